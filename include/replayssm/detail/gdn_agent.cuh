// Block-level Gated DeltaNet agent and its __global__ entry.
#pragma once

#include <replayssm/detail/gdn_split.cuh>
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

/// One block works on `Policy::tile` columns of V of one value head of one batch row. `Split`:
/// the decode kernel of the split replay step (gdn_split.cuh, `params.workspace` set): its
/// replay rows read r and the coefficients from the coefficient kernel; without it (the
/// default) the kernels are exactly the fused ones.
template <class Policy, op Op, int MaxDraft = 1, bool Branch = false, bool Split = false>
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
  static constexpr int max_draft = MaxDraft;
  static constexpr bool branching = Branch;  ///< checkpoints through branch_ref (run_item.cuh)
  static_assert(!Policy::has_serving_copy || (Op != op::eager && Op != op::eager_draft),
                "eager steps keep one state: run the eager baseline with precision::fp32 or a "
                "single low-precision checkpoint (precision::bf16, fp16), not a pair.");
  /// Resident blocks per SM the registers must allow (0: no bound). The state tile alone takes
  /// 128 registers at 128 threads; decode, which stages its buffer rows in one wave, is held to 3
  /// blocks (170 registers), which the compiler otherwise exceeds (measured with bf16 inputs at
  /// L = 16; fp32 inputs or a longer buffer spill under this bound). So is the verification of up
  /// to 4 drafts, which takes 168 registers unbounded at L = 19-23 with bf16 inputs (measured: with
  /// the scaled fold it took 178, 2 blocks per SM, and the T = 4 round was 25% slower).
  static constexpr int min_blocks_per_sm =
      (NT == 128 && (Op == op::decode || (Op == op::verify && MaxDraft <= 4))) ? 3 : 0;
  /// Whether fold() runs the scaled form (one FMA per element and step): the window folds of
  /// decode commits, flush and materialize. The eager step (one step) and the verification keep
  /// the direct form: measured on the H200 (batch 256, Hv64), the scaled form made the T = 4
  /// verification 17% slower at the same 168 registers (round 630 -> 735 us; T = 2 and 8 were
  /// 1-2% faster; not understood: profile before trying again).
  static constexpr bool scaled_fold = (Op != op::eager && Op != op::verify);
  // Steps staged at once: the buffered steps (up to L), plus the current one for decode.
  static constexpr int S = (Op == op::eager)         ? 1
                           : (Op == op::eager_draft) ? MaxDraft
                           : (Op == op::decode)      ? L + 1
                                                     : L;
  // Buffered rows decode stages at most (it clamps its cursor to L - 1).
  static constexpr int NB = L > 1 ? L - 1 : 1;
  static constexpr bool kv = (rule::layout == state_layout::kv);
  using tile_t = typename gdn_tile_for<rule, VT, NT>::type;
  static constexpr bool drafts = (Op == op::verify || Op == op::eager_draft || Op == op::accept);
  static_assert(!drafts || MaxDraft <= 32, "speculative launches: MaxDraft must be at most 32.");
  static_assert(NT >= L && (!drafts || NT >= MaxDraft),
                "replay_policy: BlockThreads must be at least BufferLen (and MaxDraft): each "
                "thread stages one buffered step's scalars.");
  static constexpr int NQ = drafts ? MaxDraft : 1;  // q vectors staged
  static_assert(Op != op::verify || L >= K - 1 + 2 * MaxDraft,
                "gated_deltanet: the buffer must hold a full window (up to CommitInterval - 1 + "
                "MaxDraft accepted steps) plus the next draft: BufferLen >= CommitInterval - 1 + "
                "2 * MaxDraft.");
  static_assert(
      VD % VT == 0,
      "gated_deltanet: the policy's Tile (columns of V per block) must divide head_v_dim.");
  static_assert(VT <= NT && KD <= NT,
                "gated_deltanet: the policy's Tile and head_k_dim must not exceed BlockThreads.");

  /// The split replay step (gdn_split.cuh, `params.workspace`) exists for decode with the
  /// one-item-per-block kernel only: pipelined policies keep the fused path (the launcher
  /// ignores the workspace there).
  static_assert(!Split || (Op == op::decode && Policy::pipeline_stages < 2),
                "gated_deltanet: the split replay step is a decode kernel of one item per block");
  /// The decode kernel of the split replay step for this agent (kernels.cuh
  /// launch_items_or_split; named, not instantiated, by the other operations).
  using split_agent = gdn_agent<Policy, op::decode, 1, Branch, true>;

  static REPLAYSSM_HD int heads(const params_t& p) { return p.num_v_heads; }  ///< heads per row
  static constexpr int tiles_per_head = VD / VT;  ///< blocks (work items) per head

  struct shared_storage {
    alignas(16) float k[S][KD];  // normalised k_j
    alignas(16) float v[S][VT];  // v_j, this block's columns
    alignas(16) float g[S];
    alignas(16) float beta[S];
    alignas(16) float c[NQ][S];   // beta_j (k_j . r_j) from the sweep, per query
    alignas(16) float ksc[S];     // normalisation factor of k_j
    alignas(16) float q[NQ][KD];  // normalised, scaled q
    alignas(16) float o[VT];
    alignas(16) float kh[VT];
    alignas(16) float u[VT];
    // (the scaled fold's contract_cols alternates two halves of it)
    alignas(16) float scratch[(scaled_fold ? 2 : 1) * tile_t::scratch_floats];
    // The scaled fold's per-step scalars (fold_scalars): 1 / A_j, and the factor a step first
    // brings the tile to (1: none).
    float fold_ia[scaled_fold ? S : 1];
    float fold_r[scaled_fold ? S : 1];
    float fold_A;  // A_m
    float qscale[NQ];
    uint32_t path[NQ];  // verify: the drafts on each draft's path (bit k: draft k)
  };

  shared_storage& s;

  static REPLAYSSM_DEVICE int64_t buf_step(int64_t slot, int j) { return slot * L + j; }

  template <class S>
  static REPLAYSSM_DEVICE S* tile_base(S* head, int64_t row_stride, int v0) {
    return kv ? head + v0 : head + v0 * row_stride;
  }
  static REPLAYSSM_DEVICE int64_t slot_of(const params_t& p, int b) {
    return p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
  }
  /// Element (0, v0) of value head hv's state in row `slot` of a pool.
  template <class S>
  static REPLAYSSM_DEVICE S* tile_ptr(const basic_pool_ref<S>& pool, int64_t slot, int hv, int t) {
    return tile_base(pool.data + slot * pool.slot_stride + hv * pool.head_stride, pool.row_stride,
                     t * VT);
  }

  /// Work item (b, hv, t): row b, head hv, tile t, loading the state tile itself.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int hv, int t, const state_pool_ref& other) {
    run_item(*this, p, b, hv, t, other);
  }

  /// The backward sweep for query qi by one warp: s.q[qi] <- M_1 ... M_m q and s.c[qi][j] =
  /// beta_j k_j . (M_{j+1} ... M_m q) over the staged steps j < m. Only the steps j < n0 and the
  /// drafts n0 + k with bit k of `mask` set take part (a token tree's path); the others count as
  /// absent. Call from all lanes of one warp.
  REPLAYSSM_DEVICE void sweep(int qi, int m, int n0, uint32_t mask) {
    gdn_sweep<KD>(s.k, s.g, s.beta, s.q[qi], s.q[qi], s.c[qi], m, n0, mask);
  }

  /// The split replay step's sweep result for row b, value head hv, m staged steps: r into
  /// s.q[0] and c_0 .. c_{m-1} into s.c[0], as written by gdn_coef_kernel (workspace row
  /// (b, hv)). Waits for that kernel (PDL) first; the state tile and the v rows were requested
  /// before. Call from all threads after the staging barriers; ends with a barrier.
  REPLAYSSM_DEVICE void split_sweep(const params_t& p, int b, int hv, int m) {
    pdl_wait();  // the coefficient grid has completed and its writes are visible
    const float* ws = p.workspace + (int64_t(b) * p.num_v_heads + hv) * (KD + L);
    for (int i = threadIdx.x; i < KD + m; i += NT) {
      const float w = ws[i];
      if (i < KD)
        s.q[0][i] = w;
      else
        s.c[0][i - KD] = w;
    }
    __syncthreads();
  }

  /// Applies staged step j (k normalised) to the state tile in the direct form of the delta
  /// rule: h = alpha_j h + k_j u_j^T, u_j = beta_j (v_j - alpha_j h^T k_j).
  REPLAYSSM_DEVICE void direct_step(tile_t& tile, int j) {
    const float alpha = expf(s.g[j]);
    tile.contract(s.k[j], s.kh, s.scratch);  // h^T k before the decay
    if (threadIdx.x < VT)
      s.u[threadIdx.x] = s.beta[j] * (s.v[j][threadIdx.x] - alpha * s.kh[threadIdx.x]);
    __syncthreads();
    tile.rank1(alpha, s.k[j], s.u, 1.f);
  }

  /// Folds the first m staged steps (k normalised) into the state tile: the delta-rule update
  /// h_j = alpha_j h_{j-1} + k_j u_j^T, u_j = beta_j (v_j - alpha_j h_{j-1}^T k_j), one step at
  /// a time. Where `scaled_fold` (decode commits, flush, materialize), in the scaled form
  /// h_j = A_j H_j (A_j = alpha_1 ... alpha_j, a block-uniform scalar): H_j = H_{j-1} + k_j
  /// (u_j / A_j)^T with u_j / A_j = beta_j (v_j / A_j - H_{j-1}^T k_j), so a step is a
  /// contraction and one FMA per element (not a contraction, a multiply and an FMA), and the
  /// tile is multiplied by A_m once at the end. Rounding is that of fp32 arithmetic on the true
  /// magnitudes (each term's error scales with it). Should A fall below 2^-64 (1 / A would grow
  /// the tile without bound), the tile is first brought to A's scale: it then holds
  /// alpha_j h_{j-1} and the step continues with A = 1.
  REPLAYSSM_DEVICE void fold(tile_t& tile, int m) {
    if constexpr (!scaled_fold) {
      for (int j = 0; j < m; ++j) direct_step(tile, j);
    } else {
      if (fold_scalars(m)) {  // (block-uniform)
        for (int j = 0; j < m; ++j) scaled_step<true>(tile, j);
      } else {  // (the usual case: no step's scalars are waited for before its contraction)
        for (int j = 0; j < m; ++j) scaled_step<false>(tile, j);
      }
      const float A = s.fold_A;
      if (A != 1.f) tile.scale(A);
      if constexpr (kv) __syncthreads();  // the last step's partial sums are read before reuse
    }
  }

  /// The scaled fold's scalars of the first m staged steps (m <= L <= NT), computed once: thread
  /// j runs the per-step form's operations for steps 0 .. j in their order (A *= exp(g_i);
  /// should A fall below 2^-64, the step first scales the tile by A and continues with A = 1),
  /// so every thread's A_j has the same bits as the sequential form's, and writes step j's
  /// rescale factor (1: none) and 1 / A_j. A step then no longer waits for an exponential, a
  /// division and a branch on them before its contraction (bench/experiments/
  /// gdn_commit_study.md). Returns whether any step rescales (block-uniform). Call from all
  /// threads once s.g[0 .. m - 1] are visible; ends with a barrier.
  REPLAYSSM_DEVICE bool fold_scalars(int m) {
    constexpr float tiny = 5.421010862427522e-20f;  // 2^-64
    int rescales = 0;
    if (int(threadIdx.x) < m) {
      const int j = threadIdx.x;
      float A = 1.f, r = 1.f;  // the tile holds h / A
      // (branch-free: every staged entry's exponential is independent of the others, so they
      // are all in flight at once; entries past j, or past m, only feed selects)
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const float Ai = A * expf(s.g[i]);
        const bool low = Ai < tiny;  // (rare: gates summing below -44 within a window)
        const bool in = i <= j;
        r = in ? (low ? Ai : 1.f) : r;  // (below 2^-64: never 1)
        A = in ? (low ? 1.f : Ai) : A;
      }
      s.fold_r[j] = r;
      s.fold_ia[j] = 1.f / A;
      if (j == m - 1) s.fold_A = A;
      rescales = r != 1.f;
    }
    if (m == 0 && threadIdx.x == 0) s.fold_A = 1.f;
    return __syncthreads_or(rescales) != 0;
  }

  /// Step j of the scaled fold (fold()): H_j = H_{j-1} + k_j (u_j / A_j)^T,
  /// u_j / A_j = beta_j (v_j / A_j - H_{j-1}^T k_j).
  template <bool Rescale>
  REPLAYSSM_DEVICE void scaled_step(tile_t& tile, int j) {
    if constexpr (Rescale) {
      const float r = s.fold_r[j];
      if (r != 1.f) tile.scale(r);
    }
    if constexpr (kv) {  // one barrier a step: each thread forms u for its own columns
      const float4 kh = tile.contract_cols(s.k[j], s.scratch, j & 1);  // H^T k
      const float ia = s.fold_ia[j], bj = s.beta[j];
      const float4 vj = *reinterpret_cast<const float4*>(&s.v[j][tile_t::col()]);
      tile.rank1_add_cols(s.k[j], make_float4(bj * (vj.x * ia - kh.x), bj * (vj.y * ia - kh.y),
                                              bj * (vj.z * ia - kh.z), bj * (vj.w * ia - kh.w)));
    } else {
      tile.contract(s.k[j], s.kh, s.scratch);  // H^T k
      const float ia = s.fold_ia[j], bj = s.beta[j];
      if (threadIdx.x < VT) s.u[threadIdx.x] = bj * (s.v[j][threadIdx.x] * ia - s.kh[threadIdx.x]);
      __syncthreads();
      tile.rank1_add(s.k[j], s.u);
    }
  }

  /// The rest of work item (b, hv, t) once its state tile is in registers (or requested).
  /// Requested first: the current step; then the buffer rows in one wave.
  REPLAYSSM_DEVICE void process(const params_t& p, int b, int hv, int t, int64_t slot, tile_t& tile,
                                const state_pool_ref& other, ckpt_slots ck) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    const int v0 = t * VT;
    const uint32_t blocks_per_slot = uint32_t(Hv) * (VD / VT);
    auto* ckpt = tile_ptr(p.state, ck.wr, hv, t);
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
    const int n = (Op == op::eager) ? 0 : buffered_steps<Op, K, L>(p.cursors.cursor[slot]);
    if (Op == op::flush && n == 0) return;  // nothing buffered: the checkpoint is current
    const bool commit = (Op != op::decode) || (n + 1 >= K);
    const int m = n + (has_current ? 1 : 0);
    slot_arrival arrival;
    // The split replay step: r and the coefficients come from the coefficient kernel
    // (workspace), so only the v rows are staged. (Split kernels only; committing rows take the
    // fused path.)
    const bool split = Split && !commit;

    if (split) {
      staged_rows<NB, VT, NT, T> vq;
      vq.load(p.buffer.v + (buf_step(slot, 0) * Hv + hv) * VD + v0, int64_t(Hv) * VD, n);
      vq.store(s.v, n);
    } else if constexpr (Op == op::decode) {  // the buffered rows, all requested before use
      staged_rows<NB, KD, NT, T> kq;
      staged_rows<NB, VT, NT, T> vq;
      kq.load(p.buffer.k + (buf_step(slot, 0) * Hk + hk) * KD, int64_t(Hk) * KD, n);
      vq.load(p.buffer.v + (buf_step(slot, 0) * Hv + hv) * VD + v0, int64_t(Hv) * VD, n);
      float gq = 0.f, bq = 0.f, kscq = 0.f;
      if (int(threadIdx.x) < n) {
        const int j = threadIdx.x;
        gq = p.buffer.g[buf_step(slot, j) * Hv + hv];
        bq = p.buffer.beta[buf_step(slot, j) * Hv + hv];
        kscq = p.buffer.kscale[buf_step(slot, j) * Hk + hk];
      }
      kq.store(s.k, n);
      vq.store(s.v, n);
      if (int(threadIdx.x) < n) {
        s.g[threadIdx.x] = gq;
        s.beta[threadIdx.x] = bq;
        s.ksc[threadIdx.x] = kscq;
      }
    } else if (Op != op::eager) {  // flush, materialize: one matrix at a time (fewer registers)
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
      // Decode arrives here: every thread has used its read of the cursor (and of the checkpoint
      // index) before the barrier, so the atomic's round trip overlaps the rest of the item.
      if constexpr (Op == op::decode) arrival.arrive(p.cursors.arrivals, slot);
      if (threadIdx.x < 32) {  // the step's own normalisation factors
        float qs, ks;
        gdn_step_factors<KD>(p, s.q[0], s.k[n], qs, ks);
        if (threadIdx.x == 0) {
          s.qscale[0] = qs;
          s.ksc[n] = ks;
        }
      }
    }
    __syncthreads();
    if (!split) {  // (the split step needs only the current k's factor, for the buffer)
      // Normalise: k_j = raw k_j * its factor (exactly what the step computed), q scaled.
      for (int i = threadIdx.x; i < m * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
      if (has_current && threadIdx.x < KD) s.q[0][threadIdx.x] *= s.qscale[0];
      __syncthreads();
    }

    if (commit) {
      if constexpr (Op == op::decode) reload_master<gdn_agent>(tile, p, ck.rd, hv, t);  // (pairs)
      fold(tile, m);
      if (Op == op::materialize) {
        tile.store(tile_base(other.data + b * other.slot_stride + hv * other.head_stride,
                             other.row_stride, v0),
                   other.row_stride);
        return;
      }
      if constexpr (Policy::scaled_state)
        store_master<gdn_agent>(tile, p, ck.wr, hv, t);
      else
        tile.store(ckpt, p.state.row_stride);
      store_copy<gdn_agent>(tile, p, ck.wr, hv, t);  // a pair's copy, from the master
      if (has_current) tile.contract(s.q[0], s.o, s.scratch);
    } else {
      if constexpr (Split) {  // (here !commit, so split)
        split_sweep(p, b, hv, m);
      } else {
        // Backward sweep: q <- M_1 ... M_m q, c_j = beta_j k_j . (M_{j+1} ... M_m q).
        if (threadIdx.x < 32) sweep(0, m, m, 0u);
        __syncthreads();
      }
      tile.contract(s.q[0], s.o, s.scratch);
      if (threadIdx.x < VT) {
        float o = s.o[threadIdx.x];
        for (int j = 0; j < m; ++j) o = fmaf(s.c[0][j], s.v[j][threadIdx.x], o);
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
    finish_cursor<Op, Branch>(p, arrival, slot, blocks_per_slot, n, commit, ck);
  }

  /// op::accept and op::fork (row_item): copies buffered steps `from` .. `from + count - 1` of
  /// `from_slot` to steps `to` .. `to + count - 1` of `to_slot` (the two ranges must not
  /// overlap), the whole steps (v, g and beta of every value head, k and its factor of every k
  /// head): one contiguous range per array. Call from all threads.
  static REPLAYSSM_DEVICE void move_rows(const params_t& p, int64_t from_slot, int from,
                                         int64_t to_slot, int to, int count) {
    const int64_t Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int64_t f = buf_step(from_slot, from), d = buf_step(to_slot, to);
    block_copy<NT>(p.buffer.v + d * Hv * VD, p.buffer.v + f * Hv * VD, count * Hv * VD);
    block_copy<NT>(p.buffer.k + d * Hk * KD, p.buffer.k + f * Hk * KD, count * Hk * KD);
    block_copy<NT>(p.buffer.g + d * Hv, p.buffer.g + f * Hv, count * Hv);
    block_copy<NT>(p.buffer.beta + d * Hv, p.buffer.beta + f * Hv, count * Hv);
    block_copy<NT>(p.buffer.kscale + d * Hk, p.buffer.kscale + f * Hk, count * Hk);
  }

  /// Row b's nd draft steps (input rows b * MaxDraft + d) in registers: raw q and k, this
  /// block's columns of v, g and beta. `load` requests them all; `store` waits once.
  struct draft_rows {
    strided_rows<MaxDraft, KD, NT, T> q, k;
    strided_rows<MaxDraft, VT, NT, T> v;
    float g = 0.f, beta = 0.f;
    REPLAYSSM_DEVICE void load(const params_t& p, int b, int hv, int hk, int v0, int nd) {
      const int64_t r0 = int64_t(b) * MaxDraft;
      q.load(p.in.q + r0 * p.in.q_batch_stride + hk * p.in.q_head_stride, p.in.q_batch_stride, nd);
      k.load(p.in.k + r0 * p.in.k_batch_stride + hk * p.in.k_head_stride, p.in.k_batch_stride, nd);
      v.load(p.in.v + r0 * p.in.v_batch_stride + hv * p.in.v_head_stride + v0, p.in.v_batch_stride,
             nd);
      if (int(threadIdx.x) < nd) {
        g = p.in.g[(r0 + threadIdx.x) * p.in.g_batch_stride + hv];
        beta = p.in.beta[(r0 + threadIdx.x) * p.in.beta_batch_stride + hv];
      }
    }
    /// Stages the drafts at positions n..n+nd-1 (raw q in s.q[d], raw k, v, g, beta).
    REPLAYSSM_DEVICE void store(shared_storage& s, int n, int nd) const {
      q.store(s.q, nd);
      k.store(s.k + n, nd);
      v.store(s.v + n, nd);
      if (int(threadIdx.x) < nd) {
        s.g[n + threadIdx.x] = g;
        s.beta[n + threadIdx.x] = beta;
      }
    }
  };

  /// Each staged draft's normalisation factors (s.qscale[d], s.ksc[n + d]) exactly as its eager
  /// step computes them, one warp per draft. Call after the barrier that publishes the staged
  /// drafts; ends without a barrier.
  REPLAYSSM_DEVICE void draft_norms(const params_t& p, int n, int nd) {
    const int lane = threadIdx.x & 31;
    for (int d = threadIdx.x >> 5; d < nd; d += NT / 32) {
      float qs, ks;
      gdn_step_factors<KD>(p, s.q[d], s.k[n + d], qs, ks);
      if (lane == 0) {
        s.qscale[d] = qs;
        s.ksc[n + d] = ks;
      }
    }
  }

  /// op::verify: the outputs of row b's draft steps d < num_draft[b] (input rows
  /// b * MaxDraft + d), each by the backward sweep from its own q over the buffered steps and
  /// the drafts on its path (0..d for chains; one warp per draft, all at once), with one read of
  /// the checkpoint; the drafts are appended to the buffer after the buffered steps. A window of
  /// K or more steps (left by accept) is folded into the checkpoint first, in the same pass over
  /// the state: the cursor then holds folded_cursor(n) until accept moves the accepted drafts to
  /// the front. Otherwise the cursor does not move.
  REPLAYSSM_DEVICE void process_verify(const params_t& p, int b, int hv, int t, int64_t slot,
                                       tile_t& tile, ckpt_slots ck) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    const int v0 = t * VT;
    int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    const bool fold_window = n >= K;
    if (nd > L - n) nd = L - n;  // only a corrupt cursor gets here: stay inside the buffer
    const int base = fold_window ? 0 : n;  // where draft 0 is staged
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
    if (!fold_window) {  // (requested any earlier, the drafts cost GDN ~90 registers)
      draft_rows drafts;
      drafts.load(p, b, hv, hk, v0, nd);
      drafts.store(s, n, nd);
    }
    if (int(threadIdx.x) < nd) s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, b, threadIdx.x);
    __syncthreads();
    if (fold_window) {
      reload_master<gdn_agent>(tile, p, ck.rd, hv, t);  // (pairs: the outputs' copy is loaded)
      for (int i = threadIdx.x; i < n * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
      __syncthreads();
      fold(tile, n);
      store_checkpoint<gdn_agent>(tile, p, ck.wr, hv, t);
      __syncthreads();  // the drafts are staged over the folded steps
      draft_rows drafts;
      drafts.load(p, b, hv, hk, v0, nd);
      drafts.store(s, 0, nd);
      __syncthreads();
    }
    draft_norms(p, base, nd);
    __syncthreads();
    // Append the drafts' raw k and factors after the buffered (or folded) steps before k is
    // normalised in place. Nothing this launch reads lives there.
    if (t == 0 && hv % (Hv / Hk) == 0) {
      for (int i = threadIdx.x; i < nd * KD; i += NT)
        p.buffer.k[(buf_step(slot, n + i / KD) * Hk + hk) * KD + i % KD] =
            from_float<T>(s.k[base + i / KD][i % KD]);
      if (int(threadIdx.x) < nd)
        p.buffer.kscale[buf_step(slot, n + threadIdx.x) * Hk + hk] = s.ksc[base + threadIdx.x];
    }
    const int m = base + nd;
    __syncthreads();
    for (int i = threadIdx.x; i < m * KD; i += NT) s.k[i / KD][i % KD] *= s.ksc[i / KD];
    for (int i = threadIdx.x; i < nd * KD; i += NT) s.q[i / KD][i % KD] *= s.qscale[i / KD];
    __syncthreads();
    for (int d = threadIdx.x >> 5; d < nd; d += NT / 32) sweep(d, base + d + 1, base, s.path[d]);
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      tile.contract(s.q[d], s.o, s.scratch);
      if (threadIdx.x < VT) {
        float o = s.o[threadIdx.x];
        for (int j = 0; j <= base + d; ++j) o = fmaf(s.c[d][j], s.v[j][threadIdx.x], o);
        const int64_t r = int64_t(b) * MaxDraft + d;
        p.in.out[r * p.in.out_batch_stride + hv * p.in.out_head_stride + v0 + threadIdx.x] =
            from_float<T>(o);
      }
      __syncthreads();  // the next draft reuses o
    }
    // Append the drafts' v, g and beta (exactly as given).
    for (int i = threadIdx.x; i < nd * VT; i += NT)
      p.buffer.v[(buf_step(slot, n + i / VT) * Hv + hv) * VD + v0 + i % VT] =
          from_float<T>(s.v[base + i / VT][i % VT]);
    if (t == 0 && int(threadIdx.x) < nd) {
      p.buffer.g[buf_step(slot, n + threadIdx.x) * Hv + hv] = s.g[base + threadIdx.x];
      p.buffer.beta[buf_step(slot, n + threadIdx.x) * Hv + hv] = s.beta[base + threadIdx.x];
    }
    if (fold_window)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot,
                            uint32_t(Hv) * tiles_per_head, folded_cursor(n),
                            Branch ? p.branch.ckpt_of : nullptr, ck.wr);
  }

  /// op::eager_draft, the baseline speculative round of eager engines (see mamba2_agent).
  REPLAYSSM_DEVICE void process_eager_draft(const params_t& p, int b, int hv, int t, tile_t& tile,
                                            const state_pool_ref& other) {
    const int hk = hv / (p.num_v_heads / p.num_k_heads);
    const int v0 = t * VT;
    int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
    {
      draft_rows drafts;
      drafts.load(p, b, hv, hk, v0, nd);
      drafts.store(s, 0, nd);
    }
    __syncthreads();
    draft_norms(p, 0, nd);
    __syncthreads();
    for (int i = threadIdx.x; i < nd * KD; i += NT) {
      s.k[i / KD][i % KD] *= s.ksc[i / KD];
      s.q[i / KD][i % KD] *= s.qscale[i / KD];
    }
    __syncthreads();
    for (int d = 0; d < nd; ++d) {
      const int64_t r = int64_t(b) * MaxDraft + d;
      direct_step(tile, d);
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
