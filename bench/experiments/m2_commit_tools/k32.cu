// The fp32 policy bench_decode's m2pol<16> uses (mamba2<64,128,bf16>, K = L = 16, fp32, tile 64,
// 256 threads): decode (stream kernel, commit branch) and eager.
#include <replayssm/replayssm.cuh>
using pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, __nv_bfloat16>, 16, 16,
                                     replayssm::precision::fp32>;
replayssm::result f(const replayssm::mamba2_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
replayssm::result e(const replayssm::mamba2_params<pol>& p) { return replayssm::eager_step(p, nullptr); }
