// The split verification of Mamba-2 (verify_step with `params.workspace`, for the policies
// `mamba2_verify_split_supported` accepts; every other verification keeps the fused
// mamba2_agent path unchanged).
//
// Why (bench/NOTES.md v15, Next -11): the standalone prototype of this structure
// (bench/experiments/mma_verify, FMA form, 4 warps) ran the Mamba-2 T = 4 verification of batch
// 256, H 128, 15 buffered steps in 367 us against the fused kernel's 516; the same kernel at 8
// warps per block was 439-558 us. The earlier split verifications (split_verify*.patch) lost
// because their readout kept 256-512-thread blocks and staged B per block. Measured (v16, H200,
// bench_spec rows spec/mamba2/H128_G8_ws, batch 256, 15 buffered steps): T = 2 / 4 / 8
// 337 / 395 / 629 us against the fused kernel's 428 / 518 / 936; every row folding 819 / 866 /
// 1091 against 800 / 891 / 1197; v17 (the drafts' rows with hoisted index math, `draft_rows`):
// 330 / 381 / 576, folding 813 / 896 / 1049; v23 (the outputs by warp per draft, the setup's
// index math): T = 4 371, folding 779. (Its first form held each thread's x column in
// registers, 15 scalar loads that ptxas serialized under the 128-register bound: 501 / 658 / 744
// us.)
//
// Two grids, the second launched with programmatic dependent launch (sm_90+):
// 1. mamba2_verify_coef_kernel, one block per (group g, batch row b): the dot products
//      dots[b][g][d][j] = B_j . C_d   for d < nd and the steps j < base + nd on draft d's path
//    (the buffered steps j < base always, draft k at base + k iff bit k of draft_path(d)), 0
//    elsewhere, where base = n for a row with n < K buffered steps and 0 for a row that folds,
//    with exactly the fused replay_dots' arithmetic; and the drafts' B rows appended to the
//    buffer (once per (row, group), where the fused path appends them from a group's first head).
//    Workspace layout: `[batch][ngroups][MaxDraft][BufferLen]` floats.
// 2. mamba2_verify_readout_kernel, one block of 128 threads per (head h, batch row b) (grid
//    (H / G, G, batch): h = g H / G + blockIdx.x, no division) whatever the policy's
//    BlockThreads, at 4 blocks per SM: the block holds its whole 64 x 128 fp32
//    state tile in registers, warp w rows 16 w .. 16 w + 15, lane (gi, t) = (lane >> 2,
//    lane & 3) rows 16 w + gi and 16 w + gi + 8, of each the 32 values at columns 16 i + 4 t +
//    {0..3} (one 16-byte streaming load per (row, i)), requested first; then the buffered and
//    the drafts' x rows, the drafts' C, dt and the path masks, all staged in shared memory as
//    fp32 (requested together: one memory latency); a row that folds (n >= K) also requests its
//    window's B and x as given by asynchronous copies (no registers held, in flight with the
//    rest), takes c_j = dt_j exp(A sum_{i > j} dt_i) from thread j and exp(A sum dt) from thread
//    0 (scale_window's arithmetic, per thread instead of one serial walk), folds the window into
//    the registers as mamba2_agent::fold_window does (h scaled by exp(A sum dt), then one FMA
//    of c_j x_j per element and step, in step order: the same bits) and stores them as the
//    checkpoint, its drafts then at base 0 (their dt staged there before the first barrier, so
//    the fold adds one barrier, not three). pdl_wait (with MaxDraft <= 4 right after the
//    staging barrier, each warp then requesting its draft's dots before the G loop; otherwise
//    after it); G_d[p] = h[p, :] . C_d by FMAs over the lane's values and two xor shuffles; the
//    dots from the workspace turn into the weights and decays of mamba2_agent::decay_weights
//    (the fused path's function; for BufferLen <= 32 its one chunk written out here, the same
//    bits); then
//      y_d[p] = decay_d G_d[p] + sum_{j on d's path} w[d][j] x_j[p] + D x_{n+d}[p],
//    y *= silu(z) when z is set (with 3 or 4 drafts warp d writes draft d's outputs, two rows
//    per lane; otherwise thread (d0, r) its drafts' row r). The drafts' x and dt are appended as
//    process_verify appends them; the cursor does not move, except after a fold: the row's last
//    block sets folded_cursor(n) (as process_verify).
// The buffer ends up exactly as the fused verification leaves it; the outputs differ from the
// fused path's by fp32 rounding only (the contraction's summation order).
//
// Races: the coefficient grid reads every listed row's cursor and triggers only after that read
// passed a block barrier, so the readout blocks that fold (and set their row's cursor at the
// end) start after every cursor read. The coefficient grid writes buffer.B only at the drafts'
// positions n + d, which neither grid reads; the readout reads the workspace only after
// pdl_wait.
#pragma once

#include <replayssm/detail/mamba2_agent.cuh>
#include <replayssm/detail/validate.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// Whether `verify_step` of `Policy` runs the split verification when `params.workspace` is set
/// (and the launch does not branch): an fp32 checkpoint (precision::fp32: no serving copy, no
/// scales; or an fp32 master with a 16-bit serving copy, precision::pair<bf16 / fp16>: rows that
/// do not fold read the copy, folding rows read the master and write both), headdim 64 and
/// dstate 128, one tile per head (`Tile == HeadDim`, the default tile
/// for headdim 64), no pipeline. The readout runs 128-thread blocks whatever the policy's
/// BlockThreads (its four warps take 16 rows of headdim each), so the rule's default policy
/// qualifies.
template <class Policy>
struct mamba2_verify_split_supported {
  using rule = typename Policy::rule;
  static constexpr bool value =
      std::is_same<typename Policy::master_type, float>::value &&
      (!Policy::has_serving_copy ||
       (sizeof(typename Policy::serving_type) == 2 && !Policy::scaled_copy)) &&
      !Policy::scaled_state && rule::dstate == 128 && rule::headdim == 64 &&
      Policy::tile == rule::headdim && Policy::pipeline_stages < 2;
};

/// Threads of a coefficient block (one block per (group, batch row)).
constexpr int mamba2_verify_coef_threads = 128;
/// Threads of a readout block (one block per (head, batch row)): 4 warps of 16 state rows each.
constexpr int mamba2_verify_readout_threads = 128;

/// The coefficient grid of the split verification (see the file comment): grid (ngroups, batch).
template <class Policy, int MaxDraft>
struct mamba2_verify_coef {
  using T = typename Policy::input_type;
  using params_t = mamba2_params<Policy>;
  static constexpr int N = Policy::rule::dstate;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NT = mamba2_verify_coef_threads;
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static_assert(MaxDraft >= 1 && MaxDraft <= 32 && MaxDraft <= NT,
                "mamba2 split verification: MaxDraft must be 1..32.");
  static_assert(N % 4 == 0, "mamba2 split verification: dstate must be a multiple of 4.");

  struct shared_storage {
    alignas(16) float B[L][N];         // the buffered steps' B, then the drafts'
    alignas(16) float C[MaxDraft][N];  // the drafts' C
    uint32_t path[MaxDraft];           // the drafts on each draft's path (bit k: draft k)
    int n, nd;
  };
  static_assert(sizeof(shared_storage) <= 48 * 1024,
                "mamba2 split verification: the coefficient block stages BufferLen + MaxDraft "
                "rows of dstate floats, over 48 KiB; lower BufferLen.");

  /// Row b, group g. Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, int b, int g) {
    const int64_t slot = p.rows.slot_idx ? __ldg(p.rows.slot_idx + b) : b;
    if (slot == p.rows.null_slot) return;  // (exit = implicit trigger)
    if (threadIdx.x == 0) {                // n and nd exactly as process_verify reads them
      const int n = buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]);
      int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
      if (nd > L - n) nd = L - n;  // only a corrupt cursor gets here
      s.n = n;
      s.nd = nd;
    }
    __syncthreads();
    const int n = s.n, nd = s.nd;
    // Every cursor read of this block passed the barrier: the readout grid's folding blocks,
    // which set their row's cursor at the end, may start.
    pdl_trigger();
    // A row that folds (n >= K) gets its drafts' dots alone (the readout grid folds the window
    // first, then reads the drafts against the new checkpoint): its drafts are steps 0..nd-1.
    const int base = n >= K ? 0 : n;
    const int G = p.ngroups;
    const int64_t r0 = int64_t(b) * MaxDraft;
    // All rows requested at once: the buffered B (16-byte aligned, validated), the drafts' B and C.
    staged_rows<NB, N, NT, T> Bq;
    strided_rows<MaxDraft, N, NT, T> Bd, Cd;
    Bq.load(p.buffer.B + (slot * L * G + g) * int64_t(N), int64_t(G) * N, base);
    Bd.load(p.in.B + r0 * p.in.B_batch_stride + g * p.in.B_group_stride, p.in.B_batch_stride, nd);
    Cd.load(p.in.C + r0 * p.in.C_batch_stride + g * p.in.C_group_stride, p.in.C_batch_stride, nd);
    if (int(threadIdx.x) < nd) s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, b, threadIdx.x);
    Bq.store(s.B, base);
    Bd.store(s.B + base, nd);
    Cd.store(s.C, nd);
    __syncthreads();
    // dots[d][j]: one thread per dot, mamba2_agent::bc_dot as replay_dots computes it, so the dots
    // are bit-identical to the fused path's. Every entry of the row's [MaxDraft][L] block is
    // written (0 off the paths).
    const int m = base + nd;
    float* ws = p.workspace + (int64_t(b) * G + g) * (int64_t(MaxDraft) * L);
    for (int i = threadIdx.x; i < MaxDraft * L; i += NT) {
      const int d = i / L, j = i - d * L;
      float w = 0.f;
      if (d < nd && j < m && (j < base || ((s.path[d] >> (j - base)) & 1u)))
        w = mamba2_agent<Policy, op::verify, MaxDraft>::bc_dot(s.B[j], s.C[d], j);
      ws[i] = w;
    }
    // The drafts' B rows appended after the buffered (or folded) steps, exactly as given (the
    // conversion back is exact), once per (row, group); the readout grid appends x and dt.
    for (int i = threadIdx.x; i < nd * N; i += NT)
      p.buffer.B[((slot * L + n + i / N) * G + g) * N + i % N] =
          from_float<T>(s.B[base + i / N][i % N]);
  }
};

template <class Policy, int MaxDraft>
REPLAYSSM_KERNEL void __launch_bounds__(mamba2_verify_coef_threads)
    mamba2_verify_coef_kernel(const mamba2_params<Policy> p) {
  using coef = mamba2_verify_coef<Policy, MaxDraft>;
  __shared__ typename coef::shared_storage smem;
  coef::run(smem, p, int(blockIdx.y), int(blockIdx.x));
}

/// The readout grid of the split verification (see the file comment): grid (nheads, batch),
/// 128 threads per block.
template <class Policy, int MaxDraft>
struct mamba2_verify_readout {
  using fused = mamba2_agent<Policy, op::verify, MaxDraft>;  ///< folding rows, and the helpers
  using T = typename Policy::input_type;
  using params_t = mamba2_params<Policy>;
  static constexpr int P = Policy::rule::headdim;
  static constexpr int N = Policy::rule::dstate;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  static constexpr int NT = mamba2_verify_readout_threads;
  using bits_t = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;  ///< an input's bits
  /// The fused agent's staging plus a folding row's window B as given (16-bit inputs).
  struct window_bits_storage : fused::shared_storage {
    alignas(16) bits_t Bw[L][N];
  };
  /// Whether a folding row's window B is copied as given: fp32 inputs into `B` itself, 16-bit
  /// ones into `Bw` where that fits 48 KiB of static shared memory (else they are loaded and
  /// stored as floats after the other loads, as before).
  static constexpr bool copy_B = sizeof(T) == 4 || sizeof(window_bits_storage) <= size_t(48) * 1024;
  /// The fused agent's staging (with `Bw` where 16-bit window B are copied as given): a policy
  /// whose fused verification fits fits here too. A folding row keeps its window's x as given
  /// at the start of `x` (row j at element j P of `x` read as bits_t), below the drafts' x at
  /// rows n + d; its window's dt at `dt[nd + j]`, after its drafts'; and c_j, with exp(A sum dt)
  /// at L, in `z` (fold_coefs), which the readout does not use otherwise (its gates stay in
  /// registers).
  using shared_storage = std::conditional_t<sizeof(T) == 2 && copy_B, window_bits_storage,
                                            typename fused::shared_storage>;
  static_assert(sizeof(fused::shared_storage::z) >= sizeof(float) * (L + 1),
                "mamba2 split verification: the gate rows' staging must hold BufferLen + 1 "
                "floats (a folding row's c_j); lower BufferLen.");
  static REPLAYSSM_DEVICE float* fold_coefs(shared_storage& s) { return &s.z[0][0]; }
  static constexpr int NB = K > 1 ? K - 1 : 1;  // buffered steps of a row that does not fold
  static constexpr int OPT = NT / P;            // threads per output row p (drafts split over)
  static constexpr int DPT = (MaxDraft + OPT - 1) / OPT;  // drafts (outputs) per thread
  static constexpr int V = N / 16;                        // 16-byte loads per state row and lane
  /// A 16-bit serving copy (precision::pair<bf16 / fp16>): outputs of rows that do not fold read
  /// it; a fold reads the fp32 master and writes both.
  static constexpr bool pair = Policy::has_serving_copy;
  using S = typename Policy::serving_type;
  /// Element (16 warp + gi, 4 t) of head h's serving copy in pool slot `slot` (pairs).
  static REPLAYSSM_DEVICE S* copy_row(const params_t& p, int64_t slot, int64_t h, int warp, int gi,
                                      int t) {
    return fused::tile_ptr(p.serving, slot, int(h), 0) +
           int64_t(16 * warp + gi) * p.serving.row_stride + 4 * t;
  }
  /// Pairs whose inputs have the copy's type (bf16 copy and bf16 inputs, fp16 and fp16), at most
  /// 8 drafts: a row that does not fold computes G_d = h . C_d on tensor cores from the copy's
  /// bits (mma m16n8k16, fp32 accumulation; C_d as given, so every product is exact); the
  /// registers already hold the A fragments (see g_mma).
  static constexpr bool mma_g = pair && std::is_same<S, T>::value && MaxDraft <= 8;
  /// mma_g: where the copy's bits wait for the G step: in h0 / h1's .x / .y (the registers a
  /// folding row uses for its fp32 tile; separate arrays spilled 8-32 bytes at MaxDraft 2 / 4)
  /// or in their own arrays (MaxDraft 8: the other way spilled 8 bytes).
  static constexpr bool mma_bits_in_h = MaxDraft <= 4;
  /// Two 16-bit values (exact: staged from inputs of type S) packed into a word, `lo` low.
  static REPLAYSSM_DEVICE uint32_t pack2(float lo, float hi) {  // (one cvt.rn.{bf16,f16}x2)
    uint32_t w;
    if constexpr (std::is_same<S, __nv_bfloat16>::value) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      w = *reinterpret_cast<const uint32_t*>(&v);
    } else {
      const __half2 v = __floats2half2_rn(lo, hi);
      w = *reinterpret_cast<const uint32_t*>(&v);
    }
    return w;
  }
  /// s.y[d][16 warp + gi (+ 8)] = G_d of this warp's rows, d < nd, from the copy's bits
  /// (`frag(i)`: rows gi, gi + 8, columns 16 i + 4 t + {0..3}). mma.m16n8k16 with k permuted
  /// inside each 16-column block: the lane's columns 4t, 4t+1 are k slots 2t, 2t+1 and 4t+2,
  /// 4t+3 are 2t+8, 2t+9 (a permutation of a sum: the same contraction), so the A fragment is
  /// {row gi word 0, row gi + 8 word 0, row gi word 1, row gi + 8 word 1} as loaded, and the B
  /// fragment of draft n = gi is C_gi at the same columns (0 for gi >= nd). D: rows gi / gi + 8,
  /// drafts 2t, 2t + 1.
  template <class Frag>
  static REPLAYSSM_DEVICE void g_mma(shared_storage& s, Frag frag, int nd, int warp, int gi,
                                     int t) {
    float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
    const float* const c = s.C[gi < MaxDraft ? gi : 0] + 4 * t;
    const bool on = gi < nd;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float4 cv = make_float4(0.f, 0.f, 0.f, 0.f);
      if (on) cv = *reinterpret_cast<const float4*>(c + 16 * i);
      const uint32_t b0 = pack2(cv.x, cv.y), b1 = pack2(cv.z, cv.w);
      const uint4 a = frag(i);
      if constexpr (std::is_same<S, __nv_bfloat16>::value)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
            : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
      else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
            : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
    }
    const int d = 2 * t, r0 = 16 * warp + gi;
    if (d < nd) s.y[d][r0] = c0, s.y[d][r0 + 8] = c2;
    if (d + 1 < nd) s.y[d + 1][r0] = c1, s.y[d + 1][r0 + 8] = c3;
  }
  /// Four consecutive 16-bit copy values from their bits (one 8-byte load), as floats (exact).
  static REPLAYSSM_DEVICE float4 copy4(uint2 w) {
    const uint4 f = make_uint4(w.x, w.y, 0u, 0u);
    return make_float4(frag_get<S>(f, 0), frag_get<S>(f, 1), frag_get<S>(f, 2), frag_get<S>(f, 3));
  }
  static_assert(mamba2_verify_split_supported<Policy>::value,
                "mamba2_verify_readout: policy not supported (see mamba2_verify_split_supported)");
  static_assert(NT % P == 0 && P == 16 * (NT / 32), "mamba2_verify_readout: 16 rows per warp");
  static_assert(fused::tiles_per_head == 1, "mamba2_verify_readout: one tile per head");

  /// The drafts' rows [0, rows) of a strided `[MaxDraft][W]` matrix of T (row j at
  /// `src + j * stride`, any alignment): exactly the elements strided_rows<MaxDraft, W, NT, T>
  /// loads and stores (element i = threadIdx.x + it NT at row i / W, column i % W), with the
  /// index math hoisted: W divides NT, so this thread holds column threadIdx.x % W of the rows
  /// threadIdx.x / W + it (NT / W); its first element's address is computed once (one 64-bit
  /// product), the others step by (NT / W) stride, and the row test is one compare with a
  /// constant per element. All loads are independent (requested together, as strided_rows).
  template <int W>
  struct draft_rows {
    static_assert(NT % W == 0, "draft_rows: W must divide the block");
    static constexpr int RPI = NT / W;                        // rows per iteration
    static constexpr int iters = (MaxDraft + RPI - 1) / RPI;  // = strided_rows' iters
    static_assert(iters == (MaxDraft * W + NT - 1) / NT, "draft_rows: strided_rows' elements");
    T v[iters];
    int lim;  // rows - this thread's first row: element it is loaded iff it * RPI < lim
    /// threadIdx.x, read apart from the block's other reads of it: the compiler would otherwise
    /// share threadIdx.x / W and % W with the readout's d0 and r, and keep them live through the
    /// G loop (one register over the 128-register bound there).
    static REPLAYSSM_DEVICE unsigned tid() {
      unsigned t;
      asm("mov.u32 %0, %%tid.x;" : "=r"(t));
      return t;
    }
    REPLAYSSM_DEVICE void load(const T* src, int64_t stride, int rows) {
      const unsigned j0 = tid() / W, c = tid() % W;
      lim = rows - int(j0);
      const T* q = src + int64_t(j0) * stride + c;
      const int64_t step = int64_t(RPI) * stride;
#pragma unroll
      for (int it = 0; it < iters; ++it, q += step)
        if (it * RPI < lim) v[it] = *q;
    }
    /// dst[j][c] = row j's element c as float, for the rows loaded.
    REPLAYSSM_DEVICE void store(float (*dst)[W]) const {
      float* d = &dst[tid() / W][tid() % W];
#pragma unroll
      for (int it = 0; it < iters; ++it)
        if (it * RPI < lim) d[it * RPI * W] = to_float(v[it]);
    }
  };

  /// The buffered x rows [0, rows) (rows <= NB; 16-byte aligned, validated): staged_rows<NB, P,
  /// NT, T>'s elements (16-byte chunk c = threadIdx.x + it NT at row c / cpr), with unsigned
  /// index math (a shift and a mask per chunk, one 32 x 64-bit product) and, for bf16, each
  /// word's two values widened by a shift and a mask (the conversion is exact: the same bits).
  /// (Not staged_rows itself: given this form, with decay_weights' single chunk in the agent,
  /// every kernel staging rows changed, and some lost 6-16%: bench/experiments/
  /// staged_rows_unsigned.patch.)
  struct buffered_x {
    static constexpr int vec = 16 / int(sizeof(T));
    static constexpr int cpr = P / vec;  // chunks per row
    static_assert(P % vec == 0, "buffered_x: whole 16-byte chunks per row");
    static constexpr int iters = (NB * cpr + NT - 1) / NT;
    uint4 v[iters];
    REPLAYSSM_DEVICE void load(const T* src, int64_t stride, int rows) {
#pragma unroll
      for (int it = 0; it < iters; ++it) {
        const unsigned c = threadIdx.x + unsigned(it * NT);
        if (c < unsigned(rows * cpr))
          v[it] = __ldg(reinterpret_cast<const uint4*>(src + int64_t(c / cpr) * stride) + c % cpr);
      }
    }
    REPLAYSSM_DEVICE void store(float (*dst)[P], int rows) const {
#pragma unroll
      for (int it = 0; it < iters; ++it) {
        const unsigned c = threadIdx.x + unsigned(it * NT);
        if (c < unsigned(rows * cpr)) {
          float* d = &dst[c / cpr][(c % cpr) * vec];
          if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            const uint32_t w[4] = {v[it].x, v[it].y, v[it].z, v[it].w};
#pragma unroll
            for (int k = 0; k < 4; k += 2)
              *reinterpret_cast<float4*>(d + 2 * k) = make_float4(
                  __uint_as_float(w[k] << 16), __uint_as_float(w[k] & 0xffff0000u),
                  __uint_as_float(w[k + 1] << 16), __uint_as_float(w[k + 1] & 0xffff0000u));
          } else {
            const T* e = reinterpret_cast<const T*>(&v[it]);
#pragma unroll
            for (int k = 0; k < vec; ++k) d[k] = to_float(e[k]);
          }
        }
      }
    }
  };

  /// Block (b, h) of group g. Call from all threads.
  static REPLAYSSM_DEVICE void run(shared_storage& s, const params_t& p, unsigned b, unsigned h,
                                   unsigned g) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    readout(s, p, b, h, g, slot, buffered_steps<op::verify, K, L>(p.cursors.cursor[slot]));
  }

  /// Row b's outputs at head h, folding its window first when n >= K (see the file comment).
  /// Call from all threads.
  static REPLAYSSM_DEVICE void readout(shared_storage& s, const params_t& p, unsigned b_,
                                       unsigned h_, unsigned g_, int64_t slot, int n) {
    // Row, head and group as 64-bit values known to be non-negative (block indices): their
    // products with the 64-bit strides need no sign extension.
    const int64_t b = b_, h = h_, g = g_;
    const int H = p.nheads, G = p.ngroups;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gi = lane >> 2, t = lane & 3;
    const bool fold = n >= K;
    // 1. The state tile: rows 16 warp + gi (h0) and + 8 (h1), columns 16 i + 4 t + {0..3}.
    // Pairs (a 16-bit serving copy): a row that does not fold reads the copy (what the fused
    // path's outputs read), one 8-byte load per (row, i), kept as bits (half the registers
    // while the rest is staged) and widened after the staging barrier; a row that folds reads
    // the master instead (the fused path reads the copy, then reloads the master: the copy is
    // not needed).
    float* const row = fused::tile_ptr(p.state, slot, int(h), 0) +
                       int64_t(16 * warp + gi) * p.state.row_stride + 4 * t;
    float* const row8 = row + 8 * p.state.row_stride;
    float4 h0[V], h1[V];
    [[maybe_unused]] uint2 q0[V], q1[V];  // pairs, a row that does not fold: the copy's bits
    if constexpr (pair) {
      if (fold) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          h0[i] = __ldcs(reinterpret_cast<const float4*>(row + 16 * i));
          h1[i] = __ldcs(reinterpret_cast<const float4*>(row8 + 16 * i));
        }
      } else {
        const S* const crow = copy_row(p, slot, h, warp, gi, t);
        const S* const crow8 = crow + 8 * p.serving.row_stride;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if constexpr (mma_g && mma_bits_in_h) {  // the bits in h0 / h1's .x and .y
            const uint2 u0 = __ldcs(reinterpret_cast<const uint2*>(crow + 16 * i));
            const uint2 u1 = __ldcs(reinterpret_cast<const uint2*>(crow8 + 16 * i));
            h0[i].x = __uint_as_float(u0.x), h0[i].y = __uint_as_float(u0.y);
            h1[i].x = __uint_as_float(u1.x), h1[i].y = __uint_as_float(u1.y);
          } else {
            q0[i] = __ldcs(reinterpret_cast<const uint2*>(crow + 16 * i));
            q1[i] = __ldcs(reinterpret_cast<const uint2*>(crow8 + 16 * i));
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        h0[i] = __ldcs(reinterpret_cast<const float4*>(row + 16 * i));
        h1[i] = __ldcs(reinterpret_cast<const float4*>(row8 + 16 * i));
      }
    }
    // 2. The buffered x rows j < n (16-byte loads; with their B rows when the row folds) and the
    // drafts' x, C and dt, all requested before any is used (one memory latency), staged into
    // shared memory as fp32: x_j in s.x[j], draft d's x in s.x[n + d] (where process_verify
    // appends it), C_d in s.C[d], B_j in s.B[j]. (Per-thread register columns of x made ptxas
    // serialize the loads under the 128-register bound: v16.)
    int nd = draft_count<MaxDraft>(p.spec.num_draft[b]);
    if (nd > L - n) nd = L - n;     // only a corrupt cursor gets here: stay inside the buffer
    const int base = fold ? 0 : n;  // the drafts' first step index in the weights
    const int r = threadIdx.x % P;
    const int d0 = threadIdx.x / P;  // this thread's drafts: d0, d0 + OPT, ...
    const int64_t r0 = b * MaxDraft;
    const float A = p.weights.A[h];
    float dt_own = 0.f;  // thread d < nd: draft d's dt after bias and softplus
    {
      const int64_t sh = slot * L * H + h;  // (slot, step 0, head h) of the buffer
      const T* xsrc = p.buffer.x + sh * int64_t(P);
      buffered_x xq;  // a row that does not fold: its buffered x, first
      if (!fold) xq.load(xsrc, int64_t(H) * P, n);
      draft_rows<P> xd;  // (strided_rows' elements, hoisted index math)
      xd.load(p.in.x + r0 * p.in.x_batch_stride + h * p.in.x_head_stride, p.in.x_batch_stride, nd);
      draft_rows<N> Cd;
      Cd.load(p.in.C + r0 * p.in.C_batch_stride + g * p.in.C_group_stride, p.in.C_batch_stride, nd);
      float dtq = 0.f, dtd = 0.f;
      // ((slot L + j) H + h = sh + j H.)
      if (int(threadIdx.x) < n) dtq = p.buffer.dt[sh + int64_t(threadIdx.x) * H];
      if (int(threadIdx.x) < nd)
        dtd =
            to_float(p.in.dt[(r0 + threadIdx.x) * p.in.dt_batch_stride + h * p.in.dt_head_stride]);
      // A row that folds: its window's x and B as given, by 16-byte asynchronous copies
      // (buffered rows: 16-byte aligned, validated), requested with the other loads and holding
      // no register (held in registers, they spilled: v16; staged after the other loads had
      // landed, they took one more memory latency).
      if (fold) {
        constexpr int ce = 16 / int(sizeof(T));  // elements per copy
        constexpr int cb = N / ce, cx = P / ce;  // copies per B row, per x row
        bits_t* const xw = reinterpret_cast<bits_t*>(&s.x[0][0]);
        const T* const Bb = p.buffer.B + (slot * L * G + g) * int64_t(N);
        if constexpr (copy_B) {
          bits_t* Bw;
          if constexpr (sizeof(T) == 2)
            Bw = &s.Bw[0][0];
          else
            Bw = reinterpret_cast<bits_t*>(&s.B[0][0]);
          for (int i = threadIdx.x; i < n * cb; i += NT) {
            const int j = i / cb, e = (i % cb) * ce;
            cp_async16(Bw + j * N + e, Bb + int64_t(j) * G * N + e);
          }
        }
        for (int i = threadIdx.x; i < n * cx; i += NT) {
          const int j = i / cx, e = (i % cx) * ce;
          cp_async16(xw + j * P + e, xsrc + int64_t(j) * H * P + e);
        }
      }
      if (!fold) xq.store(s.x, n);  // (a folding row's window: copied above)
      xd.store(s.x + n);
      Cd.store(s.C);
      if (int(threadIdx.x) < n) s.dt[(fold ? nd : 0) + threadIdx.x] = dtq;
      if (int(threadIdx.x) < nd) {
        dt_own = mamba2_step_dt(p, dtd, int(h));
        s.path[threadIdx.x] = draft_path<MaxDraft>(p.spec, int(b), threadIdx.x);
        s.dt[base + threadIdx.x] = dt_own;  // (a folding row's drafts: steps 0..nd-1)
      }
      if constexpr (!copy_B) {  // (after the other stores: their registers are free by then)
        if (fold)
          stage_rows<L, N, NT>(s.B, p.buffer.B + (slot * L * G + g) * int64_t(N), int64_t(G) * N,
                               n);
      }
      // (a folding row's copies of this thread, the barrier shows them; unconditional: behind
      // `if (fold)` ptxas spilled a gate value at MaxDraft 8)
      cp_async_wait_all();
    }
    __syncthreads();
    fused agent{s};
    if constexpr (pair && !mma_g) {
      if (!fold) {  // the copy's values, widened (exact): the fused path's load_copy
#pragma unroll
        for (int i = 0; i < V; ++i) {
          h0[i] = copy4(q0[i]);
          h1[i] = copy4(q1[i]);
        }
      }
    }
    if (fold) {
      // 3. The window folded into the tile as fold_window does it: 16-bit B as floats; c_j =
      // dt_j exp(A sum_{i > j} dt_i) by thread j (its own walk over the later steps, in
      // scale_window's order, so the same bits) and exp(A sum dt) by thread 0; then h scaled
      // by it and one FMA per element and step, steps in order, with scale_window's c_j x_j
      // (x as given times c_j); written back as the checkpoint. The drafts' dt are at 0..nd-1
      // already (the window's after them), so no barrier follows.
      if constexpr (sizeof(T) == 2 && copy_B) {
        for (int i = threadIdx.x; i < n * (N / 4); i += NT) {
          const int j = i / (N / 4), e = (i % (N / 4)) * 4;
          *reinterpret_cast<float4*>(&s.B[j][e]) = value4_of<T>(&s.Bw[j][e]);
        }
      }
      float* const cs = fold_coefs(s);
      if (int(threadIdx.x) < n) {
        const float* const dtw = s.dt + nd;  // the window's dt
        const int j = threadIdx.x;
        float later = 0.f;  // A * (sum of dt_i over the steps i > j)
        for (int i = n - 1; i > j; --i) later = fmaf(A, dtw[i], later);
        const float dt = dtw[j];
        cs[j] = dt * expf(later);
        if (j == 0) cs[L] = expf(fmaf(A, dt, later));
      }
      __syncthreads();
      const float a = cs[L];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        h0[i] = make_float4(a * h0[i].x, a * h0[i].y, a * h0[i].z, a * h0[i].w);
        h1[i] = make_float4(a * h1[i].x, a * h1[i].y, a * h1[i].z, a * h1[i].w);
      }
      const bits_t* const xw = reinterpret_cast<const bits_t*>(&s.x[0][0]) + 16 * warp + gi;
#pragma unroll 1
      for (int j = 0; j < n; ++j) {
        const float c = cs[j];
        const float x0 = bits_value<T>(xw[j * P]) * c, x1 = bits_value<T>(xw[j * P + 8]) * c;
        const float* bj = s.B[j] + 4 * t;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float4 bv = *reinterpret_cast<const float4*>(bj + 16 * i);
          h0[i] = fma4(x0, bv, h0[i]);
          h1[i] = fma4(x1, bv, h1[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        *reinterpret_cast<float4*>(row + 16 * i) = h0[i];
        *reinterpret_cast<float4*>(row8 + 16 * i) = h1[i];
      }
      if constexpr (pair) {
        // The copy regenerated from the folded fp32 values (store_checkpoint's store_copy:
        // from_float per element, the same bits); the outputs below read the fp32 values, as
        // the fused path's draft_outputs read its folded tile.
        S* const crow = copy_row(p, slot, h, warp, gi, t);
        S* const crow8 = crow + 8 * p.serving.row_stride;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          store_state4(crow + 16 * i, h0[i]);
          store_state4(crow8 + 16 * i, h1[i]);
        }
      }
    }
    // With a warp per draft (MaxDraft <= 4), each warp's dots (step j at lane j) are requested
    // now, so that their latency overlaps the G loop; the wait delays only the first wave of
    // blocks, started while the coefficient grid still ran. (v16: T = 2 / 4 rounds -1.5% / -3%;
    // at T = 8 the extra registers spilled and it lost 1.5%, so there the wait stays below.)
    constexpr bool prefetch = MaxDraft <= NT / 32;
    // With 3 or 4 drafts (two per thread), warp d's lanes take draft d's rows 2 lane and
    // 2 lane + 1 in step 7 (one 8-byte x load and one weight per two FMAs), and their gate
    // values (as given, converted in step 7) are requested here with the dots; otherwise thread
    // (d0, r) takes its drafts d0, d0 + OPT, ... at row r (with at most 2 drafts that is one x
    // load per FMA already; the two-row form spilled at MaxDraft 2).
    constexpr bool warp_out = prefetch && DPT == 2;
    float w_pre = 0.f;
    T zq[2] = {T(), T()};  // warp_out: the gate of rows 2 lane and 2 lane + 1 of draft `warp`
    if constexpr (prefetch) {
      pdl_wait();  // the coefficient grid has completed and its writes are visible
      const float* wp = p.workspace + (int64_t(b) * G + g) * (int64_t(MaxDraft) * L) + warp * L;
      if (warp < nd && lane < base + nd) w_pre = wp[lane];
      if constexpr (warp_out) {
        if (p.in.z && warp < nd) {
          const T* const zp =
              p.in.z + (r0 + warp) * p.in.z_batch_stride + h * p.in.z_head_stride + 2 * lane;
          zq[0] = zp[0];
          zq[1] = zp[1];
        }
      }
    }
    // 4. G_d[p] = h[p, :] . C_d into s.y[d][p]: the lane's 32 values of each row, then the sum
    // over the 4 lanes t of its group (which together hold the row's 128 columns). (mma_g, a row
    // that does not fold: on tensor cores from the copy's bits, g_mma.)
    if constexpr (mma_g) {
      if (!fold) {
        if constexpr (mma_bits_in_h)
          g_mma(
              s,
              [&](int i) {
                return make_uint4(__float_as_uint(h0[i].x), __float_as_uint(h1[i].x),
                                  __float_as_uint(h0[i].y), __float_as_uint(h1[i].y));
              },
              nd, warp, gi, t);
        else
          g_mma(
              s, [&](int i) { return make_uint4(q0[i].x, q1[i].x, q0[i].y, q1[i].y); }, nd, warp,
              gi, t);
      }
    }
    for (int d = 0; d < ((mma_g && !fold) ? 0 : nd); ++d) {
      const float* c = s.C[d] + 4 * t;
      float a0 = 0.f, a1 = 0.f, e0 = 0.f, e1 = 0.f;  // (two chains per row)
#pragma unroll
      for (int i = 0; i < V; i += 2) {
        const float4 c0 = *reinterpret_cast<const float4*>(c + 16 * i);
        const float4 c1 = *reinterpret_cast<const float4*>(c + 16 * (i + 1));
        a0 = fmaf(h0[i].x, c0.x, fmaf(h0[i].y, c0.y, fmaf(h0[i].z, c0.z, fmaf(h0[i].w, c0.w, a0))));
        a1 = fmaf(h1[i].x, c0.x, fmaf(h1[i].y, c0.y, fmaf(h1[i].z, c0.z, fmaf(h1[i].w, c0.w, a1))));
        e0 = fmaf(h0[i + 1].x, c1.x,
                  fmaf(h0[i + 1].y, c1.y, fmaf(h0[i + 1].z, c1.z, fmaf(h0[i + 1].w, c1.w, e0))));
        e1 = fmaf(h1[i + 1].x, c1.x,
                  fmaf(h1[i + 1].y, c1.y, fmaf(h1[i + 1].z, c1.z, fmaf(h1[i + 1].w, c1.w, e1))));
      }
      float v0 = a0 + e0, v1 = a1 + e1;
      v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
      v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
      v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
      v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
      if (t == 0) s.y[d][16 * warp + gi] = v0;
      if (t == 1) s.y[d][16 * warp + gi + 8] = v1;
    }
    // 5. The gate rows and D, requested before the wait (the state registers are free now; with
    // warp_out the gates were requested above).
    float zr[DPT];
    if constexpr (!warp_out) {
#pragma unroll
      for (int k = 0; k < DPT; ++k) {
        const int d = d0 + k * OPT;
        zr[k] = (p.in.z && d < nd)
                    ? to_float(p.in.z[(r0 + d) * p.in.z_batch_stride + h * p.in.z_head_stride + r])
                    : 0.f;
      }
    }
    const float D = p.weights.D ? p.weights.D[h] : 0.f;
    // 6. The weights: w[d][j] = dots[d][j] dt_j exp(sum of A dt over the later steps on d's
    // path), decay_d = exp(sum of A dt over d's path), one warp per draft (decay_weights). Steps
    // j < base are the buffered ones (none after a fold), then the drafts.
    if constexpr (!prefetch) pdl_wait();  // the coefficient grid's writes are visible
    const int m = base + nd;
    const float* ws = p.workspace + (int64_t(b) * G + g) * (int64_t(MaxDraft) * L);
    for (int d = warp; d < nd; d += NT / 32) {
      const float* wd = ws + d * L;
      if constexpr (L <= 32) {
        // One chunk (m <= L <= 32): decay_weights' arithmetic for its single trip, lane j at
        // step j, with the path mask and dt read once (the same bits: its carry is 0 there,
        // and x + 0 differs from x only for x = -0, where expf gives 1 all the same).
        const uint32_t path = s.path[d];
        const bool on = lane < m && (lane < base || ((path >> (lane - base)) & 1u));
        const float dt = on ? s.dt[lane] : 0.f;
        const float la = on ? A * dt : 0.f;
        const float incl = warp_suffix_sum(la);  // sum over the steps i >= lane
        // Off-path steps: exactly 0 as replay_dots leaves them (not 0 * dt, NaN for a
        // sibling's non-finite dt). With prefetch (MaxDraft <= 4) d is this warp: its dot is
        // the prefetched one.
        const float bj = on ? (prefetch ? w_pre : wd[lane]) * dt : 0.f;
        if (lane < m) s.w[d][lane] = bj * expf(incl - la);
        const float total = __shfl_sync(0xffffffffu, incl, 0);
        if (lane == 0) s.decay[d] = expf(total);
      } else {
        auto on = [&](int j) { return j < base || ((s.path[d] >> (j - base)) & 1u); };
        // Off-path steps: exactly 0 as replay_dots leaves them (not 0 * dt, NaN for a sibling's
        // non-finite dt). decay_weights asks lane j for step j (then j + 32, ...): the
        // prefetched dot where it is this warp's first draft.
        agent.decay_weights(d, m, A, on, [&](int j) {
          return on(j) ? (prefetch && j == lane ? w_pre : wd[j]) * s.dt[j] : 0.f;
        });
      }
    }
    __syncthreads();
    // 7. The outputs of this thread's drafts (the fused order: the buffered steps, then the
    // drafts; off-path weights are exactly 0), and their x appended.
    const float(*xs)[P] = s.x + (n - base);  // step j's x: the drafts sit at n + d
    if constexpr (warp_out) {
      // Warp d, draft d (the warp that computed its weights), lane rows 2 lane and 2 lane + 1:
      // per output, the arithmetic of the loop below in its order (the same bits).
      if (warp < nd) {
        const int d = warp, r2 = 2 * lane;
        const float dec = s.decay[d];
        const float2 gv = *reinterpret_cast<const float2*>(&s.y[d][r2]);
        float y0 = dec * gv.x, y1 = dec * gv.y;
        const float* const w = s.w[d];
        const float* const xj = &xs[0][r2];
#pragma unroll 4
        for (int j = 0; j < m; ++j) {
          const float wj = w[j];
          const float2 xv = *reinterpret_cast<const float2*>(xj + j * P);
          y0 = fmaf(wj, xv.x, y0);
          y1 = fmaf(wj, xv.y, y1);
        }
        const float2 xo = *reinterpret_cast<const float2*>(&s.x[n + d][r2]);  // draft d's x
        if (p.weights.D) {
          y0 = fmaf(D, xo.x, y0);
          y1 = fmaf(D, xo.y, y1);
        }
        if (p.in.z) {
          y0 *= silu(to_float(zq[0]));
          y1 *= silu(to_float(zq[1]));
        }
        T* const o = p.in.out + (r0 + d) * p.in.out_batch_stride + h * p.in.out_head_stride + r2;
        o[0] = from_float<T>(y0);
        o[1] = from_float<T>(y1);
        T* const xa = p.buffer.x + ((slot * L + n + d) * H + h) * int64_t(P) + r2;
        xa[0] = from_float<T>(xo.x);
        xa[1] = from_float<T>(xo.y);
      }
    } else {
#pragma unroll
      for (int k = 0; k < DPT; ++k) {
        const int d = d0 + k * OPT;
        if (d < nd) {
          float y = s.decay[d] * s.y[d][r];
          const float* w = s.w[d];
          for (int j = 0; j < m; ++j) y = fmaf(w[j], xs[j][r], y);
          const float x_own = s.x[n + d][r];  // x of draft d (the skip term and the append)
          if (p.weights.D) y = fmaf(D, x_own, y);
          if (p.in.z) y *= silu(zr[k]);
          p.in.out[(r0 + d) * p.in.out_batch_stride + h * p.in.out_head_stride + r] =
              from_float<T>(y);
          p.buffer.x[((slot * L + n + d) * H + h) * int64_t(P) + r] = from_float<T>(x_own);
        }
      }
    }
    if (int(threadIdx.x) < nd) p.buffer.dt[(slot * L + n + threadIdx.x) * H + h] = dt_own;
    // A fold: the row's last block to arrive sets the folded cursor (after every block of the
    // row, and of the coefficient grid, read the old one).
    if (fold)
      arrive_and_set_cursor(p.cursors.cursor, p.cursors.arrivals, slot, uint32_t(H),
                            folded_cursor(n));
  }
};

template <class Policy, int MaxDraft>
REPLAYSSM_KERNEL void __launch_bounds__(mamba2_verify_readout_threads, 4)
    mamba2_verify_readout_kernel(const mamba2_params<Policy> p) {
  using readout = mamba2_verify_readout<Policy, MaxDraft>;
  static_assert(sizeof(typename readout::shared_storage) <= 48 * 1024,
                "ReplaySSM: the verification block's staging exceeds 48 KiB of static shared "
                "memory; lower BufferLen or MaxDraft.");
  __shared__ typename readout::shared_storage smem;
  // Grid (H / G, G, batch): head h = g (H / G) + blockIdx.x of group g = blockIdx.y, so no
  // division (the blocks' linear order h + H b is that of the former (H, batch) grid).
  readout::run(smem, p, blockIdx.z, blockIdx.y * gridDim.x + blockIdx.x, blockIdx.y);
}

/// The split verification for validated params (workspace checked): the coefficient grid, then
/// the readout grid with programmatic stream serialization (its blocks may start, and request
/// their state, once every coefficient block has read its cursor and triggered). Two stream
/// launches, no synchronisation, no allocation: capturable in a CUDA graph.
template <class Policy, int MaxDraft>
result launch_mamba2_verify_split(const mamba2_params<Policy>& p, cudaStream_t stream) {
  if (p.rows.batch == 0) return ok();
  mamba2_verify_coef_kernel<Policy, MaxDraft><<<dim3(unsigned(p.ngroups), unsigned(p.rows.batch)),
                                                mamba2_verify_coef_threads, 0, stream>>>(p);
  if (auto r = check_launch(); !r) return r;
  return launch_dependent(
      mamba2_verify_readout_kernel<Policy, MaxDraft>,
      dim3(unsigned(p.nheads / p.ngroups), unsigned(p.ngroups), unsigned(p.rows.batch)),
      mamba2_verify_readout_threads, stream,
      "the split verification's readout launch failed (cudaLaunchKernelEx "
      "with programmatic stream serialization)",
      p);
}

}  // namespace detail
}  // namespace replayssm
