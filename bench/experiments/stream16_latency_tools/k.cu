#include <replayssm/replayssm.cuh>
using pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, __nv_bfloat16>, 16, 16, replayssm::precision::bf16>;
replayssm::result f(const replayssm::mamba2_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
