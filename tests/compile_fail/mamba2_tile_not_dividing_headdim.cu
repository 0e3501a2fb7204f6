// expect: must divide headdim
#include <replayssm/replayssm.cuh>
using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16,
                                        replayssm::precision::fp32, 48, 256>;
replayssm::result launch(const replayssm::mamba2_params<policy>& p) {
  return replayssm::decode_step(p, nullptr);
}
