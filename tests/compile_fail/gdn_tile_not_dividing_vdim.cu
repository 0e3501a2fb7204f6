// expect: must divide head_v_dim
#include <replayssm/replayssm.cuh>
using policy = replayssm::replay_policy<replayssm::rules::gated_deltanet<128, 128>, 16, 16,
                                        replayssm::precision::fp32, 96, 128>;
replayssm::result launch(const replayssm::gdn_params<policy>& p) {
  return replayssm::decode_step(p, nullptr);
}
