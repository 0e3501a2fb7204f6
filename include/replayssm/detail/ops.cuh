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
  verify,       // speculative: outputs of up to MaxDraft draft steps appended after the buffered
                // ones, no state written; a window of K or more accepted steps is folded first
  accept,       // speculative: keep the accepted drafts (moved to the buffer's tail when the
                // verification folded its window or the drafts form a tree); no state traffic
  eager_draft,  // the eager engines' speculative round: one intermediate state written per draft
  fork,         // branching: copy a slot's buffer and cursor to another slot sharing its checkpoint
};

/// The ops that read or write a slot's checkpoint through branch_ref when the engine branches.
constexpr bool branchable(op o) {
  return o == op::decode || o == op::flush || o == op::materialize || o == op::verify ||
         o == op::load || o == op::fork;
}

/// The checkpoint a work item reads (rd) and the pool slot a commit writes (wr): both the
/// item's slot unless the engine branches (branch_ref).
struct ckpt_slots {
  int64_t rd, wr;
};

/// A verification that folded a window of n steps into the checkpoint leaves `-1 - n` in the
/// cursor: no steps are buffered any more, and its drafts sit at positions n, n + 1, ... until
/// accept moves the accepted ones to the front.
__host__ __device__ __forceinline__ constexpr int32_t folded_cursor(int n) { return -1 - n; }

/// The number of buffered steps a launch of `Op` may use, from the slot's cursor (a folded
/// cursor counts as none). Valid cursors never exceed L - MaxDraft after accept (verify needs
/// L >= K - 1 + 2 MaxDraft), so decode, which stages the current step after them, clamps to
/// L - 1. Other values can only come from uninitialised memory; clamping them keeps every
/// access inside the slot's buffer (the slot's results are then meaningless, but no other memory
/// is touched).
template <op Op, int K, int L>
__host__ __device__ __forceinline__ int buffered_steps(int32_t cursor) {
  constexpr int hi = Op == op::decode ? L - 1 : L;
  return cursor < 0 ? 0 : (cursor > hi ? hi : cursor);
}

/// The drafts a speculative launch uses for a row: `spec.num_draft[b]` clamped to [0, MaxDraft]
/// (the verifications then also keep n + nd <= L; other values come only from corrupt memory).
template <int MaxDraft>
__host__ __device__ __forceinline__ int draft_count(int32_t num_draft) {
  return num_draft < 0 ? 0 : (num_draft > MaxDraft ? MaxDraft : num_draft);
}

/// Where the drafts of the last verification start in a slot's buffer (op::accept): after the
/// buffered steps, or after the window the verification folded.
template <int L>
__host__ __device__ __forceinline__ int draft_offset(int32_t cursor) {
  const int64_t off = cursor < 0 ? -1 - int64_t(cursor) : cursor;
  return off > L ? L : int(off);
}
}  // namespace detail
}  // namespace replayssm
