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

template <class Agent>
REPLAYSSM_DEVICE void run_item(Agent& agent, const typename Agent::params_t& p, int b, int h, int t,
                               const state_pool_ref& other) {
  constexpr op Op = Agent::operation;
  const int64_t slot = Agent::slot_of(p, b);
  if (slot == p.rows.null_slot) return;
  typename Agent::tile_t tile;
  if constexpr (Op == op::load) {
    tile.load(Agent::tile_ptr(other, b, h, t), other.row_stride);
    tile.store(Agent::tile_ptr(p.state, slot, h, t), p.state.row_stride);
    if (h == 0 && t == 0 && threadIdx.x == 0) p.cursors.cursor[slot] = 0;
    return;
  }
  if constexpr (Op == op::compact) {
    agent.compact(p, b, h, t, slot);
    return;
  }
  if constexpr (Op == op::accept) {  // no state traffic unless the window fills
    const int n = Agent::accepted_steps(p, slot, b);
    if (n < Agent::policy::commit_interval) {
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot,
                            uint32_t(Agent::heads(p)) * Agent::tiles_per_head, n);
      return;
    }
  }
  tile.load(Agent::tile_ptr(p.state, slot, h, t), p.state.row_stride);
  if constexpr (Op == op::verify)
    agent.process_verify(p, b, h, t, slot, tile);
  else if constexpr (Op == op::eager_draft)
    agent.process_eager_draft(p, b, h, t, tile, other);
  else
    agent.process(p, b, h, t, slot, tile, other);
}

}  // namespace detail
}  // namespace replayssm
