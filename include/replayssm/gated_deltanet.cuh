/// @file gated_deltanet.cuh
/// @brief Gated DeltaNet decode: views, params and the host launchers.
///
/// One decode step for value head h, with q and k L2-normalised and q scaled (float64 reference:
/// `ref::gdn_eager_step` in reference.hpp): `h = exp(g) h; v' = beta (v - h^T k); h += k v'^T;
/// o = h^T q`. Replay computes `o` with the backward sweep over the buffer: no state is formed
/// (`ref::gdn_replay_output`).
#pragma once

#include <stdint.h>

#include <replayssm/cache.cuh>
#include <replayssm/policy.cuh>
#include <replayssm/status.cuh>

namespace replayssm {

/// @brief The step's inputs and output as the engine lays them out (strides in elements; each
/// head's vector contiguous). Value head h reads q/k head `h / (num_v_heads / num_k_heads)`.
template <class T>
struct gdn_inputs {
  const T* q = nullptr;        ///< `[batch, num_k_heads, head_k_dim]`
  int64_t q_batch_stride = 0,  ///< elements between input rows of q
      q_head_stride = 0;       ///< elements between heads of q (at least head_k_dim)
  const T* k = nullptr;        ///< `[batch, num_k_heads, head_k_dim]`
  int64_t k_batch_stride = 0,  ///< elements between input rows of k
      k_head_stride = 0;       ///< elements between heads of k (at least head_k_dim)
  const T* v = nullptr;        ///< `[batch, num_v_heads, head_v_dim]`
  int64_t v_batch_stride = 0,  ///< elements between input rows of v
      v_head_stride = 0;       ///< elements between heads of v (at least head_v_dim)
  const float* g = nullptr;    ///< `[batch, num_v_heads]`, log gate (alpha = exp(g))
  /// Elements between input rows of g. There is no head stride: each row's heads are contiguous.
  int64_t g_batch_stride = 0;
  const float* beta = nullptr;  ///< `[batch, num_v_heads]`, in (0, 1)
  /// Elements between input rows of beta; no head stride: each row's heads are contiguous.
  int64_t beta_batch_stride = 0;
  T* out = nullptr;              ///< `[batch, num_v_heads, head_v_dim]`
  int64_t out_batch_stride = 0,  ///< elements between output rows of out
      out_head_stride = 0;       ///< elements between heads of out (at least head_v_dim)
};

/// @brief The input buffer of every slot, `L = Policy::buffer_len` steps deep, contiguous:
/// `k[slots][L][num_k_heads][head_k_dim]` (raw, type T), `kscale[slots][L][num_k_heads]` (the
/// fp32 inverse norm the step used), `v[slots][L][num_v_heads][head_v_dim]` (type T),
/// `g`, `beta` `[slots][L][num_v_heads]` (fp32). q is not kept: only its own step uses it.
template <class T>
struct gdn_buffer_ref {
  T* k = nullptr;           ///< buffered raw k
  float* kscale = nullptr;  ///< buffered k normalisation factors
  T* v = nullptr;           ///< buffered v
  float* g = nullptr;       ///< buffered log gates
  float* beta = nullptr;    ///< buffered betas
  /// @brief Elements of k for a pool of `num_slots` slots.
  static constexpr int64_t k_elems(int64_t num_slots, int L, int num_k_heads, int head_k_dim) {
    return num_slots * L * num_k_heads * head_k_dim;
  }
  /// @brief Elements (floats) of kscale for a pool of `num_slots` slots.
  static constexpr int64_t kscale_elems(int64_t num_slots, int L, int num_k_heads) {
    return num_slots * L * num_k_heads;
  }
  /// @brief Elements of v for a pool of `num_slots` slots.
  static constexpr int64_t v_elems(int64_t num_slots, int L, int num_v_heads, int head_v_dim) {
    return num_slots * L * num_v_heads * head_v_dim;
  }
  /// @brief Elements (floats) of g, and of beta (the same), for a pool of `num_slots` slots.
  static constexpr int64_t gate_elems(int64_t num_slots, int L, int num_v_heads) {
    return num_slots * L * num_v_heads;
  }
};

/// @brief Everything one Gated DeltaNet launch needs, passed by value.
/// @tparam Policy a @ref replay_policy over `rules::gated_deltanet`.
template <class Policy>
struct gdn_params {
  /// The policy this launch runs.
  using policy = Policy;
  /// T: the type of q, k, v, the output and the buffered k, v.
  using input_type = typename Policy::input_type;
  int32_t num_k_heads = 0;    ///< q/k heads (of this rank's slice)
  int32_t num_v_heads = 0;    ///< value heads; a multiple of num_k_heads
  int32_t head_k_dim = 0;     ///< must equal the policy's
  int32_t head_v_dim = 0;     ///< must equal the policy's
  bool l2norm_qk = true;      ///< L2-normalise q and k in the kernel (eps 1e-6 inside the sqrt)
  float scale = 0.f;          ///< q scale; 0 means head_k_dim^-1/2
  gdn_inputs<input_type> in;  ///< the step (eager, decode)
  batch_ref rows;             ///< batch row -> slot
  /// Checkpoint pool (replay) or state pool (eager), of the policy's master type: fp32 (fp32 and
  /// the pairs), or that of a single checkpoint (bf16, fp16, fp8 e4m3, int8; 8-bit ones scaled by
  /// `state_scale`).
  basic_pool_ref<typename Policy::master_type> state;
  gdn_buffer_ref<input_type> buffer;  ///< replay only
  cursor_ref cursors;                 ///< replay only
  spec_ref spec;                      ///< speculative rounds only (verify_step, accept)
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
  /// Scales per head of an 8-bit copy or checkpoint: one per row of each block's tile (kv:
  /// head_k_dim rows per tile of `Policy::tile` columns of V; vk: one per row of V).
  static constexpr int serving_scales_per_head =
      Policy::rule::layout == state_layout::kv
          ? (Policy::rule::head_v_dim / Policy::tile) * Policy::rule::head_k_dim
          : Policy::rule::head_v_dim;
  /// Optional, decode_step (and verify_step, below): fp32 scratch of @ref workspace_elems floats,
  /// `[batch][num_v_heads][head_k_dim + BufferLen]` (each value head's swept q, then its
  /// coefficients), 4-byte aligned, not shared with a concurrent launch. When set, decode_step
  /// runs a replay (non-commit) row as two kernels: a small one per (batch row, k head) computes
  /// the backward sweep, then the decode grid, launched with programmatic dependent launch
  /// (sm_90+), streams the state and reads its result (rows that commit keep the fused path).
  /// Null (the default): one fused kernel. Ignored by every other launch and by pipelined
  /// policies (PipelineStages >= 2). When to set it (H200, README "Performance"): at batch
  /// 256, K = 16 the fp32 window's step is 321 us with it (Hv64, 9fc2413), 359 without (the
  /// fused kernel as last measured, on 808ff01, before the scaled fold of its commit rows), and
  /// 16- and 8-bit serving states gain more; at K = 8 the split step was slower (808ff01: 345
  /// vs 323 us; 330 with it on 188aafe); below `split_min_batch` rows the launch ignores it (the
  /// fused kernel measured faster at batch 1 and 8).
  /// verify_step<MaxDraft> uses it where the policy allows it (precision::fp32, or an fp32
  /// master with a bf16 / fp16 serving copy: rows that do not fold read the copy; kv layout,
  /// head_k_dim == head_v_dim == 128, Tile == head_v_dim, BlockThreads 128, no pipeline,
  /// BufferLen <= 32) and the launch does not branch (`branch.ckpt_of` null): a kernel per
  /// (row, k head) runs the drafts' backward sweeps of its value heads into it (@ref
  /// verify_workspace_elems floats), then a readout grid, launched with programmatic dependent
  /// launch, streams the state and writes the outputs (rows that fold a window fold it there
  /// first). A workspace smaller than that is refused (bad_shape). H200, batch 256, Hv 64, T = 4:
  /// the round 454 us against 606 without a workspace (kernels of b13dcbe, README "Speculative
  /// decoding"). The rule's default policy qualifies.
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
  /// Floats `workspace` needs for `batch` rows of `num_v_heads` value heads.
  static constexpr int64_t workspace_elems(int64_t batch, int num_v_heads) {
    return batch * num_v_heads * (Policy::rule::head_k_dim + Policy::buffer_len);
  }
  /// Floats `workspace` needs for verify_step<max_draft> of `batch` rows of `num_v_heads` value
  /// heads (the split verification, see `workspace`): `[batch][num_v_heads][max_draft]
  /// [head_k_dim + BufferLen]` (each draft's swept q, then its coefficients). A launch that uses
  /// it checks `workspace_size` against this and refuses a smaller one (bad_shape).
  static constexpr int64_t verify_workspace_elems(int64_t batch, int num_v_heads, int max_draft) {
    return batch * num_v_heads * max_draft * (Policy::rule::head_k_dim + Policy::buffer_len);
  }
};

/// @brief Eager step: read, update and write each row's state; write the output.
template <class Policy>
result eager_step(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief Replay decode step (see the Mamba-2 overload): output by the backward sweep over the
/// buffer against the checkpoint, no state written; a row whose window fills commits in place.
template <class Policy>
result decode_step(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief Commit (flush) the buffered steps of every listed slot; cursor to 0.
template <class Policy>
result commit(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief Checkpoint + buffer of each row's slot -> `dest` row b (same layout as the pool).
template <class Policy>
result materialize(const gdn_params<Policy>& p, const state_pool_ref& dest, cudaStream_t stream);
/// @brief `src` row b -> checkpoint of each row's slot; cursor to 0.
template <class Policy>
result load_state(const gdn_params<Policy>& p, const state_pool_ref& src, cudaStream_t stream);
/// @brief Speculative verification (see the Mamba-2 overload): every draft position's output by
/// a backward sweep from its own q (one warp per draft), one read of the checkpoint; a window of
/// K or more accepted steps is folded in the same pass. Needs `BufferLen >= CommitInterval - 1 +
/// 2 * MaxDraft`.
template <int MaxDraft, class Policy>
result verify_step(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief The speculative round of eager engines, the baseline verify_step is measured against:
/// reads each row's state once, applies its `spec.num_draft[b]` drafts in order, writes the state
/// after each draft to `intermediate` row `b * MaxDraft + d` (so any prefix can be kept) and the
/// outputs; the slot's own state is not written.
template <int MaxDraft, class Policy>
result eager_draft_step(const gdn_params<Policy>& p, const state_pool_ref& intermediate,
                        cudaStream_t stream);
/// @brief Keeps the first `spec.accepted[b]` drafts of each row (no state traffic; the next
/// verify_step, decode_step or commit folds a full window).
template <class Policy>
result accept(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief Token trees: keeps each row's accepted path (`spec.accepted_nodes`, `spec.accepted[b]`
/// drafts, root side first) as the buffer's tail. One launch, no host round trip.
template <int MaxDraft, class Policy>
result accept_tree(const gdn_params<Policy>& p, cudaStream_t stream);
/// @brief Branching: makes the slot of each batch row b a branch of slot `branch.fork_src[b]`:
/// copies its buffered steps and cursor and points `branch.ckpt_of` of the new slot at the same
/// checkpoint. No state is read or written. Needs `branch.ckpt_of` (and passing it to every
/// later launch on these slots, with `branch.write_idx` wherever a branch may commit while
/// others still read its checkpoint). Destination slots must differ from all sources; fork after
/// accept, not between a verification and its accept.
template <class Policy>
result fork(const gdn_params<Policy>& p, cudaStream_t stream);

/// @brief Host checks the launchers run first (see validate_mamba2).
template <class Policy>
result validate_gdn(const gdn_params<Policy>& p, bool needs_step, bool needs_buffer,
                    int input_rows_per_row = 1);

}  // namespace replayssm

#include <replayssm/detail/gdn_launch.inl>
