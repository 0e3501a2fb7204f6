#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <replayssm/replayssm.cuh>
using namespace replayssm;
using p0 = replay_policy<rules::mamba2<64, 128, float>, 32, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p0, 8>(const mamba2_params<p0>);
using p1 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 24, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p1, 4>(const mamba2_params<p1>);
using p2 = replay_policy<rules::mamba2<64, 128, float>, 37, 30>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p2, 4>(const mamba2_params<p2>);
using p3 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 21, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p3, 3>(const mamba2_params<p3>);
using p4 = replay_policy<rules::mamba2<64, 128, __half>, 21, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p4, 3>(const mamba2_params<p4>);
using p5 = replay_policy<rules::mamba2<64, 128, __half>, 24, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p5, 4>(const mamba2_params<p5>);
using p6 = replay_policy<rules::mamba2<64, 128, float>, 24, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p6, 4>(const mamba2_params<p6>);
using p7 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 17, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p7, 1>(const mamba2_params<p7>);
using p8 = replay_policy<rules::mamba2<64, 128, __nv_bfloat16>, 19, 16>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p8, 2>(const mamba2_params<p8>);
using p10 = replay_policy<rules::mamba2<64, 128, float>, 32, 1>;
template __global__ void replayssm::detail::mamba2_verify_readout_kernel<p10, 16>(const mamba2_params<p10>);
