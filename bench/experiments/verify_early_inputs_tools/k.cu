// The split verification's readout kernel as bench_spec instantiates it: Mamba-2 H128 P64 N128,
// bf16 inputs, fp32 checkpoint, K = 16, L = K - 1 + 2 T, MaxDraft = T (TN, default 4).
// nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -DTN=4 [-DIN_T=float] -cubin -Xptxas -v
#include <replayssm/replayssm.cuh>
#ifndef IN_T
#define IN_T __nv_bfloat16
#endif
#ifndef TN
#define TN 4
#endif
using pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, IN_T>, 16 - 1 + 2 * TN, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<pol, TN>(const replayssm::mamba2_params<pol>);
