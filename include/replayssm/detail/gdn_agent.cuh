// Block-level Gated DeltaNet agent and its __global__ entry.
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/run_item.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

template <class Rule, int Tile, int Threads, state_layout = Rule::layout>
struct gdn_tile_for {
  using type = reduce_major_tile<Tile, Rule::head_k_dim, Threads>;  // [K, V]: v contiguous
};
template <class Rule, int Tile, int Threads>
struct gdn_tile_for<Rule, Tile, Threads, state_layout::vk> {
  using type = keep_major_tile<Tile, Rule::head_k_dim, Threads>;  // [V, K]: k contiguous
};

/// One block works on `Policy::tile` columns of V of one value head of one batch row.
template <class Policy, op Op, int MaxDraft = 1>
struct gdn_agent {
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using policy = Policy;
  static constexpr op operation = Op;
  using params_t = gdn_params<Policy>;
  static constexpr int KD = rule::head_k_dim;
  static constexpr int VD = rule::head_v_dim;
  static constexpr int VT = Policy::tile;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int S = (Op == op::eager) ? 1 : (Op == op::eager_draft ? MaxDraft : L);
  static constexpr int RPL = (KD + 31) / 32;  // sweep elements per lane
  static constexpr bool kv = (rule::layout == state_layout::kv);
  using tile_t = typename gdn_tile_for<rule, VT, NT>::type;
  static constexpr bool drafts = (Op == op::verify || Op == op::eager_draft || Op == op::compact);
  static_assert(!drafts || MaxDraft <= 32, "speculative launches: MaxDraft must be at most 32.");
  static_assert(NT >= L && (!drafts || NT >= MaxDraft),
                "replay_policy: BlockThreads must be at least BufferLen (and MaxDraft): each "
                "thread stages one buffered step's scalars.");
  static constexpr int NQ = drafts ? MaxDraft : 1;  // q vectors staged
  static_assert(Op != op::verify || L >= K - 1 + MaxDraft,
                "gated_deltanet: the buffer must hold a full commit window plus the largest "
                "draft: BufferLen >= CommitInterval - 1 + MaxDraft.");
  static_assert(
      VD % VT == 0,
      "gated_deltanet: the policy's Tile (columns of V per block) must divide head_v_dim.");
  static_assert(VT <= NT && KD <= NT,
                "gated_deltanet: the policy's Tile and head_k_dim must not exceed BlockThreads.");

  static REPLAYSSM_HD int heads(const params_t& p) { return p.num_v_heads; }  ///< heads per row
  static constexpr int tiles_per_head = VD / VT;  ///< blocks (work items) per head

  struct shared_storage {
    alignas(16) float k[S][KD];  // normalised k_j
    alignas(16) float v[S][VT];  // v_j, this block's columns
    alignas(16) float g[S];
    alignas(16) float beta[S];
    alignas(16) float c[S];       // beta_j (k_j . r_j) from the sweep
    alignas(16) float ksc[S];     // normalisation factor of k_j
    alignas(16) float q[NQ][KD];  // normalised, scaled q
    alignas(16) float r[KD];      // M_1 ... M_n q
    alignas(16) float o[VT];
    alignas(16) float kh[VT];
    alignas(16) float u[VT];
    alignas(16) float scratch[tile_t::scratch_floats];
    float qscale[NQ];
    uint32_t path[NQ];  // verify: the drafts on each draft's path (bit k: draft k)
  };

  shared_storage& s;

  static REPLAYSSM_DEVICE int64_t buf_step(int64_t slot, int j) { return slot * L + j; }

  static REPLAYSSM_DEVICE float* tile_base(float* head, int64_t row_stride, int v0) {
    return kv ? head + v0 : head + v0 * row_stride;
  }
  static REPLAYSSM_DEVICE int64_t slot_of(const params_t& p, int b) {
    return p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  }
  /// Element (0, v0) of value head hv's state in row `slot` of a pool.
  static REPLAYSSM_DEVICE float* tile_ptr(const state_pool_ref& pool, int64_t slot, int hv, int t) {
    return tile_base(pool.data + slot * pool.slot_stride + hv * pool.head_stride, pool.row_stride,
                     t * VT);
  }

  /// Work item (b, hv, t): row b, head hv, tile t, loading the state tile itself.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int hv, int t, const state_pool_ref& other) {
    run_item(*this, p, b, hv, t, other);
  }

  /// Steps in the buffer once row b's accepted drafts are kept: cursor + accepted (op::accept).
  static REPLAYSSM_DEVICE int accepted_steps(const params_t& p, int64_t slot, int b) {
    const int n = buffered_steps<op::accept, K, L>(p.cursors.cursor[slot]);
    int a = p.spec.accepted[b];
    if (p.spec.num_draft && a > p.spec.num_draft[b]) a = p.spec.num_draft[b];  // only drafts
    return n + (a < 0 ? 0 : (a > L - n ? L - n : a));
  }

  /// Replay output of the staged steps below m for the staged query s.q[qi] (normalised):
  /// s.o[i] = (h_c^T r)[i] + sum_j beta_j c_j v_j[i] for the threads i < VT, by the backward sweep.
  /// Call from all threads.
  /// Only the steps j < n0 and the drafts n0 + k with bit k of `mask` set take part (a token
  /// tree's path); the others count as absent.
  REPLAYSSM_DEVICE void replay_output(const tile_t& tile, int qi, int m, int n0, uint32_t mask) {
    // Backward sweep: r = M_1 ... M_n q, c_j = beta_j k_j . (M_{j+1} ... M_n q).
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      float r[RPL];
#pragma unroll
      for (int e = 0; e < RPL; ++e) r[e] = (lane + 32 * e < KD) ? s.q[qi][lane + 32 * e] : 0.f;
      for (int j = m - 1; j >= 0; --j) {
        if (j >= n0 && !((mask >> (j - n0)) & 1u)) {  // not on this draft's path
          if (lane == 0) s.c[j] = 0.f;
          continue;
        }
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < RPL; ++e)
          if (lane + 32 * e < KD) d = fmaf(s.k[j][lane + 32 * e], r[e], d);
        d = warp_sum(d);
        const float alpha = expf(s.g[j]);
        const float bc = s.beta[j] * d;
#pragma unroll
        for (int e = 0; e < RPL; ++e)
          if (lane + 32 * e < KD) r[e] = alpha * fmaf(-bc, s.k[j][lane + 32 * e], r[e]);
        if (lane == 0) s.c[j] = bc;
      }
#pragma unroll
      for (int e = 0; e < RPL; ++e)
        if (lane + 32 * e < KD) s.r[lane + 32 * e] = r[e];
    }
    __syncthreads();
    tile.contract(s.r, s.o, s.scratch);
    if (threadIdx.x < VT) {
      float o = s.o[threadIdx.x];
      for (int j = 0; j < m; ++j) o = fmaf(s.c[j], s.v[j][threadIdx.x], o);
      s.o[threadIdx.x] = o;
    }
  }

  /// The rest of work item (b, hv, t) once its state tile is in registers (or requested).
  /// Requested first: the current step; then the buffer rows in one wave.
  REPLAYSSM_DEVICE void process(const params_t& p, int b, int hv, int t, int64_t slot, tile_t& tile,
                                const state_pool_ref& other) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    const int v0 = t * VT;
    const uint32_t blocks_per_slot = uint32_t(Hv) * (VD / VT);
    float* ckpt = tile_ptr(p.state, slot, hv, t);
    constexpr bool has_current = (Op == op::eager || Op == op::decode);
    float q_cur = 0.f, k_cur = 0.f, v_cur = 0.f, g_cur = 0.f, beta_cur = 0.f;
    if (has_current) {
      if (threadIdx.x < KD) {
        q_cur = to_float(p.in.q[b * p.in.q_batch_stride + hk * p.in.q_head_stride + threadIdx.x]);
        k_cur = to_float(p.in.k[b * p.in.k_batch_stride + hk * p.in.k_head_stride + threadIdx.x]);
      }
      if (threadIdx.x < VT)
        v_cur =
            to_float(p.in.v[b * p.in.v_batch_stride + hv * p.in.v_head_stride + v0 + threadIdx.x]);
      g_cur = p.in.g[b * p.in.g_batch_stride + hv];
      beta_cur = p.in.beta[b * p.in.beta_batch_stride + hv];
    }
    const int n = (Op == op::eager)    ? 0
                  : (Op == op::accept) ? accepted_steps(p, slot, b)
                                       : buffered_steps<Op, K, L>(p.cursors.cursor[slot]);
    if (Op == op::flush && n == 0) return;  // nothing buffered: the checkpoint is current
    const bool commit = (Op != op::decode) || (n + 1 >= K);
    const int m = n + (has_current ? 1 : 0);

    if (Op != op::eager) {
      stage_rows<S, KD, NT>(s.k, p.buffer.k + (buf_step(slot, 0) * Hk + hk) * KD, int64_t(Hk) * KD,
                            n);
      stage_rows<S, VT, NT>(s.v, p.buffer.v + (buf_step(slot, 0) * Hv + hv) * VD + v0,
                            int64_t(Hv) * VD, n);
      if (int(threadIdx.x) < n) {
        const int j = threadIdx.x;
        s.g[j] = p.buffer.g[buf_step(slot, j) * Hv + hv];
        s.beta[j] = p.buffer.beta[buf_step(slot, j) * Hv + hv];
        s.ksc[j] = p.buffer.kscale[buf_step(slot, j) * Hk + hk];
      }
    }
    if (has_current) {
      if (threadIdx.x < KD) {
        s.q[0][threadIdx.x] = q_cur;
        s.k[n][threadIdx.x] = k_cur;
      }
      if (threadIdx.x < VT) s.v[n][threadIdx.x] = v_cur;
      if (threadIdx.x == 0) {
        s.g[n] = g_cur;
        s.beta[n] = beta_cur;
      }
      __syncthreads();
      if (threadIdx.x < 32) {  // the step's own normalisation factors
        float qq = 0.f, kk = 0.f;
        for (int e = threadIdx.x; e < KD; e += 32) {
          qq = fmaf(s.q[0][e], s.q[0][e], qq);
          kk = fmaf(s.k[n][e], s.k[n][e], kk);
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        if (threadIdx.x == 0) {
          const float scale = p.scale != 0.f ? p.scale : rsqrtf(float(KD));
          s.qscale[0] = (p.l2norm_qk ? 1.f / sqrtf(qq + 1e-6f) : 1.f) * scale;
          s.ksc[n] = p.l2norm_qk ? 1.f / sqrtf(kk + 1e-6f) : 1.f;
        }
      }
    }
    __syncthreads();
    // Normalise: k_j = raw k_j * its factor (exactly what the step computed), q scaled.
    for (int i = threadIdx.x; i < m * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
    if (has_current && threadIdx.x < KD) s.q[0][threadIdx.x] *= s.qscale[0];
    __syncthreads();

    if (commit) {
      for (int j = 0; j < m; ++j) {
        const float alpha = expf(s.g[j]);
        tile.contract(s.k[j], s.kh, s.scratch);  // h^T k before the decay
        if (threadIdx.x < VT)
          s.u[threadIdx.x] = s.beta[j] * (s.v[j][threadIdx.x] - alpha * s.kh[threadIdx.x]);
        __syncthreads();
        tile.rank1(alpha, s.k[j], s.u, 1.f);
      }
      if (Op == op::materialize) {
        tile.store(tile_base(other.data + b * other.slot_stride + hv * other.head_stride,
                             other.row_stride, v0),
                   other.row_stride);
        return;
      }
      tile.store(ckpt, p.state.row_stride);
      if (has_current) tile.contract(s.q[0], s.o, s.scratch);
    } else {
      // Backward sweep: r = M_1 ... M_n q, c_j = beta_j k_j . (M_{j+1} ... M_n q).
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float r[RPL];
#pragma unroll
        for (int e = 0; e < RPL; ++e) r[e] = (lane + 32 * e < KD) ? s.q[0][lane + 32 * e] : 0.f;
        for (int j = m - 1; j >= 0; --j) {
          float d = 0.f;
#pragma unroll
          for (int e = 0; e < RPL; ++e)
            if (lane + 32 * e < KD) d = fmaf(s.k[j][lane + 32 * e], r[e], d);
          d = warp_sum(d);
          const float alpha = expf(s.g[j]);
          const float bc = s.beta[j] * d;
#pragma unroll
          for (int e = 0; e < RPL; ++e)
            if (lane + 32 * e < KD) r[e] = alpha * fmaf(-bc, s.k[j][lane + 32 * e], r[e]);
          if (lane == 0) s.c[j] = bc;
        }
#pragma unroll
        for (int e = 0; e < RPL; ++e)
          if (lane + 32 * e < KD) s.r[lane + 32 * e] = r[e];
      }
      __syncthreads();
      tile.contract(s.r, s.o, s.scratch);
      if (threadIdx.x < VT) {
        float o = s.o[threadIdx.x];
        for (int j = 0; j < m; ++j) o = fmaf(s.c[j], s.v[j][threadIdx.x], o);
        s.o[threadIdx.x] = o;
      }
      // Append the current step to the buffer (k raw, with the factor the step used).
      // (Converting back to T is exact: the values came from T.)
      if (threadIdx.x < VT)
        p.buffer.v[(buf_step(slot, n) * Hv + hv) * VD + v0 + threadIdx.x] = from_float<T>(v_cur);
      if (t == 0) {
        if (threadIdx.x == 0) {
          p.buffer.g[buf_step(slot, n) * Hv + hv] = g_cur;
          p.buffer.beta[buf_step(slot, n) * Hv + hv] = beta_cur;
        }
        if (hv % (Hv / Hk) == 0) {
          const int64_t sk = buf_step(slot, n) * Hk + hk;
          if (threadIdx.x < KD) p.buffer.k[sk * KD + threadIdx.x] = from_float<T>(k_cur);
          if (threadIdx.x == 0) p.buffer.kscale[sk] = s.ksc[n];
        }
      }
    }

    if (has_current && threadIdx.x < VT)
      p.in.out[b * p.in.out_batch_stride + hv * p.in.out_head_stride + v0 + threadIdx.x] =
          from_float<T>(s.o[threadIdx.x]);
    if (Op == op::decode || Op == op::flush || Op == op::accept)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot, blocks_per_slot,
                            commit ? 0 : n + 1);
  }

  /// op::compact: moves row b's accepted path (accepted_nodes, root side first) from buffer
  /// positions n + node to n + k (see mamba2_agent::compact).
  REPLAYSSM_DEVICE void compact(const params_t& p, int b, int hv, int t, int64_t slot) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    const int v0 = t * VT;
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    int a = p.spec.accepted[b];
    if (p.spec.num_draft && a > p.spec.num_draft[b]) a = p.spec.num_draft[b];  // as accept
    a = a < 0 ? 0 : (a > MaxDraft ? MaxDraft : (a > L - n ? L - n : a));
    const bool k_writer = (t == 0 && hv % (Hv / Hk) == 0);
    for (int k = 0; k < a; ++k) {
      const int node = p.spec.accepted_nodes[int64_t(b) * MaxDraft + k];
      if (node == k || node < k || node >= L - n) continue;  // in place, or malformed
      const int64_t from = buf_step(slot, n + node), to = buf_step(slot, n + k);
      for (int i = threadIdx.x; i < VT; i += NT)
        p.buffer.v[(to * Hv + hv) * VD + v0 + i] = p.buffer.v[(from * Hv + hv) * VD + v0 + i];
      if (t == 0 && threadIdx.x == 0) {
        p.buffer.g[to * Hv + hv] = p.buffer.g[from * Hv + hv];
        p.buffer.beta[to * Hv + hv] = p.buffer.beta[from * Hv + hv];
      }
      if (k_writer) {
        for (int i = threadIdx.x; i < KD; i += NT)
          p.buffer.k[(to * Hk + hk) * KD + i] = p.buffer.k[(from * Hk + hk) * KD + i];
        if (threadIdx.x == 0) p.buffer.kscale[to * Hk + hk] = p.buffer.kscale[from * Hk + hk];
      }
      __syncthreads();
    }
  }

  /// Stages row b's nd draft steps (input rows b * MaxDraft + d) at positions n..n+nd-1 (raw q in
  /// s.q[d], raw k, this block's columns of v, g, beta) and has warp 0 compute each draft's
  /// normalisation factors (s.qscale[d], s.ksc[n + d]) exactly as its eager step would. Ends
  /// without a barrier after warp 0's work.
  REPLAYSSM_DEVICE void stage_drafts(const params_t& p, int b, int hv, int hk, int v0, int n,
                                     int nd) {
    for (int i = threadIdx.x; i < nd * KD; i += NT) {
      const int64_t r = int64_t(b) * MaxDraft + i / KD;
      s.q[i / KD][i % KD] =
          to_float(p.in.q[r * p.in.q_batch_stride + hk * p.in.q_head_stride + i % KD]);
      s.k[n + i / KD][i % KD] =
          to_float(p.in.k[r * p.in.k_batch_stride + hk * p.in.k_head_stride + i % KD]);
    }
    for (int i = threadIdx.x; i < nd * VT; i += NT) {
      const int64_t r = int64_t(b) * MaxDraft + i / VT;
      s.v[n + i / VT][i % VT] =
          to_float(p.in.v[r * p.in.v_batch_stride + hv * p.in.v_head_stride + v0 + i % VT]);
    }
    if (int(threadIdx.x) < nd) {
      const int64_t r = int64_t(b) * MaxDraft + threadIdx.x;
      s.g[n + threadIdx.x] = p.in.g[r * p.in.g_batch_stride + hv];
      s.beta[n + threadIdx.x] = p.in.beta[r * p.in.beta_batch_stride + hv];
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // each draft's own normalisation factors, as its eager step computes
      for (int d = 0; d < nd; ++d) {
        float qq = 0.f, kk = 0.f;
        for (int e = threadIdx.x; e < KD; e += 32) {
          qq = fmaf(s.q[d][e], s.q[d][e], qq);
          kk = fmaf(s.k[n + d][e], s.k[n + d][e], kk);
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        if (threadIdx.x == 0) {
          const float scale = p.scale != 0.f ? p.scale : rsqrtf(float(KD));
          s.qscale[d] = (p.l2norm_qk ? 1.f / sqrtf(qq + 1e-6f) : 1.f) * scale;
          s.ksc[n + d] = p.l2norm_qk ? 1.f / sqrtf(kk + 1e-6f) : 1.f;
        }
      }
    }
  }

  /// op::verify: the outputs of row b's draft steps d < num_draft[b] (input rows
  /// b * MaxDraft + d), each by the backward sweep from its own q over the buffered steps and
  /// the drafts on its path (0..d for chains), with one read of the checkpoint and no state write;
  /// the drafts are appended to the buffer after the cursor, which does not move (op::accept moves
  /// it).
  REPLAYSSM_DEVICE void process_verify(const params_t& p, int b, int hv, int t, int64_t slot,
                                       const tile_t& tile) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    const int v0 = t * VT;
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    int nd = p.spec.num_draft[b];
    nd = nd < 0 ? 0 : (nd > MaxDraft ? MaxDraft : nd);
    stage_rows<S, KD, NT>(s.k, p.buffer.k + (buf_step(slot, 0) * Hk + hk) * KD, int64_t(Hk) * KD,
                          n);
    stage_rows<S, VT, NT>(s.v, p.buffer.v + (buf_step(slot, 0) * Hv + hv) * VD + v0,
                          int64_t(Hv) * VD, n);
    if (int(threadIdx.x) < n) {
      const int j = threadIdx.x;
      s.g[j] = p.buffer.g[buf_step(slot, j) * Hv + hv];
      s.beta[j] = p.buffer.beta[buf_step(slot, j) * Hv + hv];
      s.ksc[j] = p.buffer.kscale[buf_step(slot, j) * Hk + hk];
    }
    stage_drafts(p, b, hv, hk, v0, n, nd);
    if (int(threadIdx.x) < nd) s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, b, threadIdx.x);
    // Append the drafts' raw k (and, below, their factors) before k is normalised in place.
    const bool k_writer = (t == 0 && hv % (Hv / Hk) == 0);
    if (k_writer)
      for (int i = threadIdx.x; i < nd * KD; i += NT)
        p.buffer.k[(buf_step(slot, n + i / KD) * Hk + hk) * KD + i % KD] =
            from_float<T>(s.k[n + i / KD][i % KD]);
    __syncthreads();
    if (k_writer && int(threadIdx.x) < nd)
      p.buffer.kscale[buf_step(slot, n + threadIdx.x) * Hk + hk] = s.ksc[n + threadIdx.x];
    for (int i = threadIdx.x; i < (n + nd) * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
    for (int i = threadIdx.x; i < nd * KD; i += NT) s.q[i / KD][i % KD] *= s.qscale[i / KD];
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      replay_output(tile, d, n + d + 1, n, s.path[d]);
      if (threadIdx.x < VT) {
        const int64_t r = int64_t(b) * MaxDraft + d;
        p.in.out[r * p.in.out_batch_stride + hv * p.in.out_head_stride + v0 + threadIdx.x] =
            from_float<T>(s.o[threadIdx.x]);
      }
      __syncthreads();  // the next draft reuses r, c and o
    }
    // Append the drafts' v, g and beta after the cursor (exactly as given).
    for (int i = threadIdx.x; i < nd * VT; i += NT)
      p.buffer.v[(buf_step(slot, n + i / VT) * Hv + hv) * VD + v0 + i % VT] =
          from_float<T>(s.v[n + i / VT][i % VT]);
    if (t == 0 && int(threadIdx.x) < nd) {
      p.buffer.g[buf_step(slot, n + threadIdx.x) * Hv + hv] = s.g[n + threadIdx.x];
      p.buffer.beta[buf_step(slot, n + threadIdx.x) * Hv + hv] = s.beta[n + threadIdx.x];
    }
  }

  /// op::eager_draft, the baseline speculative round of eager engines (see mamba2_agent).
  REPLAYSSM_DEVICE void process_eager_draft(const params_t& p, int b, int hv, int t, tile_t& tile,
                                            const state_pool_ref& other) {
    const int hk = hv / (p.num_v_heads / p.num_k_heads);
    const int v0 = t * VT;
    int nd = p.spec.num_draft[b];
    nd = nd < 0 ? 0 : (nd > MaxDraft ? MaxDraft : nd);
    stage_drafts(p, b, hv, hk, v0, 0, nd);
    __syncthreads();
    for (int i = threadIdx.x; i < nd * KD; i += NT) {
      s.k[i / KD][i % KD] *= s.ksc[i / KD];
      s.q[i / KD][i % KD] *= s.qscale[i / KD];
    }
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      const int64_t r = int64_t(b) * MaxDraft + d;
      const float alpha = expf(s.g[d]);
      tile.contract(s.k[d], s.kh, s.scratch);  // h^T k before the decay
      if (threadIdx.x < VT)
        s.u[threadIdx.x] = s.beta[d] * (s.v[d][threadIdx.x] - alpha * s.kh[threadIdx.x]);
      __syncthreads();
      tile.rank1(alpha, s.k[d], s.u, 1.f);
      tile.store(tile_base(other.data + r * other.slot_stride + hv * other.head_stride,
                           other.row_stride, v0),
                 other.row_stride);
      tile.contract(s.q[d], s.o, s.scratch);
      if (threadIdx.x < VT)
        p.in.out[r * p.in.out_batch_stride + hv * p.in.out_head_stride + v0 + threadIdx.x] =
            from_float<T>(s.o[threadIdx.x]);
      __syncthreads();  // kh, u and o are reused by the next draft
    }
  }
};

}  // namespace detail
}  // namespace replayssm
