// The stream kernel of the Gated DeltaNet split replay step (decode with `params.workspace`), for
// the policies `gdn_stream_supported` accepts; the others keep the split item kernel (gdn_agent
// with Split = true).
//
// Why (bench/NOTES.md v10-v12): the split item kernel keeps the fused agent's structure for
// replay rows (v rows staged in shared memory, the workspace copied into shared memory, the
// tile's `contract` with its barriers) and measured 307 us per replay step (Hv64 Hk16,
// K = V = 128, fp32 kv state, bf16 inputs, batch 256, H200) against a read-only floor of about
// 243. An earlier stream kernel at 512 threads (bench/experiments/stream_all.patch, v11) gained 2%
// on replay rows but ran its committing rows through the fused path at 512 threads, 29% slower.
// This one keeps the split grid and block exactly: one block of the policy's 128 threads per
// (batch row, value head), launch bounds (128, 3) of the fused decode agent, so committing rows
// run the unchanged fused path in the same kernel with the same register budget (168).
//
// What (replay rows, n + 1 < CommitInterval): warp w (0..3) owns the state rows (k indices)
// k0 = 32 w .. k0 + 31 of its value head. A lane holds 16-byte fragments of those rows (what
// outputs read: a pair's serving copy): E = 4 fp32, 8 16-bit or 16 8-bit elements at columns
// (lane % LPR) E .. of row k0 + RPL f + lane / LPR for fragment f, LPR = 128 / E lanes per row, so
// one warp load is RPL = 1, 2 or 4 rows and a lane holds KL = 32, 16 or 8 fragments (128, 64 or
// 32 registers; 8-bit codes with their rows' scales). All of them are requested first, with the
// lane's 4 columns of v_j for the warp's steps j = w, w + 4, ... <= n (buffered for j < n, the
// current step's for j = n, one load where aligned; where registers are short, halfway through
// the contraction instead: early_v); then, after pdl_wait, r (row k0 + lane by lane) and c_j from
// the workspace (gdn_split.cuh) by asynchronous copies into shared memory, so that nothing waits
// for the state before every input is in flight (bench/experiments/stream16_latency.md found the
// Mamba-2 stream kernel's post-pdl_wait loads issued only after its state had landed); one block
// barrier and the cursor arrival (as the fused path: every thread has used its read of n and of
// the checkpoint index before it). The coefficient grid appends the current g, beta, k and k
// factor (it reads them anyway; the factor by gdn_step_factors, the fused path's function, from
// the same floats). Then per lane, with no shuffle per row,
//   o_part[c] = sum_{its rows k} h[k][c] r[k]          (8-bit: the code times r[k] scale[k])
// over its E columns, reduced over the RPL lanes that share those columns by one transposing sum
// (log2 RPL shuffle levels; afterwards every lane holds 4 columns, 128 per warp), plus
// sum_{its steps j} c_j v_j[c] over those 4 columns; the 4 warps' partial sums meet in the fused
// agent's scratch (one barrier) and thread c writes output column c. The warp owning step n
// appends v. The buffer ends up exactly as the fused path leaves it (v and k as given; g and beta
// as given; the k factor from the same function and floats; k and its factor by the k head's
// first value head, v, g and beta by every value head), and the cursor advances by the same
// per-slot arrival protocol (run_item.cuh; blocks per slot: num_v_heads, one tile per head). The
// summation order differs from the fused path (fp32 rounding only).
//
// A committing row (n + 1 >= CommitInterval) runs the fused agent's path in the same block (its
// own cursor read, arrival and fold), so a launch is still coefficient grid + one decode grid
// (mamba2_stream.cuh says why not a third grid). Registers (ptxas, sm_90): the kernel takes the
// fused agent's 168; the stream branch (SASS before the commit branch) has no local memory for any
// serving type, K = 8..32, bf16 or fp32 inputs; the kernel's spills (0-68 B at L = 16) are the
// commit branch's, outside its fold loop. H200, batch 256, K 16 (2026-11-29): Hv64 fp32 replay
// step 308 -> 296 us, window 348 -> 324; bf16 serving replay 242 -> 189 (bench/NOTES.md v13).
#pragma once

#include <replayssm/detail/gdn_agent.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// Whether the split replay step of `Policy` (decode with a workspace) uses gdn_stream_agent: the
/// kv layout with head_k_dim = head_v_dim = 128, one tile per value head (`Tile == head_v_dim`,
/// the default) at 128 threads (the default: 4 warps of 32 state rows), CommitInterval <= 32, one
/// item per block (no pipeline), and a serving state of fp32, bf16, fp16, or 8-bit codes with
/// per-row scales (fp8 e4m3, int8: a pair's copy or a single checkpoint). The launcher also asks
/// for 16-byte aligned fragments (gdn_stream_agent::fragments_aligned).
template <class Policy>
struct gdn_stream_supported {
  using rule = typename Policy::rule;
  using S = typename Policy::serving_type;
  static constexpr bool value =
      rule::layout == state_layout::kv && rule::head_k_dim == 128 && rule::head_v_dim == 128 &&
      Policy::tile == rule::head_v_dim && Policy::block_threads == 128 &&
      Policy::commit_interval <= 32 && Policy::pipeline_stages < 2 && is_state_storage<S>;
};

/// The decode grid of the split replay step for stream-supported policies: one work item per
/// (batch row, value head), run by item_kernel (its launch bounds and static shared memory are
/// those of the fused decode agent, which committing rows use). Replay rows stream (stream());
/// committing rows take the fused agent's path unchanged.
template <class Policy, bool Branch>
struct gdn_stream_agent {
  using fused = gdn_agent<Policy, op::decode, 1, Branch, false>;  ///< commit rows
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using S = typename Policy::serving_type;  ///< the state output steps read
  using policy = Policy;
  using params_t = gdn_params<Policy>;
  static constexpr op operation = op::decode;
  static constexpr int KD = rule::head_k_dim;
  static constexpr int VD = rule::head_v_dim;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int warps = NT / 32;
  static constexpr int RW = KD / warps;          ///< state rows per warp (32)
  static constexpr int E = 16 / int(sizeof(S));  ///< state elements per 16-byte fragment
  static constexpr int LPR = VD / E;             ///< lanes per state row (32, 16 or 8)
  static constexpr int RPL = 32 / LPR;           ///< state rows per warp load (1, 2 or 4)
  static constexpr int KL = RW / RPL;            ///< fragments per lane (32, 16 or 8)
  static constexpr int KPL = KD / 32;            ///< current k values per lane (warp 0)
  static constexpr int levels = RPL == 4 ? 2 : RPL == 2 ? 1 : 0;  ///< transposing sum levels
  /// Steps per warp: j = warp + warps i <= n <= K - 2 (at least 1 for the K = 1 instance,
  /// whose rows all commit).
  static constexpr int SPW = K > 1 ? (K - 1 + warps - 1) / warps : 1;
  /// Whether the steps' v values are requested with the state, before the barrier (their
  /// registers held across it and pdl_wait), or halfway through the contraction, once half of
  /// the state's registers are free: early while the state fragments and the v values fit in
  /// 136 registers (an fp32 state with 16-bit inputs at K <= 16, every 16- and 8-bit state),
  /// which keeps the stream path free of spills at the fused agent's 168 (ptxas, sm_90; an fp32
  /// state with fp32 inputs, or at K = 32, spilled 7-72 words when requested early).
  static constexpr bool early_v = KL * 4 + SPW * (sizeof(T) == 4 ? 4 : 2) <= 136;
  /// 8-bit serving state: codes times per-row scales (a pair's copy, or a single checkpoint)
  static constexpr bool scaled = Policy::scaled_copy || Policy::scaled_state;
  static constexpr bool branching = Branch;
  static constexpr int tiles_per_head = 1;
  static constexpr int min_blocks_per_sm = fused::min_blocks_per_sm;
  static_assert(gdn_stream_supported<Policy>::value,
                "gdn_stream_agent: policy not supported (see gdn_stream_supported)");
  static_assert(fused::tiles_per_head == 1, "gdn_stream_agent: one tile per value head");
  static_assert(RW <= 32 && RW % RPL == 0 && E / RPL == 4,
                "gdn_stream_agent: a warp's rows are whole warp loads, 4 columns per lane after "
                "the transposing sum");
  using shared_storage = typename fused::shared_storage;  ///< commit rows; replay rows: scratch
  static_assert(fused::tile_t::scratch_floats >= warps * VD,
                "gdn_stream_agent: the warps' partial outputs fit in the fused agent's scratch");

  shared_storage& s;

  /// Whether the serving pool's pointer and strides keep every 16-byte fragment aligned (the
  /// launcher falls back to the split item kernel otherwise; always true for fp32).
  static REPLAYSSM_HD bool fragments_aligned(const params_t& p) {
    return fragments_aligned16<E>(serving_pool_of<Policy>(p));
  }
  static REPLAYSSM_HD int heads(const params_t& p) { return p.num_v_heads; }  ///< blocks per row

  /// The transposing sum over the RPL lanes that hold the same columns (lane bits 4 and, 8-bit,
  /// 3): `levels` halvings, after which a lane keeps 4 of its fragments' E columns.
  using col_sum = transpose_sum<E, 32>;
  /// The lane's first column after the transposing sum: its fragments' first column, plus the
  /// half (quarter) of the fragment's E columns it keeps at each level (see stream()).
  static REPLAYSSM_DEVICE int column(int lane) {
    return (lane % LPR) * E + col_sum::template index_after<levels>(lane);
  }

  /// 4 elements of T at `src` (aligned to their size) by one load, in words x and y (16-bit) or
  /// all four words (fp32) of the fragment.
  static REPLAYSSM_DEVICE uint4 load4(const T* src) {
    if constexpr (sizeof(T) == 4) {
      return __ldg(reinterpret_cast<const uint4*>(src));
    } else {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(src));
      return make_uint4(u.x, u.y, 0u, 0u);
    }
  }

  /// The lane's 4 columns of v_j for the warp's steps j = warp + warps i <= n, in type T
  /// (buffered rows: 16-byte aligned, validated; the current step's: any alignment), zero for
  /// the steps after n.
  REPLAYSSM_DEVICE static void load_steps(const params_t& p, int b, int hv, int64_t slot, int n,
                                          uint4 (&vr)[SPW]) {
    const int Hv = p.num_v_heads, warp = threadIdx.x >> 5, col = column(threadIdx.x & 31);
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
      const int j = warp + warps * i;
      vr[i] = make_uint4(0u, 0u, 0u, 0u);
      if (j < n) {
        vr[i] = load4(p.buffer.v + ((slot * L + j) * Hv + hv) * int64_t(VD) + col);
      } else if (j == n) {  // one load where aligned (no lane waits for it before the state)
        const T* src = p.in.v + b * p.in.v_batch_stride + hv * p.in.v_head_stride + col;
        if (reinterpret_cast<uintptr_t>(src) % (4 * sizeof(T)) == 0) {
          vr[i] = load4(src);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) frag_set<T>(vr[i], e, src[e]);
        }
      }
    }
  }

  /// Work item (b, hv): null rows touch nothing; committing rows run the fused path; replay rows
  /// stream. Every block of a row reads the same cursor (no block of the slot arrives before it
  /// has read it), so all of a row's blocks take the same path.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int hv, int /*t*/,
                            const state_pool_ref& other) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    const int n = buffered_steps<op::decode, K, L>(p.cursors.cursor[slot]);
    if (n + 1 >= K) {
      fused{s}.run(p, b, hv, 0, other);  // reads the slot and cursor again: the same values
      return;
    }
    stream(p, b, hv, slot, n);
  }

  /// A replay row's item (see the file comment). Call from all threads.
  REPLAYSSM_DEVICE void stream(const params_t& p, int b, int hv, int64_t slot, int n) {
    const int Hv = p.num_v_heads;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k0 = warp * RW;                    // the warp's first state row
    const int half = RPL == 1 ? 0 : lane / LPR;  // which row of a warp load (16-, 8-bit)
    const int col = column(lane);                // the lane's 4 output columns
    ckpt_slots ck;  // as run_item: a corrupt index touches nothing (the whole row agrees)
    if (!resolve_ckpt_slots<Branch>(p, b, slot, true, ck)) return;

    // 1. The state fragments (what outputs read: a pair's serving copy), streamed.
    uint4 hr[KL];
    float sc[scaled ? KL : 1];  // 8-bit: the scale of each fragment's row
    {
      const auto& pool = serving_pool_of<Policy>(p);
      const S* st = pool.data + ck.rd * pool.slot_stride + hv * pool.head_stride +
                    int64_t(k0 + half) * pool.row_stride + (lane % LPR) * E;
#pragma unroll
      for (int f = 0; f < KL; ++f)
        hr[f] = __ldcs(reinterpret_cast<const uint4*>(st + int64_t(f) * RPL * pool.row_stride));
      if constexpr (scaled) {  // (kv: one scale per state row k of the head's one tile)
        const scale_pool_ref& sp = serving_scales_of<Policy>(p);
        const float* srow = sp.data + ck.rd * sp.slot_stride + hv * sp.head_stride + k0 + half;
#pragma unroll
        for (int f = 0; f < KL; ++f) sc[f] = srow[f * RPL];
      }
    }

    // 2. The lane's 4 columns of v_j for the warp's steps (load_steps: here where `early_v`,
    // else halfway through the contraction). The current g, beta, k and k factor are appended at
    // position n by the coefficient grid, which reads them anyway (gdn_split.cuh).
    uint4 vr[SPW];  // 4 elements of T (16-bit: words x and y)
    if constexpr (early_v) load_steps(p, b, hv, slot, n, vr);

    // 3. The coefficient grid's results (it has completed and its writes are visible; blocks
    // after the first wave do not wait here): r of the warp's rows (lane l: row k0 + l) and c_j
    // of its steps, copied asynchronously into shared memory (s.q[0], s.c[0]: unused by replay
    // rows), so that no register waits for them. (Loaded into registers after the barrier, they
    // were requested only once the state had landed: bench/experiments/stream16_latency.md, the
    // Mamba-2 stream kernel's study.) Each warp copies, and later reads, only its own entries.
    pdl_wait();
    {
      const float* ws = p.workspace + (int64_t(b) * Hv + hv) * (KD + L);
      cp_async4(&s.q[0][k0 + lane], ws + k0 + lane);  // (RW == 32 rows per warp)
      const int j = warp + warps * lane;              // step of lane i < SPW
      if (lane < SPW && j <= n) cp_async4(&s.c[0][j], ws + KD + j);
      cp_async_wait_all();
    }

    // 4. The cursor arrival: every thread has used its read of the cursor (and checkpoint index)
    // before this barrier (run_item.cuh slot_arrival); the atomic overlaps the rest. The barrier
    // also shows each warp its copies.
    __syncthreads();
    slot_arrival arrival;
    arrival.arrive(p.cursors.arrivals, slot);
    const int64_t at = slot * L + n;
    float cj[SPW];
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
      const int j = warp + warps * i;
      cj[i] = j <= n ? s.c[0][j] : 0.f;  // (positions after n are not written)
    }

    // 5. The lane's partial outputs over its rows: acc[e] = sum_f h[row_f][c_e] r[row_f] for
    // its fragments' E columns (8-bit: codes times r scale, the row's scale folded into r).
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
#pragma unroll
    for (int f = 0; f < KL; ++f) {
      // (not early_v: requested once half of the state fragments are used, their registers free)
      if (!early_v && f == KL / 2) load_steps(p, b, hv, slot, n, vr);
      float rf = s.q[0][k0 + f * RPL + half];  // r of row k0 + f RPL + half
      if constexpr (scaled) rf *= sc[f];
#pragma unroll
      for (int e = 0; e < E; e += 2) {  // (pairs: frag_get2)
        const float2 q = frag_get2<S>(hr[f], e);
        acc[e] = fmaf(q.x, rf, acc[e]);
        acc[e + 1] = fmaf(q.y, rf, acc[e + 1]);
      }
    }
    // Sum over the RPL lanes holding the same columns (lane bits 4 and, 8-bit, 3) by halving
    // (col_sum): every lane ends with 4 columns (column(lane) ..), summed over the warp's 32
    // rows.
    col_sum::template halve<levels>(acc);
    // The buffered (and current) steps' term over the same 4 columns (c_j = 0, v_j = 0 for the
    // steps after n).
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = fmaf(cj[i], frag_get<T>(vr[i], e), acc[e]);
    }

    // 6. The 4 warps' partial outputs through shared memory (the fused agent's scratch), one
    // barrier; thread c writes output column c.
    *reinterpret_cast<float4*>(s.scratch + warp * VD + col) =
        make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (int(threadIdx.x) < VD) {
      float o = s.scratch[threadIdx.x];
#pragma unroll
      for (int w = 1; w < warps; ++w) o += s.scratch[w * VD + threadIdx.x];
      p.in.out[b * p.in.out_batch_stride + hv * p.in.out_head_stride + threadIdx.x] =
          from_float<T>(o);
    }

    // 7. Append the current v at position n (exactly as given) from the warp owning step n.
#pragma unroll
    for (int i = 0; i < SPW; ++i) {
      if (warp + warps * i == n) {
        T* dst = p.buffer.v + (at * Hv + hv) * int64_t(VD) + col;
        if constexpr (sizeof(T) == 4)
          *reinterpret_cast<uint4*>(dst) = vr[i];
        else
          *reinterpret_cast<uint2*>(dst) = make_uint2(vr[i].x, vr[i].y);
      }
    }

    // 8. The slot's last block sets cursor n + 1 (and, branching, keeps ckpt_of at rd).
    arrival.finish(p.cursors.cursor, p.cursors.arrivals, slot, uint32_t(Hv), n + 1,
                   Branch ? p.branch.ckpt_of : nullptr, ck.rd);
  }
};

}  // namespace detail
}  // namespace replayssm
