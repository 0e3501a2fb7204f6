// Toolchain checks and the few macros ReplaySSM needs.
#pragma once

#if defined(_MSVC_LANG)
#define REPLAYSSM_CPLUSPLUS _MSVC_LANG
#else
#define REPLAYSSM_CPLUSPLUS __cplusplus
#endif
#if REPLAYSSM_CPLUSPLUS < 201703L
#error "ReplaySSM needs C++17: compile with -std=c++17 (nvcc: -std=c++17)."
#endif
#if !defined(__CUDACC__)
#error \
    "ReplaySSM's kernel headers must be compiled by a CUDA compiler (nvcc): put the #include in a .cu file. Only <replayssm/reference.hpp> is plain C++."
#endif
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ < 12)
#error "ReplaySSM needs CUDA 12 or newer."
#endif

#include <cuda_runtime.h>

#define REPLAYSSM_HD __host__ __device__ __forceinline__
#define REPLAYSSM_DEVICE __device__ __forceinline__

// Kernels defined in headers get hidden visibility so that two shared objects of one engine that
// instantiate the same kernel do not collide (see NVIDIA/cccl#166).
#if defined(_WIN32)
#define REPLAYSSM_KERNEL __global__
#else
#define REPLAYSSM_KERNEL __global__ __attribute__((visibility("hidden")))
#endif
