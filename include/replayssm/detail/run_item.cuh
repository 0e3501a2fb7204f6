// The work of one item (row b, head h, tile t), the same for every agent: skip null rows, then
// dispatch on the operation. An agent provides the pieces (see kernels.cuh for the list).
#pragma once

#include <replayssm/cache.cuh>
#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

/// The drafts on the path from the root to draft d of row b, as bits (chains, with no `parent`:
/// drafts 0..d). A parent that is not an earlier draft ends the path (malformed trees cannot loop).
template <int MaxDraft>
REPLAYSSM_HD uint32_t draft_path(const spec_ref& spec, int b, int d) {
  if (!spec.parent) return d >= 31 ? ~0u : (2u << d) - 1u;
  uint32_t mask = 0;
  for (int k = d; k >= 0;) {
    mask |= 1u << k;
    const int up = spec.parent[int64_t(b) * MaxDraft + k];
    k = up < k ? up : -1;
  }
  return mask;
}

/// Tile (slot, h, t) of a pool, loaded or stored with the row scales `sc` when Scaled (8-bit
/// storage) or plainly otherwise: the one way checkpoints and serving copies move.
template <bool Scaled, class Agent, class Tile, class S>
REPLAYSSM_DEVICE void load_tile(Tile& tile, const basic_pool_ref<S>& pool, const scale_pool_ref& sc,
                                int64_t slot, int h, int t) {
  if constexpr (Scaled)
    load_scaled(
        tile, Agent::tile_ptr(pool, slot, h, t), pool.row_stride,
        sc.data + slot * sc.slot_stride + h * sc.head_stride + int64_t(t) * Tile::scale_rows);
  else
    tile.load(Agent::tile_ptr(pool, slot, h, t), pool.row_stride);
}
template <bool Scaled, class Agent, class Tile, class S>
REPLAYSSM_DEVICE void store_tile(const Tile& tile, const basic_pool_ref<S>& pool,
                                 const scale_pool_ref& sc, int64_t slot, int h, int t) {
  if constexpr (Scaled)
    store_scaled(
        tile, Agent::tile_ptr(pool, slot, h, t), pool.row_stride,
        sc.data + slot * sc.slot_stride + h * sc.head_stride + int64_t(t) * Tile::scale_rows);
  else
    tile.store(Agent::tile_ptr(pool, slot, h, t), pool.row_stride);
}
/// The checkpoint (a pair's master) of pool slot `slot`.
template <class Agent, class Tile>
REPLAYSSM_DEVICE void load_master(Tile& tile, const typename Agent::params_t& p, int64_t slot,
                                  int h, int t) {
  load_tile<Agent::policy::scaled_state, Agent>(tile, p.state, p.state_scale, slot, h, t);
}
template <class Agent, class Tile>
REPLAYSSM_DEVICE void store_master(const Tile& tile, const typename Agent::params_t& p,
                                   int64_t slot, int h, int t) {
  store_tile<Agent::policy::scaled_state, Agent>(tile, p.state, p.state_scale, slot, h, t);
}
/// Pairs: the serving copy of pool slot `slot` (what output steps read); a store regenerates it
/// from a folded tile (no-op without a copy).
template <class Agent, class Tile>
REPLAYSSM_DEVICE void load_copy(Tile& tile, const typename Agent::params_t& p, int64_t slot, int h,
                                int t) {
  load_tile<Agent::policy::scaled_copy, Agent>(tile, p.serving, p.serving_scale, slot, h, t);
}
/// The pool output steps read (decode, verify) as the stream agents see it: a pair's serving copy,
/// else the checkpoint; and that pool's row scales (8-bit serving states).
template <class Policy, class Params>
REPLAYSSM_HD const auto& serving_pool_of(const Params& p) {
  if constexpr (Policy::has_serving_copy)
    return p.serving;
  else
    return p.state;
}
template <class Policy, class Params>
REPLAYSSM_DEVICE const scale_pool_ref& serving_scales_of(const Params& p) {
  if constexpr (Policy::has_serving_copy)
    return p.serving_scale;
  else
    return p.state_scale;
}
/// Whether a pool's pointer and strides keep every 16-byte fragment of E elements aligned (the
/// stream agents' launchers fall back to the split item kernel otherwise; always for fp32).
template <int E, class Pool>
REPLAYSSM_HD bool fragments_aligned16(const Pool& pool) {
  return reinterpret_cast<uintptr_t>(pool.data) % 16 == 0 && pool.row_stride % E == 0 &&
         pool.head_stride % E == 0 && pool.slot_stride % E == 0;
}
template <class Agent, class Tile>
REPLAYSSM_DEVICE void store_copy(const Tile& tile, const typename Agent::params_t& p, int64_t slot,
                                 int h, int t) {
  if constexpr (Agent::policy::has_serving_copy)
    store_tile<Agent::policy::scaled_copy, Agent>(tile, p.serving, p.serving_scale, slot, h, t);
}

/// Writes a folded checkpoint tile to pool slot `wr`: the master and, for a pair, the serving
/// copy regenerated from it in the same launch.
template <class Agent, class Tile>
REPLAYSSM_DEVICE void store_checkpoint(const Tile& tile, const typename Agent::params_t& p,
                                       int64_t wr, int h, int t) {
  store_master<Agent>(tile, p, wr, h, t);
  store_copy<Agent>(tile, p, wr, h, t);
}

/// Pairs: decode and verify load the serving copy (run_item); a launch that then folds needs the
/// master instead, requested here (only the committing rows pay this second load).
template <class Agent, class Tile>
REPLAYSSM_DEVICE void reload_master(Tile& tile, const typename Agent::params_t& p, int64_t rd,
                                    int h, int t) {
  if constexpr (Agent::policy::has_serving_copy) load_master<Agent>(tile, p, rd, h, t);
}

/// The end of a decode or flush item: the slot's last block to arrive sets its cursor (0 after a
/// commit, else n + 1) and, with branches, which pool slot now holds its checkpoint. Decode
/// arrived right after its staging barrier (`arrival`); flush arrives here. Call from all threads.
template <op Op, bool Branch, class Params>
REPLAYSSM_DEVICE void finish_cursor(const Params& p, const slot_arrival& arrival, int64_t slot,
                                    uint32_t blocks_per_slot, int n, bool commit, ckpt_slots ck) {
  if constexpr (Op == op::decode)
    arrival.finish(p.cursors.cursor, p.cursors.arrivals, slot, blocks_per_slot, commit ? 0 : n + 1,
                   Branch ? p.branch.ckpt_of : nullptr, commit ? ck.wr : ck.rd);
  if constexpr (Op == op::flush)
    arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot, blocks_per_slot, 0,
                          Branch ? p.branch.ckpt_of : nullptr, ck.wr);
}

/// The checkpoint slots of batch row b, whose pool slot is `slot`: both `slot`, unless Branch
/// (the checkpoint lives in other pool slots, branch_ref): then rd = branch.ckpt_of[slot] (when
/// `reads_ckpt_of`) and wr = branch.write_idx[b] (a negative or absent write_idx, a row that will
/// not commit: in place). False for an index outside the pool: the caller touches nothing (all
/// blocks of the row agree, so no arrival is missing). The one place these are resolved
/// (run_item, the stream kernels).
template <bool Branch, class Params>
REPLAYSSM_DEVICE bool resolve_ckpt_slots(const Params& p, int b, int64_t slot, bool reads_ckpt_of,
                                         ckpt_slots& ck) {
  ck = ckpt_slots{slot, slot};
  if constexpr (Branch) {
    if (reads_ckpt_of) ck.rd = p.branch.ckpt_of[slot];
    const int64_t w = p.branch.write_idx ? p.branch.write_idx[b] : -1;
    ck.wr = w >= 0 ? w : ck.rd;
    if (ck.rd < 0 || ck.rd >= p.state.num_slots || ck.wr < 0 || ck.wr >= p.state.num_slots)
      return false;
  }
  return true;
}

/// op::accept and op::fork for batch row b, by one block (row_kernel): neither touches state, so
/// a row needs no per-head work items, only its buffered steps moved (`Agent::move_rows`, every
/// head and group of a step at once, all threads) and its cursor set by the block itself.
///
/// accept keeps row b's accepted drafts: they move to the buffer's tail (positions n, n + 1, ...)
/// from where the verification put them (its cursor tells: after the buffered steps, or after
/// the window it folded) along the accepted path (`accepted_nodes`, trees) or in order (chains,
/// `accepted_nodes` null); then cursor = n + accepted. A source never lies before its
/// destination, but a later move may write where an earlier one read (a tree path 1, 2 with the
/// drafts at n: move 0 reads n + 1, which move 1 writes), hence the barrier after each move. A
/// chain's drafts move only after a fold, from behind the folded window (at least K steps on) to
/// step 0: two disjoint ranges, moved as one (a memory latency per array, not per draft and
/// array: NOTES v26).
/// fork makes slot `dst` (row b's) a branch of slot `branch.fork_src[b]`: its buffered steps
/// and cursor are copied and it reads the same checkpoint. Fork after accept, not between a
/// verification and its accept (drafts are not copied). Call from all threads.
template <class Agent>
REPLAYSSM_DEVICE void row_item(const typename Agent::params_t& p, int b) {
  constexpr op Op = Agent::operation;
  static_assert(Op == op::accept || Op == op::fork, "row_item: accept and fork only");
  constexpr int K = Agent::policy::commit_interval, L = Agent::policy::buffer_len;
  const int64_t slot = Agent::slot_of(p, b);
  if (slot == p.rows.null_slot) return;
  ckpt_slots ck;  // (accept, branching: a row whose checkpoint index is corrupt is left alone)
  if (!resolve_ckpt_slots<Agent::branching>(p, b, slot, Op == op::accept, ck)) return;
  if constexpr (Op == op::accept) {
    constexpr int MaxDraft = Agent::max_draft;
    const int32_t c = p.cursors.cursor[slot];
    const int n = buffered_steps<op::accept, K, L>(c), off = draft_offset<L>(c);
    int a = p.spec.accepted[b];
    if (p.spec.num_draft && a > p.spec.num_draft[b]) a = p.spec.num_draft[b];  // only drafts
    if (p.spec.accepted_nodes && a > MaxDraft) a = MaxDraft;
    a = a < 0 ? 0 : (a > L - off ? L - off : a);
    const bool chain = !p.spec.accepted_nodes;  // drafts 0 .. a - 1 at off .. off + a - 1
    if (chain && off != n && off - n >= a) {
      // A chain after a fold (off = the folded window's length >= K > a, n = 0): two disjoint
      // ranges, one copy of a steps (a memory latency per array, not per step and array).
      Agent::move_rows(p, slot, off, slot, n, a);
    } else {
      for (int k = 0; k < a; ++k) {
        const int node = chain ? k : p.spec.accepted_nodes[int64_t(b) * MaxDraft + k];
        if (node < k || off + node >= L || off + node == n + k) continue;  // malformed, or in place
        Agent::move_rows(p, slot, off + node, slot, n + k, 1);
        __syncthreads();  // this move lands before a later one could overwrite its source
      }
    }
    __syncthreads();  // every thread has read the cursor
    if (threadIdx.x == 0) p.cursors.cursor[slot] = n + a;
  } else {
    const int64_t src = p.branch.fork_src[b];
    if (src < 0 || src >= p.state.num_slots || src == slot) return;
    const int n = buffered_steps<op::flush, K, L>(p.cursors.cursor[src]);
    const int32_t ckpt = p.branch.ckpt_of[src];
    if (n > 0) Agent::move_rows(p, src, 0, slot, 0, n);  // (disjoint slots)
    if (threadIdx.x == 0) {
      p.cursors.cursor[slot] = n;
      p.branch.ckpt_of[slot] = ckpt;
    }
  }
}

template <class Agent>
REPLAYSSM_DEVICE void run_item(Agent& agent, const typename Agent::params_t& p, int b, int h, int t,
                               const state_pool_ref& other) {
  constexpr op Op = Agent::operation;
  static_assert(Op != op::accept && Op != op::fork,
                "run_item: accept and fork are row operations (row_item, row_kernel)");
  const int64_t slot = Agent::slot_of(p, b);
  if (slot == p.rows.null_slot) return;
  ckpt_slots ck;
  if (!resolve_ckpt_slots<Agent::branching>(p, b, slot, Op != op::load, ck)) return;
  typename Agent::tile_t tile;
  if constexpr (Op == op::load) {
    tile.load(Agent::tile_ptr(other, b, h, t), other.row_stride);
    store_checkpoint<Agent>(tile, p, ck.wr, h, t);
    if (h == 0 && t == 0 && threadIdx.x == 0) {
      p.cursors.cursor[slot] = 0;
      if constexpr (Agent::branching) p.branch.ckpt_of[slot] = int32_t(ck.wr);
    }
    return;
  }
  if constexpr (Agent::policy::has_serving_copy && (Op == op::decode || Op == op::verify))
    load_copy<Agent>(tile, p, ck.rd, h, t);  // what outputs read
  else
    load_master<Agent>(tile, p, ck.rd, h, t);
  if constexpr (Op == op::verify)
    agent.process_verify(p, b, h, t, slot, tile, ck);
  else if constexpr (Op == op::eager_draft)
    agent.process_eager_draft(p, b, h, t, tile, other);
  else
    agent.process(p, b, h, t, slot, tile, other, ck);
}

}  // namespace detail
}  // namespace replayssm
