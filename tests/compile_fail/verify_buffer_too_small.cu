// expect: BufferLen >= CommitInterval - 1 + 2 * MaxDraft
#include <replayssm/replayssm.cuh>
// One step short: K - 1 + 2 * MaxDraft = 23.
using policy = replayssm::replay_policy<replayssm::rules::mamba2<64, 128>, 22, 16>;
replayssm::result launch(const replayssm::mamba2_params<policy>& p) {
  return replayssm::verify_step<4>(p, nullptr);
}
