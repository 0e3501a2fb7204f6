// expect: eager steps keep one state
#include <replayssm/replayssm.cuh>
using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16,
                                        replayssm::precision::fp32_bf16>;
replayssm::result launch(const replayssm::mamba2_params<policy>& p) {
  return replayssm::eager_step(p, nullptr);
}
