// Implementation of the Gated DeltaNet launchers declared in <replayssm/gated_deltanet.cuh>.
#pragma once

#include <replayssm/detail/gdn_agent.cuh>
#include <replayssm/detail/gdn_stream.cuh>
#include <replayssm/detail/gdn_verify.cuh>
#include <replayssm/detail/kernels.cuh>
#include <replayssm/detail/validate.cuh>

namespace replayssm {

template <class Policy>
result validate_gdn(const gdn_params<Policy>& p, bool needs_step, bool needs_buffer,
                    int input_rows_per_row) {
  using detail::fail;
  using rule = typename Policy::rule;
  constexpr bool kv = rule::layout == state_layout::kv;
  if (p.head_k_dim != rule::head_k_dim)
    return fail(status::policy_mismatch,
                "gated_deltanet: head_k_dim differs from the policy's KDim");
  if (p.head_v_dim != rule::head_v_dim)
    return fail(status::policy_mismatch,
                "gated_deltanet: head_v_dim differs from the policy's VDim");
  if (p.num_k_heads <= 0 || p.num_v_heads <= 0)
    return fail(status::bad_shape, "gated_deltanet: num_k_heads and num_v_heads must be positive");
  if (p.num_v_heads % p.num_k_heads != 0)
    return fail(status::bad_shape, "gated_deltanet: num_v_heads must be a multiple of num_k_heads");
  if (int64_t(p.num_v_heads) * (rule::head_v_dim / Policy::tile) > 2147483647)
    return fail(status::bad_shape, "gated_deltanet: too many heads for one launch");
  if (!(p.scale >= 0.f))
    return fail(status::bad_shape, "gated_deltanet: scale must be >= 0 (0 = default)");
  if (auto r = detail::check_pool(
          p.state, p.num_v_heads, kv ? rule::head_k_dim : rule::head_v_dim,
          kv ? rule::head_v_dim : rule::head_k_dim, "gated_deltanet: state.data is null",
          "gated_deltanet: state.data must be aligned to 4 elements (16-byte for fp32, 8-byte "
          "for bf16/fp16) and its strides multiples of 4 elements",
          "gated_deltanet: state strides overlap: need row_stride >= the "
          "contiguous dim, head_stride >= rows * row_stride, slot_stride >= "
          "num_v_heads * head_stride");
      !r)
    return r;
  if (auto r = detail::check_rows(p.rows, p.state.num_slots); !r) return r;
  if constexpr (Policy::scaled_state) {
    if (auto r = detail::check_scales(
            p.state_scale, p.num_v_heads, gdn_params<Policy>::serving_scales_per_head,
            p.state.num_slots,
            "gated_deltanet: state_scale.data is null (an 8-bit checkpoint needs its row scales)",
            "gated_deltanet: state_scale.data must be 4-byte aligned",
            "gated_deltanet: state_scale strides overlap: need head_stride >= "
            "serving_scales_per_head, "
            "slot_stride >= heads * head_stride",
            "gated_deltanet: state_scale has fewer slots than state");
        !r)
      return r;
  }
  if constexpr (Policy::has_serving_copy) {
    if (auto r = detail::check_pool(
            p.serving, p.num_v_heads, kv ? rule::head_k_dim : rule::head_v_dim,
            kv ? rule::head_v_dim : rule::head_k_dim,
            "gated_deltanet: serving.data is null (a precision pair needs its serving copy)",
            "gated_deltanet: serving.data must be aligned to 4 elements and its strides multiples "
            "of 4",
            "gated_deltanet: serving strides overlap (same rules as state)");
        !r)
      return r;
    if (p.serving.num_slots < p.state.num_slots)
      return fail(status::bad_shape, "gated_deltanet: serving has fewer slots than state");
    if constexpr (Policy::scaled_copy) {
      if (auto r = detail::check_scales(
              p.serving_scale, p.num_v_heads, gdn_params<Policy>::serving_scales_per_head,
              p.state.num_slots,
              "gated_deltanet: serving_scale.data is null (an 8-bit copy needs its row scales)",
              "gated_deltanet: serving_scale.data must be 4-byte aligned",
              "gated_deltanet: serving_scale strides overlap: need head_stride >= "
              "serving_scales_per_head, "
              "slot_stride >= heads * head_stride",
              "gated_deltanet: serving_scale has fewer slots than state");
          !r)
        return r;
    }
  }
  if (needs_step) {
    if (!p.in.q || !p.in.k || !p.in.v || !p.in.g || !p.in.beta || !p.in.out)
      return fail(status::null_pointer,
                  "gated_deltanet: in.q, in.k, in.v, in.g, in.beta and in.out are required");
    if (p.in.q_head_stride < rule::head_k_dim || p.in.k_head_stride < rule::head_k_dim ||
        p.in.v_head_stride < rule::head_v_dim || p.in.out_head_stride < rule::head_v_dim)
      return fail(status::bad_stride, "gated_deltanet: head strides must cover the head dims");
    if (int64_t(p.rows.batch) * input_rows_per_row > 1 &&
        (p.in.q_batch_stride < int64_t(p.num_k_heads) * p.in.q_head_stride ||
         p.in.k_batch_stride < int64_t(p.num_k_heads) * p.in.k_head_stride ||
         p.in.v_batch_stride < int64_t(p.num_v_heads) * p.in.v_head_stride ||
         p.in.out_batch_stride < int64_t(p.num_v_heads) * p.in.out_head_stride ||
         p.in.g_batch_stride < p.num_v_heads || p.in.beta_batch_stride < p.num_v_heads))
      return fail(status::bad_stride,
                  "gated_deltanet: a batch stride is smaller than one row's extent");
  }
  if (needs_buffer) {
    if (!p.buffer.k || !p.buffer.kscale || !p.buffer.v || !p.buffer.g || !p.buffer.beta)
      return fail(status::null_pointer,
                  "gated_deltanet: buffer.k, buffer.kscale, buffer.v, buffer.g and buffer.beta are "
                  "required");
    if (!detail::aligned(p.buffer.k, 16) || !detail::aligned(p.buffer.v, 16))
      return fail(
          status::misaligned_pointer,
          "gated_deltanet: buffer.k and buffer.v must be 16-byte aligned (rows load as 16 bytes)");
    if (auto r = detail::check_cursors(p.cursors); !r) return r;
  }
  {  // no array the launch writes may be passed twice (one write would overwrite the other)
    const void* written[] = {
        p.state.data,
        Policy::has_serving_copy ? static_cast<const void*>(p.serving.data) : nullptr,
        Policy::scaled_state ? p.state_scale.data : nullptr,
        Policy::scaled_copy ? p.serving_scale.data : nullptr,
        needs_buffer ? static_cast<const void*>(p.buffer.k) : nullptr,
        needs_buffer ? p.buffer.kscale : nullptr,
        needs_buffer ? static_cast<const void*>(p.buffer.v) : nullptr,
        needs_buffer ? p.buffer.g : nullptr,
        needs_buffer ? p.buffer.beta : nullptr,
        needs_buffer ? p.cursors.cursor : nullptr,
        needs_buffer ? p.cursors.arrivals : nullptr};
    if (detail::shares_base(written))
      return fail(status::bad_stride,
                  "gated_deltanet: two arrays the launch writes start at the same address: "
                  "state, serving, state_scale / serving_scale, buffer.k, buffer.kscale, "
                  "buffer.v, buffer.g, buffer.beta, cursors.cursor and cursors.arrivals must be "
                  "distinct arrays");
  }
  return detail::ok();
}

namespace detail {
/// The grid of `Agent`, or for a decode with a workspace the split replay step
/// (launch_items_or_split) after gdn_coef_kernel, one block per (k head, batch row). Its decode
/// grid is the stream kernel (gdn_stream.cuh) where the policy allows it and the serving pool's
/// 16-byte fragments are aligned (always for fp32; a 16-bit pool needs its pointer and strides in
/// multiples of 8 elements, an 8-bit one of 16, where validation asks for 4), else the split item
/// kernel.
template <class Agent, op Op>
result launch_gdn_items(const typename Agent::params_t& p, const state_pool_ref& other,
                        cudaStream_t stream) {
  using policy = typename Agent::policy;
  auto coef = [&p](auto s) {  // (generic: instantiated for decode only)
    const dim3 grid(unsigned(p.num_k_heads), unsigned(p.rows.batch));
    gdn_coef_kernel<policy><<<grid, gdn_coef_threads, 0, s>>>(p);
    return check_launch();
  };
  return launch_items_or_stream<Agent, Op, gdn_stream_agent<policy, Agent::branching>,
                                gdn_stream_supported<policy>::value>(p, other, stream, coef);
}

template <class Policy, op Op, int MaxDraft = 1>
result launch_gdn(const gdn_params<Policy>& p, const state_pool_ref& other, cudaStream_t stream) {
  using rule = typename Policy::rule;
  constexpr bool kv = rule::layout == state_layout::kv;
  constexpr bool needs_step =
      (Op == op::eager || Op == op::decode || Op == op::verify || Op == op::eager_draft);
  constexpr bool needs_buffer = (Op == op::decode || Op == op::flush || Op == op::materialize ||
                                 Op == op::verify || Op == op::accept || Op == op::fork);
  constexpr int rows_per_row = (Op == op::verify || Op == op::eager_draft) ? MaxDraft : 1;
  if (auto r = validate_gdn(p, needs_step, needs_buffer, rows_per_row); !r) return r;
  if (Op == op::load || Op == op::materialize || Op == op::eager_draft) {
    if (auto r = check_pool(other, p.num_v_heads, kv ? rule::head_k_dim : rule::head_v_dim,
                            kv ? rule::head_v_dim : rule::head_k_dim,
                            "gated_deltanet: the caller's state buffer is null",
                            "gated_deltanet: the caller's state buffer must be 16-byte aligned "
                            "with strides that are multiples of 4 elements",
                            "gated_deltanet: the caller's state buffer strides overlap");
        !r)
      return r;
    if (other.num_slots < p.rows.batch * (Op == op::eager_draft ? MaxDraft : 1))
      return fail(status::bad_shape,
                  "gated_deltanet: the caller's state buffer has fewer rows than batch");
    if (Op != op::load) {  // (load_state only reads `other`)
      if (auto r = detail::check_caller_buffer(
              other.data, p.state.data,
              Policy::has_serving_copy ? static_cast<const void*>(p.serving.data) : nullptr,
              "gated_deltanet: the caller's state buffer (materialize's dest, "
              "eager_draft_step's intermediate) is the state pool itself: it is written by "
              "batch row, so it must be a separate array");
          !r)
        return r;
    }
  }
  if constexpr (Op == op::decode && Policy::pipeline_stages < 2) {  // (the split replay step)
    if (auto r = check_workspace(
            p.workspace, p.workspace_size, p.workspace_elems(p.rows.batch, p.num_v_heads),
            "gated_deltanet: workspace must be 4-byte aligned",
            "gated_deltanet: workspace_size is smaller than workspace_elems(batch, num_v_heads) "
            "floats (set workspace_size to the floats allocated at workspace)");
        !r)
      return r;
  }
  if (Op == op::load && p.cursors.cursor == nullptr)
    return fail(status::null_pointer, "cursors.cursor is null");
  if ((Op == op::verify || Op == op::eager_draft) && p.spec.num_draft == nullptr)
    return fail(status::null_pointer,
                Op == op::verify ? "gated_deltanet: spec.num_draft is null (verify_step)"
                                 : "gated_deltanet: spec.num_draft is null (eager_draft_step)");
  if (Op == op::accept && p.spec.accepted == nullptr)
    return fail(status::null_pointer, "gated_deltanet: spec.accepted is null (accept)");
  if constexpr (branchable(Op)) {
    if (p.branch.write_idx && !p.branch.ckpt_of)
      return fail(
          status::null_pointer,
          "gated_deltanet: branch.write_idx needs branch.ckpt_of (where each slot's checkpoint "
          "is, kept current by the kernels)");
    if (Op == op::fork && (!p.branch.ckpt_of || !p.branch.fork_src))
      return fail(status::null_pointer,
                  "gated_deltanet: fork needs branch.ckpt_of and branch.fork_src");
    if (auto r = detail::check_branch_map(
            p.branch.ckpt_of, p.cursors,
            "gated_deltanet: branch.ckpt_of is the same array as cursors.cursor or "
            "cursors.arrivals: each needs its own [num_slots] array");
        !r)
      return r;
    if (Op == op::fork || p.branch.ckpt_of)  // the plain kernels stay as measured
      return launch_gdn_items<gdn_agent<Policy, Op, MaxDraft, true>, Op>(p, other, stream);
  }
  if constexpr (Op == op::verify && gdn_verify_split_supported<Policy>::value) {
    // The split verification (gdn_verify.cuh): not branching here (branches returned above).
    if (p.workspace != nullptr) {
      if (auto r = check_workspace(
              p.workspace, p.workspace_size,
              p.verify_workspace_elems(p.rows.batch, p.num_v_heads, MaxDraft),
              "gated_deltanet: workspace must be 4-byte aligned",
              "gated_deltanet: workspace_size is smaller than verify_workspace_elems(batch, "
              "num_v_heads, MaxDraft) floats, which verify_step needs for this policy (set "
              "workspace_size to the floats allocated at workspace, or pass no workspace)");
          !r)
        return r;
      if (p.rows.batch >= p.split_min_batch)
        return launch_gdn_verify_split<Policy, MaxDraft>(p, stream);
    }
  }
  if constexpr (Op != op::fork)
    return launch_gdn_items<gdn_agent<Policy, Op, MaxDraft>, Op>(p, other, stream);
  else
    return ok();  // (not reached: fork always branches)
}
}  // namespace detail

template <class Policy>
result eager_step(const gdn_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::eager>(p, state_pool_ref{}, stream);
}
template <class Policy>
result decode_step(const gdn_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::decode>(p, state_pool_ref{}, stream);
}
template <class Policy>
result commit(const gdn_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::flush>(p, state_pool_ref{}, stream);
}
template <class Policy>
result materialize(const gdn_params<Policy>& p, const state_pool_ref& dest, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::materialize>(p, dest, stream);
}
template <int MaxDraft, class Policy>
result verify_step(const gdn_params<Policy>& p, cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "verify_step: MaxDraft must be at least 1");
  return detail::launch_gdn<Policy, detail::op::verify, MaxDraft>(p, state_pool_ref{}, stream);
}
template <int MaxDraft, class Policy>
result eager_draft_step(const gdn_params<Policy>& p, const state_pool_ref& intermediate,
                        cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "eager_draft_step: MaxDraft must be at least 1");
  return detail::launch_gdn<Policy, detail::op::eager_draft, MaxDraft>(p, intermediate, stream);
}
template <int MaxDraft, class Policy>
result accept_tree(const gdn_params<Policy>& p, cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "accept_tree: MaxDraft must be at least 1");
  if (p.spec.accepted_nodes == nullptr)
    return detail::fail(status::null_pointer,
                        "gated_deltanet: spec.accepted_nodes is required (accept_tree)");
  return detail::launch_gdn<Policy, detail::op::accept, MaxDraft>(p, state_pool_ref{}, stream);
}
template <class Policy>
result accept(const gdn_params<Policy>& p, cudaStream_t stream) {
  auto chain = p;  // chains keep drafts in order: accepted_nodes is not read
  chain.spec.accepted_nodes = nullptr;
  return detail::launch_gdn<Policy, detail::op::accept>(chain, state_pool_ref{}, stream);
}
template <class Policy>
result fork(const gdn_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::fork>(p, state_pool_ref{}, stream);
}
template <class Policy>
result load_state(const gdn_params<Policy>& p, const state_pool_ref& src, cudaStream_t stream) {
  return detail::launch_gdn<Policy, detail::op::load>(p, src, stream);
}

}  // namespace replayssm
