// The GDN split verification's readout as bench_spec instantiates it: gated_deltanet<128, 128>,
// bf16 inputs, K = 16, L = K - 1 + 2 T, MaxDraft = T (TN, default 4).
#include <replayssm/replayssm.cuh>
#ifndef TN
#define TN 4
#endif
using pol = replayssm::replay_policy<replayssm::rules::gated_deltanet<128, 128, __nv_bfloat16>, 16 - 1 + 2 * TN, 16>;
template __global__ void replayssm::detail::gdn_verify_readout_kernel<pol, TN>(const replayssm::gdn_params<pol>);
