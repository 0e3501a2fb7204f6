// The fp32 policy bench_decode's gdnpol<16> uses (gated_deltanet<128,128,bf16>, K = L = 16, fp32,
// tile 128, 128 threads): decode (coefficient + stream kernel, commit branch) and eager.
#include <replayssm/replayssm.cuh>
using pol = replayssm::replay_policy<replayssm::rules::gated_deltanet<128, 128, __nv_bfloat16>, 16, 16,
                                     replayssm::precision::fp32>;
replayssm::result f(const replayssm::gdn_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
replayssm::result e(const replayssm::gdn_params<pol>& p) { return replayssm::eager_step(p, nullptr); }
