// The thin __global__ entries over a block agent, and the launch of a grid of them. An agent
// (mamba2_agent, gdn_agent) provides: params_t, policy, operation, shared_storage, tile_t,
// tiles_per_head, heads(params), slot_of(params, b), tile_ptr(pool, row, head, tile),
// max_draft, and process / process_verify / process_eager_draft / move_rows (run_item.cuh).
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/run_item.cuh>
#include <replayssm/detail/tile.cuh>
#include <replayssm/detail/validate.cuh>

namespace replayssm {
namespace detail {

/// One work item (b = blockIdx.y, head and tile from blockIdx.x) per block.
template <class Agent>
REPLAYSSM_KERNEL void __launch_bounds__(Agent::policy::block_threads, Agent::min_blocks_per_sm)
    item_kernel(const typename Agent::params_t p, const state_pool_ref other) {
  static_assert(sizeof(typename Agent::shared_storage) <= 48 * 1024,
                "ReplaySSM: the block's staging exceeds 48 KiB of static shared memory; lower "
                "BufferLen, MaxDraft or Tile.");
  __shared__ typename Agent::shared_storage smem;
  constexpr int tiles = Agent::tiles_per_head;
  Agent{smem}.run(p, blockIdx.y, blockIdx.x / tiles, blockIdx.x % tiles, other);
}

/// Row operations (accept, fork: no state traffic): one block per batch row, no shared memory
/// (run_item.cuh row_item).
template <class Agent>
REPLAYSSM_KERNEL void __launch_bounds__(Agent::policy::block_threads)
    row_kernel(const typename Agent::params_t p) {
  row_item<Agent>(p, int(blockIdx.x));
}

/// Persistent, pipelined entry for eager and decode: each block walks work items
/// blockIdx.x, blockIdx.x + gridDim.x, ... and keeps the state tiles of the next
/// `pipeline_stages - 1` items in flight (cp.async into shared memory) while it finishes the
/// current one.
template <class Agent>
REPLAYSSM_KERNEL void __launch_bounds__(Agent::policy::block_threads)
    pipelined_kernel(const typename Agent::params_t p, const state_pool_ref other) {
  using tile_t = typename Agent::tile_t;
  constexpr int Z = Agent::policy::pipeline_stages;
  constexpr int NT = Agent::policy::block_threads;
  constexpr int tiles = Agent::tiles_per_head;
  static_assert(Z >= 2, "pipelined kernels need at least 2 stages");
  __shared__ typename Agent::shared_storage smem;
  extern __shared__ float4 stages[];  // [Z][frags][NT]
  const int per_row = Agent::heads(p) * tiles;
  const int items = p.rows.batch * per_row;
  auto issue = [&](int item, int stage) {
    if (item < items) {
      const int b = item / per_row, h = (item % per_row) / tiles, t = item % tiles;
      const int64_t slot = Agent::slot_of(p, b);
      if (slot != p.rows.null_slot)
        tile_load_async<tile_t, NT>(stages + stage * tile_t::frags * NT,
                                    Agent::tile_ptr(p.state, slot, h, t), p.state.row_stride);
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
  };
#pragma unroll
  for (int k = 0; k < Z - 1; ++k) issue(blockIdx.x + k * gridDim.x, k);
  int stage = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    issue(item + (Z - 1) * gridDim.x, (stage + Z - 1) % Z);
    cp_async_wait<Z - 1>();  // this thread's copies of `item` have landed
    const int b = item / per_row, h = (item % per_row) / tiles, t = item % tiles;
    const int64_t slot = Agent::slot_of(p, b);
    if (slot != p.rows.null_slot) {
      tile_t tile;
      tile_load_from<tile_t, NT>(tile, stages + stage * tile_t::frags * NT);
      Agent{smem}.process(p, b, h, t, slot, tile, other, ckpt_slots{slot, slot});
    }
    __syncthreads();  // the next item reuses the agent's shared storage
    stage = (stage + 1) % Z;
  }
  cp_async_wait<0>();
}

/// Launches the grid of `Agent` for validated params: one block per work item, or the
/// persistent pipelined kernel for eager and decode when the policy asks for it.
template <class Agent, op Op>
result launch_items(const typename Agent::params_t& p, const state_pool_ref& other,
                    cudaStream_t stream) {
  using policy = typename Agent::policy;
  if (p.rows.batch == 0) return ok();
  if constexpr (Op == op::accept || Op == op::fork) {
    row_kernel<Agent><<<unsigned(p.rows.batch), policy::block_threads, 0, stream>>>(p);
    return check_launch();
  } else {
    const dim3 grid(unsigned(Agent::heads(p)) * Agent::tiles_per_head, unsigned(p.rows.batch));
    if constexpr (policy::pipeline_stages >= 2 && !Agent::branching &&
                  (Op == op::eager || Op == op::decode)) {
      const size_t smem = size_t(policy::pipeline_stages) * Agent::tile_t::frags *
                          policy::block_threads * sizeof(float4);
      int blocks = 0;
      if (auto r = persistent_grid(pipelined_kernel<Agent>, policy::block_threads, smem,
                                   int(grid.x * grid.y), blocks);
          !r)
        return r;
      pipelined_kernel<Agent><<<blocks, policy::block_threads, smem, stream>>>(p, other);
      return check_launch();
    }
    item_kernel<Agent><<<grid, policy::block_threads, 0, stream>>>(p, other);
    return check_launch();
  }
}

/// The split replay step of decode (mamba2_split.cuh, gdn_split.cuh): `coef`, a
/// callable launching the rule's coefficient grid on `stream` and returning its result, then
/// the decode grid of `Split` (by default `Agent::split_agent`; Mamba-2 passes
/// mamba2_stream_agent where it applies, mamba2_launch.inl), one item per block, with
/// programmatic stream serialization, so that its blocks may start (and request their state) once
/// every coefficient block has read its cursor and triggered; its replay rows wait for the
/// coefficients in pdl_wait. Two stream launches, no synchronisation, no allocation: capturable
/// in a CUDA graph (as a programmatic edge). Every other launch, a decode without a workspace
/// or with fewer than `p.split_min_batch` rows, and pipelined policies (their persistent kernel
/// keeps the fused path) go to launch_items.
template <class Agent, op Op, class Split = typename Agent::split_agent, class Coef>
result launch_items_or_split(const typename Agent::params_t& p, const state_pool_ref& other,
                             cudaStream_t stream, Coef&& coef) {
  using policy = typename Agent::policy;
  if constexpr (Op == op::decode && policy::pipeline_stages < 2) {
    if (p.workspace != nullptr && p.rows.batch >= p.split_min_batch) {
      if (p.rows.batch == 0) return ok();
      if (auto r = coef(stream); !r) return r;
      return launch_dependent(
          item_kernel<Split>,
          dim3(unsigned(Split::heads(p)) * Split::tiles_per_head, unsigned(p.rows.batch)),
          policy::block_threads, stream,
          "the split replay step's decode launch failed (cudaLaunchKernelEx with programmatic "
          "stream serialization)",
          p, state_pool_ref{});
    }
  }
  return launch_items<Agent, Op>(p, other, stream);
}

/// launch_items_or_split with the rule's stream kernel as the split step's decode grid: `Stream`
/// where `StreamOk` (the policy fits it) and its serving pool's 16-byte fragments are aligned
/// (`Stream::fragments_aligned`), else the agent's split item kernel.
template <class Agent, op Op, class Stream, bool StreamOk, class Coef>
result launch_items_or_stream(const typename Agent::params_t& p, const state_pool_ref& other,
                              cudaStream_t stream, Coef&& coef) {
  if constexpr (Op == op::decode && StreamOk) {
    if (Stream::fragments_aligned(p))
      return launch_items_or_split<Agent, Op, Stream>(p, other, stream, coef);
  }
  return launch_items_or_split<Agent, Op, typename Agent::split_agent>(p, other, stream, coef);
}

}  // namespace detail
}  // namespace replayssm
