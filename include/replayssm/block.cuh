/// @file block.cuh
/// @brief Block-level building blocks: the work of one thread block, callable from your own
/// kernels (to fuse decode with neighbouring work, or to schedule blocks your own way).
///
/// Each block type does one work item: batch row `b`, head `h` (value head for Gated DeltaNet),
/// tile `t` in `[0, tiles_per_head)`. The launchers' kernels are thin `__global__` wrappers over
/// these. Contract for a kernel of yours:
/// - launch `Policy::block_threads` threads per block; give each block the block type's
///   `shared_storage` (static `__shared__` is fine);
/// - call `run` from all threads of the block, once for every (b, h, t) of the launch: the
///   replay cursor of a slot advances when all `nheads * tiles_per_head` items of its row have
///   run, so each must run exactly once per launch;
/// - validate the params on the host first (`validate_mamba2` / `validate_gdn`).
///
/// What a block type `blk` provides:
/// - `typename blk::shared_storage`: the block's staging in shared memory;
/// - `blk{smem}`: a block over `smem`, a `shared_storage&` (cheap: it holds only the reference);
/// - `blk::tiles_per_head`: work items per head, `headdim / Tile` (Mamba-2) or
///   `head_v_dim / Tile` (Gated DeltaNet);
/// - `run(p, b, h, t, other)`: the work item (b, h, t) of the launch described by `p` (the same
///   params as the launcher's). `other` is the caller's fp32 pool of load_state / materialize;
///   the decode, eager and commit blocks do not use it: pass `state_pool_ref{}`.
///
/// Blocks give only the fused path (the one-kernel step; each block loads its own state tile).
/// The split step and split verification (`p.workspace`: their coefficient kernels and
/// readout grids) and the pipelined persistent kernel (PipelineStages >= 2) are not available
/// as blocks: the blocks ignore `p.workspace`. verify_step, accept, accept_tree, fork,
/// materialize, load_state and eager_draft_step have no block type.
///
/// @code
/// using blk = replayssm::mamba2_decode_block<policy>;
/// __global__ void my_fused_step(replayssm::mamba2_params<policy> p) {
///   __shared__ typename blk::shared_storage smem;
///   const int per_row = p.nheads * blk::tiles_per_head;
///   for (int i = blockIdx.x; i < p.rows.batch * per_row; i += gridDim.x) {
///     blk{smem}.run(p, i / per_row, (i % per_row) / blk::tiles_per_head,
///                   i % blk::tiles_per_head, replayssm::state_pool_ref{});
///     __syncthreads();  // smem is reused by the next item
///   }
///   // ... the rest of your fused work
/// }
/// @endcode
#pragma once

#include <replayssm/gated_deltanet.cuh>
#include <replayssm/mamba2.cuh>

namespace replayssm {

// These blocks read each slot's checkpoint from its own pool slot: they ignore `p.branch`
// (branching runs through the launchers). Every precision scheme of the policy works (fp32, the
// singles bf16, fp16, fp8, int8 and the pairs fp32_bf16, fp32_fp16, fp32_fp8, fp32_int8), except
// that the eager blocks refuse pairs at compile time, as eager_step does.

/// @brief One block's Mamba-2 replay decode step (see @ref decode_step).
template <class Policy>
using mamba2_decode_block = detail::mamba2_agent<Policy, detail::op::decode>;
/// @brief One block's Mamba-2 eager step (see @ref eager_step).
template <class Policy>
using mamba2_eager_block = detail::mamba2_agent<Policy, detail::op::eager>;
/// @brief One block's Mamba-2 commit of the buffered steps (see @ref commit).
template <class Policy>
using mamba2_commit_block = detail::mamba2_agent<Policy, detail::op::flush>;
/// @brief One block's Gated DeltaNet replay decode step.
template <class Policy>
using gdn_decode_block = detail::gdn_agent<Policy, detail::op::decode>;
/// @brief One block's Gated DeltaNet eager step.
template <class Policy>
using gdn_eager_block = detail::gdn_agent<Policy, detail::op::eager>;
/// @brief One block's Gated DeltaNet commit of the buffered steps.
template <class Policy>
using gdn_commit_block = detail::gdn_agent<Policy, detail::op::flush>;

}  // namespace replayssm
