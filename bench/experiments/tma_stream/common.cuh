// Shared by the standalone prototypes of this folder (tma_stream.cu, bf16_dot.cu): the CUDA error
// check, counter-based random fills and the event timer (median of repeated launches).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__device__ __forceinline__ uint32_t proto_hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}
__device__ __forceinline__ void proto_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void proto_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
/// p[i] uniform in [lo, hi) from (seed, i): the same values on every run.
template <class T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    proto_store(p + i, lo + (hi - lo) * (proto_hash32(seed * 0x9e3779b97f4a7c15ull + i) *
                                         (1.0f / 4294967296.0f)));
}

/// Median time of `reps` launches after 3 warm-up ones (launch(r) gets the repetition index, so
/// that callers can rotate state sets).
struct timer {
  cudaEvent_t a, b;
  int reps;
  explicit timer(int reps_) : reps(reps_) {
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
  }
  template <class F>
  double median_us(F&& launch) {
    for (int w = 0; w < 3; ++w) launch(w);
    std::vector<double> v;
    for (int r = 0; r < reps; ++r) {
      CHECK(cudaEventRecord(a));
      launch(r);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      v.push_back(ms * 1e3);
    }
    CHECK(cudaGetLastError());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};
