// Implementation of the Mamba-2 launchers declared in <replayssm/mamba2.cuh>.
#pragma once

#include <replayssm/detail/kernels.cuh>
#include <replayssm/detail/mamba2_agent.cuh>
#include <replayssm/detail/mamba2_stream.cuh>
#include <replayssm/detail/mamba2_verify.cuh>
#include <replayssm/detail/validate.cuh>

namespace replayssm {

template <class Policy>
result validate_mamba2(const mamba2_params<Policy>& p, bool needs_step, bool needs_buffer,
                       bool needs_weights, int input_rows_per_row) {
  using detail::fail;
  using rule = typename Policy::rule;
  if (p.headdim != rule::headdim)
    return fail(status::policy_mismatch, "mamba2: headdim differs from the policy's HeadDim");
  if (p.dstate != rule::dstate)
    return fail(status::policy_mismatch, "mamba2: dstate differs from the policy's DState");
  if (p.nheads <= 0 || p.ngroups <= 0)
    return fail(status::bad_shape, "mamba2: nheads and ngroups must be positive");
  if (p.nheads % p.ngroups != 0)
    return fail(status::bad_shape, "mamba2: ngroups must divide nheads");
  if (int64_t(p.nheads) * (rule::headdim / Policy::tile) > 2147483647)
    return fail(status::bad_shape, "mamba2: too many heads for one launch");
  if (auto r = detail::check_pool(
          p.state, p.nheads, rule::headdim, rule::dstate, "mamba2: state.data is null",
          "mamba2: state.data must be aligned to 4 elements (16-byte for fp32, "
          "8-byte for bf16/fp16) and its strides multiples of 4 elements",
          "mamba2: state strides overlap: need row_stride >= dstate, "
          "head_stride >= headdim * row_stride, slot_stride >= nheads * "
          "head_stride");
      !r)
    return r;
  if (auto r = detail::check_rows(p.rows, p.state.num_slots); !r) return r;
  if constexpr (Policy::scaled_state) {
    if (auto r = detail::check_scales(
            p.state_scale, p.nheads, mamba2_params<Policy>::serving_scales_per_head,
            p.state.num_slots,
            "mamba2: state_scale.data is null (an 8-bit checkpoint needs its row scales)",
            "mamba2: state_scale.data must be 4-byte aligned",
            "mamba2: state_scale strides overlap: need head_stride >= serving_scales_per_head, "
            "slot_stride >= heads * head_stride",
            "mamba2: state_scale has fewer slots than state");
        !r)
      return r;
  }
  if constexpr (Policy::has_serving_copy) {
    if (auto r = detail::check_pool(
            p.serving, p.nheads, rule::headdim, rule::dstate,
            "mamba2: serving.data is null (a precision pair needs its serving copy)",
            "mamba2: serving.data must be aligned to 4 elements and its strides multiples of 4",
            "mamba2: serving strides overlap (same rules as state)");
        !r)
      return r;
    if (p.serving.num_slots < p.state.num_slots)
      return fail(status::bad_shape, "mamba2: serving has fewer slots than state");
    if constexpr (Policy::scaled_copy) {
      if (auto r = detail::check_scales(
              p.serving_scale, p.nheads, mamba2_params<Policy>::serving_scales_per_head,
              p.state.num_slots,
              "mamba2: serving_scale.data is null (an 8-bit copy needs its row scales)",
              "mamba2: serving_scale.data must be 4-byte aligned",
              "mamba2: serving_scale strides overlap: need head_stride >= serving_scales_per_head, "
              "slot_stride >= heads * head_stride",
              "mamba2: serving_scale has fewer slots than state");
          !r)
        return r;
    }
  }
  if (needs_weights && p.weights.A == nullptr)
    return fail(status::null_pointer, "mamba2: weights.A is null");
  if (needs_step) {
    if (!p.in.x || !p.in.dt || !p.in.B || !p.in.C || !p.in.out)
      return fail(status::null_pointer, "mamba2: in.x, in.dt, in.B, in.C and in.out are required");
    if (p.in.x_head_stride < rule::headdim || p.in.out_head_stride < rule::headdim ||
        (p.in.z && p.in.z_head_stride < rule::headdim))
      return fail(status::bad_stride, "mamba2: x/z/out head strides must be at least headdim");
    if (p.in.B_group_stride < rule::dstate || p.in.C_group_stride < rule::dstate)
      return fail(status::bad_stride, "mamba2: B/C group strides must be at least dstate");
    // dt is one scalar per head: heads must not share one (dt also enters the buffer, so a
    // wrong dt reaches the checkpoint at the next commit, not only this step's output).
    if (p.nheads > 1 && p.in.dt_head_stride < 1)
      return fail(status::bad_stride,
                  "mamba2: in.dt_head_stride must be at least 1 (dt is [batch, nheads], one "
                  "scalar per head)");
    const bool many_rows = int64_t(p.rows.batch) * input_rows_per_row > 1;
    if (many_rows && (p.in.x_batch_stride < int64_t(p.nheads) * p.in.x_head_stride ||
                      p.in.out_batch_stride < int64_t(p.nheads) * p.in.out_head_stride ||
                      p.in.B_batch_stride < int64_t(p.ngroups) * p.in.B_group_stride ||
                      p.in.C_batch_stride < int64_t(p.ngroups) * p.in.C_group_stride ||
                      (p.in.z && p.in.z_batch_stride < int64_t(p.nheads) * p.in.z_head_stride)))
      return fail(status::bad_stride,
                  "mamba2: a batch stride (x, z, out, B or C) is smaller than one row's extent");
    if (many_rows && p.in.dt_batch_stride < int64_t(p.nheads - 1) * p.in.dt_head_stride + 1)
      return fail(status::bad_stride,
                  "mamba2: in.dt_batch_stride is smaller than one row of dt: need "
                  "dt_batch_stride >= (nheads - 1) * dt_head_stride + 1 (it defaults to 0, which "
                  "would give every row the first row's dt)");
  }
  if (needs_buffer) {
    if (!p.buffer.x || !p.buffer.B || !p.buffer.dt)
      return fail(status::null_pointer, "mamba2: buffer.x, buffer.B and buffer.dt are required");
    if (!detail::aligned(p.buffer.x, 16) || !detail::aligned(p.buffer.B, 16))
      return fail(status::misaligned_pointer,
                  "mamba2: buffer.x and buffer.B must be 16-byte aligned (rows load as 16 bytes)");
    if (auto r = detail::check_cursors(p.cursors); !r) return r;
  }
  {  // no array the launch writes may be passed twice (one write would overwrite the other)
    const void* written[] = {
        p.state.data,
        Policy::has_serving_copy ? static_cast<const void*>(p.serving.data) : nullptr,
        Policy::scaled_state ? p.state_scale.data : nullptr,
        Policy::scaled_copy ? p.serving_scale.data : nullptr,
        needs_buffer ? static_cast<const void*>(p.buffer.x) : nullptr,
        needs_buffer ? static_cast<const void*>(p.buffer.B) : nullptr,
        needs_buffer ? p.buffer.dt : nullptr,
        needs_buffer ? p.cursors.cursor : nullptr,
        needs_buffer ? p.cursors.arrivals : nullptr};
    if (detail::shares_base(written))
      return fail(status::bad_stride,
                  "mamba2: two arrays the launch writes start at the same address: state, "
                  "serving, state_scale / serving_scale, buffer.x, buffer.B, buffer.dt, "
                  "cursors.cursor and cursors.arrivals must be distinct arrays");
  }
  return detail::ok();
}

namespace detail {
/// The grid of `Agent`, or for a decode with a workspace the split replay step
/// (launch_items_or_split) after mamba2_coef_kernel, one block per batch row. Its decode grid
/// is the stream kernel (mamba2_stream.cuh) where the policy allows it and the serving pool's
/// 16-byte fragments are aligned (always for fp32; a 16-bit pool needs its pointer and strides
/// in multiples of 8 elements, where validation asks for 4), else the split item kernel.
template <class Agent, op Op>
result launch_mamba2_items(const typename Agent::params_t& p, const state_pool_ref& other,
                           cudaStream_t stream) {
  using policy = typename Agent::policy;
  // (committing rows' coefficients too where the stream kernel's commit() reads them; with the
  // split item kernel instead, for unaligned pools, they are computed and not read)
  constexpr bool commits = mamba2_stream_commits<policy>::value;
  auto coef = [&p](auto s) {  // (generic: instantiated for decode only)
    const size_t smem = size_t(p.ngroups) * policy::buffer_len * sizeof(float);
    mamba2_coef_kernel<policy, commits>
        <<<unsigned(p.rows.batch), mamba2_coef_threads, smem, s>>>(p);
    return check_launch();
  };
  return launch_items_or_stream<Agent, Op, mamba2_stream_agent<policy, Agent::branching>,
                                mamba2_stream_supported<policy>::value>(p, other, stream, coef);
}

template <class Policy, op Op, int MaxDraft = 1>
result launch_mamba2(const mamba2_params<Policy>& p, const state_pool_ref& other,
                     cudaStream_t stream) {
  constexpr bool needs_step =
      (Op == op::eager || Op == op::decode || Op == op::verify || Op == op::eager_draft);
  constexpr bool needs_buffer = (Op == op::decode || Op == op::flush || Op == op::materialize ||
                                 Op == op::verify || Op == op::accept || Op == op::fork);
  constexpr int rows_per_row = (Op == op::verify || Op == op::eager_draft) ? MaxDraft : 1;
  if (auto r = validate_mamba2(p, needs_step, needs_buffer, Op != op::load && Op != op::fork,
                               rows_per_row);
      !r)
    return r;
  if (Op == op::load || Op == op::materialize || Op == op::eager_draft) {
    if (auto r = check_pool(other, p.nheads, Policy::rule::headdim, Policy::rule::dstate,
                            "mamba2: the caller's state buffer is null",
                            "mamba2: the caller's state buffer must be 16-byte aligned with "
                            "strides that are multiples of 4 elements",
                            "mamba2: the caller's state buffer strides overlap");
        !r)
      return r;
    if (other.num_slots < p.rows.batch * (Op == op::eager_draft ? MaxDraft : 1))
      return fail(status::bad_shape, "mamba2: the caller's state buffer has fewer rows than batch");
    if (Op != op::load) {  // (load_state only reads `other`)
      if (auto r = detail::check_caller_buffer(
              other.data, p.state.data,
              Policy::has_serving_copy ? static_cast<const void*>(p.serving.data) : nullptr,
              "mamba2: the caller's state buffer (materialize's dest, eager_draft_step's "
              "intermediate) is the state pool itself: it is written by batch row, so it "
              "must be a separate array");
          !r)
        return r;
    }
  }
  if constexpr (Op == op::decode && Policy::pipeline_stages < 2) {  // (the split replay step)
    if (auto r = check_workspace(
            p.workspace, p.workspace_size, p.workspace_elems(p.rows.batch, p.nheads),
            "mamba2: workspace must be 4-byte aligned",
            "mamba2: workspace_size is smaller than workspace_elems(batch, nheads) floats (set "
            "workspace_size to the floats allocated at workspace)");
        !r)
      return r;
    if (p.workspace != nullptr &&
        int64_t(p.ngroups) * Policy::buffer_len * int64_t(sizeof(float)) > 48 * 1024)
      return fail(status::bad_shape,
                  "mamba2: the split decode step (workspace set) stages ngroups * BufferLen dot "
                  "products in 48 KiB of shared memory: too many groups; pass no workspace");
  }
  if (Op == op::load && p.cursors.cursor == nullptr)
    return fail(status::null_pointer, "cursors.cursor is null");
  if ((Op == op::verify || Op == op::eager_draft) && p.spec.num_draft == nullptr)
    return fail(status::null_pointer, Op == op::verify
                                          ? "mamba2: spec.num_draft is null (verify_step)"
                                          : "mamba2: spec.num_draft is null (eager_draft_step)");
  if (Op == op::accept && p.spec.accepted == nullptr)
    return fail(status::null_pointer, "mamba2: spec.accepted is null (accept)");
  if constexpr (branchable(Op)) {
    if (p.branch.write_idx && !p.branch.ckpt_of)
      return fail(status::null_pointer,
                  "mamba2: branch.write_idx needs branch.ckpt_of (where each slot's checkpoint "
                  "is, kept current by the kernels)");
    if (Op == op::fork && (!p.branch.ckpt_of || !p.branch.fork_src))
      return fail(status::null_pointer, "mamba2: fork needs branch.ckpt_of and branch.fork_src");
    if (auto r = detail::check_branch_map(
            p.branch.ckpt_of, p.cursors,
            "mamba2: branch.ckpt_of is the same array as cursors.cursor or "
            "cursors.arrivals: each needs its own [num_slots] array");
        !r)
      return r;
    if (Op == op::fork || p.branch.ckpt_of)  // the plain kernels stay as measured
      return launch_mamba2_items<mamba2_agent<Policy, Op, MaxDraft, true>, Op>(p, other, stream);
  }
  if constexpr (Op == op::verify && mamba2_verify_split_supported<Policy>::value) {
    // The split verification (mamba2_verify.cuh): not branching here (branches returned above).
    if (p.workspace != nullptr) {
      if (auto r = check_workspace(
              p.workspace, p.workspace_size,
              p.verify_workspace_elems(p.rows.batch, p.ngroups, MaxDraft),
              "mamba2: workspace must be 4-byte aligned",
              "mamba2: workspace_size is smaller than verify_workspace_elems(batch, ngroups, "
              "MaxDraft) floats, which verify_step needs for this policy (set workspace_size to "
              "the floats allocated at workspace, or pass no workspace)");
          !r)
        return r;
      // (The readout grid is (H / G, G, batch): more than 65535 groups keep the fused path.)
      if (p.rows.batch >= p.split_min_batch && p.ngroups <= 65535)
        return launch_mamba2_verify_split<Policy, MaxDraft>(p, stream);
    }
  }
  if constexpr (Op != op::fork)
    return launch_mamba2_items<mamba2_agent<Policy, Op, MaxDraft>, Op>(p, other, stream);
  else
    return ok();  // (not reached: fork always branches)
}
}  // namespace detail

template <class Policy>
result eager_step(const mamba2_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::eager>(p, state_pool_ref{}, stream);
}
template <class Policy>
result decode_step(const mamba2_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::decode>(p, state_pool_ref{}, stream);
}
template <class Policy>
result commit(const mamba2_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::flush>(p, state_pool_ref{}, stream);
}
template <class Policy>
result materialize(const mamba2_params<Policy>& p, const state_pool_ref& dest,
                   cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::materialize>(p, dest, stream);
}
template <int MaxDraft, class Policy>
result verify_step(const mamba2_params<Policy>& p, cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "verify_step: MaxDraft must be at least 1");
  return detail::launch_mamba2<Policy, detail::op::verify, MaxDraft>(p, state_pool_ref{}, stream);
}
template <int MaxDraft, class Policy>
result eager_draft_step(const mamba2_params<Policy>& p, const state_pool_ref& intermediate,
                        cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "eager_draft_step: MaxDraft must be at least 1");
  return detail::launch_mamba2<Policy, detail::op::eager_draft, MaxDraft>(p, intermediate, stream);
}
template <int MaxDraft, class Policy>
result accept_tree(const mamba2_params<Policy>& p, cudaStream_t stream) {
  static_assert(MaxDraft >= 1, "accept_tree: MaxDraft must be at least 1");
  if (p.spec.accepted_nodes == nullptr)
    return detail::fail(status::null_pointer,
                        "mamba2: spec.accepted_nodes is required (accept_tree)");
  return detail::launch_mamba2<Policy, detail::op::accept, MaxDraft>(p, state_pool_ref{}, stream);
}
template <class Policy>
result accept(const mamba2_params<Policy>& p, cudaStream_t stream) {
  auto chain = p;  // chains keep drafts in order: accepted_nodes is not read
  chain.spec.accepted_nodes = nullptr;
  return detail::launch_mamba2<Policy, detail::op::accept>(chain, state_pool_ref{}, stream);
}
template <class Policy>
result fork(const mamba2_params<Policy>& p, cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::fork>(p, state_pool_ref{}, stream);
}
template <class Policy>
result load_state(const mamba2_params<Policy>& p, const state_pool_ref& src, cudaStream_t stream) {
  return detail::launch_mamba2<Policy, detail::op::load>(p, src, stream);
}

}  // namespace replayssm
