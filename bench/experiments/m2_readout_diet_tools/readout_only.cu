// Only the bench policy's Mamba-2 split readout kernels (bench_spec's m2pol<Tn>, bf16 inputs,
// K = 16, BufferLen 15 + 2 Tn), for fast SASS iteration:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -cubin \
//     bench/experiments/m2_readout_diet_tools/readout_only.cu -o /tmp/ro.cubin
// Their SASS is the same as in bench_spec's cubin (checked with census.py on both).
#include <cuda_bf16.h>
#include <replayssm/replayssm.cuh>

namespace {
template <int Tn>
using m2pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, __nv_bfloat16>,
                                       15 + 2 * Tn, 16>;
}

template __global__ void replayssm::detail::mamba2_verify_readout_kernel<m2pol<2>, 2>(
    const replayssm::mamba2_params<m2pol<2>>);
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<m2pol<4>, 4>(
    const replayssm::mamba2_params<m2pol<4>>);
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<m2pol<8>, 8>(
    const replayssm::mamba2_params<m2pol<8>>);
