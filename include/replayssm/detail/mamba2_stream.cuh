// The stream kernel of the Mamba-2 split replay step (decode with `params.workspace`), for the
// policies `mamba2_stream_supported` accepts; the others keep the split item kernel
// (mamba2_agent with Split = true).
//
// Why (bench/NOTES.md v10): the split item kernel carries the commit path and the fused tile
// structure (x rows staged in shared memory, a block barrier, `contract` with a barrier), held at
// 64 registers with 40 bytes of spills, and measured 351 us per replay step (Mamba-2 H128 fp32,
// batch 256, H200) where the prototype's stream kernel (bench/experiments/split_replay, kernel B)
// took 277 us with no shared memory and no barrier.
//
// What: one block per (batch row, HB heads), each head's P rows over its warps, R rows per warp.
// A lane owns one 16-byte fragment (4 fp32, 8 16-bit elements or 16 8-bit codes) of each of its
// warp's rows, so one warp load is one fp32 state row of N = 128, two 16-bit or four 8-bit rows;
// 16- and 8-bit blocks take HB = 2 heads so that a lane has 8 (16-bit) or 4 (8-bit) 16-byte
// loads in flight, where a head per block would leave it 4 or 2 (bench/NOTES.md v11); an 8-bit
// fragment's dot is taken over the codes and multiplied by its row's scale once. Lane
// q <= n owns step q's x values of those R rows (q < n buffered, q = n the current step). A replay
// row (n + 1 < K) reads its cursor, requests its state rows and then every other input before it
// uses any (bench/experiments/stream16_latency.md): the x values (16-byte loads where the current
// step is aligned, so that no lane waits for them), and, after `pdl_wait` (the coefficient grid
// has completed: a wait for the first wave only), its row's weights w_0..w_n, decay and D from
// the workspace (mamba2_split.cuh), C and z, by asynchronous copies into the block's shared
// memory (the fused agent's storage, which replay rows do not use otherwise); waits for its own
// copies, passes one block barrier (the cursor arrival, as in the fused path: every thread has
// used its read of n), and only then waits for the state. (Loaded into registers, those inputs
// shared the state's scoreboard: their first use waited for the state, and the workspace, C
// and z loads took one more latency after it.) It forms, per lane and row,
//   decay (h[p, E lane' ..] . C[E lane' ..]) + (w_lane + [lane == n] D) x_lane[p]
// (the dot only on the lanes whose fragment is of row p),
// reduced over the warp by one transposing sum; y *= silu(z); lane n appends x (the coefficient
// kernel appended the current step's dt and B). The buffer ends up exactly as the fused path
// leaves it (x, B as given; dt after bias and softplus, same formula), and the cursor advances
// by the same per-slot arrival protocol (run_item.cuh; blocks per slot: heads(p) = nheads / HB
// rounded up; committing rows arrive once per head, the fused kernel's count). The summation
// order differs from the fused path (fp32 rounding only).
//
// A committing row (n + 1 >= K) runs the fused agent's path in the same block (its own cursor
// read, arrival and fold), so a launch is still coefficient grid + one decode grid. Not a third
// grid for the commits after this one: by then this grid has advanced the replay rows' cursors
// (a row at n = K - 2 would read K - 1 and commit twice), and a grid of batch * nheads blocks
// that mostly exit at once would cost an estimated tens of microseconds per step (unmeasured). The
// two paths share the kernel's register allocation (64, the fused path's spills stay in the commit
// branch; the stream branch alone needs <= 64 with no spills).
#pragma once

#include <replayssm/detail/mamba2_agent.cuh>
#include <type_traits>

namespace replayssm {
namespace detail {

/// Whether the split replay step of `Policy` (decode with a workspace) uses mamba2_stream_agent:
/// dstate 128, one tile per head (`Tile == HeadDim`, the default for headdim 64), a serving state
/// of fp32, bf16, fp16, or 8-bit codes with per-row scales (fp8 e4m3, int8: a pair's copy or a
/// single checkpoint), K <= 32 (lane q owns step q), one item per block, and the agent's mapping
/// (its `heads_per_block` heads over the block's warps, R rows per warp, a power of two <= 32
/// whose x values are whole 16-byte chunks and whose state rows are whole warp loads; each
/// head's warps cover dstate threads for the B append).
template <class Policy>
struct mamba2_stream_supported {
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using S = typename Policy::serving_type;
  static constexpr int warps = Policy::block_threads / 32;
  /// Heads per block: a 16-bit state row is 256 bytes, half a warp's 16-byte load, so a 16-bit
  /// block takes two heads to keep as many state bytes per lane in flight as fp32 (NOTES v11).
  /// An 8-bit block takes two as well (a lane then holds 4 fragments of 16 codes: more heads
  /// would need 32 row sums per lane, over the 64 registers).
  static constexpr int heads_per_block = (sizeof(S) <= 2 && warps * 32 >= 2 * rule::dstate) ? 2 : 1;
  static constexpr int warps_per_head = warps / heads_per_block;
  static constexpr int R = warps_per_head > 0 ? rule::headdim / warps_per_head : 0;
  static constexpr int rows_per_load = 32 / (rule::dstate / (16 / int(sizeof(S))));  ///< 1, 2, 4
  static constexpr bool value =
      rule::dstate == 128 && Policy::tile == rule::headdim && warps % heads_per_block == 0 &&
      warps_per_head * 32 >= rule::dstate && rule::headdim % warps_per_head == 0 && R >= 2 &&
      R <= 32 && (R & (R - 1)) == 0 && (R * int(sizeof(T))) % 16 == 0 && R % rows_per_load == 0 &&
      Policy::commit_interval <= 32 && Policy::pipeline_stages < 2 && is_state_storage<S>;
};

/// The decode grid of the split replay step for stream-supported policies: one work item per
/// (batch row, HB heads: one for an fp32 serving state, two for a 16- or 8-bit one), run by
/// item_kernel (its launch bounds and static shared memory are those of the fused agent, which
/// commit rows use). Replay rows stream (stream()); committing rows take the fused agent's path
/// unchanged, once per head. A lane holds 16-byte state fragments (4 fp32, 8 16-bit elements or
/// 16 8-bit codes), KL of them at the default 256 threads: 8 (fp32, 16-bit) or 4 (8-bit, with
/// the 4 rows' scales), 128 or 64 bytes of state in flight per lane (bench/NOTES.md v11).
template <class Policy, bool Branch>
struct mamba2_stream_agent {
  using fused = mamba2_agent<Policy, op::decode, 1, Branch, false>;  ///< commit rows
  using rule = typename Policy::rule;
  using T = typename Policy::input_type;
  using policy = Policy;
  using params_t = mamba2_params<Policy>;
  static constexpr op operation = op::decode;
  static constexpr int P = rule::headdim;
  static constexpr int N = rule::dstate;
  static constexpr int NT = Policy::block_threads;
  static constexpr int L = Policy::buffer_len;
  static constexpr int K = Policy::commit_interval;
  using S = typename Policy::serving_type;  ///< the state output steps read
  using support = mamba2_stream_supported<Policy>;
  static constexpr int warps = NT / 32;
  static constexpr int HB = support::heads_per_block;  ///< heads per block (1 fp32, else 2)
  static constexpr int WH = support::warps_per_head;   ///< warps per head
  static constexpr int R = support::R;                 ///< headdim rows per warp
  static constexpr int E = 16 / int(sizeof(S));        ///< state elements per 16-byte fragment
  static constexpr int LPR = N / E;                    ///< lanes per state row (32, 16 or 8)
  static constexpr int RPL = support::rows_per_load;   ///< state rows per warp load (1, 2 or 4)
  /// 8-bit serving state: codes times per-row scales (a pair's copy, or a single checkpoint)
  static constexpr bool scaled = Policy::scaled_copy || Policy::scaled_state;
  static constexpr int KL = R / RPL;                      ///< fragments per lane
  static constexpr int chunks = R * int(sizeof(T)) / 16;  ///< 16-byte chunks of a lane's x values
  static constexpr int xe = 16 / int(sizeof(T));          ///< x values per chunk
  static constexpr bool branching = Branch;
  static constexpr int tiles_per_head = 1;  ///< (the grid's x extent is heads(p): head groups)
  static constexpr int min_blocks_per_sm = fused::min_blocks_per_sm;
  static_assert(mamba2_stream_supported<Policy>::value,
                "mamba2_stream_agent: policy not supported (see mamba2_stream_supported)");
  static_assert(fused::tiles_per_head == 1, "mamba2_stream_agent: one tile per head");
  /// A replay block's staging, per head: C and z (as given, their bits), the weights w_0..w_n
  /// with decay at index L, and D, copied asynchronously before the block's barrier, so that
  /// nothing after it waits for more than shared memory and the state (see stream()). In the
  /// fused agent's storage, which only commit rows use.
  using bits_t = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  struct stage_t {
    alignas(16) bits_t C[HB][N];
    alignas(16) bits_t z[HB][P];
    alignas(16) float w[HB][L + 1];
    float D[HB];
  };
  /// A committing block's staging (commit(), fp32 single-checkpoint policies): the window's
  /// inputs as given (bits: x and B of the n buffered steps and the current one at n, the
  /// current C and z), copied asynchronously; the coefficients c_j and exp(A sum dt) (at L) and
  /// D; then the fold's rows: c_j x_j and B_j as floats.
  struct commit_stage_t {
    alignas(16) float x[L][P];  // c_j x_j
    alignas(16) float B[L][N];  // B_j
    alignas(16) bits_t xr[L][P];
    alignas(16) bits_t Br[L][N];
    alignas(16) bits_t C[N];
    alignas(16) bits_t z[P];
    alignas(16) float c[L + 1];
    float D;
  };
  /// Rows per warp of commit(): every warp of the block works on one head at a time (HB heads
  /// one after another), so CR = P / warps (= R with one head per block).
  static constexpr int CR = P / warps;
  /// An fp32 master with a serving copy (precision::fp32_bf16, fp32_fp16, fp32_fp8, fp32_int8):
  /// commit() folds the master and regenerates the copy from the folded fp32 values.
  static constexpr bool pair_commit = Policy::has_serving_copy &&
                                      std::is_same<typename Policy::master_type, float>::value &&
                                      !Policy::scaled_state;
  /// Whether committing rows take commit() (the state first, the inputs by cp.async, the
  /// coefficients from mamba2_coef_kernel, an FMA fold in the stream layout) instead of the fused
  /// agent's path: fp32 single checkpoints (no 8-bit scales) with one head per block, or an fp32
  /// master with a serving copy (pair_commit: the block's HB heads one after another); at most
  /// 8 rows per warp (32 state registers per thread at the 64-register bound), 16-bit inputs
  /// (with fp32 inputs ptxas spilled a state fragment right after its load, and in the replay
  /// path too), and a staging that fits static shared memory. The other policies keep the fused
  /// path.
  static constexpr bool stream_commit =
      ((std::is_same<S, float>::value &&
        std::is_same<typename Policy::master_type, float>::value && !Policy::has_serving_copy &&
        !scaled && HB == 1) ||
       pair_commit) &&
      P % warps == 0 && CR <= 8 && CR % 4 == 0 && sizeof(T) == 2 &&
      (P * int(sizeof(T))) % 16 == 0 && sizeof(commit_stage_t) <= 40 * 1024;
  union shared_storage {
    typename fused::shared_storage f;  ///< commit rows (fused path)
    stage_t st;                        ///< replay rows
    std::conditional_t<stream_commit, commit_stage_t, char> cm;  ///< commit rows (commit())
  };
  static_assert(sizeof(stage_t) <= sizeof(typename fused::shared_storage),
                "mamba2_stream_agent: the replay staging fits the fused agent's storage");

  shared_storage& s;

  /// Whether the serving pool's pointer and strides keep every 16-byte fragment aligned (the
  /// launcher falls back to the split item kernel otherwise).
  static REPLAYSSM_HD bool fragments_aligned(const params_t& p) {
    return fragments_aligned16<E>(serving_pool_of<Policy>(p));
  }
  /// Blocks per row: HB heads each (the last one may have fewer).
  static REPLAYSSM_HD int heads(const params_t& p) { return (p.nheads + HB - 1) / HB; }

  /// Work item (b, h): null rows touch nothing; committing rows run the fused path; replay rows
  /// stream. Every block of a row reads the same cursor (no block of the slot arrives before it
  /// has read it), so all of a row's blocks take the same path.
  REPLAYSSM_DEVICE void run(const params_t& p, int b, int hb, int /*t*/,
                            const state_pool_ref& other) {
    const int64_t slot = fused::slot_of(p, b);
    if (slot == p.rows.null_slot) return;
    const int n = buffered_steps<op::decode, K, L>(p.cursors.cursor[slot]);
    if (n + 1 >= K) {
      if constexpr (stream_commit && HB == 1) {
        commit(p, b, hb, slot, n);
      } else if constexpr (stream_commit) {
        // Pairs of a 16- or 8-bit copy (HB = 2): the block's heads one after another, each over
        // all the warps, each reading the slot and cursor again and arriving for itself, as the
        // fused items below (the same values: the slot's H arrivals are not complete before
        // this block's last head has arrived). One copy of commit() in a loop, slot and n read
        // again in it: carried across the first head instead (or commit() inlined twice),
        // ptxas spilled 40-68 bytes, state fragments among them right after their loads.
#pragma unroll 1
        for (int i = 0; i < HB; ++i) {
          const int h = hb * HB + i;
          if (h >= p.nheads) break;    // (a missing last head)
          if (i > 0) __syncthreads();  // the next head reuses the staging
          const int64_t si = fused::slot_of(p, b);
          commit(p, b, h, si, buffered_steps<op::decode, K, L>(p.cursors.cursor[si]));
        }
      } else {
        // One fused item per head (each reads the slot and cursor again, the same values: the
        // slot's H arrivals are not complete before this block's last head has arrived).
        fused{s.f}.run(p, b, hb * HB, 0, other);
        if (HB == 2 && hb * HB + 1 < p.nheads) {
          __syncthreads();  // the second head reuses the shared storage
          fused{s.f}.run(p, b, hb * HB + 1, 0, other);
        }
      }
      return;
    }
    stream(p, b, hb, slot, n);
  }

  /// Head h of a committing row (stream_commit policies; with HB = 2, pairs, the block's heads
  /// one after another, see run()): m = n + 1 steps (the n buffered ones and the current one)
  /// folded into the checkpoint (a pair's fp32 master), the current step's output from the
  /// folded state, cursor 0. Built like the fold prototype (bench/experiments/mma_fold,
  /// fold_kernel<fma, 1>):
  ///  1. the state fragments requested first (the replay rows' layout: warp w rows w R .., lane l
  ///     columns 4 l ..; R 16-byte streaming loads per thread, not waited on before the fold);
  ///  2. the window's inputs as given (x and B of steps 0..n, the current C, z) by asynchronous
  ///     copies into shared memory (current-step rows at another alignment element by element);
  ///  3. after pdl_wait, the coefficients c_j = dt_j exp(A sum_{i > j} dt_i) and exp(A sum dt)
  ///     that mamba2_coef_kernel wrote for committing rows (Commits = true), and D;
  ///  4. one barrier (the cursor arrival), c_j x_j and B_j as floats, a second barrier;
  ///  5. h = exp(A sum dt) h + sum_j (c_j x_j) B_j^T, one FMA per element and step in step
  ///     order: the same operations as the fused path's fold_window (scale_window's c_j, the
  ///     coefficient kernel forms with the same fmaf walk; rank_k), so the checkpoint is
  ///     bit-identical to it; the output is contract's sum (the same per-fragment formula and
  ///     transpose_sum<R, 32> order), + D x_cur, * silu(z).
  ///  6. (pairs) the serving copy regenerated from the folded fp32 values in registers, as the
  ///     fused path's store_copy: a 16-bit copy rounded to nearest per element (store_state4),
  ///     an 8-bit copy by store_scaled_frag<32> (a row is one warp here as in the fused tile:
  ///     the same max reduction, scale, reciprocal and codes, scale row p0 + k of the head);
  ///     the output, as the fused path's, from the fp32 values.
  /// The buffer is not appended (the window restarts at cursor 0). Call from all threads.
  REPLAYSSM_DEVICE void commit(const params_t& p, int b, int h, int64_t slot, int n) {
    constexpr int R = CR;  // (rows per warp: every warp of the block is on head h)
    const int H = p.nheads, G = p.ngroups;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tid = threadIdx.x;
    const int p0 = warp * R;
    const int m = n + 1;
    ckpt_slots ck;
    if (!resolve_ckpt_slots<Branch>(p, b, slot, true, ck)) return;
    auto& cs = s.cm;

    // 1. The state fragments (the checkpoint at ck.rd).
    uint4 hr[R];
    {
      const float* st = p.state.data + ck.rd * p.state.slot_stride + h * p.state.head_stride +
                        int64_t(p0) * p.state.row_stride + lane * 4;
#pragma unroll
      for (int k = 0; k < R; ++k)
        hr[k] = __ldcs(reinterpret_cast<const uint4*>(st + int64_t(k) * p.state.row_stride));
    }

    // 2. x and B of steps 0..n and the current C and z, as given: 16-byte asynchronous copies
    // (buffered rows: 16-byte aligned, validated; a current-step row where aligned); a current
    // row at another alignment element by element, after every copy is requested (below).
    constexpr int ce = 16 / int(sizeof(T));  // elements per 16-byte copy
    constexpr int cx = P / ce, cb = N / ce;  // copies per x row, per B row
    static_assert(cx <= 32 && cb <= 32, "mamba2_stream_agent::commit: a row's copies fit a warp");
    const int g = int(unsigned(h) / unsigned(H / G));  // (h, H / G >= 0: unsigned division)
    const T* xc = p.in.x + b * p.in.x_batch_stride + h * p.in.x_head_stride;
    const T* Bc = p.in.B + b * p.in.B_batch_stride + g * p.in.B_group_stride;
    const T* Cc = p.in.C + b * p.in.C_batch_stride + g * p.in.C_group_stride;
    const T* zc = p.in.z ? p.in.z + b * p.in.z_batch_stride + h * p.in.z_head_stride : nullptr;
    const auto aligned = [](const T* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    {
      const T* xb = p.buffer.x + (slot * L * H + h) * int64_t(P);
      for (int i = tid; i < n * cx; i += NT) {
        const int j = i / cx, e = (i - j * cx) * ce;
        cp_async16(&cs.xr[j][e], xb + int64_t(j) * H * P + e);
      }
      const T* Bb = p.buffer.B + (slot * L * G + g) * int64_t(N);
      for (int i = tid; i < n * cb; i += NT) {
        const int j = i / cb, e = (i - j * cb) * ce;
        cp_async16(&cs.Br[j][e], Bb + int64_t(j) * G * N + e);
      }
      // The current step's rows, a warp each from the last: x, B, C, z.
      const int q = lane * ce;
      if (warp == warps - 1 && lane < cx && aligned(xc)) cp_async16(&cs.xr[n][q], xc + q);
      if (warp == warps - 2 && lane < cb && aligned(Bc)) cp_async16(&cs.Br[n][q], Bc + q);
      if (warp == warps - 3 && lane < cb && aligned(Cc)) cp_async16(&cs.C[q], Cc + q);
      if (warp == warps - 4 && zc && lane < cx && aligned(zc)) cp_async16(&cs.z[q], zc + q);
    }

    // 3. The coefficient grid's c_j and exp(A sum dt) for this row and head (mamba2_coef_row,
    // committing rows), and D.
    pdl_wait();
    {
      const float* ws = p.workspace + (int64_t(b) * H + h) * (L + 1);
      if (tid <= n) cp_async4(&cs.c[tid], ws + tid);
      if (tid == NT - 1) cp_async4(&cs.c[L], ws + L);
      if (tid == NT - 2 && p.weights.D) cp_async4(&cs.D, p.weights.D + h);
    }
    // (current-step rows at another alignment: one element per thread and row)
    if (!aligned(xc))
      for (int i = tid; i < P; i += NT) cs.xr[n][i] = bits_t(value_bits(xc[i]));
    if (!aligned(Bc))
      for (int i = tid; i < N; i += NT) cs.Br[n][i] = bits_t(value_bits(Bc[i]));
    if (!aligned(Cc))
      for (int i = tid; i < N; i += NT) cs.C[i] = bits_t(value_bits(Cc[i]));
    if (zc && !aligned(zc))
      for (int i = tid; i < P; i += NT) cs.z[i] = bits_t(value_bits(zc[i]));
    cp_async_wait_all();

    // 4. c_j x_j and B_j as floats (4 elements per item), then the cursor arrival (every thread
    // has used its read of the cursor and checkpoint index; the atomic overlaps the fold). (An
    // arrival after the first barrier had ptxas wait for the atomic's result before the
    // conversions, one more round trip on warp 0 before the second barrier.)
    __syncthreads();
    for (int i = tid; i < m * (P / 4); i += NT) {
      const int j = i / (P / 4), e = (i - j * (P / 4)) * 4;
      const float c = cs.c[j];
      const float4 x = value4_of<T>(&cs.xr[j][e]);  // (x * c as scale_window's `x *= c`)
      *reinterpret_cast<float4*>(&cs.x[j][e]) = make_float4(x.x * c, x.y * c, x.z * c, x.w * c);
    }
    for (int i = tid; i < m * (N / 4); i += NT) {
      const int j = i / (N / 4), e = (i - j * (N / 4)) * 4;
      *reinterpret_cast<float4*>(&cs.B[j][e]) = value4_of<T>(&cs.Br[j][e]);
    }
    __syncthreads();
    slot_arrival arrival;
    arrival.arrive(p.cursors.arrivals, slot);

    // 5. The fold (the first use of the state): h = decay h, then h += (c_j x_j) B_j^T for
    // j = 0..n in order, as rank_k.
    float4 v[R];
    {
      const float decay = cs.c[L];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float4 q = make_float4(__uint_as_float(hr[k].x), __uint_as_float(hr[k].y),
                                     __uint_as_float(hr[k].z), __uint_as_float(hr[k].w));
        v[k] = make_float4(decay * q.x, decay * q.y, decay * q.z, decay * q.w);
      }
    }
    {
      const float* bp = &cs.B[0][lane * 4];  // B_j: the lane's 4 columns
      const float* xp = &cs.x[0][p0];        // c_j x_j: the warp's R rows (a broadcast)
#pragma unroll 1  // (unrolled by 2: 4 bytes of spills, the same 32 FFMA and 3 LDS.128 per step)
      for (int j = 0; j < m; ++j, bp += N, xp += P) {
        const float4 bj = *reinterpret_cast<const float4*>(bp);
        float xs[R];
#pragma unroll
        for (int k = 0; k < R / 4; ++k) {
          const float4 x4 = reinterpret_cast<const float4*>(xp)[k];
          xs[4 * k] = x4.x, xs[4 * k + 1] = x4.y, xs[4 * k + 2] = x4.z, xs[4 * k + 3] = x4.w;
        }
#pragma unroll
        for (int k = 0; k < R; ++k) v[k] = fma4(xs[k], bj, v[k]);
      }
    }

    // 6. The checkpoint at ck.wr (streaming stores, as tile.store).
    {
      float* st = p.state.data + ck.wr * p.state.slot_stride + h * p.state.head_stride +
                  int64_t(p0) * p.state.row_stride + lane * 4;
#pragma unroll
      for (int k = 0; k < R; ++k) store_state4(st + int64_t(k) * p.state.row_stride, v[k]);
    }
    if constexpr (pair_commit) {  // the copy at ck.wr, from the folded master (store_copy)
      const auto& sp = p.serving;
      S* cp = sp.data + ck.wr * sp.slot_stride + h * sp.head_stride +
              int64_t(p0) * sp.row_stride + lane * 4;
      if constexpr (Policy::scaled_copy) {
        const scale_pool_ref& sc = p.serving_scale;
        float* srow = sc.data + ck.wr * sc.slot_stride + h * sc.head_stride + p0;  // (tile 0)
#pragma unroll
        for (int k = 0; k < R; ++k)
          store_scaled_frag<32>(v[k], cp + int64_t(k) * sp.row_stride, srow + k);
      } else {
#pragma unroll
        for (int k = 0; k < R; ++k) store_state4(cp + int64_t(k) * sp.row_stride, v[k]);
      }
    }

    // 7. The current step's output from the folded state: contract's per-fragment dot and
    // transposing sum, then D x_cur and the gate (as the fused path).
    {
      const float4 c = value4_of<T>(&cs.C[lane * 4]);
      float acc[R];
#pragma unroll
      for (int k = 0; k < R; ++k)
        acc[k] = fmaf(v[k].x, c.x, fmaf(v[k].y, c.y, fmaf(v[k].z, c.z, v[k].w * c.w)));
      using sum = transpose_sum<R, 32>;
      sum::run(acc);
      if (sum::leader(lane)) {
        const int r = p0 + sum::index(lane);
        float y = acc[0];
        if (p.weights.D) y = fmaf(cs.D, bits_value<T>(cs.xr[n][r]), y);
        if (p.in.z) y *= silu(bits_value<T>(cs.z[r]));
        p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + r] = from_float<T>(y);
      }
    }

    // 8. The slot's last block sets cursor 0 (and, branching, ckpt_of to the written slot).
    // (one arrival per head, the fused path's count: H; with HB = 1 that is heads(p))
    arrival.finish(p.cursors.cursor, p.cursors.arrivals, slot,
                   HB == 1 ? uint32_t(heads(p)) : uint32_t(H), 0,
                   Branch ? p.branch.ckpt_of : nullptr, ck.wr);
  }

  /// A replay row's item for the block's heads hb * HB ..: the state rows, the x values, and after
  /// pdl_wait the weights, decay, D, C and z (staged), all requested before any is used; the
  /// barrier and arrival; the output, the x append and the cursor. Warp w works on
  /// head hb * HB + w / WH, rows (w % WH) * R ..; a lane holds KL 16-byte state fragments (E
  /// elements of row p0 + k RPL + lane / LPR at column (lane % LPR) E). Call from all threads.
  REPLAYSSM_DEVICE void stream(const params_t& p, int b, int hb, int64_t slot, int n) {
    const int H = p.nheads, G = p.ngroups;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // (With one head per block these fold to h = hb, live, p0 = warp R, tl = threadIdx.x and
    // half = 0: the registers the fp32 path had before two-head blocks; spelled out because the
    // compiler cannot bound warp / WH itself, and the extra live values spilled the arrival.)
    const int hw = HB == 1 ? 0 : warp / WH;  // the warp's head within the block
    const int h = hb * HB + hw;              // (>= H: a missing last head, idle)
    const bool live = HB == 1 || h < H;
    const int p0 = (HB == 1 ? warp : warp - hw * WH) * R;
    const int tl = HB == 1 ? int(threadIdx.x) : int(threadIdx.x) - hw * WH * 32;  // in the head
    const int half = RPL == 1 ? 0 : lane / LPR;  // which row of a warp load (16-, 8-bit)
    ckpt_slots ck;
    if (!resolve_ckpt_slots<Branch>(p, b, slot, true, ck)) return;

    // 1. The state fragments (what outputs read: a pair's serving copy), streamed.
    uint4 hr[KL];
    float sc[scaled ? KL : 1];  // 8-bit: the scale of each fragment's row
    if (live) {
      const auto& pool = serving_pool_of<Policy>(p);
      const S* st = pool.data + ck.rd * pool.slot_stride + h * pool.head_stride +
                    int64_t(p0 + half) * pool.row_stride + (lane % LPR) * E;
#pragma unroll
      for (int k = 0; k < KL; ++k)
        hr[k] = __ldcs(reinterpret_cast<const uint4*>(st + int64_t(k) * RPL * pool.row_stride));
      if constexpr (scaled) {
        const scale_pool_ref& sp = serving_scales_of<Policy>(p);
        const float* srow = sp.data + ck.rd * sp.slot_stride + h * sp.head_stride + p0 + half;
#pragma unroll
        for (int k = 0; k < KL; ++k) sc[k] = srow[k * RPL];
      }
    }

    // 2. The x values (lane q <= n: step q's values of the warp's rows, as given in type T):
    // buffered rows and a 16-byte aligned current step by R / xe 16-byte loads, not waited on
    // before the state; a current step at another alignment element by element.
    uint4 xr[chunks];
#pragma unroll
    for (int k = 0; k < chunks; ++k) xr[k] = make_uint4(0u, 0u, 0u, 0u);
    if (live && lane <= n) {
      const T* src = lane < n ? p.buffer.x + ((slot * L + lane) * H + h) * int64_t(P) + p0
                              : p.in.x + b * p.in.x_batch_stride + h * p.in.x_head_stride + p0;
      if (lane < n || reinterpret_cast<uintptr_t>(src) % 16 == 0) {  // (buffered: validated)
#pragma unroll
        for (int k = 0; k < chunks; ++k) xr[k] = __ldg(reinterpret_cast<const uint4*>(src) + k);
      } else {
#pragma unroll
        for (int i = 0; i < R; ++i) frag_set<T>(xr[i / xe], i % xe, src[i]);
      }
    }

    // 3. The coefficient grid's results (it has completed and its writes are visible; blocks
    // after the first wave do not wait here): the weights, decay and D (added to w_n below), by
    // the head's last warp, as asynchronous copies into the staging, which hold no register.
    // (Loaded into registers, ptxas gave them the state's scoreboard: their first use waited for
    // the state, so the output took one more latency after it. Requested first, before any
    // instruction that could wait for the state is scheduled.)
    pdl_wait();
    const int64_t at = slot * L + n;
    stage_t& sg = s.st;
    if (live) {
      const int q = tl - (WH - 1) * 32;  // the head's last warp: the weights (n <= K - 2 <= 30)
      const float* ws = p.workspace + (int64_t(b) * H + h) * (L + 1);
      if (q >= 0 && q <= n) cp_async4(&sg.w[hw][q], ws + q);
      if (q == 31) cp_async4(&sg.w[hw][L], ws + L);
      if (q == n && p.weights.D) cp_async4(&sg.D[hw], p.weights.D + h);
    }
    // 4. C and z rows of the block's heads (as given), copied the same way, 16 bytes each; rows
    // at another alignment element by element (waited for before the barrier). Then every copy
    // of this thread has landed; the state and the x values have not been waited for.
    constexpr int ce = 16 / int(sizeof(T));  // elements per 16-byte copy
    const int g = (live ? h : 0) / (H / G);  // (after the state's requests: two divisions)
    if (live) {
      const T* Cg = p.in.C + b * p.in.C_batch_stride + g * p.in.C_group_stride;
      if (tl < N / ce) {  // (the head's first warp)
        if (reinterpret_cast<uintptr_t>(Cg) % 16 == 0)
          cp_async16(&sg.C[hw][tl * ce], Cg + tl * ce);
        else
#pragma unroll
          for (int e = 0; e < ce; ++e) sg.C[hw][tl * ce + e] = bits_t(value_bits(Cg[tl * ce + e]));
      }
      const int tz = tl - 32;  // (the head's second warp)
      if (p.in.z && tz >= 0 && tz < P / ce) {
        const T* zg = p.in.z + b * p.in.z_batch_stride + h * p.in.z_head_stride;
        if (reinterpret_cast<uintptr_t>(zg) % 16 == 0)
          cp_async16(&sg.z[hw][tz * ce], zg + tz * ce);
        else
#pragma unroll
          for (int e = 0; e < ce; ++e) sg.z[hw][tz * ce + e] = bits_t(value_bits(zg[tz * ce + e]));
      }
    }
    cp_async_wait_all();  // (this thread's copies; the barrier shows them to the block)

    // 5. The cursor arrival: every thread has used its read of the cursor (and checkpoint index)
    // before this barrier (run_item.cuh slot_arrival); the atomic overlaps the rest.
    __syncthreads();
    slot_arrival arrival;
    arrival.arrive(p.cursors.arrivals, slot);
    using sum = transpose_sum<R, 32>;  // afterwards lane l holds row p0 + sum::index(l)
    const int r_out = sum::index(lane);
    if (live) {
      float w = lane <= n ? sg.w[hw][lane] : 0.f;
      if (lane == n && p.weights.D) w += sg.D[hw];  // D x_cur rides on the current weight
      const float decay = sg.w[hw][L];
      // C as given, packed (a 16-bit C takes E / 2 registers instead of E), widened in the dot.
      constexpr int cbytes = E * int(sizeof(T));
      uint4 cr[(E + xe - 1) / xe];
      {
        const bits_t* Cs = &sg.C[hw][(lane % LPR) * E];  // (cbytes-aligned)
        if constexpr (cbytes % 16 == 0) {
#pragma unroll
          for (int k = 0; k < cbytes / 16; ++k) cr[k] = reinterpret_cast<const uint4*>(Cs)[k];
        } else {
          static_assert(cbytes == 8, "mamba2_stream_agent: C fragments of 8 or 16k bytes");
          const uint2 c2 = *reinterpret_cast<const uint2*>(Cs);
          cr[0] = make_uint4(c2.x, c2.y, 0u, 0u);
        }
      }
      const float gate = p.in.z && sum::leader(lane) ? bits_value<T>(sg.z[hw][p0 + r_out]) : 0.f;

      // 6. Per-row partial sums of this lane (a fragment's dot counts for its own row only),
      // reduced over the warp.
      float v[R];
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        // (as before: the first term a product, not fma(.., 0); the state's elements read in
        // pairs, frag_get2, the terms summed from the last element down as before)
        const float2 top = frag_get2<S>(hr[k], E - 2);
        float d = top.y * frag_get<T>(cr[(E - 1) / xe], (E - 1) % xe);
        d = fmaf(top.x, frag_get<T>(cr[(E - 2) / xe], (E - 2) % xe), d);
#pragma unroll
        for (int e = E - 4; e >= 0; e -= 2) {
          const float2 q = frag_get2<S>(hr[k], e);
          d = fmaf(q.y, frag_get<T>(cr[(e + 1) / xe], (e + 1) % xe), d);
          d = fmaf(q.x, frag_get<T>(cr[e / xe], e % xe), d);
        }
        if constexpr (scaled) d *= sc[k];  // (the code dot, then the row's scale)
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
          const int r = k * RPL + q;
          v[r] = fmaf(decay, q == half ? d : 0.f, w * frag_get<T>(xr[r / xe], r % xe));
        }
      }
      sum::run(v);
      if (sum::leader(lane)) {
        float y = v[0];
        if (p.in.z) y *= silu(gate);
        p.in.out[b * p.in.out_batch_stride + h * p.in.out_head_stride + p0 + r_out] =
            from_float<T>(y);
      }

      // 7. Append the current step's x at position n (exactly as given).
      if (lane == n) {
        uint4* dst = reinterpret_cast<uint4*>(p.buffer.x + (at * H + h) * int64_t(P) + p0);
#pragma unroll
        for (int k = 0; k < chunks; ++k) dst[k] = xr[k];
      }
    }

    // 8. The slot's last block sets cursor n + 1 (and, branching, keeps ckpt_of at rd).
    arrival.finish(p.cursors.cursor, p.cursors.arrivals, slot, uint32_t(heads(p)), n + 1,
                   Branch ? p.branch.ckpt_of : nullptr, ck.rd);
  }
};

/// Whether the decode grid of `Policy`'s split step folds committing rows with
/// mamba2_stream_agent::commit (then mamba2_coef_kernel computes their coefficients).
template <class Policy, bool Supported = mamba2_stream_supported<Policy>::value>
struct mamba2_stream_commits : std::false_type {};
template <class Policy>
struct mamba2_stream_commits<Policy, true>
    : std::integral_constant<bool, mamba2_stream_agent<Policy, false>::stream_commit> {};

}  // namespace detail
}  // namespace replayssm
