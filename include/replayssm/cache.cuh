/// @file cache.cuh
/// @brief Trivially copyable views over cache memory that the engine owns.
#pragma once

#include <stdint.h>

#include <replayssm/detail/config.cuh>
#include <type_traits>

namespace replayssm {

/// @brief A pool of state tiles of type T (`float`, or `__nv_bfloat16`, `__half`, `__nv_fp8_e4m3`,
/// `int8_t` for low-precision checkpoints and serving copies; 8-bit ones with a @ref
/// scale_pool_ref), one per slot, in the engine's memory.
///
/// Element (slot, head, row, col) lives at
/// `data[slot * slot_stride + head * head_stride + row * row_stride + col]` (strides in elements,
/// the last dimension contiguous). Mamba-2 rows are headdim and columns dstate (`[slots, H, P,
/// N]`); Gated DeltaNet rows and columns follow the rule's @ref state_layout.
/// @note `data` must be aligned to 4 elements (16 bytes for 4-byte types, 8 for 2-byte, 4 for
///       1-byte) and `slot_stride`, `head_stride`, `row_stride` must be multiples of 4 elements,
///       so that rows load 4 elements at a time (else misaligned_pointer).
template <class T>
struct basic_pool_ref {
  T* data = nullptr;        ///< base of the pool
  int64_t slot_stride = 0;  ///< elements between slots
  int64_t head_stride = 0;  ///< elements between heads
  int64_t row_stride = 0;   ///< elements between rows of one head
  int32_t num_slots = 0;    ///< number of slots in the pool
};
/// The fp32 pool: checkpoints of fp32 policies and masters of pairs, and every caller buffer
/// (materialize, load_state, eager_draft_step).
using state_pool_ref = basic_pool_ref<float>;

/// @brief The fp32 scales of an 8-bit serving copy (`precision::fp32_fp8`, `fp32_int8`: the
/// params' `serving_scale`) or of a single 8-bit checkpoint (`precision::fp8`, `int8`: the params'
/// `state_scale`): one per row of each block's state tile, so a stored code times its row's scale
/// is the value. Scale of (slot, head, i) at `data[slot * slot_stride + head * head_stride + i]`,
/// i below the params' `serving_scales_per_head` (Mamba-2: headdim; Gated DeltaNet: head_v_dim
/// for the vk layout, head_k_dim times the tiles per head for kv). Commits and load_state write
/// them with the codes; every read of the codes reads them.
struct scale_pool_ref {
  float* data = nullptr;    ///< base
  int64_t slot_stride = 0;  ///< elements between slots
  int64_t head_stride = 0;  ///< elements between heads
  int32_t num_slots = 0;    ///< number of slots
};

/// @brief Which slot each batch row uses.
///
/// Row b uses slot `slot_idx[b]` (or slot b when `slot_idx` is null). A row whose slot equals
/// `null_slot` is skipped: no input of it is read and no memory of any slot is touched, its
/// output row included. Non-null slot indices must be distinct within one launch and lie in
/// `[0, num_slots)`.
struct batch_ref {
  const int32_t* slot_idx = nullptr;  ///< device array `[batch]`, or null for the identity
  int32_t null_slot = -1;             ///< the index that marks a padding row
  int32_t batch = 0;                  ///< number of rows
};

/// @brief Per-slot replay bookkeeping, in device memory so that no host decision is needed.
///
/// `cursor[slot]` counts the steps buffered since the slot's checkpoint (0 after a commit or a
/// load). `arrivals` is scratch the kernels use to advance the cursor once per launch; allocate
/// it zeroed once, it rearms itself. Initialise a slot's cursor with @ref load_state (or zero it
/// with its checkpoint) before its first decode step: kernels clamp an out-of-range cursor so that
/// no access leaves the slot's buffer, but that slot's results are then meaningless.
struct cursor_ref {
  int32_t* cursor = nullptr;     ///< device array `[num_slots]`
  uint32_t* arrivals = nullptr;  ///< device array `[num_slots]`, zero-initialised once
};

/// @brief Speculative decoding: per-row counts in device memory, as engines provide them.
///
/// For a verification launch (`verify_step<MaxDraft>`), row b has `num_draft[b]` draft steps in
/// `[0, MaxDraft]`, laid out as input rows `b * MaxDraft + t`. For `accept`, row b keeps
/// `accepted[b]` of them (clamped to `num_draft[b]` when `num_draft` is given): the first ones of
/// a chain, or the path listed in `accepted_nodes` for a tree (`accept_tree`); the rest are
/// forgotten (a cursor move). `accepted_nodes` is trusted: it must be a root-to-node path of the
/// verified tree, and `accept_tree` must run once per verification (a retry would move the
/// compacted drafts again). With `parent`, the drafts form a tree and
/// each draft's output is that of the path from the root to it.
struct spec_ref {
  const int32_t* num_draft = nullptr;  ///< device array `[batch]` (verify)
  const int32_t* accepted = nullptr;   ///< device array `[batch]` (accept)
  /// Token trees (EAGLE style), or null for chains: `parent[b * MaxDraft + d]` is the parent
  /// draft of draft d (-1: a child of the last accepted token), always an earlier draft.
  const int32_t* parent = nullptr;
  /// Trees: the accepted path's drafts, root side first, `accepted[b]` of them per row, at
  /// `accepted_nodes[b * MaxDraft + k]` (`accept_tree` moves them to the buffer's tail).
  const int32_t* accepted_nodes = nullptr;
};

/// @brief Branching: several sequences (branches, each with its own slot: buffer and cursor) that
/// share one checkpoint, as in beam or tree search and agents exploring alternatives.
///
/// With `ckpt_of`, slot s reads its checkpoint from pool slot `ckpt_of[s]` (a device array the
/// kernels keep current); `fork` makes a branch by copying a slot's buffer and cursor and pointing
/// the new slot at the same checkpoint, with no state traffic. A commit (in decode_step, commit
/// or a verification's fold) of batch row b writes its new checkpoint to pool slot
/// `write_idx[b]` and sets `ckpt_of[slot] = write_idx[b]`, so a shared checkpoint is never
/// written: give each committing branch a free pool slot (for example its own slot, once no other
/// branch reads the checkpoint there). Without `write_idx` (or where `write_idx[b] < 0`), commits
/// write in place, to the slot the checkpoint was read from. All null (the default): slot s's
/// checkpoint is pool slot s. `load_state` writes `write_idx[b]` (or pool slot s itself) and
/// points `ckpt_of[s]` at it: make sure no other branch still reads that pool slot. The engine
/// owns the bookkeeping of which pool slots are free; the library does not track sharing.
struct branch_ref {
  int32_t* ckpt_of = nullptr;          ///< device array `[num_slots]`, or null: the identity
  const int32_t* write_idx = nullptr;  ///< device array `[batch]`, or null: commit in place
  const int32_t* fork_src = nullptr;   ///< fork only: device array `[batch]`, the source slots
};

static_assert(std::is_trivially_copyable<spec_ref>::value, "views must be trivially copyable");
static_assert(std::is_trivially_copyable<branch_ref>::value, "views must be trivially copyable");
static_assert(std::is_trivially_copyable<scale_pool_ref>::value,
              "views must be trivially copyable");
static_assert(std::is_trivially_copyable<state_pool_ref>::value &&
                  std::is_trivially_copyable<basic_pool_ref<uint16_t>>::value,
              "views must be trivially copyable");
static_assert(std::is_trivially_copyable<batch_ref>::value, "views must be trivially copyable");
static_assert(std::is_trivially_copyable<cursor_ref>::value, "views must be trivially copyable");

}  // namespace replayssm
