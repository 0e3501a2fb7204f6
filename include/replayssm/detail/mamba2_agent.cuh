// Block-level Mamba-2 agent and its __global__ entry.
#pragma once

#include <replayssm/detail/mamba2_split.cuh>
#include <replayssm/detail/ops.cuh>
#include <replayssm/detail/run_item.cuh>
#include <replayssm/detail/tile.cuh>

namespace replayssm {
namespace detail {

/// One block works on `Policy::tile` rows of one head of one batch row. `MaxDraft`: draft steps
/// per row of a verification launch (op::verify). `Split`: the decode kernel of the split replay
/// step (mamba2_split.cuh, `params.workspace` set): its replay rows read their weights from the
/// coefficient kernel; without it (the default) the kernels are exactly the fused ones.
template <class Policy, op Op, int MaxDraft = 1, bool Branch = false, bool Split = false>
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
  static constexpr int max_draft = MaxDraft;
  static constexpr bool branching = Branch;  ///< checkpoints through branch_ref (run_item.cuh)
  static_assert(!Policy::has_serving_copy || (Op != op::eager && Op != op::eager_draft),
                "eager steps keep one state: run the eager baseline with precision::fp32 or a "
                "single low-precision checkpoint (precision::bf16, fp16), not a pair.");
  /// Resident blocks per SM the registers must allow (0: no bound). The replay kernels are
  /// latency-bound chains, the more blocks the more state bytes in flight: 64 registers per
  /// thread. The eager step measured faster with its own allocation (74 registers, 3 blocks).
  static constexpr int min_blocks_per_sm = (Op == op::eager || NT > 256) ? 0 : 65536 / (64 * NT);
  // Steps staged in shared memory at once: the buffered steps (up to L), plus the current one
  // for decode (a window left full by accept folds with it).
  static constexpr int S = (Op == op::eager)         ? 1
                           : (Op == op::eager_draft) ? MaxDraft
                           : (Op == op::decode)      ? L
                                                     : L;
  // Buffered rows decode stages at most (it clamps its cursor to L - 1).
  static constexpr int NB = L > 1 ? L - 1 : 1;
  using tile_t = keep_major_tile<TR, N, NT>;
  static_assert(P % TR == 0,
                "mamba2: the policy's Tile (rows of headdim per block) must divide headdim.");
  static_assert(TR <= NT && N <= NT,
                "mamba2: the policy's Tile and the rule's DState must not exceed BlockThreads.");

  static constexpr bool drafts = (Op == op::verify || Op == op::eager_draft || Op == op::accept);
  static_assert(!drafts || MaxDraft <= 32, "speculative launches: MaxDraft must be at most 32.");
  static_assert(NT >= L && (!drafts || NT >= MaxDraft),
                "replay_policy: BlockThreads must be at least BufferLen (and MaxDraft): each "
                "thread stages one buffered step's scalars.");
  static constexpr int NC = drafts ? MaxDraft : 1;  // C vectors staged
  static_assert(Op != op::verify || L >= K - 1 + 2 * MaxDraft,
                "mamba2: the buffer must hold a full window (up to CommitInterval - 1 + MaxDraft "
                "accepted steps) plus the next draft: BufferLen >= CommitInterval - 1 + 2 * "
                "MaxDraft.");

  /// The decode kernel of the split replay step for this agent (kernels.cuh
  /// launch_items_or_split; named, not instantiated, by the other operations). Policies that
  /// mamba2_stream_supported accepts use mamba2_stream_agent instead (mamba2_launch.inl).
  using split_agent = mamba2_agent<Policy, op::decode, 1, Branch, true>;
  /// The split replay step (mamba2_split.cuh, `params.workspace`) exists for decode with the
  /// one-item-per-block kernel only: pipelined policies keep the fused path (the launcher
  /// ignores the workspace there).
  static_assert(!Split || (Op == op::decode && Policy::pipeline_stages < 2),
                "mamba2: the split replay step is a decode kernel of one item per block");

  static REPLAYSSM_HD int heads(const params_t& p) { return p.nheads; }  ///< heads per row
  static constexpr int tiles_per_head = P / TR;  ///< blocks (work items) per head

  struct shared_storage {
    alignas(16) float B[S][N];   // B_j, group vectors
    alignas(16) float x[S][TR];  // x_j, this block's rows
    alignas(16) float dt[S];     // dt_j after bias and softplus
    alignas(16) float w[NC][S];  // replay weights exp(L_j) dt_j (B_j . C), per C vector
    alignas(16) float C[NC][N];
    alignas(16) float z[Op == op::verify ? NC : 1][TR];  // verify: the drafts' gate rows
    alignas(16) float y[NC][TR];
    float decay[NC];    // exp(sum_j A dt_j)
    uint32_t path[NC];  // verify: the drafts on each draft's path (bit k: draft k)
  };

  shared_storage& s;

  static REPLAYSSM_DEVICE int64_t buf_step(int64_t slot, int j) { return slot * L + j; }

  static REPLAYSSM_DEVICE int64_t slot_of(const params_t& p, int b) {
    return p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  }
  /// Element (row0, 0) of head h's state in row `slot` of a pool.
  template <class S>
  static REPLAYSSM_DEVICE S* tile_ptr(const basic_pool_ref<S>& pool, int64_t slot, int h, int t) {
    return pool.data + slot * pool.slot_stride + h * pool.head_stride +
           int64_t(t) * TR * pool.row_stride;
  }

  /// Work item (b, h, t): row b, head h, tile t, loading the state tile itself.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int h, int t, const state_pool_ref& other) {
    run_item(*this, p, b, h, t, other);
  }

  /// B_j . C_d over the N columns of two staged rows: four partial sums over float4 columns,
  /// starting at column j mod (N / 4) so that the threads of consecutive steps j read different
  /// shared-memory banks; ((a.x + a.y) + (a.z + a.w)). The split verification's coefficient
  /// kernel uses it too, so both paths' dots are bit-identical.
  static REPLAYSSM_DEVICE float bc_dot(const float* b_row, const float* c_row, int j) {
    constexpr int Q = N / 4;  // float4 columns of a B or C row
    const float4* bj = reinterpret_cast<const float4*>(b_row);
    const float4* cd = reinterpret_cast<const float4*>(c_row);
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    int c = j % Q;
#pragma unroll 8
    for (int q = 0; q < Q; ++q) {
      const float4 x = bj[c], y = cd[c];
      a = make_float4(fmaf(x.x, y.x, a.x), fmaf(x.y, y.y, a.y), fmaf(x.z, y.z, a.z),
                      fmaf(x.w, y.w, a.w));
      c = c + 1 == Q ? 0 : c + 1;
    }
    return (a.x + a.y) + (a.z + a.w);
  }

  /// s.w[d][j] = (B_j . C_d) dt_j for d < nd, j < m where on(d, j) holds (else 0): one thread
  /// per dot product (bc_dot). One integer division per dot; the warp-per-dot form (a
  /// transposing reduction per four dots, a division per dot and lane) ran ~230 instructions per
  /// four dots, a third of the T = 4 verification's instructions at 15 buffered steps (v15).
  /// Call from all threads; ends without a barrier.
  template <class On>
  REPLAYSSM_DEVICE void replay_dots(int nd, int m, On on) {
    for (int i = threadIdx.x; i < nd * m; i += NT) {
      const int d = i / m, j = i - d * m;
      float w = 0.f;
      if (on(d, j)) w = bc_dot(s.B[j], s.C[d], j) * s.dt[j];
      s.w[d][j] = w;
    }
  }

  /// Folds staged step j into the state tile: h = exp(A dt_j) h + dt_j x_j B_j^T.
  REPLAYSSM_DEVICE void fold_step(tile_t& tile, int j, float A) {
    tile.rank1(expf(A * s.dt[j]), s.B[j], s.x[j], s.dt[j]);
  }

  /// One warp (call from its 32 lanes): s.w[d][j] = base(j) exp(sum_{j < i < m, on(i)} A dt_i)
  /// for j < m and s.decay[d] = exp(sum_{i < m, on(i)} A dt_i), by a suffix scan over 32 steps
  /// at a time (steps with !on(i) neither decay the others nor count).
  template <class On, class Base>
  REPLAYSSM_DEVICE void decay_weights(int d, int m, float A, On on, Base base) {
    const int lane = threadIdx.x & 31;
    float carry = 0.f;
    for (int b0 = ((m - 1) / 32) * 32; b0 >= 0; b0 -= 32) {
      const int j = b0 + lane;
      const float la = (j < m && on(j)) ? A * s.dt[j] : 0.f;
      const float incl = warp_suffix_sum(la);  // sum over i >= j within this chunk
      if (j < m) s.w[d][j] = base(j) * expf(incl - la + carry);
      carry += __shfl_sync(0xffffffffu, incl, 0);
    }
    if (lane == 0) s.decay[d] = expf(carry);
  }
  static REPLAYSSM_DEVICE bool every_step(int) { return true; }

  /// Folds the first m staged steps into the state tile as one rank-m update,
  ///   h' = exp(A sum_j dt_j) h + sum_j c_j x_j B_j^T,  c_j = dt_j exp(A sum_{i > j} dt_i),
  /// which is fold_step over j = 0..m-1 up to fp32 rounding, with one FMA per state element and
  /// step instead of a multiply and an FMA (the commit steps were issue-bound: bench/NOTES.md
  /// v11). Each thread walks the steps backwards for the sums (registers are the constraint
  /// here, not these few instructions); the first TR threads scale their x column by c_j in
  /// place (s.x[0..m) holds c_j x_j afterwards). Call from all threads once the steps are
  /// staged; it passes one block barrier.
  REPLAYSSM_DEVICE void fold_window(tile_t& tile, int m, float A) {
    tile.rank_k(scale_window(m, A), s.B, s.x, m);
  }
  /// fold_window's coefficients: the first TR threads scale their x column of the first m staged
  /// steps by c_j in place; returns exp(A sum_j dt_j). Call from all threads; it passes one
  /// block barrier (the split verification's readout computes the same c_j per thread,
  /// mamba2_verify.cuh).
  REPLAYSSM_DEVICE float scale_window(int m, float A) {
    float later = 0.f;  // A * (sum of dt_i over the steps i > j)
    for (int j = m - 1; j >= 0; --j) {
      const float dt = s.dt[j];
      if (threadIdx.x < TR) s.x[j][threadIdx.x] *= dt * expf(later);
      later = fmaf(A, dt, later);
    }
    __syncthreads();
    return expf(later);
  }

  /// Replay output of the first m staged steps against the state tile, for the step whose C
  /// vector is s.C[0]: s.y[0][r] = exp(sum A dt) (h_c C)[r] + sum_j exp(L_j) dt_j
  /// (B_j . C) x_j[r] for the threads r < TR (D and z not applied). Call from all threads.
  REPLAYSSM_DEVICE void replay_rows(const tile_t& tile, int m, float A) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // A warp per dot (the warp-per-four-dots replay_dots of before v15 spilled here at 64
    // registers; its per-thread form, replay_dots(1, m, ...), is not measured in decode yet).
    for (int j = warp; j < m; j += NT / 32) {
      float d = 0.f;
      for (int c = lane; c < N; c += 32) d = fmaf(s.B[j][c], s.C[0][c], d);
      d = warp_sum(d);
      if (lane == 0) s.w[0][j] = d * s.dt[j];
    }
    __syncthreads();
    if (warp == 0) decay_weights(0, m, A, every_step, [&](int j) { return s.w[0][j]; });
    tile.contract(s.C[0], s.y[0], nullptr);  // its barrier also publishes w and decay
    if (threadIdx.x < TR) {
      float y = s.decay[0] * s.y[0][threadIdx.x];
      for (int j = 0; j < m; ++j) y = fmaf(s.w[0][j], s.x[j][threadIdx.x], y);
      s.y[0][threadIdx.x] = y;
    }
  }

  /// The split replay step's output for the step whose C vector is s.C[0]: as replay_rows, with
  /// the weights and exp(sum A dt) computed by mamba2_coef_kernel (workspace row (b, h)) instead
  /// of from staged B rows. Waits for that kernel (PDL) first; the state tile, x rows and C were
  /// requested before. Call from all threads after the staging barrier.
  REPLAYSSM_DEVICE void split_rows(const params_t& p, const tile_t& tile, int b, int h, int m) {
    pdl_wait();  // the coefficient grid has completed and its writes are visible
    const float* ws = p.workspace + (int64_t(b) * p.nheads + h) * (L + 1);
    if (int(threadIdx.x) < m) s.w[0][threadIdx.x] = ws[threadIdx.x];
    if (threadIdx.x == NT - 1) s.decay[0] = ws[L];
    tile.contract(s.C[0], s.y[0], nullptr);  // its barrier also publishes w and decay
    if (threadIdx.x < TR) {
      float y = s.decay[0] * s.y[0][threadIdx.x];
      for (int j = 0; j < m; ++j) y = fmaf(s.w[0][j], s.x[j][threadIdx.x], y);
      s.y[0][threadIdx.x] = y;
    }
  }

  /// The rest of work item (b, h, t) once its state tile is in registers (or requested: the
  /// loads complete at first use). Cursor-independent inputs are requested first, then the
  /// cursor-dependent buffer rows, all in one wave.
  REPLAYSSM_DEVICE void process(const params_t& p, int b, int h, int t, int64_t slot, tile_t& tile,
                                const state_pool_ref& other, ckpt_slots ck) {
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const uint32_t blocks_per_slot = uint32_t(H) * (P / TR);
    auto* ckpt = tile_ptr(p.state, ck.wr, h, t);
    constexpr bool has_current = (Op == op::eager || Op == op::decode);
    float x_cur = 0.f, b_cur = 0.f, c_cur = 0.f, dt_cur = 0.f;
    if (has_current) {
      const int64_t bg = b * p.in.B_batch_stride + g * p.in.B_group_stride;
      const int64_t cg = b * p.in.C_batch_stride + g * p.in.C_group_stride;
      if (threadIdx.x < N) {
        b_cur = to_float(p.in.B[bg + threadIdx.x]);
        c_cur = to_float(p.in.C[cg + threadIdx.x]);
      }
      if (threadIdx.x < TR) {
        x_cur =
            to_float(p.in.x[b * p.in.x_batch_stride + h * p.in.x_head_stride + row0 + threadIdx.x]);
      }
      dt_cur = mamba2_step_dt(
          p, to_float(p.in.dt[b * p.in.dt_batch_stride + h * p.in.dt_head_stride]), h);
    }
    const float A = p.weights.A[h];
    // The output's D and gate, requested now rather than after the reduction.
    float D = 0.f, gate = 0.f;
    if (has_current) {
      if (p.weights.D) D = p.weights.D[h];
      if (p.in.z && threadIdx.x < TR)
        gate =
            to_float(p.in.z[b * p.in.z_batch_stride + h * p.in.z_head_stride + row0 + threadIdx.x]);
    }
    const int n = (Op == op::eager) ? 0 : buffered_steps<Op, K, L>(p.cursors.cursor[slot]);
    if (Op == op::flush && n == 0) return;  // nothing buffered: the checkpoint is current
    const bool commit = (Op != op::decode) || (n + 1 >= K);
    const int m = n + (has_current ? 1 : 0);
    // The split replay step: the weights come from the coefficient kernel (workspace), so only
    // the x rows are staged. (Split kernels only; committing rows take the fused path.)
    const bool split = Split && !commit;

    if (split) {
      staged_rows<NB, TR, NT, T> xq;
      xq.load(p.buffer.x + (buf_step(slot, 0) * H + h) * P + row0, int64_t(H) * P, n);
      xq.store(s.x, n);
    } else if constexpr (Op == op::decode) {  // the buffered rows, all requested before use
      staged_rows<NB, N, NT, T> Bq;
      staged_rows<NB, TR, NT, T> xq;
      Bq.load(p.buffer.B + (buf_step(slot, 0) * p.ngroups + g) * N, int64_t(p.ngroups) * N, n);
      xq.load(p.buffer.x + (buf_step(slot, 0) * H + h) * P + row0, int64_t(H) * P, n);
      const float dtq =
          int(threadIdx.x) < n ? p.buffer.dt[buf_step(slot, threadIdx.x) * H + h] : 0.f;
      Bq.store(s.B, n);
      xq.store(s.x, n);
      if (int(threadIdx.x) < n) s.dt[threadIdx.x] = dtq;
    } else if (Op != op::eager) {  // flush, materialize: one matrix at a time (fewer registers)
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
    // Decode arrives here: every thread has used its read of the cursor (and of the checkpoint
    // index) before the barrier, so the atomic's round trip overlaps the rest of the item.
    slot_arrival arrival;
    if constexpr (Op == op::decode) arrival.arrive(p.cursors.arrivals, slot);

    if (commit) {
      if constexpr (Op == op::decode) reload_master<mamba2_agent>(tile, p, ck.rd, h, t);  // (pairs)
      if constexpr (Op == op::eager)
        fold_step(tile, 0, A);
      else
        fold_window(tile, m, A);
      if (Op == op::materialize) {
        tile.store(
            other.data + b * other.slot_stride + h * other.head_stride + row0 * other.row_stride,
            other.row_stride);
        return;
      }
      if constexpr (Policy::scaled_state)
        store_master<mamba2_agent>(tile, p, ck.wr, h, t);
      else
        tile.store(ckpt, p.state.row_stride);
      store_copy<mamba2_agent>(tile, p, ck.wr, h, t);  // a pair's copy, from the master
      if (has_current) tile.contract(s.C[0], s.y[0], nullptr);
    } else {
      if constexpr (Split)  // (here !commit, so split)
        split_rows(p, tile, b, h, m);
      else
        replay_rows(tile, m, A);
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
      float y = s.y[0][r];
      if (p.weights.D) y = fmaf(D, x_cur, y);
      if (p.in.z) y *= silu(gate);
      p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + r] = from_float<T>(y);
    }
    finish_cursor<Op, Branch>(p, arrival, slot, blocks_per_slot, n, commit, ck);
  }

  /// op::accept and op::fork (row_item): copies buffered steps `from` .. `from + count - 1` of
  /// `from_slot` to steps `to` .. `to + count - 1` of `to_slot` (the two ranges must not
  /// overlap), the whole steps (x and dt of every head, B of every group): one contiguous range
  /// per array. Call from all threads.
  static REPLAYSSM_DEVICE void move_rows(const params_t& p, int64_t from_slot, int from,
                                         int64_t to_slot, int to, int count) {
    const int64_t H = p.nheads, G = p.ngroups;
    const int64_t f = buf_step(from_slot, from), d = buf_step(to_slot, to);
    block_copy<NT>(p.buffer.x + d * H * P, p.buffer.x + f * H * P, count * H * P);
    block_copy<NT>(p.buffer.B + d * G * N, p.buffer.B + f * G * N, count * G * N);
    block_copy<NT>(p.buffer.dt + d * H, p.buffer.dt + f * H, count * H);
  }

  /// Row b's nd draft steps (input rows b * MaxDraft + d) in registers: B, C, this block's rows
  /// of x and (verify, with z) of the gate, dt. `load` requests them all; `store` waits once.
  struct draft_rows {
    strided_rows<MaxDraft, N, NT, T> B, C;
    strided_rows<MaxDraft, TR, NT, T> x, z;
    float dt = 0.f;
    REPLAYSSM_DEVICE void load(const params_t& p, int b, int h, int g, int row0, int nd) {
      const int64_t r0 = int64_t(b) * MaxDraft;
      B.load(p.in.B + r0 * p.in.B_batch_stride + g * p.in.B_group_stride, p.in.B_batch_stride, nd);
      C.load(p.in.C + r0 * p.in.C_batch_stride + g * p.in.C_group_stride, p.in.C_batch_stride, nd);
      x.load(p.in.x + r0 * p.in.x_batch_stride + h * p.in.x_head_stride + row0, p.in.x_batch_stride,
             nd);
      if (Op == op::verify && p.in.z)
        z.load(p.in.z + r0 * p.in.z_batch_stride + h * p.in.z_head_stride + row0,
               p.in.z_batch_stride, nd);
      if (int(threadIdx.x) < nd)
        dt = to_float(p.in.dt[(r0 + threadIdx.x) * p.in.dt_batch_stride + h * p.in.dt_head_stride]);
    }
    /// Stages the drafts at positions n..n+nd-1 (B, x, dt after bias and softplus), each draft's
    /// C in s.C[d] and its gate rows in s.z[d].
    REPLAYSSM_DEVICE void store(shared_storage& s, const params_t& p, int h, int n, int nd) const {
      B.store(s.B + n, nd);
      C.store(s.C, nd);
      x.store(s.x + n, nd);
      if (Op == op::verify && p.in.z) z.store(s.z, nd);
      if (int(threadIdx.x) < nd) s.dt[n + threadIdx.x] = mamba2_step_dt(p, dt, h);
    }
  };

  /// The outputs of the nd drafts staged at positions base..base+nd-1, all from one pass over
  /// the state tile: draft d's output uses the steps j < base and the drafts on its path
  /// (s.path[d]; masked-out steps neither contribute nor decay the others). Writes output rows
  /// b * MaxDraft + d. Call from all threads after the staging barrier.
  REPLAYSSM_DEVICE void draft_outputs(const params_t& p, int b, int h, int row0, const tile_t& tile,
                                      int base, int nd, float A) {
    const float D = p.weights.D ? p.weights.D[h] : 0.f;
    const int m = base + nd;
    const int warp = threadIdx.x >> 5;
    auto on = [&](int d, int j) { return j < base || ((s.path[d] >> (j - base)) & 1u); };
    replay_dots(nd, m, on);                   // w[d][j] = (B_j . C_d) dt_j on draft d's path
    tile.contract_many(s.C, s.y, nd);         // its barrier also publishes w
    for (int d = warp; d < nd; d += NT / 32)  // w[d][j] *= exp(sum_{i > j on the path} A dt_i)
      decay_weights(
          d, m, A, [&](int j) { return on(d, j); }, [&](int j) { return s.w[d][j]; });
    __syncthreads();
    for (int i = threadIdx.x; i < nd * TR; i += NT) {
      const int d = i / TR, r = i % TR;
      float y = s.decay[d] * s.y[d][r];
      for (int j = 0; j < m; ++j) y = fmaf(s.w[d][j], s.x[j][r], y);
      const int64_t row = int64_t(b) * MaxDraft + d;
      if (p.weights.D) y = fmaf(D, s.x[base + d][r], y);
      if (p.in.z) y *= silu(s.z[d][r]);
      p.in.out[row * p.in.out_batch_stride + h * p.in.out_head_stride + row0 + r] =
          from_float<T>(y);
    }
  }

  /// op::verify: the outputs of row b's draft steps d < num_draft[b] (input rows
  /// b * MaxDraft + d), each from the checkpoint, the buffered steps and the drafts on its path
  /// (0..d for chains), with one read of the checkpoint; the drafts are appended to the buffer
  /// after the buffered steps. A window of K or more steps (left by accept) is folded into the
  /// checkpoint first, in the same pass over the state: the cursor then holds folded_cursor(n)
  /// until accept moves the accepted drafts to the front. Otherwise the cursor does not move.
  REPLAYSSM_DEVICE void process_verify(const params_t& p, int b, int h, int t, int64_t slot,
                                       tile_t& tile, ckpt_slots ck) {
    const int H = p.nheads;
    const int g = h / (H / p.ngroups);
    const int row0 = t * TR;
    const float A = p.weights.A[h];
    int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
    draft_rows drafts;  // requested before the cursor-dependent loads
    drafts.load(p, b, h, g, row0, nd);
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    const bool fold = n >= K;
    if (nd > L - n) nd = L - n;     // only a corrupt cursor gets here: stay inside the buffer
    const int base = fold ? 0 : n;  // where draft 0 is staged
    stage_rows<S, N, NT>(s.B, p.buffer.B + (buf_step(slot, 0) * p.ngroups + g) * N,
                         int64_t(p.ngroups) * N, n);
    stage_rows<S, TR, NT>(s.x, p.buffer.x + (buf_step(slot, 0) * H + h) * P + row0, int64_t(H) * P,
                          n);
    if (int(threadIdx.x) < n) s.dt[threadIdx.x] = p.buffer.dt[buf_step(slot, threadIdx.x) * H + h];
    if (!fold) drafts.store(s, p, h, n, nd);
    if (int(threadIdx.x) < nd) s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, b, threadIdx.x);
    __syncthreads();
    if (fold) {
      reload_master<mamba2_agent>(tile, p, ck.rd, h, t);  // (pairs: the outputs' copy is loaded)
      fold_window(tile, n, A);
      store_checkpoint<mamba2_agent>(tile, p, ck.wr, h, t);
      __syncthreads();   // the drafts are staged over the folded steps
      draft_rows again;  // requested again: holding them across the fold costs registers
      again.load(p, b, h, g, row0, nd);
      again.store(s, p, h, 0, nd);
      __syncthreads();
    }
    draft_outputs(p, b, h, row0, tile, base, nd, A);
    // Append the drafts after the buffered (or folded) steps, exactly as given (the conversions
    // back are exact). Nothing this launch reads lives there.
    for (int i = threadIdx.x; i < nd * TR; i += NT)
      p.buffer.x[(buf_step(slot, n + i / TR) * H + h) * P + row0 + i % TR] =
          from_float<T>(s.x[base + i / TR][i % TR]);
    if (t == 0) {
      if (int(threadIdx.x) < nd)
        p.buffer.dt[buf_step(slot, n + threadIdx.x) * H + h] = s.dt[base + threadIdx.x];
      if (h % (H / p.ngroups) == 0)
        for (int i = threadIdx.x; i < nd * N; i += NT)
          p.buffer.B[(buf_step(slot, n + i / N) * p.ngroups + g) * N + i % N] =
              from_float<T>(s.B[base + i / N][i % N]);
    }
    if (fold)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot,
                            uint32_t(H) * tiles_per_head, folded_cursor(n),
                            Branch ? p.branch.ckpt_of : nullptr, ck.wr);
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
    int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
    {
      draft_rows drafts;
      drafts.load(p, b, h, g, row0, nd);
      drafts.store(s, p, h, 0, nd);
    }
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      const int64_t r = int64_t(b) * MaxDraft + d;
      fold_step(tile, d, A);
      tile.store(other.data + r * other.slot_stride + h * other.head_stride +
                     int64_t(row0) * other.row_stride,
                 other.row_stride);
      tile.contract(s.C[d], s.y[0], nullptr);
      if (threadIdx.x < TR) {
        float y = s.y[0][threadIdx.x];
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
