// What a launch does to each slot it visits.
#pragma once

#include <stdint.h>

namespace replayssm {
namespace detail {

enum class op : int {
  eager,        // read state, apply the step, write state, write output
  decode,       // replay: output from checkpoint + buffer, append; commit when the window fills
  flush,        // fold the buffered steps into the checkpoint, cursor -> 0
  materialize,  // checkpoint + buffer -> caller's state buffer (nothing else changes)
  load,         // caller's state -> checkpoint, cursor -> 0
  verify,       // speculative: outputs of up to MaxDraft appended draft steps, no cursor change
  accept,       // speculative: cursor += accepted; a window that fills commits (accepted only)
  eager_draft,  // the eager engines' speculative round: one intermediate state written per draft
  compact,      // token trees: move the accepted path's drafts to the buffer's tail (no state)
};

/// The number of buffered steps a launch of `Op` may use, from the slot's cursor. A cursor outside
/// its range can only come from uninitialised memory; clamping it keeps every access inside the
/// slot's buffer (the slot's results are then meaningless, but no other memory is touched).
template <op Op, int K, int L>
__host__ __device__ __forceinline__ int buffered_steps(int32_t cursor) {
  constexpr int hi = (Op == op::decode || Op == op::verify || Op == op::accept) ? K - 1 : L;
  return cursor < 0 ? 0 : (cursor > hi ? hi : cursor);
}

}  // namespace detail
}  // namespace replayssm
