/// @file mamba2.cuh
/// @brief Mamba-2 (SSD) decode: views, params and the host launchers.
///
/// One decode step for head h of batch row b (float64 reference: `ref::mamba2_eager_step` in
/// reference.hpp):
/// `dt = softplus(dt + dt_bias)`, `h = exp(A dt) h + dt x B^T`, `y = h C + D x`, `y *= silu(z)`.
#pragma once

#include <stdint.h>

#include <replayssm/cache.cuh>
#include <replayssm/policy.cuh>
#include <replayssm/status.cuh>

namespace replayssm {

/// @brief Per-head layer weights (device arrays, fp32).
struct mamba2_weights {
  const float* A = nullptr;        ///< `[nheads]`, negative
  const float* dt_bias = nullptr;  ///< `[nheads]`, or null for none
  const float* D = nullptr;        ///< `[nheads]`, or null for no skip connection
  bool dt_softplus = true;         ///< apply softplus to dt + dt_bias
};

/// @brief The step's inputs and its output, as the engine's activations lay them out.
///
/// Each row's vectors are contiguous; batch, head and group strides are in elements, so fused
/// projections (x, B, C, z sliced out of one `in_proj` output) are described without copies.
/// dt is one scalar per head (tied over headdim). With more than one input row, every batch
/// stride must cover a row (`dt_batch_stride >= (nheads - 1) * dt_head_stride + 1`, the others
/// `>= heads (groups) * head (group) stride`), so the default 0 of `dt_batch_stride` is refused.
template <class T>
struct mamba2_inputs {
  const T* x = nullptr;          ///< `[batch, nheads, headdim]`
  int64_t x_batch_stride = 0,    ///< elements between input rows of x
      x_head_stride = 0;         ///< elements between heads of x (at least headdim)
  const T* dt = nullptr;         ///< `[batch, nheads]`, raw (before dt_bias and softplus)
  int64_t dt_batch_stride = 0,   ///< elements between input rows of dt (0 refused, see above)
      dt_head_stride = 1;        ///< elements between heads of dt (>= 1 when nheads > 1)
  const T* B = nullptr;          ///< `[batch, ngroups, dstate]`
  int64_t B_batch_stride = 0,    ///< elements between input rows of B
      B_group_stride = 0;        ///< elements between groups of B (at least dstate)
  const T* C = nullptr;          ///< `[batch, ngroups, dstate]`
  int64_t C_batch_stride = 0,    ///< elements between input rows of C
      C_group_stride = 0;        ///< elements between groups of C (at least dstate)
  const T* z = nullptr;          ///< `[batch, nheads, headdim]`, or null for no gating
  int64_t z_batch_stride = 0,    ///< elements between input rows of z
      z_head_stride = 0;         ///< elements between heads of z (at least headdim)
  T* out = nullptr;              ///< `[batch, nheads, headdim]`
  int64_t out_batch_stride = 0,  ///< elements between output rows of out
      out_head_stride = 0;       ///< elements between heads of out (at least headdim)
};

/// @brief The input buffer of every slot, `L = Policy::buffer_len` steps deep, contiguous:
/// `x[slots][L][nheads][headdim]`, `B[slots][L][ngroups][dstate]` (type T, exactly as given),
/// `dt[slots][L][nheads]` (fp32, after bias and softplus).
template <class T>
struct mamba2_buffer_ref {
  T* x = nullptr;       ///< buffered x
  T* B = nullptr;       ///< buffered B
  float* dt = nullptr;  ///< buffered dt
  /// @brief Elements of x for a pool of `num_slots` slots.
  static constexpr int64_t x_elems(int64_t num_slots, int L, int nheads, int headdim) {
    return num_slots * L * nheads * headdim;
  }
  /// @brief Elements of B for a pool of `num_slots` slots.
  static constexpr int64_t B_elems(int64_t num_slots, int L, int ngroups, int dstate) {
    return num_slots * L * ngroups * dstate;
  }
  /// @brief Elements (floats) of dt for a pool of `num_slots` slots.
  static constexpr int64_t dt_elems(int64_t num_slots, int L, int nheads) {
    return num_slots * L * nheads;
  }
};

/// @brief Everything one Mamba-2 launch needs, passed by value.
/// @tparam Policy a @ref replay_policy over `rules::mamba2`.
template <class Policy>
struct mamba2_params {
  /// The policy this launch runs.
  using policy = Policy;
  /// T: the type of the step inputs (dt included), the output and the buffered x, B.
  using input_type = typename Policy::input_type;
  int32_t nheads = 0;      ///< heads of this layer (of this rank's slice under tensor parallelism)
  int32_t ngroups = 0;     ///< B/C groups; must divide nheads
  int32_t headdim = 0;     ///< must equal the policy's
  int32_t dstate = 0;      ///< must equal the policy's
  mamba2_weights weights;  ///< A, dt_bias, D
  mamba2_inputs<input_type> in;  ///< the step (eager, decode)
  batch_ref rows;                ///< batch row -> slot
  /// Checkpoint pool (replay) or state pool (eager), of the policy's master type: fp32 (fp32 and
  /// the pairs), or that of a single checkpoint (bf16, fp16, fp8 e4m3, int8; 8-bit ones scaled by
  /// `state_scale`).
  basic_pool_ref<typename Policy::master_type> state;
  mamba2_buffer_ref<input_type> buffer;  ///< replay only
  cursor_ref cursors;                    ///< replay only
  spec_ref spec;                         ///< speculative rounds only (verify_step, accept)
  branch_ref branch;  ///< branching only (shared checkpoints, fork); all null otherwise
  /// Pairs only (`precision::fp32_bf16`, `fp32_fp16`, `fp32_fp8`, `fp32_int8`; 8-bit copies scaled
  /// by `serving_scale`): the serving copy of every checkpoint, same shape as `state`; output
  /// steps read it, commits rewrite it from the master.
  basic_pool_ref<typename Policy::serving_type> serving;
  /// 8-bit copies (`precision::fp32_fp8`, `fp32_int8`): the scales of `serving`,
  /// `serving_scales_per_head` per head.
  scale_pool_ref serving_scale;
  /// Single 8-bit checkpoints (`precision::fp8`, `int8`): the scales of `state`, laid out as
  /// `serving_scale` (`serving_scales_per_head` per head).
  scale_pool_ref state_scale;
  /// Scales per head of an 8-bit copy or checkpoint (`serving_scale`, `state_scale`): one per row
  /// of P.
  static constexpr int serving_scales_per_head = Policy::rule::headdim;
  /// Optional, decode_step (and verify_step, below): fp32 scratch of @ref workspace_elems floats,
  /// `[batch][nheads][BufferLen + 1]` (each head's replay weights, then its decay), 4-byte
  /// aligned, not shared with a concurrent launch. When set, decode_step runs a replay
  /// (non-commit) row as two kernels: a small one per batch row computes the weights, then the
  /// decode grid, launched with programmatic dependent launch (sm_90+), streams the state and
  /// reads them (rows that commit keep the fused path). Null (the default): one fused kernel.
  /// verify_step<MaxDraft> uses it where the policy allows it (precision::fp32, or an fp32
  /// master with a bf16 / fp16 serving copy: rows that do not fold read the copy; HeadDim 64,
  /// DState 128, Tile == HeadDim: the rule's defaults; no pipeline) and the launch does not
  /// branch (`branch.ckpt_of` null): a kernel per (row, group) computes the drafts' B . C dot
  /// products (@ref verify_workspace_elems floats, `[batch][ngroups][MaxDraft][BufferLen]`), then
  /// a readout grid of 128-thread blocks, launched with programmatic dependent launch, holds each
  /// (row, head) state in registers, folds a full window there, and writes the outputs. H200,
  /// batch 256, T = 4: the round 446 us against 603 without a workspace (kernels of b13dcbe, README
  /// "Speculative decoding"). A workspace smaller than verify_workspace_elems is refused
  /// (bad_shape). Ignored by every other launch and by pipelined policies (PipelineStages >= 2).
  /// When it pays (H200, README "Performance"): from batch 64 up, most for 16- and 8-bit
  /// serving states; below `split_min_batch` rows the launch ignores it (the fused kernel
  /// measured faster at batch 1 and 8).
  float* workspace = nullptr;
  /// Floats available at `workspace`: a launch that would use it checks this against
  /// @ref workspace_elems of its batch (verify_step: @ref verify_workspace_elems) and refuses a
  /// smaller one (bad_shape), so a workspace sized for fewer rows is never overrun.
  int64_t workspace_size = 0;
  /// decode_step runs the split step only when the launch has at least this many batch rows
  /// (and a workspace); below it the workspace is ignored and the fused kernel runs, which
  /// measured faster at batch 1 and 8 on every model shape (H200, README "Performance"). 0: the
  /// split step at every batch (the tests use it to cover small batches). verify_step's split
  /// verification applies the same bound (unmeasured there).
  int split_min_batch = 32;
  /// Floats `workspace` needs for `batch` rows of `nheads` heads.
  static constexpr int64_t workspace_elems(int64_t batch, int nheads) {
    return batch * nheads * (Policy::buffer_len + 1);
  }
  /// Floats `workspace` needs for verify_step<max_draft> of `batch` rows of `ngroups` groups
  /// (the split verification, see `workspace`): a launch that uses it checks `workspace_size`
  /// against this and refuses a smaller one (bad_shape).
  static constexpr int64_t verify_workspace_elems(int64_t batch, int ngroups, int max_draft) {
    return batch * ngroups * max_draft * Policy::buffer_len;
  }
};

/// @brief Eager step: read each row's state, apply the step, write the state and the output.
/// The baseline replay must reproduce. `buffer` and `cursors` are ignored.
template <class Policy>
result eager_step(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief Replay decode step: appends the step to each row's buffer and writes its output from
/// checkpoint + buffer, writing no state; a row whose window fills (n + 1 >= K, n its buffered
/// steps: after accept n can exceed K - 1) commits in the same launch (reads the checkpoint, folds
/// the buffer and the step in, writes it, cursor 0).
/// @note No allocation, no synchronisation: safe to capture in a CUDA graph.
/// @code
/// replayssm::mamba2_params<policy> p = ...;  // views over the engine's cache tensors
/// if (auto r = replayssm::decode_step(p, stream); !r) fprintf(stderr, "%s\n", r.message);
/// @endcode
template <class Policy>
result decode_step(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief Commit (flush) every listed slot: fold its buffered steps into the checkpoint and set
/// its cursor to 0. `in` is ignored. Slots with nothing buffered are left untouched.
template <class Policy>
result commit(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief Write checkpoint + buffer (the current state) of the slot of each batch row b into
/// `dest` at row b (`dest.slot_stride` between rows); nothing else changes.
template <class Policy>
result materialize(const mamba2_params<Policy>& p, const state_pool_ref& dest, cudaStream_t stream);

/// @brief Set the checkpoint of the slot of each batch row b from `src` row b (for example a
/// prefill's final state) and its cursor to 0.
template <class Policy>
result load_state(const mamba2_params<Policy>& p, const state_pool_ref& src, cudaStream_t stream);

/// @brief Speculative verification: appends each row's `spec.num_draft[b]` draft steps (input
/// rows `b * MaxDraft + t`) after its buffered steps and writes every draft position's output
/// (output rows `b * MaxDraft + t`), reading the checkpoint once. A row whose buffer holds K or
/// more accepted steps (accept never commits) folds them into its checkpoint in the same pass
/// over the state, so a commit costs one state write and no extra read; otherwise no state is
/// written and the cursor does not move. Needs `BufferLen >= CommitInterval - 1 + 2 * MaxDraft`
/// (a full window of accepted steps plus the next draft).
/// @code
/// replayssm::verify_step<4>(p, stream);   // outputs of all draft positions
/// // ... the engine compares with the target model and fills p.spec.accepted on the device
/// replayssm::accept(p, stream);           // keep the verified prefix (no state traffic)
/// @endcode
template <int MaxDraft, class Policy>
result verify_step(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief The speculative round of eager engines, the baseline verify_step is measured against:
/// reads each row's state once, applies its `spec.num_draft[b]` drafts in order, writes the state
/// after each draft to `intermediate` row `b * MaxDraft + d` (so any prefix can be kept) and the
/// outputs; the slot's own state is not written.
template <int MaxDraft, class Policy>
result eager_draft_step(const mamba2_params<Policy>& p, const state_pool_ref& intermediate,
                        cudaStream_t stream);
/// @brief Keeps the first `spec.accepted[b]` drafts of each row (cursor += accepted; rejected
/// drafts are forgotten). No state traffic: a window this fills is folded by the next
/// verify_step or decode_step (or commit), so only accepted steps are ever committed.
template <class Policy>
result accept(const mamba2_params<Policy>& p, cudaStream_t stream);
/// @brief Token trees: keeps each row's accepted path (`spec.accepted_nodes`, `spec.accepted[b]`
/// drafts, root side first) as the buffer's tail, as @ref accept does for chains. One launch, no
/// host round trip. Verify the tree with `verify_step<MaxDraft>` and `spec.parent` set.
template <int MaxDraft, class Policy>
result accept_tree(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief Branching: makes the slot of each batch row b a branch of slot `branch.fork_src[b]`:
/// copies its buffered steps and cursor and points `branch.ckpt_of` of the new slot at the same
/// checkpoint. No state is read or written. Needs `branch.ckpt_of` (and passing it to every
/// later launch on these slots, with `branch.write_idx` wherever a branch may commit while
/// others still read its checkpoint). Destination slots must differ from all sources; fork after
/// accept, not between a verification and its accept.
template <class Policy>
result fork(const mamba2_params<Policy>& p, cudaStream_t stream);

/// @brief Host checks the launchers run first: shapes against the policy, pointers, alignment,
/// strides. `needs_step`: the step inputs are read; `needs_buffer`: buffer and cursors are used;
/// `needs_weights`: A (and dt_bias, D when given) are read; `input_rows_per_row`: input rows per
/// batch row (MaxDraft for the speculative launches).
template <class Policy>
result validate_mamba2(const mamba2_params<Policy>& p, bool needs_step, bool needs_buffer,
                       bool needs_weights, int input_rows_per_row = 1);

}  // namespace replayssm

#include <replayssm/detail/mamba2_launch.inl>
