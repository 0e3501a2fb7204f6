// expect: BufferLen >= CommitInterval - 1 + MaxDraft
#include <replayssm/replayssm.cuh>
using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 16, 16>;
replayssm::result launch(const replayssm::mamba2_params<policy>& p) {
  return replayssm::verify_step<4>(p, nullptr);
}
