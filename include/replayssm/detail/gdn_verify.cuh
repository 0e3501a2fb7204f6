// The split verification of Gated DeltaNet (verify_step with `params.workspace`, for the
// policies `gdn_verify_split_supported` accepts; every other verification keeps the fused
// gdn_agent path unchanged).
//
// Why (bench/experiments/mma_verify_gdn): the standalone prototype of this structure (a sweep
// grid, then a 4-warp readout grid launched with programmatic dependent launch) ran the T = 4
// verification of batch 256, Hk 16, Hv 64, K = V = 128, 15 buffered steps in 481 us (FMA, 4
// warps, PDL) against the library's fused verification's 626 us. Measured here (H200, v16,
// bench_spec spec/gdn/Hv64_Hk16_ws, batch 256): verification at 15 buffered steps T = 2 / 4 / 8
// 388 / 497 / 859 us against the fused 589 / 633 / 1340; rows that all fold 1065 / 1181 / 1832
// against 1142 / 1151 / 1800 (then the fold ran the fused process_verify in the readout grid;
// bench/experiments/gdn_verify_fold.md: the fold in the readout's structure).
//
// Two grids, the second launched with programmatic dependent launch (sm_90+):
// 1. gdn_verify_sweep_kernel, one block of 128-512 threads per (k head hk, batch row b): it
//    stages exactly what process_verify stages before its sweeps (for a row that does not fold,
//    n < K buffered steps: the buffered steps' raw k and factors, then the drafts'; g and beta of
//    the k head's value heads; for a row that folds, n >= K: the drafts' alone, from step 0, as
//    process_verify stages them after its fold: `base` = n or 0), computes the drafts' factors
//    with gdn_step_factors (as draft_norms), normalises, and runs every (value head, draft)
//    backward sweep with gdn_sweep's arithmetic (`sweep(d, base + d + 1, base, path[d])` of the
//    fused path; gdn_verify_sweep::sweep: the same operations per lane in the same order, with
//    less per-step work; four value heads of one draft a warp where four divide the k head's,
//    their dot products summed by one transposed butterfly that adds warp_sum's pairs, else one
//    a warp), so that r_d and c_d are bit-identical to the fused path's. The k rows are staged
//    and normalised once per k head, not once per value head (NOTES v24: the grid was (value
//    head, row) before, and a third of the verification's time at T = 4); the block has one warp
//    per (value heads, draft) up to 16 (128, 256 or 512 threads, NOTES v25, v27).
//    Workspace layout: `[batch][num_v_heads][MaxDraft][head_k_dim + BufferLen]` floats: r_d
//    (head_k_dim), then c_d[j] for j <= base + d (0 off d's path; later positions not written).
//    Each block appends its k head's drafts' raw k and factors to the buffer at n + d (where
//    process_verify appends them from, folding or not).
// 2. gdn_verify_readout_kernel, one block of 128 threads per (value head hv, batch row b): the
//    128 x 128 fp32 state tile (the fused agent's tile) is requested first, as run_item requests
//    it. A row that does not fold: the v rows of the buffered steps and drafts, pdl_wait, r_d and
//    c_d from the workspace (all requested together into shared memory, mostly by cp.async: no
//    per-thread chains of dependent loads around the tile's 128 registers), then per draft the
//    fused path's own readout: o_d = tile.contract(r_d) + sum_{j <= n + d} c_d[j] v_j (same
//    order), and the drafts' v, g, beta appended. The cursor does not move (as in the fused path
//    for non-folding rows). A row that folds (`fold_row`): the window's k and v rows, g, beta and
//    factors and the drafts' v, g, beta requested at once by cp.async, the window folded into
//    the registers with the fused verification's direct form and arithmetic (`fold_step`: one
//    barrier a step instead of three), the checkpoint stored, then pdl_wait and the drafts read
//    against it at base 0 as above; the drafts' v, g, beta appended at n + d and the row's last
//    block sets folded_cursor(n) (as process_verify). Checkpoint, outputs, buffer and cursor end
//    up bit-identical to the fused path's.
//    With a 16-bit serving copy (precision::pair<bf16 / fp16>) the tile requested first is the
//    copy's (as run_item's load_copy: 8 bytes per fragment, held as bits until the staging
//    barrier, then widened, exactly): a row that does not fold reads its drafts against it. A row
//    that folds then requests the fp32 master instead (reload_master: the copy's bits are
//    dropped), folds it as above and stores the master, then the copy from the same registers
//    (store_checkpoint's store_copy: round to nearest per element, the same bits); its drafts read
//    the fp32 folded registers, as the fused path's do.
//
// Races: the sweep grid reads every listed row's cursor and triggers only after that read passed
// a block barrier, so the readout blocks that fold (and set their row's cursor at the end) start
// after every cursor read. The sweep grid writes buffer.k / kscale only at the drafts' positions
// n + d, which no readout block reads (a folding row reads its window, j < n); the readout reads
// the workspace only after pdl_wait.
#pragma once

#include <cstddef>
#include <replayssm/detail/gdn_agent.cuh>
#include <replayssm/detail/validate.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// Whether `verify_step` of `Policy` runs the split verification when `params.workspace` is set
/// (and the launch does not branch): an fp32 checkpoint (precision::fp32: no serving copy, no
/// scales; or an fp32 master with an unscaled 16-bit serving copy, precision::pair<bf16 / fp16>:
/// rows that do not fold read the copy, folding rows read the master and write both; 8-bit copies
/// keep the fused path, whose row scales the readout does not handle), the kv layout,
/// head_k_dim == head_v_dim == 128, one tile per value head (`Tile == head_v_dim`), 128 threads
/// per block, no pipeline, BufferLen <= 32.
template <class Policy>
struct gdn_verify_split_supported {
  using rule = typename Policy::rule;
  static constexpr bool value =
      std::is_same<typename Policy::master_type, float>::value &&
      (!Policy::has_serving_copy ||
       (sizeof(typename Policy::serving_type) == 2 && !Policy::scaled_copy)) &&
      !Policy::scaled_state && rule::layout == state_layout::kv && rule::head_k_dim == 128 &&
      rule::head_v_dim == 128 && Policy::tile == rule::head_v_dim && Policy::block_threads == 128 &&
      Policy::pipeline_stages < 2 && Policy::buffer_len <= 32;
};

/// Threads of a sweep block (one block per (k head, batch row), one warp per (value head, draft)
/// sweep): enough warps for the k head's sweeps at MaxDraft drafts, 128 to 512
/// (launch_gdn_verify_split; NOTES v24: 16 warps for 4 sweeps left Hv32 T = 2 4.5% slower).
constexpr int gdn_verify_sweep_threads(int sweeps) {
  return sweeps <= 4 ? 128 : sweeps <= 8 ? 256 : 512;
}

/// The sweep grid of the split verification (see the file comment): grid (num_k_heads, batch).
/// A block stages, normalises and appends its k head's rows once for the k head's value heads
/// (VH at a time), whose decays and beta it stages beside them; its warps then run the (value
/// heads, draft) sweeps, `Chains` value heads of one draft per warp (they share the draft's k
/// rows and q: one load of k_j a step for all of them, and their dot products reduced together
/// by one transposed butterfly, `reduce_chains`, that adds the same pairs as warp_sum).
template <class Policy, int MaxDraft, int Threads, int Chains = 1>
struct gdn_verify_sweep {
  using T = typename Policy::input_type;
  using params_t = gdn_params<Policy>;
  static constexpr int KD = Policy::rule::head_k_dim;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NT = Threads;
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static constexpr int NW = NT / 32;            // warps
  static constexpr int C = Chains;              // value heads a warp sweeps together
  static constexpr int VH = NW * C < 16 ? NW * C : 16;  // value heads staged at a time
  static constexpr int RPL = KD / 32;                   // a sweep's r elements per lane
  static_assert(MaxDraft >= 1 && MaxDraft <= 32 && MaxDraft <= NT && L <= 32,
                "gated_deltanet split verification: MaxDraft and BufferLen must be at most 32.");
  static_assert(C == 1 || C == 4, "gdn_verify_sweep: Chains is 1 or 4");
  static_assert(VH % C == 0, "gdn_verify_sweep: a chunk of value heads is whole warps' chains");
  static_assert(KD % 128 == 0, "gated_deltanet split verification: head_k_dim is 128");
  /// (i * div_mul) >> div_shift == i / nd with div_mul = ceil(2^20 / nd), for 1 <= nd <= 32 and
  /// the (value heads, draft) items i < (VH / C) MaxDraft <= 512 (exact while i (div_mul nd - 2^20)
  /// < 2^20): the items' split without a division a warp.
  static constexpr int div_shift = 20;

  struct shared_storage {
    alignas(16) float k[L][KD];         // the buffered steps' k, then the drafts' (normalised)
    alignas(16) float q[MaxDraft][KD];  // the drafts' q (normalised, scaled)
    float alpha[VH][L], beta[VH][L];    // value head v0 + v's expf(g) and beta (run's chunk)
    uint32_t path[MaxDraft];            // the drafts on each draft's path (bit k: draft k)
    int32_t parent[MaxDraft];           // trees: the drafts' parents (spec.parent of row b)
    int64_t slot;     // (re-read after the barriers of each further chunk of value heads)
    int n, base, nd;  // base: where draft 0 is staged (n, or 0 for a row that folds)
    int per_k, div_mul;
  };
  static_assert(sizeof(shared_storage) <= 48 * 1024,
                "gated_deltanet split verification: the sweep block stages BufferLen + MaxDraft "
                "rows of head_k_dim floats, over 48 KiB; lower BufferLen or MaxDraft.");

  /// draft_path<MaxDraft>(p.spec, b, d) (run_item.cuh), the same walk, with row b's parents
  /// staged in `parent` (entries 0..d, all it reads; `tree`: p.spec.parent, null for chains).
  static REPLAYSSM_DEVICE uint32_t staged_path(const int32_t* parent, const int32_t* tree, int d) {
    if (!tree) return d >= 31 ? ~0u : (2u << d) - 1u;
    uint32_t mask = 0;
    for (int k = d; k >= 0;) {
      mask |= 1u << k;
      const int up = parent[k];
      k = up < k ? up : -1;
    }
    return mask;
  }

  /// The dot products d[c] of C chains summed over the warp, every lane getting each total: for
  /// C = 1 warp_sum; for C = 4 a transposed butterfly that adds, chain by chain, the same two
  /// partial sums at each level as warp_sum (xor 16, 8, 4, 2, 1), so that every total is
  /// warp_sum's float: at xor 16 a lane keeps the two chains of its half and sends the other two,
  /// at xor 8 it keeps one of its two and sends the other, then the usual levels on the one kept
  /// sum; the totals are gathered from the lanes that hold them (chain c: lanes 8c .. 8c + 7).
  /// Call from all lanes of one warp.
  static REPLAYSSM_DEVICE void reduce_chains(float (&d)[C], int lane) {
    if constexpr (C == 1) {
      d[0] = warp_sum(d[0]);
    } else {
      const bool b4 = lane & 16, b3 = lane & 8;
      float k0 = b4 ? d[2] : d[0], k1 = b4 ? d[3] : d[1];
      k0 += __shfl_xor_sync(0xffffffffu, b4 ? d[0] : d[2], 16);
      k1 += __shfl_xor_sync(0xffffffffu, b4 ? d[1] : d[3], 16);
      float keep = b3 ? k1 : k0;  // chain 2 b4 + b3
      keep += __shfl_xor_sync(0xffffffffu, b3 ? k0 : k1, 8);
#pragma unroll
      for (int off = 4; off > 0; off >>= 1) keep += __shfl_xor_sync(0xffffffffu, keep, off);
#pragma unroll
      for (int c = 0; c < 4; ++c) d[c] = __shfl_sync(0xffffffffu, keep, 8 * c);
    }
  }

  /// One step j of gdn_sweep<KD> (gdn_split.cuh) for C chains (value heads v .. v + C - 1 of the
  /// staged chunk) at once, the same floating-point operations in the same order per chain and
  /// lane: d = fmaf(k_j[lane + 32 e], r[e], d) for e = 0, 1, ..; the warp sum (reduce_chains: the
  /// same float); bc = beta_j * d; r[e] = alpha_j * fmaf(-bc, k_j[lane + 32 e], r[e]) with alpha_j
  /// = expf(g_j) (staged: the same float). c_j is kept by lane j (`cl`), not stored.
  static REPLAYSSM_DEVICE void sweep_step(const shared_storage& s, const float* kj, int v,
                                          float (&r)[C][RPL], float (&cl)[C], int lane, int j) {
    float kv[RPL], d[C];
#pragma unroll
    for (int e = 0; e < RPL; ++e) kv[e] = kj[lane + 32 * e];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      d[c] = 0.f;
#pragma unroll
      for (int e = 0; e < RPL; ++e) d[c] = fmaf(kv[e], r[c][e], d[c]);
    }
    reduce_chains(d, lane);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float bc = s.beta[v + c][j] * d[c], alpha = s.alpha[v + c][j];
#pragma unroll
      for (int e = 0; e < RPL; ++e) r[c][e] = alpha * fmaf(-bc, kv[e], r[c][e]);
      if (lane == j) cl[c] = bc;
    }
  }

  /// gdn_sweep<KD>(k, g, beta, q, r_out, c, m, n0, mask) of gdn_split.cuh (what the fused path
  /// runs) for the C value heads v .. v + C - 1 of the staged chunk and one draft (its q, its
  /// path), the same arithmetic step by step (sweep_step), in a form with less per-step work: the
  /// drafts' steps j >= n0 tested against `mask` only where it skips some (trees; chains and the
  /// buffered steps run untested), alpha_j = expf(g_j) staged once per (value head, step) instead
  /// of once per draft, and c_j held by lane j (m <= L <= 32) and stored once at the end (c_j = 0
  /// off the path, as gdn_sweep writes it; positions from m on not written). Chain c's r and c go
  /// to `ws + c * ws_stride` (r: KD floats, then c).
  static REPLAYSSM_DEVICE void sweep(const shared_storage& s, int v, const float* q, float* ws,
                                     int64_t ws_stride, int m, int n0, uint32_t mask) {
    const int lane = threadIdx.x & 31;
    float r[C][RPL], cl[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      cl[c] = 0.f;
#pragma unroll
      for (int e = 0; e < RPL; ++e) r[c][e] = q[lane + 32 * e];
    }
    int j = m - 1;
    const int nt = m - n0;  // the drafts' steps (<= 32)
    const uint32_t all = nt >= 32 ? ~0u : nt > 0 ? (1u << nt) - 1u : 0u;
    if ((mask & all) != all)  // a path that skips drafts (trees): its steps tested one by one
      for (; j >= n0; --j)
        if ((mask >> (j - n0)) & 1u) sweep_step(s, s.k[j], v, r, cl, lane, j);
    for (; j >= 0; --j) sweep_step(s, s.k[j], v, r, cl, lane, j);  // (chains: all)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float* out = ws + c * ws_stride;
#pragma unroll
      for (int e = 0; e < RPL; ++e) out[lane + 32 * e] = r[c][e];
      if (lane < m) out[KD + lane] = cl[c];
    }
  }

  /// Row b, k head hk (its value heads hk per_k .. hk per_k + per_k - 1). Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, int b, int hk) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int64_t slot = p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
    if (slot == p.rows.null_slot) return;  // (exit = implicit trigger)
    if (threadIdx.x == 0) {                // n and nd exactly as process_verify reads them
      int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
      const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
      if (nd > L - n) nd = L - n;  // only a corrupt cursor gets here
      s.n = n;
      s.slot = slot;
      // A row that folds (n >= K): the readout grid folds its window into the checkpoint first
      // and reads its drafts against the new one, so their sweeps run over the drafts alone,
      // staged from step 0 (process_verify's after its fold).
      s.base = n >= K ? 0 : n;
      s.nd = nd;
      // The block's two integer divisions, once (not once a warp).
      s.per_k = Hv / Hk;
      s.div_mul = nd > 0 ? ((1 << div_shift) + nd - 1) / nd : 0;
    }
    __syncthreads();
    const int base = s.base, nd = s.nd, per_k = s.per_k;
    // Every cursor read of this block passed the barrier: the readout grid's folding blocks,
    // which set their row's cursor at the end, may start.
    pdl_trigger();
    const int64_t r0 = int64_t(b) * MaxDraft;
    {  // All rows requested at once: the buffered raw k (16-byte aligned, validated) with their
      // factors (a chunk's thread reads its row's), the drafts' raw q and k.
      staged_rows<NB, KD, NT, T> kq;
      strided_rows<MaxDraft, KD, NT, T> qd, kd;
      constexpr int CPR = decltype(kq)::chunks_per_row, CE = decltype(kq)::vec;
      kq.load(p.buffer.k + (slot * L * Hk + hk) * int64_t(KD), int64_t(Hk) * KD, base);
      float kscv[decltype(kq)::iters];
#pragma unroll
      for (int it = 0; it < decltype(kq)::iters; ++it) {
        const int c = threadIdx.x + it * NT;
        if (c < base * CPR) kscv[it] = p.buffer.kscale[(slot * L + c / CPR) * Hk + hk];
      }
      qd.load(p.in.q + r0 * p.in.q_batch_stride + hk * p.in.q_head_stride, p.in.q_batch_stride, nd);
      kd.load(p.in.k + r0 * p.in.k_batch_stride + hk * p.in.k_head_stride, p.in.k_batch_stride, nd);
      int32_t par = -1;
      const int j = threadIdx.x;  // (warp 0: draft j's parent)
      if (p.spec.parent && j < nd) par = p.spec.parent[r0 + j];
      stage_gates(s, p, slot, r0, hk * per_k, per_k < VH ? per_k : VH, base, nd);
      // The buffered rows normalised as staged: to_float(raw k) times the step's factor, the
      // product process_verify forms in place (rounded once, the same float).
#pragma unroll
      for (int it = 0; it < decltype(kq)::iters; ++it) {
        const int c = threadIdx.x + it * NT;
        if (c < base * CPR) {
          const T* e = reinterpret_cast<const T*>(&kq.v[it]);
          float* d = &s.k[c / CPR][(c % CPR) * CE];
#pragma unroll
          for (int x = 0; x < CE; ++x) d[x] = to_float(e[x]) * kscv[it];
        }
      }
      kd.store(s.k + base, nd);
      qd.store(s.q, nd);
      if (j < nd) s.parent[j] = par;
    }
    __syncthreads();
    // The drafts' paths (draft_path's walk over the staged parents: one memory latency for the
    // tree, not one per level). Read by the sweeps, after the barrier below.
    if (int(threadIdx.x) < nd)
      s.path[threadIdx.x] = staged_path(s.parent, p.spec.parent, threadIdx.x);
    // One warp per draft: its factors (gdn_agent::draft_norms: every lane gets the same floats
    // from the butterfly sums), then its raw k and factor appended after the buffered (or folded)
    // steps at n + d (process_verify appends them from tile 0 of the k head's first value head:
    // once per (row, k head), as this block does), then its k and q normalised in place (the
    // products process_verify forms: raw k times the k factor, q times the q factor), each lane
    // on its own 4 consecutive elements.
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    {
      struct alignas(4 * sizeof(T)) raw4 {
        T x[4];
      };
      const int64_t at = (slot * L + s.n) * Hk + hk;  // (step n, k head hk)
      for (int d = warp; d < nd; d += NW) {
        float qs, ks;
        gdn_step_factors<KD>(p, s.q[d], s.k[base + d], qs, ks);
        __syncwarp();  // every lane's reads of the raw rows are done
#pragma unroll
        for (int e = 4 * lane; e < KD; e += 128) {
          float4* kp = reinterpret_cast<float4*>(&s.k[base + d][e]);
          float4* qp = reinterpret_cast<float4*>(&s.q[d][e]);
          float4 kv = *kp, qv = *qp;
          raw4 w;
          w.x[0] = from_float<T>(kv.x);
          w.x[1] = from_float<T>(kv.y);
          w.x[2] = from_float<T>(kv.z);
          w.x[3] = from_float<T>(kv.w);
          *reinterpret_cast<raw4*>(p.buffer.k + (at + d * Hk) * KD + e) = w;
          kv.x *= ks;
          kv.y *= ks;
          kv.z *= ks;
          kv.w *= ks;
          qv.x *= qs;
          qv.y *= qs;
          qv.z *= qs;
          qv.w *= qs;
          *kp = kv;
          *qp = qv;
        }
        if (lane == 0) p.buffer.kscale[at + d * Hk] = ks;
      }
    }
    __syncthreads();
    // Draft d's sweep at value head hv over the buffered steps (none after a fold) and the drafts
    // on its path: r_d and c_d straight into the workspace (the fused path's sweep(d, base + d +
    // 1, base, path[d]), the same arithmetic: sweep), one warp per (C value heads, draft); the k
    // head's value heads VH at a time.
    const int div_mul = s.div_mul;
    for (int v0 = 0; v0 < per_k; v0 += VH) {
      const int nv = per_k - v0 < VH ? per_k - v0 : VH;
      if (v0 > 0) {       // the next value heads' decays and beta (the k rows stay)
        __syncthreads();  // (s.slot read here: no 64-bit row offset live across the sweeps)
        stage_gates(s, p, s.slot, r0, hk * per_k + v0, nv, base, nd);
        __syncthreads();
      }
      for (int i = warp; i < nv / C * nd; i += NW) {
        const int vg = (i * div_mul) >> div_shift, d = i - vg * nd, v = vg * C;
        const int hv = hk * per_k + v0 + v;
        float* ws = p.workspace + ((int64_t(b) * Hv + hv) * MaxDraft + d) * (KD + L);
        sweep(s, v, s.q[d], ws, int64_t(MaxDraft) * (KD + L), base + d + 1, base, s.path[d]);
      }
    }
  }

  /// expf(g) and beta of value heads hv0 .. hv0 + nv - 1 (nv <= VH) at steps j < base + nd into
  /// s.alpha[v], s.beta[v]: the buffered steps' from the buffer (j < base), then the drafts' from
  /// the inputs; warp v % NW, lane j. expf(g_j) is the sweep's alpha_j (gdn_sweep computes it per
  /// step, the same float). No barrier.
  static REPLAYSSM_DEVICE void stage_gates(shared_storage& s, const params_t& p, int64_t slot,
                                           int64_t r0, int hv0, int nv, int base, int nd) {
    const int j = threadIdx.x & 31;
    if (j >= base + nd) return;
    const int Hv = p.num_v_heads;
    for (int v = threadIdx.x >> 5; v < nv; v += NW) {
      const int hv = hv0 + v;
      float g, beta;
      if (j < base) {
        g = p.buffer.g[(slot * L + j) * Hv + hv];
        beta = p.buffer.beta[(slot * L + j) * Hv + hv];
      } else {
        g = p.in.g[(r0 + j - base) * p.in.g_batch_stride + hv];
        beta = p.in.beta[(r0 + j - base) * p.in.beta_batch_stride + hv];
      }
      s.alpha[v][j] = expf(g);
      s.beta[v][j] = beta;
    }
  }
};

template <class Policy, int MaxDraft, int Threads, int Chains>
REPLAYSSM_KERNEL void __launch_bounds__(Threads)
    gdn_verify_sweep_kernel(const gdn_params<Policy> p) {
  using sweep = gdn_verify_sweep<Policy, MaxDraft, Threads, Chains>;
  __shared__ typename sweep::shared_storage smem;
  sweep::run(smem, p, int(blockIdx.y), int(blockIdx.x));
}

/// The readout grid of the split verification (see the file comment): grid (num_v_heads,
/// batch), Policy::block_threads (128) threads, the fused verify agent's shared storage.
template <class Policy, int MaxDraft>
struct gdn_verify_readout {
  using fused = gdn_agent<Policy, op::verify, MaxDraft>;
  using T = typename Policy::input_type;
  using params_t = gdn_params<Policy>;
  using shared_storage = typename fused::shared_storage;
  using tile_t = typename fused::tile_t;
  static constexpr int KD = fused::KD, VD = fused::VD, VT = fused::VT, NT = fused::NT;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static_assert(gdn_verify_split_supported<Policy>::value && VT == VD && NT == 128,
                "gated_deltanet split verification: unsupported policy (see "
                "gdn_verify_split_supported)");
  /// A 16-bit serving copy (precision::pair<bf16 / fp16>): the outputs of a row that does not
  /// fold read it; a fold reads the fp32 master and writes both.
  static constexpr bool pair = Policy::has_serving_copy;
  using S = typename Policy::serving_type;  ///< (pairs: the copy's type)

  /// A pair's serving copy tile as bits, from its request to the staging barrier: fragment r, the
  /// four values at the tile's own (row(r), col()), as one 8-byte load (a warp's 32 loads of a
  /// row fill its 256 bytes: whole sectors), 64 registers instead of the widened tile's 128 while
  /// the rest is requested and staged. Widened, they are exactly the registers tile_t::load of the
  /// copy (load_state4<S>, run_item's load_copy) gives.
  struct copy_bits {
    uint2 w[tile_t::frags];
    /// `base`: element (0, 0) of the tile in the copy (16-bit, 8-byte aligned: the launch
    /// validates 4-element alignment and strides).
    REPLAYSSM_DEVICE void load(const S* base, int64_t row_stride) {
#pragma unroll
      for (int r = 0; r < tile_t::frags; ++r)
        w[r] = __ldcs(
            reinterpret_cast<const uint2*>(base + tile_t::row(r) * row_stride + tile_t::col()));
    }
    /// The values as floats into `tile` (frag_get: a shift or a mask per bf16 value, a
    /// conversion per fp16 one; exact, the same floats as to_float).
    REPLAYSSM_DEVICE void widen(tile_t& tile) const {
#pragma unroll
      for (int r = 0; r < tile_t::frags; ++r) {
        const uint4 f = make_uint4(w[r].x, w[r].y, 0u, 0u);
        tile.v[r] =
            make_float4(frag_get<S>(f, 0), frag_get<S>(f, 1), frag_get<S>(f, 2), frag_get<S>(f, 3));
      }
    }
  };
  /// Nothing without a copy (the fp32 readout keeps its code).
  struct no_copy_bits {};
  /// r_d into s.q[d] and c_d[j] (j <= base + d) into s.c[d], as the fused sweep leaves them
  /// there (`base`: n, or 0 after a fold): asynchronous 4-byte copies from the workspace (the
  /// sweep grid's words, unchanged), all in flight at once. Call after pdl_wait;
  /// cp_async_wait_all and a barrier before use.
  static REPLAYSSM_DEVICE void copy_workspace(shared_storage& s, const params_t& p, int b, int hv,
                                              int base, int nd) {
    const float* ws = p.workspace + (int64_t(b) * p.num_v_heads + hv) * MaxDraft * (KD + L);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd * KD; i += NT)
      cp_async4(&s.q[i / KD][i % KD], ws + (i / KD) * (KD + L) + i % KD);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd * L; i += NT) {
      const int d = i / L, j = i % L;
      if (j <= base + d) {
        if constexpr (fast_readout)
          cp_async4(&s.o[j * CW + d], ws + d * (KD + L) + KD + j);  // cT[j][d]
        else
          cp_async4(&s.c[d][j], ws + d * (KD + L) + KD + j);
      }
    }
  }

  /// The readout of up to 8 drafts with one barrier per draft and the c-terms of all drafts in
  /// one pass over j (readout_drafts; bench/experiments/gdn_readout_census_s27.md, _s28.md):
  /// c_d[j] staged transposed from s.o on, CW floats a step (cT[j][d]); beyond 4 drafts also in
  /// s.kh and s.u, which follow s.o in the fused agent's storage and are free in the readout.
  static constexpr int CW = MaxDraft <= 4 ? 4 : 8;
  static constexpr bool o_kh_u_contiguous =
      offsetof(shared_storage, kh) == offsetof(shared_storage, o) + sizeof(float) * VT &&
      offsetof(shared_storage, u) == offsetof(shared_storage, kh) + sizeof(float) * VT;
  static constexpr bool fast_readout = MaxDraft <= 8 && tile_t::lanes_per_row == 32 && NT == VT &&
                                       CW * L <= (o_kh_u_contiguous ? 3 : 1) * VT;
  /// Resident blocks per SM the registers must allow: 3 (168 registers) for the fast readout, up
  /// to 4 drafts as the fused verification; at MaxDraft 8 the fast readout takes 168 registers
  /// under the bound, 0 spills (bench/experiments/gdn_readout_census_s28.md: 168 unbounded too,
  /// but with worse code). Above 8 drafts unbounded (as the fused verification), except for
  /// pairs, held to 3 at every MaxDraft: unbounded, their MaxDraft 8 readouts took 255 registers
  /// (2 blocks per SM; ptxas, bf16 and fp32 inputs), under the bound 168 with no spill.
  static constexpr int min_blocks_per_sm =
      fast_readout || Policy::has_serving_copy ? 3 : fused::min_blocks_per_sm;
  /// Free floats in s.k once the readout starts (16-bit inputs: its upper half; fp32 inputs: all).
  static REPLAYSSM_DEVICE float* spare(shared_storage& s) {
    return &s.k[0][0] + (L * KD - spare_floats);
  }
  static constexpr int spare_floats = std::is_same<T, float>::value ? L * KD : L * KD / 2;
  /// A row with MaxDraft drafts forms their warp partials in one pass over the tile for each 4
  /// drafts (readout_drafts; gdn_readout_census_s28), draft d's in part_of(d): in s.v where no
  /// rows are read from it (16-bit inputs, a row that does not fold), else in s.k, the last in
  /// s.scratch where they do not all fit.
  static constexpr int part_room = L * (VT < KD ? VT : KD);
  static constexpr bool one_pass = fast_readout && MaxDraft <= 4 && tile_t::rows4 &&
                                   (MaxDraft - 1) * tile_t::scratch_floats <= part_room;
  template <class V>
  static REPLAYSSM_DEVICE float* part_of(shared_storage& s, int d) {
    float* const room =
        std::is_same<V, T>::value && !std::is_same<T, float>::value ? &s.v[0][0] : &s.k[0][0];
    return (d + 1) * tile_t::scratch_floats <= part_room ? room + d * tile_t::scratch_floats
                                                         : s.scratch;
  }

  /// The fold's partial sums (contract_cols' two halves of 2 x 512 floats, alternating steps, so a
  /// step needs one barrier): the last row of s.q, s.o, s.kh, s.u, then s.scratch, which lie
  /// back to back in the fused agent's storage (asserted) and are free while a row folds (s.q and
  /// s.o are written only after the barrier that ends the fold). So the readout's shared memory
  /// stays the fused verification's (the scaled fold of decode doubles s.scratch instead).
  static REPLAYSSM_DEVICE float* fold_scratch(shared_storage& s) { return &s.q[MaxDraft - 1][0]; }
  static constexpr bool fold_scratch_contiguous =
      offsetof(shared_storage, o) == offsetof(shared_storage, q) + sizeof(float) * MaxDraft * KD &&
      offsetof(shared_storage, kh) == offsetof(shared_storage, o) + sizeof(float) * VT &&
      offsetof(shared_storage, u) == offsetof(shared_storage, kh) + sizeof(float) * VT &&
      offsetof(shared_storage, scratch) == offsetof(shared_storage, u) + sizeof(float) * VT;

  /// Step j of the window fold, with exactly gdn_agent::direct_step's arithmetic (h^T k by the
  /// tile's reduction, summed over the warps in order; u_j = beta_j (v_j - alpha_j h^T k); then
  /// h = alpha_j h + k_j u_j^T, per element fmaf(alpha_j, h, u * k)), so the folded checkpoint
  /// is bit-identical to process_verify's; but each thread forms u for its own four columns
  /// (contract_cols: the same sums in the same order as contract), so a step has one barrier
  /// instead of three and no shared round trip for h^T k and u. `wv`: the window's v rows as
  /// staged (type T).
  static REPLAYSSM_DEVICE void fold_step(shared_storage& s, tile_t& tile, const T (*wv)[VT],
                                         int j) {
    static_assert(fold_scratch_contiguous && tile_t::scratch_floats == 4 * VT && KD == VT,
                  "fold_step: the fold's scratch halves (fold_scratch) are 4 rows of 128 floats");
    const float alpha = expf(s.g[j]);
    const float4 kh = tile.contract_cols(s.k[j], fold_scratch(s), j & 1);  // h^T k, my columns
    const int c = tile_t::col();
    const float bj = s.beta[j];
    const float4 vj = value4_of<T>(&wv[j][c]);
    const float4 u = make_float4(bj * (vj.x - alpha * kh.x), bj * (vj.y - alpha * kh.y),
                                 bj * (vj.z - alpha * kh.z), bj * (vj.w - alpha * kh.w));
    tile.rank1_cols(alpha, s.k[j], u);  // rank1(alpha, k_j, u, 1)
  }

  /// Pairs: a folded tile stored as store_checkpoint stores it, the master (`master`, fp32, as
  /// tile_t::store) and the copy (`copy`: store_state4<S>, from_float per element, round to
  /// nearest, 8-byte evict-first stores: the fused store_copy's bits), fragment by fragment: each
  /// fragment's conversion is stored as soon as it is formed. (Stored a whole tile after the
  /// other, ptxas formed the copy's values ahead and the fp32-input MaxDraft 8 readout spilled 332
  /// bytes; after the drafts' readout MaxDraft 2 spilled 4.) Nothing in the launch reads either.
  static REPLAYSSM_DEVICE void store_master_and_copy(const tile_t& tile, float* master,
                                                     int64_t master_stride, S* copy,
                                                     int64_t copy_stride) {
    static_assert(tile_t::offset_rows, "fragment r lies row_offset(r) rows below fragment 0");
    float* const m = master + tile_t::row(0) * master_stride + tile_t::col();
    S* const c = copy + tile_t::row(0) * copy_stride + tile_t::col();
#pragma unroll
    for (int r = 0; r < tile_t::frags; ++r) {
      store_state4(m + tile_t::row_offset(r) * master_stride, tile.v[r]);
      store_state4(c + tile_t::row_offset(r) * copy_stride, tile.v[r]);
    }
  }

  /// The fused path's readout of the drafts against `tile`, then their appends (as
  /// process_verify), for both kinds of row: draft d's output is r_d (s.q[d]) contracted with the
  /// tile, then o = fmaf(c_d[j], v_j[v], o) for j = 0 .. base + d in order (c_d in s.c[d]), with
  /// v_j[v] = to_float(vr[n - base + j][v]) (what the fused path stages in s.v: the same floats);
  /// then draft d's v (vr[n + d], through float and back), g and beta (s.g and s.beta at n + d)
  /// appended at buffer step n + d. `base`: the steps c_d weights before the drafts (n; 0 after a
  /// fold, where c_d[j] weights draft j); `vr`: rows with draft d's v at n + d (after a fold s.v,
  /// else the buffered steps' and the drafts' rows as given).
  template <class V>
  static REPLAYSSM_DEVICE void readout_drafts(shared_storage& s, const params_t& p, tile_t& tile,
                                              int Hv, int hv, int64_t slot, int64_t r0, int n,
                                              int base, int nd, const V (*vr)[VT]) {
    // Up to 4 drafts, this thread's output element is addressed once and stepped by a row per
    // draft: formed per draft, ptxas re-read b (S2UR), the row stride (LDC) and tid (S2R)
    // inside the draft loop and formed the address after the c-term sum, on each draft's path
    // to its barrier (since the fold moved into fold_row: bench/experiments/
    // gdn_nofold_restore.md). At MaxDraft 8 the per-draft loop's stepped pointer took 175
    // registers (2 blocks per SM), so that loop (now above 8 drafts) keeps the per-draft form;
    // the fast readout steps it after every contraction (the tile's registers free).
    constexpr bool step_out = MaxDraft <= 4;
    T* out = p.in.out + r0 * p.in.out_batch_stride + hv * p.in.out_head_stride + threadIdx.x;
    if constexpr (fast_readout) {
      // Up to 8 drafts (gdn_readout_census_s27, _s28): each draft's contraction is the tile's
      // warp partials summed over the warps in order (contract's arithmetic); a row with MaxDraft
      // drafts forms them in one pass over the tile for each 4 drafts and sums them after one
      // barrier, other rows draft by draft with one barrier each, the partials double-buffered
      // (s.scratch, then spare s.k); then every draft's c-terms in one pass over j, c_d[j] staged
      // transposed in s.o (copy_workspace), CW accumulators: for each output the same FMAs in the
      // same order as the per-draft loop below.
      static_assert(spare_floats >= tile_t::scratch_floats,
                    "gdn_verify_readout: the spare staging cannot hold the partial sums");
      const int t = threadIdx.x;
      float* const half1 = spare(s);
      float o[CW];
#pragma unroll
      for (int d = 0; d < CW; ++d) o[d] = 0.f;
      if (one_pass && nd == MaxDraft) {
        // Each 4 drafts' warp partials in one pass over the tile's registers (a register read
        // once for them; per draft warp_partial's FMAs in its order), each draft's in its own
        // part_of(d); one barrier for all, then each draft's sum over the warps in order.
        constexpr int G = MaxDraft < 4 ? MaxDraft : 4;
        const float4* q4 = reinterpret_cast<const float4*>(&s.q[0][tile_t::row(0)]);
#pragma unroll
        for (int g = 0; g < MaxDraft; g += G) {
          float4 acc[G];
#pragma unroll
          for (int d = 0; d < G; ++d) acc[d] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
          for (int r = 0; r < tile_t::frags; r += 4) {  // (warp_partial's for_rows, rows4)
#pragma unroll
            for (int d = 0; d < G; ++d) {
              const float4 e = q4[(g + d) * (KD / 4) + r / 4];
              acc[d] = fma4(e.x, tile.v[r], acc[d]);
              acc[d] = fma4(e.y, tile.v[r + 1], acc[d]);
              acc[d] = fma4(e.z, tile.v[r + 2], acc[d]);
              acc[d] = fma4(e.w, tile.v[r + 3], acc[d]);
            }
          }
#pragma unroll
          for (int d = 0; d < G; ++d)
            *reinterpret_cast<float4*>(part_of<V>(s, g + d) + (t >> 5) * VT + tile_t::col()) =
                acc[d];
        }
        __syncthreads();
#pragma unroll
        for (int d = 0; d < MaxDraft; ++d) {
          const float* part = part_of<V>(s, d);
          float sum = 0.f;
#pragma unroll
          for (int w = 0; w < tile_t::warps; ++w) sum += part[w * VT + t];
          o[d] = sum;
        }
      } else {
#pragma unroll
        for (int d = 0; d < MaxDraft; ++d) {
          if (d < nd) {
            float* part = (d & 1) ? half1 : s.scratch;
            const float4 acc = tile.warp_partial(s.q[d]);
            *reinterpret_cast<float4*>(part + (t >> 5) * VT + tile_t::col()) = acc;
            __syncthreads();  // (the buffer is rewritten two drafts later, after another barrier)
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < tile_t::warps; ++w) sum += part[w * VT + t];
            o[d] = sum;
          }
        }
      }
      constexpr int CQ = CW / 4;  // float4s of cT a step
      const float4* cT = reinterpret_cast<const float4*>(s.o);
      const V* vcol = &vr[n - base][t];
#pragma unroll 4
      for (int j = 0; j <= base; ++j) {  // the steps every draft's path takes
        const float vj = to_float(vcol[j * VT]);
#pragma unroll
        for (int q = 0; q < CQ; ++q) {
          const float4 c = cT[j * CQ + q];
          o[4 * q] = fmaf(c.x, vj, o[4 * q]);
          o[4 * q + 1] = fmaf(c.y, vj, o[4 * q + 1]);
          o[4 * q + 2] = fmaf(c.z, vj, o[4 * q + 2]);
          o[4 * q + 3] = fmaf(c.w, vj, o[4 * q + 3]);
        }
      }
      // Draft k's step (k > 0): on the paths of drafts k and later. Draft k's v (that float, for
      // k = 0 read again) appended at buffer step n + k, the address stepped by a row.
      T* bv = p.buffer.v + ((slot * L + n) * Hv + hv) * int64_t(VD) + t;
      const int64_t vstep = int64_t(Hv) * VD;
#pragma unroll
      for (int k = 0; k < MaxDraft; ++k) {
        if (k < nd) {
          const float vj = to_float(vcol[(base + k) * VT]);
#pragma unroll
          for (int q = k / 4; q < CQ && k > 0; ++q) {
            const float4 c4 = cT[(base + k) * CQ + q];
            const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int d = 4 * q + e;
              if (d >= k && d < MaxDraft) o[d] = fmaf(c[e], vj, o[d]);
            }
          }
          *bv = from_float<T>(vj);
          bv += vstep;
        }
      }
#pragma unroll
      for (int d = 0; d < MaxDraft; ++d) {
        if (d < nd) *out = from_float<T>(o[d]);
        out += p.in.out_batch_stride;
      }
    } else {
      for (int d = 0; d < nd; ++d) {
        tile.contract(s.q[d], s.o, s.scratch);  // (ends with a barrier)
        if (threadIdx.x < VT) {
          float o = s.o[threadIdx.x];
          for (int j = 0; j <= base + d; ++j)
            o = fmaf(s.c[d][j], to_float(vr[n - base + j][threadIdx.x]), o);
          if constexpr (step_out) {
            *out = from_float<T>(o);
          } else {
            const int64_t r = r0 + d;
            p.in.out[r * p.in.out_batch_stride + hv * p.in.out_head_stride + threadIdx.x] =
                from_float<T>(o);
          }
        }
        if constexpr (step_out) out += p.in.out_batch_stride;
        __syncthreads();  // the next draft reuses o
      }
    }
    // Append the drafts' v, g and beta after the buffered (or folded) steps.
    if constexpr (fast_readout) {
      // (the drafts' v: with their c-terms, above)
    } else if constexpr (NT == VT) {
      // thread t: column t of each draft row, the address stepped by a row
      T* bv = p.buffer.v + ((slot * L + n) * Hv + hv) * int64_t(VD) + threadIdx.x;
      const int64_t vstep = int64_t(Hv) * VD;
      for (int d = 0; d < nd; ++d) {
        *bv = from_float<T>(to_float(vr[n + d][threadIdx.x]));
        bv += vstep;
      }
    } else {
      for (int i = threadIdx.x; i < nd * VT; i += NT)
        p.buffer.v[((slot * L + n + i / VT) * Hv + hv) * VD + i % VT] =
            from_float<T>(to_float(vr[n + i / VT][i % VT]));
    }
    if (int(threadIdx.x) < nd) {
      p.buffer.g[(slot * L + n + threadIdx.x) * Hv + hv] = s.g[n + threadIdx.x];
      p.buffer.beta[(slot * L + n + threadIdx.x) * Hv + hv] = s.beta[n + threadIdx.x];
    }
  }

  /// A row that folds (n >= K buffered steps), with the state tile requested (pairs: the fp32
  /// master): what process_verify does for it, bit for bit (checkpoint, outputs, buffer, cursor;
  /// pairs: the serving copy too), in the readout's structure: every input requested at once
  /// (cp.async into shared memory, no registers), the window folded in registers (fold_step),
  /// the checkpoint stored (pairs: master, then copy), then the drafts read against it as a
  /// non-folding row at base 0 (their r_d and c_d from the sweep grid, which swept them alone for
  /// this row), and the row's last block sets folded_cursor(n). The drafts' k and factors were
  /// appended by the sweep grid. `nd`: num_draft[b] as read.
  static REPLAYSSM_DEVICE void fold_row(shared_storage& s, const params_t& p, int b, int hv,
                                        int64_t slot, int n, int nd, tile_t& tile) {
    const int Hk = p.num_k_heads, Hv = p.num_v_heads;
    const int hk = hv / (Hv / Hk);
    nd = draft_count<MaxDraft>(nd);
    if (nd > L - n) nd = L - n;  // only a corrupt cursor gets here: stay inside the buffer
    const int64_t r0 = int64_t(b) * MaxDraft;
    // Staging: the window's v rows j < n as given (type T) in `wv`, its raw k rows in `wk`; the
    // drafts' v as floats in s.v[n + d] (where process_verify appends them from); g and beta of
    // the window at j < n and of the drafts at n + d; the window's k factors in s.ksc. fp32
    // inputs: wv = s.v, wk = s.k (normalised in place). 16-bit inputs: both in the storage of
    // s.v below row n (v rows, then k rows: 2 n rows of T end where s.v[n] begins).
    using row_t = T[VT];
    static_assert(KD == VT, "the window's k and v rows share a row type");
    static_assert(std::is_same<T, float>::value || sizeof(s.v) >= 2 * L * sizeof(row_t),
                  "16-bit window rows fit below the drafts' v rows");
    row_t* wv;
    row_t* wk;
    if constexpr (std::is_same<T, float>::value) {
      wv = s.v;
      wk = s.k;
    } else {
      wv = reinterpret_cast<row_t*>(&s.v[0][0]);
      wk = wv + n;
    }
    {
      constexpr int E = 16 / sizeof(T), C = VT / E;  // elements of a 16-byte chunk, chunks a row
      static_assert(VT % E == 0, "the rows are whole 16-byte chunks");
      const T* vbuf = p.buffer.v + (slot * L * Hv + hv) * int64_t(VD);  // (16-byte aligned)
      const T* kbuf = p.buffer.k + (slot * L * Hk + hk) * int64_t(KD);
#pragma unroll 1  // (issue only: nothing waits in between)
      for (int c = threadIdx.x; c < n * C; c += NT) {
        const int j = c / C, e = (c % C) * E;
        cp_async16(&wv[j][e], vbuf + j * (int64_t(Hv) * VD) + e);
        cp_async16(&wk[j][e], kbuf + j * (int64_t(Hk) * KD) + e);
      }
    }
    if (int(threadIdx.x) < n) {
      const int j = threadIdx.x;
      cp_async4(&s.g[j], p.buffer.g + (slot * L + j) * Hv + hv);
      cp_async4(&s.beta[j], p.buffer.beta + (slot * L + j) * Hv + hv);
      cp_async4(&s.ksc[j], p.buffer.kscale + (slot * L + j) * Hk + hk);
    }
#pragma unroll 1
    for (int i = threadIdx.x; i < nd; i += NT) {
      cp_async4(&s.g[n + i], p.in.g + (r0 + i) * p.in.g_batch_stride + hv);
      cp_async4(&s.beta[n + i], p.in.beta + (r0 + i) * p.in.beta_batch_stride + hv);
    }
    const T* vin = p.in.v + r0 * p.in.v_batch_stride + hv * p.in.v_head_stride;
    if constexpr (std::is_same<T, float>::value) {
#pragma unroll 1
      for (int i = threadIdx.x; i < nd * VT; i += NT)
        cp_async4(&s.v[n + i / VT][i % VT], vin + (i / VT) * p.in.v_batch_stride + i % VT);
      cp_async_wait_all();
    } else {  // (16-bit rows at any alignment: through registers, as the non-folding path)
      strided_rows<MaxDraft, VT, NT, T> vd;
      vd.load(vin, p.in.v_batch_stride, nd);
      cp_async_wait_all();
      vd.store(s.v + n, nd);
    }
    __syncthreads();
    // The window's k normalised: process_verify stages to_float(raw k) and multiplies it by the
    // factor in place (the same product, rounded once).
    for (int i = threadIdx.x; i < n * KD; i += NT)
      s.k[i / KD][i % KD] = to_float(wk[i / KD][i % KD]) * s.ksc[i / KD];
    __syncthreads();
#pragma unroll 1
    for (int j = 0; j < n; ++j) fold_step(s, tile, wv, j);
    __syncthreads();  // every step's partial sums read before s.q, s.o and s.scratch are reused
    {  // The checkpoint, at an address the compiler cannot reuse from the tile's load: otherwise
      // ptxas keeps the load's 64-bit addresses live across the fold and spills them ahead of the
      // branch, on the non-folding path too (48-56 B at MaxDraft 2 and 4, bf16 inputs).
      float* ckpt = fused::tile_ptr(p.state, slot, hv, 0);
      asm volatile("" : "+l"(ckpt));
      if constexpr (pair) {  // master and copy (the copy's address hidden the same way)
        S* copy = fused::tile_ptr(p.serving, slot, hv, 0);
        asm volatile("" : "+l"(copy));
        store_master_and_copy(tile, ckpt, p.state.row_stride, copy, p.serving.row_stride);
      } else {
        tile.store(ckpt, p.state.row_stride);
      }
    }
    // The drafts at base 0: r_d and c_d (j <= d) from the workspace, then the fused path's own
    // readout against the folded tile, v_j of draft j in s.v[n + j].
    pdl_wait();  // the sweep grid has completed and its writes are visible
    copy_workspace(s, p, b, hv, 0, nd);
    cp_async_wait_all();
    __syncthreads();
    readout_drafts(s, p, tile, Hv, hv, slot, r0, n, 0, nd, s.v);
    // The row's last block to arrive sets the folded cursor (after every block of the row, and
    // of the sweep grid, read the old one).
    arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot,
                          uint32_t(Hv) * fused::tiles_per_head, folded_cursor(n));
  }

  /// Row b, value head hv. Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, int b, int hv) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    // The state tile first, as run_item requests it (fp32 checkpoint, not branching: the master
    // at the row's own slot; pairs: the serving copy, what the outputs of a row that does not fold
    // read, as bits), before the cursor read it does not depend on.
    tile_t tile;
    [[maybe_unused]] std::conditional_t<pair, copy_bits, no_copy_bits> bits;
    if constexpr (pair)
      bits.load(fused::tile_ptr(p.serving, slot, hv, 0), p.serving.row_stride);
    else
      tile.load(fused::tile_ptr(p.state, slot, hv, 0), p.state.row_stride);
    const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
    // The draft count, for both paths (read-only: __ldg; ptxas requests it with the tile).
    int nd = __ldg(p.spec.num_draft + b);
    if (n >= K) {  // a row that folds: process_verify's results in the readout's structure
      // Pairs: the fold reads the master (the fused path's reload_master; the copy's bits go
      // unused, as its load_copy's values), requested before fold_row's staging, so that the
      // two are in flight together.
      if constexpr (pair) tile.load(fused::tile_ptr(p.state, slot, hv, 0), p.state.row_stride);
      fold_row(s, p, b, hv, slot, n, nd, tile);
      return;
    }
    const int Hv = p.num_v_heads;
    nd = draft_count<MaxDraft>(nd);
    if (nd > L - n) nd = L - n;  // (as process_verify; not reached for n < K <= L - 2 MaxDraft)
    const int64_t r0 = int64_t(b) * MaxDraft;
    // Staged into shared memory with every request in flight at once (one memory latency, not
    // one per row; cp.async holds no register, and the registers around the 128-register tile
    // are few): the v rows of the buffered steps and the drafts (this block's columns: the whole
    // head) as given (type T, in `vr`: s.v for fp32 inputs, else the storage of s.k, which this
    // path does not use), the drafts' g and beta (for the appends), all requested before the
    // wait; after it, r_d and c_d from the workspace. Only the drafts' 16-bit v rows (any
    // alignment: no cp.async) pass through registers.
    using row_t = T[VT];
    static_assert(sizeof(s.k) >= sizeof(row_t) * L, "the v rows fit in s.k");
    row_t* vr;
    if constexpr (std::is_same<T, float>::value)
      vr = s.v;
    else
      vr = reinterpret_cast<row_t*>(&s.k[0][0]);
#pragma unroll 1
    for (int i = threadIdx.x; i < nd; i += NT) {
      cp_async4(&s.g[n + i], p.in.g + (r0 + i) * p.in.g_batch_stride + hv);
      cp_async4(&s.beta[n + i], p.in.beta + (r0 + i) * p.in.beta_batch_stride + hv);
    }
    {
      constexpr int E = 16 / sizeof(T), C = VT / E;  // elements of a 16-byte chunk, chunks a row
      static_assert(VT % E == 0, "the v rows are whole 16-byte chunks");
      const T* vbuf = p.buffer.v + (slot * L * Hv + hv) * int64_t(VD);  // (16-byte aligned)
#pragma unroll 1  // (issue only: nothing waits in between)
      for (int c = threadIdx.x; c < n * C; c += NT)
        cp_async16(&vr[c / C][(c % C) * E], vbuf + (c / C) * (int64_t(Hv) * VD) + (c % C) * E);
    }
    const T* vin = p.in.v + r0 * p.in.v_batch_stride + hv * p.in.v_head_stride;
    if constexpr (std::is_same<T, float>::value) {
#pragma unroll 1
      for (int i = threadIdx.x; i < nd * VT; i += NT)
        cp_async4(&vr[n + i / VT][i % VT], vin + (i / VT) * p.in.v_batch_stride + i % VT);
      pdl_wait();  // the sweep grid has completed and its writes are visible
      copy_workspace(s, p, b, hv, n, nd);
    } else {
      strided_rows<MaxDraft, VT, NT, T> vd;
      vd.load(vin, p.in.v_batch_stride, nd);
      pdl_wait();  // the sweep grid has completed and its writes are visible
      copy_workspace(s, p, b, hv, n, nd);
#pragma unroll
      for (int it = 0; it < vd.iters; ++it) {
        const int i = threadIdx.x + it * NT;
        if (i < nd * VT) vr[n + i / VT][i % VT] = vd.v[it];
      }
    }
    cp_async_wait_all();
    __syncthreads();
    // Pairs: the copy's values widened only now (its 64 registers of bits, not 128, were live
    // through the staging).
    if constexpr (pair) bits.widen(tile);
    // The fused path's readout, draft by draft, with v_j[v] = to_float(vr[j][v]) (what the fused
    // path stages in s.v: the same floats, the same order), and its appends (v through float and
    // back, exactly as the fused path).
    readout_drafts(s, p, tile, Hv, hv, slot, r0, n, n, nd, vr);
  }
};

template <class Policy, int MaxDraft>
REPLAYSSM_KERNEL void __launch_bounds__(Policy::block_threads,
                                        gdn_verify_readout<Policy, MaxDraft>::min_blocks_per_sm)
    gdn_verify_readout_kernel(const gdn_params<Policy> p) {
  using readout = gdn_verify_readout<Policy, MaxDraft>;
  static_assert(sizeof(typename readout::shared_storage) <= 48 * 1024,
                "ReplaySSM: the verification block's staging exceeds 48 KiB of static shared "
                "memory; lower BufferLen or MaxDraft.");
  __shared__ typename readout::shared_storage smem;
  readout::run(smem, p, int(blockIdx.y), int(blockIdx.x));
}

/// The sweep grid with `Chains` value heads a warp (which divides the value heads per k head):
/// a warp per (Chains value heads, draft) up to 16 warps (gdn_verify_sweep_threads).
template <class Policy, int MaxDraft, int Chains>
void launch_gdn_verify_sweep(const gdn_params<Policy>& p, cudaStream_t stream) {
  const dim3 grid(unsigned(p.num_k_heads), unsigned(p.rows.batch));
  const int threads = gdn_verify_sweep_threads(p.num_v_heads / p.num_k_heads / Chains * MaxDraft);
  // (block sizes below MaxDraft's own are never launched: not instantiated)
  constexpr int least = gdn_verify_sweep_threads(MaxDraft);
  if constexpr (least <= 128) {
    if (threads == 128) {
      gdn_verify_sweep_kernel<Policy, MaxDraft, 128, Chains><<<grid, 128, 0, stream>>>(p);
      return;
    }
  }
  if constexpr (least <= 256) {
    if (threads == 256) {
      gdn_verify_sweep_kernel<Policy, MaxDraft, 256, Chains><<<grid, 256, 0, stream>>>(p);
      return;
    }
  }
  gdn_verify_sweep_kernel<Policy, MaxDraft, 512, Chains><<<grid, 512, 0, stream>>>(p);
}

/// The split verification for validated params (workspace checked, not branching): the sweep
/// grid, then the readout grid with programmatic stream serialization (its blocks may start, and
/// request their state, once every sweep block has read its cursor and triggered). Two stream
/// launches, no synchronisation, no allocation: capturable in a CUDA graph.
template <class Policy, int MaxDraft>
result launch_gdn_verify_split(const gdn_params<Policy>& p, cudaStream_t stream) {
  if (p.rows.batch == 0) return ok();
  // Four value heads a warp where they divide the k head's (H200, NOTES v27: Hv64 Hk16 T = 4
  // verification 380 -> 352 us; two a warp for Hv32 measured T = 4 rounds +0.7%, T = 8 -3.4%:
  // not used).
  if ((p.num_v_heads / p.num_k_heads) % 4 == 0)
    launch_gdn_verify_sweep<Policy, MaxDraft, 4>(p, stream);
  else
    launch_gdn_verify_sweep<Policy, MaxDraft, 1>(p, stream);
  if (auto r = check_launch(); !r) return r;
  return launch_dependent(gdn_verify_readout_kernel<Policy, MaxDraft>,
                          dim3(unsigned(p.num_v_heads), unsigned(p.rows.batch)),
                          Policy::block_threads, stream,
                          "gated_deltanet: the split verification's readout launch failed "
                          "(cudaLaunchKernelEx with programmatic stream serialization)",
                          p);
}

}  // namespace detail
}  // namespace replayssm
