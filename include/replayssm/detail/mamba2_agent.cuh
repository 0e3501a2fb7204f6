// Block-level Mamba-2 agent and its __global__ entry.
#pragma once

#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/run_item.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

/// One block works on `Policy::tile` rows of one head of one batch row. `MaxDraft`: draft steps
/// per row of a verification launch (op::verify).
template <class Policy, op Op, int MaxDraft = 1>
struct mamba2_agent {
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using policy = Policy;
  static constexpr op operation = Op;
  using params_t = mamba2_params<Policy>;
  static constexpr int P = rule::headdim;
  static constexpr int N = rule::dstate;
  static constexpr int TR = Policy::tile;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  // Steps staged in shared memory at once: buffered steps plus the current one.
  static constexpr int S = (Op == op::eager) ? 1 : (Op == op::eager_draft ? MaxDraft : L);
  using tile_t = keep_major_tile<TR, N, NT>;
  static_assert(P % TR == 0,
                "mamba2: the policy's Tile (rows of headdim per block) must divide headdim.");
  static_assert(TR <= NT && N <= NT,
                "mamba2: the policy's Tile and the rule's DState must not exceed BlockThreads.");

  static constexpr bool drafts = (Op == op::verify || Op == op::eager_draft || Op == op::compact);
  static_assert(!drafts || MaxDraft <= 32, "speculative launches: MaxDraft must be at most 32.");
  static_assert(NT >= L && (!drafts || NT >= MaxDraft),
                "replay_policy: BlockThreads must be at least BufferLen (and MaxDraft): each "
                "thread stages one buffered step's scalars.");
  static constexpr int NC = drafts ? MaxDraft : 1;  // C vectors staged
  static_assert(!drafts || Op == op::eager_draft || L >= K - 1 + MaxDraft,
                "mamba2: the buffer must hold a full commit window plus the largest draft: "
                "BufferLen >= CommitInterval - 1 + MaxDraft.");

  static REPLAYSSM_HD int heads(const params_t& p) { return p.nheads; }  ///< heads per row
  static constexpr int tiles_per_head = P / TR;  ///< blocks (work items) per head

  struct shared_storage {
    alignas(16) float B[S][N];   // B_j, group vectors
    alignas(16) float x[S][TR];  // x_j, this block's rows
    alignas(16) float dt[S];     // dt_j after bias and softplus
    alignas(16) float w[S];      // replay weights exp(L_j) dt_j (B_j . C)
    alignas(16) float C[NC][N];
    alignas(16) float y[TR];
    float decay;        // exp(sum_j A dt_j)
    uint32_t path[NC];  // verify: the drafts on each draft's path (bit k: draft k)
  };

  shared_storage& s;

  static REPLAYSSM_DEVICE int64_t buf_step(int64_t slot, int j) { return slot * L + j; }

  static REPLAYSSM_DEVICE int64_t slot_of(const params_t& p, int b) {
    return p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  }
  /// Element (row0, 0) of head h's state in row `slot` of a pool.
  static REPLAYSSM_DEVICE float* tile_ptr(const state_pool_ref& pool, int64_t slot, int h, int t) {
    return pool.data + slot * pool.slot_stride + h * pool.head_stride +
           int64_t(t) * TR * pool.row_stride;
  }

  /// Work item (b, h, t): row b, head h, tile t, loading the state tile itself.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int h, int t, const state_pool_ref& other) {
    run_item(*this, p, b, h, t, other);
  }

  /// Steps in the buffer once row b's accepted drafts are kept: cursor + accepted (op::accept).
  static REPLAYSSM_DEVICE int accepted_steps(const params_t& p, int64_t slot, int b) {
    const int n = buffered_steps<op::accept, K, L>(p.cursors.cursor[slot]);
    int a = p.spec.accepted[b];
    if (p.spec.num_draft && a > p.spec.num_draft[b]) a = p.spec.num_draft[b];  // only drafts
    return n + (a < 0 ? 0 : (a > L - n ? L - n : a));
  }

  /// Replay output of the first m staged steps against the state tile, for the step whose C
  /// vector is `C` (shared memory): s.y[r] = exp(sum A dt) (h_c C)[r] + sum_j exp(L_j) dt_j
  /// (B_j . C) x_j[r] for the threads r < TR (D and z not applied). Call from all threads.
  /// Masked: only the steps j < n0 and the drafts n0 + k with bit k of `mask` set take part
  /// (a token tree's path); the others count as absent.
  template <bool Masked = false>
  REPLAYSSM_DEVICE void replay_rows(const tile_t& tile, const float* C, int m, float A, int n0 = 0,
                                    uint32_t mask = 0) {
    auto on = [&](int j) { return !Masked || j < n0 || ((mask >> (j - n0)) & 1u); };
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < m; j += NT / 32) {
      float d = 0.f;
      for (int c = lane; c < N; c += 32) d = fmaf(s.B[j][c], C[c], d);
      d = warp_sum(d);
      if (lane == 0) s.w[j] = on(j) ? d * s.dt[j] : 0.f;
    }
    __syncthreads();
    if (warp == 0) {
      // w_j *= exp(sum_{i>j} A dt_i), by a suffix scan over 32 steps at a time.
      float carry = 0.f;
      for (int base = ((m - 1) / 32) * 32; base >= 0; base -= 32) {
        const int j = base + lane;
        const float la = (j < m && on(j)) ? A * s.dt[j] : 0.f;
        float incl = la;  // sum over i >= j within this chunk
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const float o = __shfl_down_sync(0xffffffffu, incl, off);
          if (lane + off < 32) incl += o;
        }
        if (j < m) s.w[j] *= expf(incl - la + carry);
        carry += __shfl_sync(0xffffffffu, incl, 0);
      }
      if (lane == 0) s.decay = expf(carry);
    }
    tile.contract(C, s.y, nullptr);  // its barrier also publishes w and decay
    if (threadIdx.x < TR) {
      float y = s.decay * s.y[threadIdx.x];
      for (int j = 0; j < m; ++j) y = fmaf(s.w[j], s.x[j][threadIdx.x], y);
      s.y[threadIdx.x] = y;
    }
  }

  /// The rest of work item (b, h, t) once its state tile is in registers (or requested: the
  /// loads complete at first use). Cursor-independent inputs are requested first, then the
  /// cursor-dependent buffer rows, all in one wave.
  REPLAYSSM_DEVICE void process(const params_t& p, int b, int h, int t, int64_t slot, tile_t& tile,
                                const state_pool_ref& other) {
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const uint32_t blocks_per_slot = uint32_t(H) * (P / TR);
    float* ckpt = tile_ptr(p.state, slot, h, t);
    constexpr bool has_current = (Op == op::eager || Op == op::decode);
    float x_cur = 0.f, b_cur = 0.f, c_cur = 0.f, dt_cur = 0.f;
    if (has_current) {
      const int64_t bg = b * p.in.B_batch_stride + g * p.in.B_group_stride;
      const int64_t cg = b * p.in.C_batch_stride + g * p.in.C_group_stride;
      if (threadIdx.x < N) {
        b_cur = to_float(p.in.B[bg + threadIdx.x]);
        c_cur = to_float(p.in.C[cg + threadIdx.x]);
      }
      if (threadIdx.x < TR)
        x_cur =
            to_float(p.in.x[b * p.in.x_batch_stride + h * p.in.x_head_stride + row0 + threadIdx.x]);
      dt_cur = to_float(p.in.dt[b * p.in.dt_batch_stride + h * p.in.dt_head_stride]);
      if (p.weights.dt_bias) dt_cur += p.weights.dt_bias[h];
      if (p.weights.dt_softplus) dt_cur = softplus(dt_cur);
    }
    const float A = p.weights.A[h];
    const int n = (Op == op::eager)    ? 0
                  : (Op == op::accept) ? accepted_steps(p, slot, b)
                                       : buffered_steps<Op, K, L>(p.cursors.cursor[slot]);
    if (Op == op::flush && n == 0) return;  // nothing buffered: the checkpoint is current
    const bool commit = (Op != op::decode) || (n + 1 >= K);
    const int m = n + (has_current ? 1 : 0);

    if (Op != op::eager) {
      stage_rows<S, N, NT>(s.B, p.buffer.B + (buf_step(slot, 0) * p.ngroups + g) * N,
                           int64_t(p.ngroups) * N, n);
      stage_rows<S, TR, NT>(s.x, p.buffer.x + (buf_step(slot, 0) * H + h) * P + row0,
                            int64_t(H) * P, n);
      if (int(threadIdx.x) < n)
        s.dt[threadIdx.x] = p.buffer.dt[buf_step(slot, threadIdx.x) * H + h];
    }
    if (has_current) {
      if (threadIdx.x < N) {
        s.B[n][threadIdx.x] = b_cur;
        s.C[0][threadIdx.x] = c_cur;
      }
      if (threadIdx.x < TR) s.x[n][threadIdx.x] = x_cur;
      if (threadIdx.x == 0) s.dt[n] = dt_cur;
    }
    __syncthreads();

    if (commit) {
      for (int j = 0; j < m; ++j) tile.rank1(expf(A * s.dt[j]), s.B[j], s.x[j], s.dt[j]);
      if (Op == op::materialize) {
        tile.store(
            other.data + b * other.slot_stride + h * other.head_stride + row0 * other.row_stride,
            other.row_stride);
        return;
      }
      tile.store(ckpt, p.state.row_stride);
      if (has_current) tile.contract(s.C[0], s.y, nullptr);
    } else {
      replay_rows(tile, s.C[0], m, A);
      // Append the current step to the buffer (the inputs exactly as given).
      // (Converting back to T is exact: the values came from T.)
      if (threadIdx.x < TR)
        p.buffer.x[(buf_step(slot, n) * H + h) * P + row0 + threadIdx.x] = from_float<T>(x_cur);
      if (t == 0) {
        if (threadIdx.x == 0) p.buffer.dt[buf_step(slot, n) * H + h] = dt_cur;
        if (h % (H / p.ngroups) == 0 && threadIdx.x < N)
          p.buffer.B[(buf_step(slot, n) * p.ngroups + g) * N + threadIdx.x] = from_float<T>(b_cur);
      }
    }

    if (has_current && threadIdx.x < TR) {
      const int r = threadIdx.x;
      float y = s.y[r];
      if (p.weights.D) y = fmaf(p.weights.D[h], x_cur, y);
      if (p.in.z)
        y *= silu(to_float(p.in.z[b * p.in.z_batch_stride + h * p.in.z_head_stride + row0 + r]));
      p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + r] = from_float<T>(y);
    }
    if (Op == op::decode || Op == op::flush || Op == op::accept)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot, blocks_per_slot,
                            commit ? 0 : n + 1);
  }

  /// op::compact: moves row b's accepted path (accepted_nodes, root side first) from buffer
  /// positions n + node to n + k, so the kept drafts are the buffer's tail. Positions only move
  /// down (a path's drafts increase), and each block moves only what it alone writes.
  REPLAYSSM_DEVICE void compact(const params_t& p, int b, int h, int t, int64_t slot) {
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    int a = p.spec.accepted[b];
    if (p.spec.num_draft && a > p.spec.num_draft[b]) a = p.spec.num_draft[b];  // as accept
    a = a < 0 ? 0 : (a > MaxDraft ? MaxDraft : (a > L - n ? L - n : a));
    for (int k = 0; k < a; ++k) {
      const int node = p.spec.accepted_nodes[int64_t(b) * MaxDraft + k];
      if (node == k || node < k || node >= L - n) continue;  // in place, or malformed
      const int64_t from = buf_step(slot, n + node), to = buf_step(slot, n + k);
      for (int i = threadIdx.x; i < TR; i += NT)
        p.buffer.x[(to * H + h) * P + row0 + i] = p.buffer.x[(from * H + h) * P + row0 + i];
      if (t == 0) {
        if (threadIdx.x == 0) p.buffer.dt[to * H + h] = p.buffer.dt[from * H + h];
        if (h % (H / p.ngroups) == 0)
          for (int i = threadIdx.x; i < N; i += NT)
            p.buffer.B[(to * p.ngroups + g) * N + i] = p.buffer.B[(from * p.ngroups + g) * N + i];
      }
      __syncthreads();  // this move lands before a later one could read near it
    }
  }

  /// Stages row b's nd draft steps (input rows b * MaxDraft + d) at positions n..n+nd-1: B, this
  /// block's rows of x, dt after bias and softplus, and each draft's C in s.C[d].
  REPLAYSSM_DEVICE void stage_drafts(const params_t& p, int b, int h, int g, int row0, int n,
                                     int nd) {
    for (int i = threadIdx.x; i < nd * N; i += NT) {
      const int64_t r = int64_t(b) * MaxDraft + i / N;
      s.B[n + i / N][i % N] =
          to_float(p.in.B[r * p.in.B_batch_stride + g * p.in.B_group_stride + i % N]);
      s.C[i / N][i % N] =
          to_float(p.in.C[r * p.in.C_batch_stride + g * p.in.C_group_stride + i % N]);
    }
    for (int i = threadIdx.x; i < nd * TR; i += NT) {
      const int64_t r = int64_t(b) * MaxDraft + i / TR;
      s.x[n + i / TR][i % TR] =
          to_float(p.in.x[r * p.in.x_batch_stride + h * p.in.x_head_stride + row0 + i % TR]);
    }
    if (int(threadIdx.x) < nd) {
      const int64_t r = int64_t(b) * MaxDraft + threadIdx.x;
      float dt = to_float(p.in.dt[r * p.in.dt_batch_stride + h * p.in.dt_head_stride]);
      if (p.weights.dt_bias) dt += p.weights.dt_bias[h];
      if (p.weights.dt_softplus) dt = softplus(dt);
      s.dt[n + threadIdx.x] = dt;
    }
  }

  /// op::verify: the outputs of row b's draft steps t < num_draft[b] (input rows
  /// b * MaxDraft + t), each from the checkpoint, the buffered steps and the drafts on its path
  /// (0..t for chains), with one read of the checkpoint and no state write; the drafts are appended
  /// to the buffer after the cursor, which does not move (op::accept moves it).
  REPLAYSSM_DEVICE void process_verify(const params_t& p, int b, int h, int t, int64_t slot,
                                       const tile_t& tile) {
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const float A = p.weights.A[h];
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    int nd = p.spec.num_draft[b];
    nd = nd < 0 ? 0 : (nd > MaxDraft ? MaxDraft : nd);
    stage_rows<S, N, NT>(s.B, p.buffer.B + (buf_step(slot, 0) * p.ngroups + g) * N,
                         int64_t(p.ngroups) * N, n);
    stage_rows<S, TR, NT>(s.x, p.buffer.x + (buf_step(slot, 0) * H + h) * P + row0, int64_t(H) * P,
                          n);
    if (int(threadIdx.x) < n) s.dt[threadIdx.x] = p.buffer.dt[buf_step(slot, threadIdx.x) * H + h];
    stage_drafts(p, b, h, g, row0, n, nd);
    if (int(threadIdx.x) < nd) s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, b, threadIdx.x);
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      replay_rows<true>(tile, s.C[d], n + d + 1, A, n, s.path[d]);
      if (threadIdx.x < TR) {
        const int64_t r = int64_t(b) * MaxDraft + d;
        const float x = s.x[n + d][threadIdx.x];
        float y = s.y[threadIdx.x];
        if (p.weights.D) y = fmaf(p.weights.D[h], x, y);
        if (p.in.z)
          y *= silu(to_float(
              p.in.z[r * p.in.z_batch_stride + h * p.in.z_head_stride + row0 + threadIdx.x]));
        p.in.out[r * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + threadIdx.x] =
            from_float<T>(y);
      }
      __syncthreads();  // the next draft reuses w, y and decay
    }
    // Append the drafts after the cursor (exactly as given: the conversions back are exact).
    for (int i = threadIdx.x; i < nd * TR; i += NT)
      p.buffer.x[(buf_step(slot, n + i / TR) * H + h) * P + row0 + i % TR] =
          from_float<T>(s.x[n + i / TR][i % TR]);
    if (t == 0) {
      if (int(threadIdx.x) < nd)
        p.buffer.dt[buf_step(slot, n + threadIdx.x) * H + h] = s.dt[n + threadIdx.x];
      if (h % (H / p.ngroups) == 0)
        for (int i = threadIdx.x; i < nd * N; i += NT)
          p.buffer.B[(buf_step(slot, n + i / N) * p.ngroups + g) * N + i % N] =
              from_float<T>(s.B[n + i / N][i % N]);
    }
  }

  /// op::eager_draft, the baseline speculative round of eager engines: reads the state once, then
  /// for each draft d < num_draft[b] applies it, writes the intermediate state to `other` row
  /// b * MaxDraft + d (so any prefix can be kept) and writes its output; the slot's own state is
  /// not written.
  REPLAYSSM_DEVICE void process_eager_draft(const params_t& p, int b, int h, int t, tile_t& tile,
                                            const state_pool_ref& other) {
    const int g = h / (p.nheads / p.ngroups);
    const int row0 = t * TR;
    const float A = p.weights.A[h];
    int nd = p.spec.num_draft[b];
    nd = nd < 0 ? 0 : (nd > MaxDraft ? MaxDraft : nd);
    stage_drafts(p, b, h, g, row0, 0, nd);
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      const int64_t r = int64_t(b) * MaxDraft + d;
      tile.rank1(expf(A * s.dt[d]), s.B[d], s.x[d], s.dt[d]);
      tile.store(other.data + r * other.slot_stride + h * other.head_stride +
                     int64_t(row0) * other.row_stride,
                 other.row_stride);
      tile.contract(s.C[d], s.y, nullptr);
      if (threadIdx.x < TR) {
        float y = s.y[threadIdx.x];
        if (p.weights.D) y = fmaf(p.weights.D[h], s.x[d][threadIdx.x], y);
        if (p.in.z)
          y *= silu(to_float(
              p.in.z[r * p.in.z_batch_stride + h * p.in.z_head_stride + row0 + threadIdx.x]));
        p.in.out[r * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + threadIdx.x] =
            from_float<T>(y);
      }
      __syncthreads();  // s.y is reused by the next draft
    }
  }
};

}  // namespace detail
}  // namespace replayssm
