// mma_verify_gdn.cu: standalone prototype of a 2-kernel Gated DeltaNet speculative verification
// (T = 4 chained drafts per row) whose state contraction runs on tensor cores (mma.sync m16n8k8
// TF32) in a near-fp32-exact 3xTF32 split, compared with 1xTF32 and with plain fp32 FMAs of the
// same structure; plus the read floor (a kernel that only reads the state) and the device-to-device
// copy bandwidth. The Gated DeltaNet sibling of ../mma_verify/mma_verify.cu (Mamba-2).
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 mma_verify_gdn.cu -o mma_verify_gdn
// Run:    ./mma_verify_gdn [--batch N]   (GPU; checks, timing table, accuracy)
//         ./mma_verify_gdn --host-test   (host-only self-test; no CUDA call)
//
// ---------------------------------------------------------------------------------------------
// The math (per row b, value head hv; k head hk = hv / (Hv / Hk); steps s = 0..14 history,
// s = 15 + d draft d = 0..3). q and k are L2-normalised per k head in fp32 (eps 1e-6 inside the
// sqrt, as the library), q is also scaled by 1/sqrt(128). alpha_s = exp(g_s). One step:
//   S_s = alpha_s S_{s-1} + k_s u_s^T,  u_s = beta_s (v_s - alpha_s S_{s-1}^T k_s)
//       = alpha_s (I - beta_s k_s k_s^T) S_{s-1} + beta_s k_s v_s^T          (S: [K x V], kv)
// The step map M_s = alpha_s (I - beta_s k_s k_s^T) is symmetric, so draft d's output
//   o_d = S_{15+d}^T q_d = S_0^T r_d + sum_{s <= 15+d} coef[d][s] v_s
// with the backward sweep (fp32, kernel 1):  r = q_d; for s = 15+d .. 0:
//   c = k_s . r;  coef[d][s] = beta_s c;  r = alpha_s (r - beta_s c k_s);    r_d = r at the end.
// (The same sweep as reference.hpp gdn_replay_output; the host test checks it against the
//  step-by-step recurrence in double.)
// Kernel 1 (sweep_kernel), grid (Hk, batch), 512 threads: normalises the 19 k and 4 q of one
//   (row, k head) into shared memory; warp w sweeps draft d = w % 4 of value head hk*4 + w / 4;
//   writes rvec[b][hv][d][K] and coef[b][hv][d][19] (zeros for s > 15 + d), fp32.
// Kernel 2 (verify_kernel<Mode, Warps>), grid (Hv, batch), one block per (row, value head): streams
//   the 64 KiB fp32 state tile into registers (16-byte loads, issued first, before it waits for
//   kernel 1 under PDL), stages r_d, coef and v_s in shared memory, computes
//   G_d[v] = sum_k S_0[k][v] r_d[k] (Mode: 3xTF32 / 1xTF32 mma, or fp32 FMA + shuffles), then
//   o_d[v] = G_d[v] + sum_s coef[d][s] v_s[v] (19 fp32 FMAs, zero coefficients past 15 + d).
//
// ---------------------------------------------------------------------------------------------
// Fragment mapping (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32), PTX ISA layouts with
// g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group):
//   A (16 x 8, M x K): a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)
//   B (8 x 8, K x N):  b0 = (k = t, n = g), b1 = (k = t+4, n = g)
//   C/D (16 x 8):      c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1)
// Our use: M = v (output index, i.e. A = S^T), K = k, N = draft d (columns 4..7 are zero).
// The 128 x 128 tile is cut into 8 chunks of 64 k-rows x 32 v-columns: chunk c has column group
// cg = c >> 1 (v = 32 cg .. 32 cg + 31) and k half kh = c & 1 (k = 64 kh .. 64 kh + 63). A warp
// owns 8 / Warps consecutive chunks (2 warps: 4, two column groups; 4 warps: 2, one column group;
// 8 warps: 1, half a column group, the two k halves summed in shared memory).
// Lane (g, t) holds, of a chunk, st[e][c] = S[64 kh + frag_k(t, e)][32 cg + frag_v(g, c)], e = 0..15,
// c = 0..3, with
//     frag_v(g, c) = 4 g + c                               (4 contiguous v: one 16-byte load)
//     frag_k(t, e) = 16 (e >> 2) + 4 t + (e & 3)           (16 k rows of the 64)
// One warp load instruction (fixed e) reads 4 k rows x 128 contiguous bytes (8 lanes x 16 B each):
// whole 128-byte lines. The v index is permuted for the mma: the two m-tiles mt = 0, 1 of a
// column group take M row m = g + 8 rh <-> lane column c = 2 mt + rh, so v = 4 g + 2 mt + rh.
// The k index is permuted the same way for A and B: at k-step j (0..7 per chunk), mma column
// kk = t + 4 h (h = 0, 1) is the lane's value e = 2 j + h, i.e. physical k = 64 kh + frag_k(t, 2j + h).
//   A reg i (m-tile mt, k-step j): value st[a_reg_e(j, i) = 2j + (i >> 1)][a_reg_c(mt, i) = 2mt + (i & 1)]
//   B reg i (k-step j):            r_d[64 kh + frag_k(t, b_reg_e(j, i) = 2j + i)] with d = g (zero for
//                                  g >= 4); the pair i = 0, 1 is k, k + 1: one 8-byte shared load
//   acc reg i (m-tile mt):         v = 32 cg + frag_v(g, acc_c(mt, i) = 2mt + (i >> 1)),
//                                  d = acc_d(lane, i) = 2t + (i & 1) (only lanes with t < 2 hold drafts)
// 3xTF32: x = x_big + x_small, x_big = cvt.rna.tf32(x), x_small = cvt.rna.tf32(x - x_big), for both
//   the state (A) and r_d (B): neither is exact in tf32. a*b ~ a_small*b_big + a_big*b_small +
//   a_big*b_big (fp32 accumulation; a_small*b_small ~ 2^-22 relative is dropped).
// FMA: the same registers; lane partial sums part[d][c] over its 16 k of each chunk, then a sum
//   over the 4 lanes t of the group (xor 1, 2); lane t writes draft d = t, 4 v as one float4.
// All mapping functions are __host__ __device__ constexpr and used by the kernels and by the host
// emulator of one warp's mma (which places the registers with the PTX layouts above, in double).
// ---------------------------------------------------------------------------------------------

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define GV_HD __host__ __device__

namespace gv {

// ---- problem shape (fixed, as in the brief; batch is a run-time argument) ----
constexpr int kHk = 16;                 // k heads
constexpr int kHv = 64;                 // value heads
constexpr int kVPerK = kHv / kHk;       // value heads per k head
constexpr int kK = 128;                 // head_k_dim
constexpr int kV = 128;                 // head_v_dim
constexpr int kHist = 15;               // buffered history steps
constexpr int kDrafts = 4;              // T
constexpr int kSteps = kHist + kDrafts; // 19
constexpr int kPoolMin = 512;           // state pool slots
constexpr double kQScaleD = 0.08838834764831845;  // 1 / sqrt(128)
constexpr float kQScale = float(kQScaleD);
constexpr float kNormEps = 1e-6f;       // inside the sqrt, as the library

// ---- tiling of the contraction ----
constexpr int kChunkK = 64;                        // k rows of a chunk
constexpr int kChunkV = 32;                        // v columns of a chunk (a column group)
constexpr int kHalves = kK / kChunkK;              // 2
constexpr int kColGroups = kV / kChunkV;           // 4
constexpr int kChunks = kHalves * kColGroups;      // 8
constexpr int kLaneK = kChunkK / 4;                // 16 k rows per lane per chunk
constexpr int kLaneV = 4;                          // 4 v per lane per chunk
constexpr int kKSteps = kChunkK / 8;               // 8 mma k-steps per chunk
constexpr int kMTiles = kChunkV / 16;              // 2 m-tiles per column group
constexpr int kRStride = kK + 16;                  // padded shared row of r_d
constexpr int kSweepThreads = 32 * kVPerK * kDrafts;  // 512: one warp per (value head, draft)

static_assert(kHalves == 2 && kColGroups == 4 && kMTiles * 2 == kLaneV, "tiling");
static_assert(kDrafts == 4, "the FMA write-out gives lane t draft d = t");
static_assert(kSteps <= 32, "one lane per step in the sweep");
static_assert(kK == 128, "sweep: lane holds k = 4 lane .. 4 lane + 3");

enum class dot_mode { tf32x3, tf32x1, fma };

// ---- PTX ISA fragment layouts of m16n8k8 tf32 (the hardware's view). Used by the host emulator
// only, so the emulator checks the kernel's mapping against them. ----
GV_HD constexpr int ptx_a_row(int lane, int i) { return (lane >> 2) + ((i & 1) ? 8 : 0); }
GV_HD constexpr int ptx_a_col(int lane, int i) { return (lane & 3) + ((i & 2) ? 4 : 0); }
GV_HD constexpr int ptx_b_row(int lane, int i) { return (lane & 3) + (i ? 4 : 0); }
GV_HD constexpr int ptx_b_col(int lane, int /*i*/) { return lane >> 2; }
GV_HD constexpr int ptx_c_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
GV_HD constexpr int ptx_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// ---- the kernel's mapping (used by the kernels and by the host emulator) ----
/// k (within the chunk's half, 0..63) of a lane's value e = 0..15 (t = threadID_in_group).
GV_HD constexpr int frag_k(int t, int e) { return 16 * (e >> 2) + 4 * t + (e & 3); }
/// v (within the column group, 0..31) of a lane's column c = 0..3 (g = groupID).
GV_HD constexpr int frag_v(int g, int c) { return 4 * g + c; }
/// Column group and k half of chunk c (0..7).
GV_HD constexpr int chunk_cg(int c) { return c >> 1; }
GV_HD constexpr int chunk_kh(int c) { return c & 1; }
/// A register i of k-step j, m-tile mt: the lane value st[a_reg_e][a_reg_c].
GV_HD constexpr int a_reg_e(int j, int i) { return 2 * j + (i >> 1); }
GV_HD constexpr int a_reg_c(int mt, int i) { return 2 * mt + (i & 1); }
/// B register i of k-step j: r_d at k = frag_k(t, b_reg_e(j, i)), d = b_lane_d(lane).
GV_HD constexpr int b_reg_e(int j, int i) { return 2 * j + i; }
GV_HD constexpr int b_lane_d(int lane) { return lane >> 2; }
/// Accumulator register i of m-tile mt: lane column c (v = frag_v(g, c)) and draft d.
GV_HD constexpr int acc_c(int mt, int i) { return 2 * mt + (i >> 1); }
GV_HD constexpr int acc_d(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// ---- bf16 stored as uint16_t bits ----
GV_HD inline float bf16_to_float(uint16_t u) {
  uint32_t bits = uint32_t(u) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even (finite inputs)
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
/// Host emulation of cvt.rna.tf32.f32: round to nearest, ties away from zero, 10 explicit
/// mantissa bits (low 13 bits zero). Finite inputs only.
inline float host_rna_tf32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// ---- inputs / parameters ----
// Layouts (row-major, last index contiguous):
//   state    fp32 [pool][Hv][K][V]            slot_idx int [batch]
//   k_hist   bf16 [batch][15][Hk][K]  (raw)   k_draft, q_draft bf16 [batch][4][Hk][K] (raw)
//   v_hist   bf16 [batch][15][Hv][V]          v_draft bf16 [batch][4][Hv][V]
//   g_hist, beta_hist fp32 [batch][15][Hv]    g_draft, beta_draft fp32 [batch][4][Hv]
//   rvec     fp32 [batch][Hv][4][K]           coef fp32 [batch][Hv][4][19]   (kernel 1 -> 2)
//   out      fp32 [batch][4][Hv][V]           g_dbg fp32 [batch][Hv][4][V] (optional: G_d)
struct sweep_params {
  const uint16_t* k_hist;
  const uint16_t* k_draft;
  const uint16_t* q_draft;
  const float* g_hist;
  const float* g_draft;
  const float* beta_hist;
  const float* beta_draft;
  float* rvec;
  float* coef;
  int batch;
};
struct verify_params {
  const float* state;
  const int* slot_idx;
  const uint16_t* v_hist;
  const uint16_t* v_draft;
  const float* rvec;
  const float* coef;
  float* out;
  float* g_dbg;  // null when timing
  int batch;
};

// =============================================================================================
// Device code
// =============================================================================================

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

/// acc += A * B for one m16n8k8 tf32 mma (fp32 accumulators).
__device__ __forceinline__ void mma_tf32(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// PDL: kernel 2 waits here for kernel 1 (a no-op when launched without the PDL attribute).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

using chunk_regs = float[kLaneK][kLaneV];

/// Loads chunk c of a state tile (row stride kV floats) into the lane's fragment registers:
/// 16 x 16-byte streaming loads.
__device__ __forceinline__ void load_chunk(const float* __restrict__ tile, int c, chunk_regs& st, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const float* base = tile + (chunk_kh(c) * kChunkK) * kV + chunk_cg(c) * kChunkV + frag_v(g, 0);
#pragma unroll
  for (int e = 0; e < kLaneK; ++e) {
    const float4 v = __ldcs(reinterpret_cast<const float4*>(base + frag_k(t, e) * kV));
    st[e][0] = v.x;
    st[e][1] = v.y;
    st[e][2] = v.z;
    st[e][3] = v.w;
  }
}

/// Adds one chunk's contribution: acc (mma modes, [m-tile][reg]) or part (FMA, [d][c]).
/// rs: r_d in shared memory (row stride kRStride), already offset by 64 kh.
template <dot_mode Mode>
__device__ __forceinline__ void contract_chunk(const chunk_regs& st, const float* rs, float (&acc)[kMTiles][4],
                                               float (&part)[kDrafts][kLaneV], int lane) {
  const int t = lane & 3;
  if constexpr (Mode == dot_mode::fma) {
#pragma unroll
    for (int q = 0; q < kLaneK / 4; ++q)
#pragma unroll
      for (int d = 0; d < kDrafts; ++d) {
        const float4 r = *reinterpret_cast<const float4*>(rs + d * kRStride + frag_k(t, 4 * q));
#pragma unroll
        for (int c = 0; c < kLaneV; ++c) {
          float v = part[d][c];
          v = fmaf(st[4 * q + 0][c], r.x, v);
          v = fmaf(st[4 * q + 1][c], r.y, v);
          v = fmaf(st[4 * q + 2][c], r.z, v);
          v = fmaf(st[4 * q + 3][c], r.w, v);
          part[d][c] = v;
        }
      }
  } else {
    const int bd = b_lane_d(lane);
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      float2 rb = make_float2(0.f, 0.f);
      if (bd < kDrafts) rb = *reinterpret_cast<const float2*>(rs + bd * kRStride + frag_k(t, b_reg_e(j, 0)));
      const float bv[2] = {rb.x, rb.y};
      uint32_t b_big[2], b_small[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        b_big[i] = to_tf32(bv[i]);
        b_small[i] = to_tf32(bv[i] - __uint_as_float(b_big[i]));
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        uint32_t a_big[4], a_small[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float v = st[a_reg_e(j, i)][a_reg_c(mt, i)];
          a_big[i] = to_tf32(v);
          a_small[i] = to_tf32(v - __uint_as_float(a_big[i]));
        }
        if constexpr (Mode == dot_mode::tf32x3) {
          mma_tf32(acc[mt], a_small, b_big);
          mma_tf32(acc[mt], a_big, b_small);
        }
        mma_tf32(acc[mt], a_big, b_big);
      }
    }
  }
}

/// Writes a column group's sums G_d[v] to gs ([4][kV], this k half's or the total).
template <dot_mode Mode>
__device__ __forceinline__ void flush_group(float (&acc)[kMTiles][4], float (&part)[kDrafts][kLaneV], float* gs,
                                            int cg, int lane) {
  const int g = lane >> 2, t = lane & 3;
  if constexpr (Mode == dot_mode::fma) {
    float mine[kLaneV] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int d = 0; d < kDrafts; ++d)
#pragma unroll
      for (int c = 0; c < kLaneV; ++c) {
        float v = part[d][c];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        if (t == d) mine[c] = v;  // lane t writes draft t
      }
    *reinterpret_cast<float4*>(gs + t * kV + cg * kChunkV + frag_v(g, 0)) = make_float4(mine[0], mine[1], mine[2], mine[3]);
  } else {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = acc_d(lane, i);
        if (d < kDrafts) gs[d * kV + cg * kChunkV + frag_v(g, acc_c(mt, i))] = acc[mt][i];
      }
  }
}

/// Register buffers of a warp's chunk pipeline: CPW chunks, at most 2 in flight.
template <int CPW>
struct pipe_cfg {
  static constexpr int kBufs = CPW < 2 ? CPW : 2;
  static constexpr int kOuts = CPW == 1 ? kHalves : 1;  // gs planes: 1 warp per chunk -> one per half
};

/// Issues the loads of the warp's first chunks (c0 .. c0 + kBufs - 1).
template <int CPW>
__device__ __forceinline__ void pipe_begin(const float* __restrict__ tile, int c0,
                                           chunk_regs (&st)[pipe_cfg<CPW>::kBufs], int lane) {
#pragma unroll
  for (int i = 0; i < pipe_cfg<CPW>::kBufs; ++i) load_chunk(tile, c0 + i, st[i], lane);
}

/// Contracts the warp's chunks c0 .. c0 + CPW - 1 against r_d (rs, shared), loading the later
/// chunks as buffers free up, and writes G_d[v] of its column group(s) to gs
/// ([kOuts][4][kV]; with one chunk per warp, plane kh holds that half's partial sums).
template <dot_mode Mode, int CPW>
__device__ __forceinline__ void pipe_finish(const float* __restrict__ tile, int c0,
                                            chunk_regs (&st)[pipe_cfg<CPW>::kBufs], const float* rs, float* gs,
                                            int lane) {
  constexpr int kBufs = pipe_cfg<CPW>::kBufs;
  float acc[kMTiles][4];
  float part[kDrafts][kLaneV];
#pragma unroll
  for (int i = 0; i < CPW; ++i) {
    const int c = c0 + i;
    const int kh = CPW >= 2 ? (i & 1) : chunk_kh(c);  // c0 is even when CPW >= 2
    if (CPW == 1 || kh == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][r] = 0.f;
#pragma unroll
      for (int d = 0; d < kDrafts; ++d)
#pragma unroll
        for (int r = 0; r < kLaneV; ++r) part[d][r] = 0.f;
    }
    contract_chunk<Mode>(st[i % kBufs], rs + kh * kChunkK, acc, part, lane);
    if (i + kBufs < CPW) load_chunk(tile, c + kBufs, st[i % kBufs], lane);
    if (CPW == 1 || kh == 1) flush_group<Mode>(acc, part, gs + (CPW == 1 ? kh : 0) * kDrafts * kV, chunk_cg(c), lane);
  }
}

/// Kernel 1: the backward sweep of every (value head, draft) of one (k head, row).
__global__ void __launch_bounds__(kSweepThreads) sweep_kernel(sweep_params prm) {
  pdl_trigger();  // let kernel 2's blocks start streaming the state as soon as they fit
  const int hk = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ __align__(16) float ks[kSteps][kK];
  __shared__ __align__(16) float qs[kDrafts][kK];
  // Normalise the 19 k and 4 q (fp32): one warp per vector, lane holds 4 values.
  for (int vec = warp; vec < kSteps + kDrafts; vec += kSweepThreads / 32) {
    const uint16_t* src;
    float* dst;
    float scale = 1.f;
    if (vec < kHist) {
      src = prm.k_hist + ((int64_t(b) * kHist + vec) * kHk + hk) * kK;
      dst = ks[vec];
    } else if (vec < kSteps) {
      src = prm.k_draft + ((int64_t(b) * kDrafts + (vec - kHist)) * kHk + hk) * kK;
      dst = ks[vec];
    } else {
      src = prm.q_draft + ((int64_t(b) * kDrafts + (vec - kSteps)) * kHk + hk) * kK;
      dst = qs[vec - kSteps];
      scale = kQScale;
    }
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src) + lane);
    const float x0 = __uint_as_float(raw.x << 16), x1 = __uint_as_float(raw.x & 0xFFFF0000u);
    const float x2 = __uint_as_float(raw.y << 16), x3 = __uint_as_float(raw.y & 0xFFFF0000u);
    float ss = x0 * x0;
    ss = fmaf(x1, x1, ss);
    ss = fmaf(x2, x2, ss);
    ss = fmaf(x3, x3, ss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = scale / sqrtf(ss + kNormEps);
    *reinterpret_cast<float4*>(dst + 4 * lane) = make_float4(x0 * inv, x1 * inv, x2 * inv, x3 * inv);
  }
  __syncthreads();

  const int hv = hk * kVPerK + warp / kDrafts, d = warp % kDrafts;
  const int last = kHist + d;
  float gl = 0.f, bl = 0.f;
  if (lane < kSteps) {
    gl = lane < kHist ? prm.g_hist[(int64_t(b) * kHist + lane) * kHv + hv]
                      : prm.g_draft[(int64_t(b) * kDrafts + (lane - kHist)) * kHv + hv];
    bl = lane < kHist ? prm.beta_hist[(int64_t(b) * kHist + lane) * kHv + hv]
                      : prm.beta_draft[(int64_t(b) * kDrafts + (lane - kHist)) * kHv + hv];
  }
  const float al = expf(gl);
  float4 r = *reinterpret_cast<const float4*>(&qs[d][4 * lane]);
  float my_coef = 0.f;
#pragma unroll
  for (int s = kSteps - 1; s >= 0; --s) {
    if (s > last) continue;  // warp-uniform
    const float4 k = *reinterpret_cast<const float4*>(&ks[s][4 * lane]);
    float c = r.x * k.x;
    c = fmaf(r.y, k.y, c);
    c = fmaf(r.z, k.z, c);
    c = fmaf(r.w, k.w, c);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    const float bc = __shfl_sync(0xffffffffu, bl, s) * c;
    const float a = __shfl_sync(0xffffffffu, al, s);
    if (lane == s) my_coef = bc;
    r.x = a * fmaf(-bc, k.x, r.x);
    r.y = a * fmaf(-bc, k.y, r.y);
    r.z = a * fmaf(-bc, k.z, r.z);
    r.w = a * fmaf(-bc, k.w, r.w);
  }
  const int64_t hd = (int64_t(b) * kHv + hv) * kDrafts + d;
  *reinterpret_cast<float4*>(prm.rvec + hd * kK + 4 * lane) = r;
  if (lane < kSteps) prm.coef[hd * kSteps + lane] = my_coef;
}

/// Kernel 2: the 4 drafts' outputs of one (row, value head). Warps = 2, 4 or 8.
template <dot_mode Mode, int Warps>
__global__ void __launch_bounds__(Warps * 32) verify_kernel(verify_params prm) {
  constexpr int kThreads = Warps * 32;
  constexpr int CPW = kChunks / Warps;
  constexpr int kBufs = pipe_cfg<CPW>::kBufs;
  constexpr int kOuts = pipe_cfg<CPW>::kOuts;
  static_assert(CPW * Warps == kChunks && CPW >= 1, "Warps must be 1, 2, 4 or 8");

  const int hv = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  __shared__ __align__(16) float rs[kDrafts][kRStride];  // r_d
  __shared__ __align__(16) float gs[kOuts][kDrafts][kV];  // G_d[v] (per k half with 8 warps)
  __shared__ float cs[kDrafts][kSteps];                   // coef[d][s]
  __shared__ __align__(16) uint16_t vs[kSteps][kV];       // v_s (bf16)

  // 1. Request the warp's first state chunks (the 1 GiB stream) before anything else.
  const int64_t slot = prm.slot_idx[b];
  const float* tile = prm.state + (slot * kHv + hv) * int64_t(kK * kV);
  chunk_regs st[kBufs];
  pipe_begin<CPW>(tile, warp * CPW, st, lane);

  // 2. Stage v_s (inputs, not produced by kernel 1): 19 x 128 bf16 in 16-byte pieces.
  for (int i = threadIdx.x; i < kSteps * kV / 8; i += kThreads) {
    const int s = i / (kV / 8), p = (i % (kV / 8)) * 8;
    const uint16_t* src = s < kHist ? prm.v_hist + ((int64_t(b) * kHist + s) * kHv + hv) * kV + p
                                    : prm.v_draft + ((int64_t(b) * kDrafts + (s - kHist)) * kHv + hv) * kV + p;
    *reinterpret_cast<uint4*>(&vs[s][p]) = __ldg(reinterpret_cast<const uint4*>(src));
  }

  // 3. Kernel 1's results (PDL: wait for it here, after the state loads are in flight).
  pdl_wait();
  const int64_t hd0 = (int64_t(b) * kHv + hv) * kDrafts;
  for (int i = threadIdx.x; i < kDrafts * kK / 4; i += kThreads) {
    const int d = i / (kK / 4), k4 = (i % (kK / 4)) * 4;
    *reinterpret_cast<float4*>(&rs[d][k4]) = *reinterpret_cast<const float4*>(prm.rvec + (hd0 + d) * kK + k4);
  }
  for (int i = threadIdx.x; i < kDrafts * kSteps; i += kThreads) cs[i / kSteps][i % kSteps] = prm.coef[hd0 * kSteps + i];
  __syncthreads();

  // 4. G_d[v] = sum_k S[k][v] r_d[k] over the warp's chunks.
  pipe_finish<Mode, CPW>(tile, warp * CPW, st, &rs[0][0], &gs[0][0][0], lane);
  __syncthreads();

  // 5. o_d[v] = G_d[v] + sum_s coef[d][s] v_s[v] (coef = 0 past step 15 + d).
  for (int o = threadIdx.x; o < kDrafts * kV; o += kThreads) {
    const int d = o / kV, v = o % kV;
    float y = gs[0][d][v];
    if constexpr (kOuts == 2) y += gs[1][d][v];
    if (prm.g_dbg) prm.g_dbg[(hd0 + d) * kV + v] = y;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) y = fmaf(cs[d][s], bf16_to_float(vs[s][v]), y);
    __stcs(prm.out + ((int64_t(b) * kDrafts + d) * kHv + hv) * kV + v, y);
  }
}

/// Read floor: reads every (row, value head) state tile of the batch once (same grid and
/// addressing as verify_kernel) and writes one sum per block.
template <int Threads>
__global__ void __launch_bounds__(Threads) read_state_kernel(const float* __restrict__ state,
                                                             const int* __restrict__ slot_idx, float* __restrict__ sink) {
  constexpr int kVec = kK * kV / 4;
  constexpr int kPer = kVec / Threads;
  const int hv = blockIdx.x, b = blockIdx.y;
  const int64_t slot = slot_idx[b];
  const float4* tile = reinterpret_cast<const float4*>(state + (slot * kHv + hv) * int64_t(kK * kV));
  float4 v[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) v[i] = __ldcs(tile + i * Threads + threadIdx.x);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc += (v[i].x + v[i].y) + (v[i].z + v[i].w);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float red[Threads / 32];
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < Threads / 32; ++w) s += red[w];
    sink[int64_t(b) * kHv + hv] = s;
  }
}

/// One warp, the kernel's own pipeline with 2 chunks (column group 0, both k halves):
/// G[d][v] = sum_k S[k][v] r[d][k] for v = 0..31 of a 128 x 128 tile. g_out[d * 32 + v].
template <dot_mode Mode>
__global__ void probe_kernel(const float* __restrict__ tile, const float* __restrict__ r4, float* __restrict__ g_out) {
  __shared__ __align__(16) float rs[kDrafts][kRStride];
  __shared__ __align__(16) float gs[kDrafts][kV];
  const int lane = threadIdx.x;
  for (int i = lane; i < kDrafts * kK; i += 32) rs[i / kK][i % kK] = r4[i];
  for (int i = lane; i < kDrafts * kV; i += 32) gs[i / kV][i % kV] = __int_as_float(0x7FC00000);  // NaN
  chunk_regs st[pipe_cfg<2>::kBufs];
  pipe_begin<2>(tile, 0, st, lane);
  __syncwarp();
  pipe_finish<Mode, 2>(tile, 0, st, &rs[0][0], &gs[0][0], lane);
  __syncwarp();
  for (int i = lane; i < kDrafts * kChunkV; i += 32) g_out[i] = gs[i / kChunkV][i % kChunkV];
}

/// Device-side random fill of the state pool: uniform in [-0.5, 0.5).
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__global__ void fill_state_kernel(float* __restrict__ s, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed + 0x9E3779B97F4A7C15ull * (i + 1));
    s[i] = float(r >> 40) * (1.0f / 16777216.0f) - 0.5f;
  }
}

// =============================================================================================
// Host side
// =============================================================================================

struct host_rng {  // splitmix64
  uint64_t s;
  explicit host_rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float uniform(float lo, float hi) { return float(lo + (hi - lo) * uniform()); }
};

static bool report(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? "PASS" : "FAIL", what);
  return ok;
}

// ---- one (row, value head) in double: the reference ----
struct head_inputs {
  double S0[kK][kV];
  double k[kSteps][kK];    // normalised
  double q[kDrafts][kK];   // normalised and scaled
  double v[kSteps][kV];
  double g[kSteps], beta[kSteps];
};

/// L2-normalises (eps inside the sqrt) and scales a raw vector, in double.
static void normalise(const float* raw, double scale, double* out) {
  double ss = 0.0;
  for (int i = 0; i < kK; ++i) ss += double(raw[i]) * raw[i];
  const double inv = scale / std::sqrt(ss + double(kNormEps));
  for (int i = 0; i < kK; ++i) out[i] = raw[i] * inv;
}

/// The backward sweep in double: r[d][k], coef[d][s] (0 past 15 + d), and mag[d][s] =
/// beta_s |r before step s| (the scale of coef's fp32 rounding).
static void sweep_double(const head_inputs& in, double (*r)[kK], double (*coef)[kSteps], double (*mag)[kSteps]) {
  for (int d = 0; d < kDrafts; ++d) {
    for (int i = 0; i < kK; ++i) r[d][i] = in.q[d][i];
    for (int s = 0; s < kSteps; ++s) coef[d][s] = mag[d][s] = 0.0;
    for (int s = kHist + d; s >= 0; --s) {
      double c = 0.0, nr = 0.0;
      for (int i = 0; i < kK; ++i) c += in.k[s][i] * r[d][i], nr += r[d][i] * r[d][i];
      const double bc = in.beta[s] * c, a = std::exp(in.g[s]);
      coef[d][s] = bc;
      mag[d][s] = in.beta[s] * std::sqrt(nr);
      for (int i = 0; i < kK; ++i) r[d][i] = a * (r[d][i] - bc * in.k[s][i]);
    }
  }
}

/// Closed form o_d = S0^T r_d + sum_s coef[d][s] v_s; also the state term S0^T r_d alone.
static void closed_form(const head_inputs& in, double (*o)[kV], double (*state_term)[kV]) {
  double r[kDrafts][kK], coef[kDrafts][kSteps], mag[kDrafts][kSteps];
  sweep_double(in, r, coef, mag);
  for (int d = 0; d < kDrafts; ++d)
    for (int v = 0; v < kV; ++v) {
      double gsum = 0.0;
      for (int i = 0; i < kK; ++i) gsum += in.S0[i][v] * r[d][i];
      double y = gsum;
      for (int s = 0; s < kSteps; ++s) y += coef[d][s] * in.v[s][v];
      o[d][v] = y;
      if (state_term) state_term[d][v] = gsum;
    }
}

/// The literal recurrence, step by step, in double: S_s = alpha S + k u^T, u = beta (v - alpha S^T k);
/// draft d's output o_d = S_{15+d}^T q_d.
static void stepwise(const head_inputs& in, double (*o)[kV]) {
  static thread_local double S[kK][kV];
  std::memcpy(S, in.S0, sizeof S);
  double u[kV];
  for (int s = 0; s < kSteps; ++s) {
    const double a = std::exp(in.g[s]);
    for (int v = 0; v < kV; ++v) u[v] = 0.0;
    for (int i = 0; i < kK; ++i)
      for (int v = 0; v < kV; ++v) u[v] += S[i][v] * in.k[s][i];  // S^T k
    for (int v = 0; v < kV; ++v) u[v] = in.beta[s] * (in.v[s][v] - a * u[v]);
    for (int i = 0; i < kK; ++i)
      for (int v = 0; v < kV; ++v) S[i][v] = a * S[i][v] + in.k[s][i] * u[v];
    if (s >= kHist) {
      const int d = s - kHist;
      for (int v = 0; v < kV; ++v) o[d][v] = 0.0;
      for (int i = 0; i < kK; ++i)
        for (int v = 0; v < kV; ++v) o[d][v] += S[i][v] * in.q[d][i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host self-test (no CUDA call)
// ---------------------------------------------------------------------------------------------

/// frag_k / frag_v are bijections, loads are aligned contiguous float4 runs, B pairs contiguous,
/// chunks tile the 128 x 128 tile once.
static bool test_mapping() {
  bool ok = true;
  std::vector<int> hk(kChunkK, 0), hv(kChunkV, 0);
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < kLaneK; ++e) {
      const int k = frag_k(t, e);
      if (k < 0 || k >= kChunkK) ok = false; else ++hk[k];
    }
  for (int g = 0; g < 8; ++g)
    for (int c = 0; c < kLaneV; ++c) {
      const int v = frag_v(g, c);
      if (v < 0 || v >= kChunkV) ok = false; else ++hv[v];
    }
  for (int k : hk) ok = ok && k == 1;
  for (int v : hv) ok = ok && v == 1;
  bool contiguous = true;
  for (int g = 0; g < 8; ++g) {
    contiguous = contiguous && frag_v(g, 0) % 4 == 0;
    for (int c = 0; c < kLaneV; ++c) contiguous = contiguous && frag_v(g, c) == frag_v(g, 0) + c;
  }
  for (int t = 0; t < 4; ++t) {
    for (int j = 0; j < kKSteps; ++j)
      contiguous = contiguous && frag_k(t, b_reg_e(j, 1)) == frag_k(t, b_reg_e(j, 0)) + 1 && frag_k(t, b_reg_e(j, 0)) % 2 == 0;
    for (int q = 0; q < kLaneK / 4; ++q) {  // FMA r loads: float4 runs
      contiguous = contiguous && frag_k(t, 4 * q) % 4 == 0;
      for (int r = 0; r < 4; ++r) contiguous = contiguous && frag_k(t, 4 * q + r) == frag_k(t, 4 * q) + r;
    }
  }
  // A warp load instruction (fixed e): 4 rows, each 8 lanes x 16 B = 128 contiguous, aligned bytes.
  bool lines = true;
  for (int e = 0; e < kLaneK; ++e) {
    std::vector<int> rows;
    for (int t = 0; t < 4; ++t) rows.push_back(frag_k(t, e));
    std::sort(rows.begin(), rows.end());
    lines = lines && std::unique(rows.begin(), rows.end()) == rows.end();
  }
  bool tiles = true;
  std::vector<int> cover(kK * kV, 0);
  for (int c = 0; c < kChunks; ++c)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < kLaneK; ++e)
        for (int cc = 0; cc < kLaneV; ++cc)
          ++cover[(chunk_kh(c) * kChunkK + frag_k(lane & 3, e)) * kV + chunk_cg(c) * kChunkV + frag_v(lane >> 2, cc)];
  for (int x : cover) tiles = tiles && x == 1;
  bool uses = true;  // every lane value enters exactly one A register per m-tile and one B pair
  {
    std::vector<int> a_use(kLaneK * kLaneV, 0), b_use(kLaneK, 0);
    for (int j = 0; j < kKSteps; ++j) {
      for (int mt = 0; mt < kMTiles; ++mt)
        for (int i = 0; i < 4; ++i) ++a_use[a_reg_e(j, i) * kLaneV + a_reg_c(mt, i)];
      for (int i = 0; i < 2; ++i) ++b_use[b_reg_e(j, i)];
    }
    for (int x : a_use) uses = uses && x == 1;
    for (int x : b_use) uses = uses && x == 1;
  }
  report(ok, "frag_k: (t, e) -> k = 0..63 and frag_v: (g, c) -> v = 0..31 are bijections");
  report(contiguous, "state loads are 16-byte aligned float4 runs of v; B pairs and FMA r float4s contiguous in k");
  report(lines, "a warp load instruction reads 4 distinct k rows x 128 contiguous bytes");
  report(tiles, "the 8 chunks x 32 lanes x 64 values cover the 128 x 128 tile exactly once");
  report(uses, "every lane value enters exactly one A register (per chunk) and r one B pair per k-step");
  return ok && contiguous && lines && tiles && uses;
}

/// Emulates one warp's pipeline over one column group (2 chunks, 2 x 8 k-steps, 2 m-tiles):
/// registers filled with the kernel's mapping, placed by the PTX layouts, D += A B in double;
/// the accumulators read with the kernel's acc mapping must equal sum_k S[k][v] r_d[k]. Also the
/// FMA variant's lane sums and write-out.
static bool test_mma_emulation(host_rng& rng) {
  static double S[kK][kV];
  double r[kDrafts][kK];
  for (auto& row : S)
    for (double& x : row) x = rng.uniform() - 0.5;
  for (auto& row : r)
    for (double& x : row) x = 2.0 * rng.uniform() - 1.0;
  bool coverage = true, all_seen = true;
  double max_err = 0.0, fma_err = 0.0;
  for (int cg = 0; cg < kColGroups; ++cg) {
    double D[kMTiles][16][8] = {};
    for (int kh = 0; kh < kHalves; ++kh) {
      const int c = 2 * cg + kh;
      for (int j = 0; j < kKSteps; ++j) {
        double Bt[8][8] = {};
        int b_hits[8][8] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const int t = lane & 3;
          for (int i = 0; i < 2; ++i) {
            const int d = b_lane_d(lane);
            const double val = d < kDrafts ? r[d][chunk_kh(c) * kChunkK + frag_k(t, b_reg_e(j, i))] : 0.0;
            Bt[ptx_b_row(lane, i)][ptx_b_col(lane, i)] = val;
            ++b_hits[ptx_b_row(lane, i)][ptx_b_col(lane, i)];
          }
        }
        for (int x = 0; x < 8; ++x)
          for (int y = 0; y < 8; ++y) coverage = coverage && b_hits[x][y] == 1;
        for (int mt = 0; mt < kMTiles; ++mt) {
          double At[16][8] = {};
          int a_hits[16][8] = {};
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            for (int i = 0; i < 4; ++i) {  // what the kernel puts in A register i: st[e][cc]
              const int e = a_reg_e(j, i), cc = a_reg_c(mt, i);
              const double val = S[chunk_kh(c) * kChunkK + frag_k(t, e)][chunk_cg(c) * kChunkV + frag_v(g, cc)];
              At[ptx_a_row(lane, i)][ptx_a_col(lane, i)] = val;
              ++a_hits[ptx_a_row(lane, i)][ptx_a_col(lane, i)];
            }
          }
          for (int x = 0; x < 16; ++x)
            for (int y = 0; y < 8; ++y) coverage = coverage && a_hits[x][y] == 1;
          for (int x = 0; x < 16; ++x)
            for (int y = 0; y < 8; ++y)
              for (int z = 0; z < 8; ++z) D[mt][x][y] += At[x][z] * Bt[z][y];
        }
      }
    }
    std::vector<int> seen(kDrafts * kChunkV, 0);
    for (int mt = 0; mt < kMTiles; ++mt)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          const double val = D[mt][ptx_c_row(lane, i)][ptx_c_col(lane, i)];  // what acc[mt][i] holds
          const int d = acc_d(lane, i);
          const int v = cg * kChunkV + frag_v(lane >> 2, acc_c(mt, i));  // what the kernel takes it for
          double want = 0.0;
          if (d < kDrafts) {
            for (int k = 0; k < kK; ++k) want += S[k][v] * r[d][k];
            ++seen[d * kChunkV + (v - cg * kChunkV)];
          }
          max_err = std::max(max_err, std::fabs(val - want));
        }
    for (int x : seen) all_seen = all_seen && x == 1;
    // FMA: lane (g, t) sums its values over both halves; the group sums over t; lane t writes d = t.
    for (int g = 0; g < 8; ++g)
      for (int d = 0; d < kDrafts; ++d)
        for (int cc = 0; cc < kLaneV; ++cc) {
          const int v = cg * kChunkV + frag_v(g, cc);
          double sum = 0.0, want = 0.0;
          for (int t = 0; t < 4; ++t)
            for (int kh = 0; kh < kHalves; ++kh)
              for (int e = 0; e < kLaneK; ++e) sum += S[kh * kChunkK + frag_k(t, e)][v] * r[d][kh * kChunkK + frag_k(t, e)];
          for (int k = 0; k < kK; ++k) want += S[k][v] * r[d][k];
          fma_err = std::max(fma_err, std::fabs(sum - want));
        }
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "emulated warp mma (kernel mapping placed by the PTX layouts) = S^T r: max abs err %.2e", max_err);
  const bool ok1 = report(max_err < 1e-12, buf);
  report(coverage, "every A/B tile element written by exactly one lane register per k-step");
  report(all_seen, "every (v, d < 4) output held by exactly one accumulator register");
  std::snprintf(buf, sizeof buf, "emulated FMA-variant lane sums = S^T r: max abs err %.2e", fma_err);
  const bool ok2 = report(fma_err < 1e-12, buf);
  return ok1 && ok2 && coverage && all_seen;
}

/// cvt.rna emulation and the 3xTF32 split accuracy (both operands fp32, neither exact in tf32).
static bool test_tf32_split(host_rng& rng) {
  bool ok = true;
  ok = ok && host_rna_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f;  // tie -> away
  ok = ok && host_rna_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f);
  ok = ok && host_rna_tf32(1.0f + 0x1p-12f) == 1.0f;
  ok = ok && host_rna_tf32(1.0f + 3 * 0x1p-12f) == 1.0f + 0x1p-10f;
  ok = ok && host_rna_tf32(1.5f) == 1.5f;
  report(ok, "cvt.rna.tf32 emulation: ties away from zero at 10 mantissa bits");
  auto split = [](float x, float& big, float& small) {
    big = host_rna_tf32(x);
    small = host_rna_tf32(x - big);  // x - big is exact in fp32
  };
  double max3 = 0.0, max2 = 0.0, max1 = 0.0;
  int inexact_b = 0, n = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float a = float((rng.uniform() - 0.5) * std::ldexp(1.0, int(rng.next() % 40) - 20));
    const float b = float((rng.uniform() - 0.5) * std::ldexp(1.0, int(rng.next() % 40) - 20));
    if (a == 0.f || b == 0.f) continue;
    float ab, as, bb, bs;
    split(a, ab, as);
    split(b, bb, bs);
    ++n;
    inexact_b += bs != 0.f;
    const double exact = double(a) * double(b);
    const double p3 = double(as) * bb + double(ab) * bs + double(ab) * bb;  // tf32 products exact in double
    const double p2 = double(as) * bb + double(ab) * bb;
    const double p1 = double(ab) * bb;
    max3 = std::max(max3, std::fabs(p3 - exact) / std::fabs(exact));
    max2 = std::max(max2, std::fabs(p2 - exact) / std::fabs(exact));
    max1 = std::max(max1, std::fabs(p1 - exact) / std::fabs(exact));
  }
  // 128-dots like the kernel's: state in [-0.5, 0.5], r ~ fp32 vectors of norm ~ 1e-3 .. 0.1.
  double dot3 = 0.0, dot1 = 0.0;
  for (int rep = 0; rep < 2000; ++rep) {
    const double rs = std::ldexp(1.0, -int(rng.next() % 10) - 3);
    double exact = 0.0, mag = 0.0, s3 = 0.0, s1 = 0.0;
    for (int k = 0; k < kK; ++k) {
      const float a = rng.uniform(-0.5f, 0.5f);
      const float b = float((2.0 * rng.uniform() - 1.0) * rs);
      float ab, as, bb, bs;
      split(a, ab, as);
      split(b, bb, bs);
      exact += double(a) * b;
      mag += std::fabs(double(a) * b);
      s3 += double(as) * bb + double(ab) * bs + double(ab) * bb;
      s1 += double(ab) * bb;
    }
    dot3 = std::max(dot3, std::fabs(s3 - exact) / mag);
    dot1 = std::max(dot1, std::fabs(s1 - exact) / mag);
  }
  char buf[240];
  std::snprintf(buf, sizeof buf, "3xTF32 products (both operands split): max rel err %.2e (want <= 1e-6)", max3);
  const bool ok3 = report(max3 <= 1e-6, buf);
  std::snprintf(buf, sizeof buf,
                "r is not tf32-exact (%.0f%% of random fp32 b have b_small != 0): 2xTF32 (b_small dropped) "
                "would give max rel %.2e, so the third mma is needed",
                100.0 * inexact_b / std::max(n, 1), max2);
  const bool okb = report(inexact_b > n / 2 && max2 > 1e-5, buf);
  std::snprintf(buf, sizeof buf,
                "info: 1xTF32 products max rel err %.2e; 128-dots (rel. to sum|ab|): 3x %.2e, 1x %.2e "
                "(exact products; the tensor core's fp32 accumulation adds its own rounding)",
                max1, dot3, dot1);
  report(true, buf);
  return ok && ok3 && okb;
}

/// Random raw inputs of one head, normalised as the kernel does (bf16 raw q/k/v, fp32 g/beta).
static void random_head(host_rng& rng, head_inputs& in) {
  for (auto& row : in.S0)
    for (double& x : row) x = rng.uniform() - 0.5;
  float raw[kK];
  for (int s = 0; s < kSteps; ++s) {
    for (float& x : raw) x = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
    normalise(raw, 1.0, in.k[s]);
    for (double& x : in.v[s]) x = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
    in.g[s] = rng.uniform(-0.5f, -0.01f);
    in.beta[s] = rng.uniform(0.1f, 0.9f);
  }
  for (int d = 0; d < kDrafts; ++d) {
    for (float& x : raw) x = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
    normalise(raw, kQScaleD, in.q[d]);
  }
}

/// Closed form (sweep) == step-by-step recurrence in double; plus an fp32 emulation of the
/// kernels' arithmetic (sweep as kernel 1, exact-product contraction, 19-FMA epilogue) for scale.
static bool test_closed_form(host_rng& rng) {
  static head_inputs in;
  bool ok = true;
  double worst = 0.0, worst_f32 = 0.0, st_frac = 0.0;
  for (int rep = 0; rep < 4; ++rep) {
    random_head(rng, in);
    double o_cf[kDrafts][kV], o_st[kDrafts][kV], st_term[kDrafts][kV];
    closed_form(in, o_cf, st_term);
    stepwise(in, o_st);
    double max_err = 0.0, max_ref = 0.0, max_st = 0.0;
    for (int d = 0; d < kDrafts; ++d)
      for (int v = 0; v < kV; ++v) {
        max_err = std::max(max_err, std::fabs(o_cf[d][v] - o_st[d][v]));
        max_ref = std::max(max_ref, std::fabs(o_st[d][v]));
        max_st = std::max(max_st, std::fabs(st_term[d][v]));
      }
    worst = std::max(worst, max_err / max_ref);
    st_frac = std::max(st_frac, max_st / max_ref);
    // fp32 emulation of kernel 1 (same operation order) + fp32 epilogue.
    float err32 = 0.f;
    for (int d = 0; d < kDrafts; ++d) {
      float r[kK], coef[kSteps] = {};
      for (int i = 0; i < kK; ++i) r[i] = float(in.q[d][i]);
      for (int s = kHist + d; s >= 0; --s) {
        float c = 0.f;
        for (int i = 0; i < kK; ++i) c = std::fma(r[i], float(in.k[s][i]), c);
        const float bc = float(in.beta[s]) * c, a = std::exp(float(in.g[s]));
        coef[s] = bc;
        for (int i = 0; i < kK; ++i) r[i] = a * std::fma(-bc, float(in.k[s][i]), r[i]);
      }
      for (int v = 0; v < kV; ++v) {
        float y = 0.f;
        for (int i = 0; i < kK; ++i) y = std::fma(float(in.S0[i][v]), r[i], y);
        for (int s = 0; s < kSteps; ++s) y = std::fma(coef[s], float(in.v[s][v]), y);
        err32 = std::max(err32, float(std::fabs(y - o_st[d][v]) / max_ref));
      }
    }
    worst_f32 = std::max(worst_f32, double(err32));
  }
  char buf[240];
  std::snprintf(buf, sizeof buf, "closed form (backward sweep) == step-by-step recurrence (double): max err / max|o| %.2e", worst);
  ok = report(worst <= 1e-12, buf) && ok;
  std::snprintf(buf, sizeof buf,
                "info: fp32 emulation of the 2 kernels vs double: max err / max|o| %.2e; the state term S0^T r is "
                "<= %.1f%% of max|o| with these gates",
                worst_f32, 100.0 * st_frac);
  ok = report(worst_f32 <= 1e-5, buf) && ok;
  return ok;
}

static bool host_self_test() {
  std::printf("Host self-test (no GPU):\n");
  host_rng rng(12345);
  bool ok = test_mapping();
  ok = test_mma_emulation(rng) && ok;
  ok = test_tf32_split(rng) && ok;
  ok = test_closed_form(rng) && ok;
  std::printf("Host self-test: %s\n\n", ok ? "PASS" : "FAIL");
  return ok;
}

// ---------------------------------------------------------------------------------------------
// GPU driver
// ---------------------------------------------------------------------------------------------

static void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    std::fflush(stdout);
    std::fprintf(stderr, "CUDA error %s at %s:%d in %s\n", cudaGetErrorString(e), file, line, what);
    std::exit(2);
  }
}
#define CK(expr) ::gv::check_cuda((expr), #expr, __FILE__, __LINE__)

/// Every launch, memset and event goes to this non-blocking stream (as the library's benches);
/// host copies follow a cudaDeviceSynchronize.
static cudaStream_t g_stream = nullptr;

template <class T>
struct dev_buf {
  T* ptr = nullptr;
  size_t n = 0;
  explicit dev_buf(size_t count) : n(count) { CK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  ~dev_buf() { cudaFree(ptr); }
  dev_buf(const dev_buf&) = delete;
  dev_buf& operator=(const dev_buf&) = delete;
  size_t bytes() const { return n * sizeof(T); }
  void upload(const std::vector<T>& h) { CK(cudaMemcpy(ptr, h.data(), bytes(), cudaMemcpyHostToDevice)); }
  void download(std::vector<T>& h) const {
    h.resize(n);
    CK(cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
  }
};

/// Median time in microseconds of `launch` (5 warm-ups, 50 timed runs, one event pair each).
template <class F>
static double time_median_us(F&& launch, int iters = 50, int warmups = 5) {
  for (int i = 0; i < warmups; ++i) launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(ev[2 * i], g_stream));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1], g_stream));
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = 1000.0 * ms;
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

struct variant {
  const char* name;
  int warps;
  void (*launch)(const verify_params&, bool pdl);
};
template <dot_mode M, int W>
static void launch_verify(const verify_params& p, bool pdl) {
  if (!pdl) {
    verify_kernel<M, W><<<dim3(kHv, p.batch), W * 32, 0, g_stream>>>(p);
    return;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kHv, p.batch);
  cfg.blockDim = dim3(W * 32);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = g_stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, verify_kernel<M, W>, p));
}

/// Fragment-layout probe on the GPU: one warp, the kernel's own chunk pipeline.
static bool gpu_probe() {
  host_rng rng(777);
  std::vector<float> S(kK * kV), R(kDrafts * kK);
  for (float& x : S) x = rng.uniform(-0.5f, 0.5f);
  for (float& x : R) x = rng.uniform(-0.05f, 0.05f);
  dev_buf<float> dS(S.size()), dR(R.size()), dG(kDrafts * kChunkV);
  dS.upload(S);
  dR.upload(R);
  CK(cudaDeviceSynchronize());  // pageable uploads may still be in flight; launches go to g_stream
  struct probe { const char* name; void (*fn)(const float*, const float*, float*); double tol; };
  const probe probes[] = {
      {"3xTF32", [](const float* a, const float* b, float* c) { probe_kernel<dot_mode::tf32x3><<<1, 32, 0, g_stream>>>(a, b, c); }, 1e-5},
      {"1xTF32", [](const float* a, const float* b, float* c) { probe_kernel<dot_mode::tf32x1><<<1, 32, 0, g_stream>>>(a, b, c); }, 1e-2},
      {"FMA", [](const float* a, const float* b, float* c) { probe_kernel<dot_mode::fma><<<1, 32, 0, g_stream>>>(a, b, c); }, 1e-5},
  };
  bool all = true;
  std::printf("GPU fragment-layout probe (one warp, G = S[128 x 32]^T . r[4 x 128]^T, the kernel's chunk pipeline):\n");
  for (const probe& pr : probes) {
    CK(cudaMemsetAsync(dG.ptr, 0xFF, dG.bytes(), g_stream));
    pr.fn(dS.ptr, dR.ptr, dG.ptr);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> G;
    dG.download(G);
    double max_err = 0.0, max_ref = 0.0;
    for (int d = 0; d < kDrafts; ++d)
      for (int v = 0; v < kChunkV; ++v) {
        double ref = 0.0;
        for (int k = 0; k < kK; ++k) ref += double(S[k * kV + v]) * R[d * kK + k];
        max_ref = std::max(max_ref, std::fabs(ref));
        const float got = G[d * kChunkV + v];
        max_err = std::isfinite(got) ? std::max(max_err, std::fabs(got - ref)) : INFINITY;
      }
    const double rel = max_err / max_ref;
    const bool ok = rel <= pr.tol;
    all = all && ok;
    std::printf("  [%s] %-7s max err / max|G| = %.2e (tolerance %.0e)%s\n", ok ? "PASS" : "FAIL", pr.name, rel, pr.tol,
                ok ? "" : "  <- fragment layout / mapping mismatch");
  }
  std::printf("\n");
  return all;
}

static int run_gpu(int batch) {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("Device: %s, %d SMs, sm_%d%d, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor,
              prop.totalGlobalMem / 1073741824.0);
  const int pool = std::max(kPoolMin, batch);
  std::printf("Shape: batch %d, Hk %d, Hv %d, K %d, V %d, history %d, drafts %d, pool %d slots; q scale 1/sqrt(%d)\n\n",
              batch, kHk, kHv, kK, kV, kHist, kDrafts, pool, kK);
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  const bool probe_ok = gpu_probe();

  // ---- inputs ----
  host_rng rng(2024);
  const size_t tile = size_t(kK) * kV;
  const size_t state_n = size_t(pool) * kHv * tile;
  std::vector<int> perm(pool);
  for (int i = 0; i < pool; ++i) perm[i] = i;
  for (int i = pool - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % uint64_t(i + 1)]);
  std::vector<int> slot_idx(perm.begin(), perm.begin() + batch);
  auto bf16_vec = [&](size_t n, float lo, float hi) {
    std::vector<uint16_t> v(n);
    for (auto& u : v) u = float_to_bf16(rng.uniform(lo, hi));
    return v;
  };
  auto f32_vec = [&](size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& f : v) f = rng.uniform(lo, hi);
    return v;
  };
  const auto k_hist = bf16_vec(size_t(batch) * kHist * kHk * kK, -1.f, 1.f);
  const auto k_draft = bf16_vec(size_t(batch) * kDrafts * kHk * kK, -1.f, 1.f);
  const auto q_draft = bf16_vec(size_t(batch) * kDrafts * kHk * kK, -1.f, 1.f);
  const auto v_hist = bf16_vec(size_t(batch) * kHist * kHv * kV, -1.f, 1.f);
  const auto v_draft = bf16_vec(size_t(batch) * kDrafts * kHv * kV, -1.f, 1.f);
  const auto g_hist = f32_vec(size_t(batch) * kHist * kHv, -0.5f, -0.01f);
  const auto g_draft = f32_vec(size_t(batch) * kDrafts * kHv, -0.5f, -0.01f);
  const auto beta_hist = f32_vec(size_t(batch) * kHist * kHv, 0.1f, 0.9f);
  const auto beta_draft = f32_vec(size_t(batch) * kDrafts * kHv, 0.1f, 0.9f);

  dev_buf<float> d_state(state_n);
  dev_buf<int> d_slot(batch);
  dev_buf<uint16_t> d_kh(k_hist.size()), d_kd(k_draft.size()), d_qd(q_draft.size()), d_vh(v_hist.size()),
      d_vd(v_draft.size());
  dev_buf<float> d_gh(g_hist.size()), d_gd(g_draft.size()), d_bh(beta_hist.size()), d_bd(beta_draft.size());
  const size_t rvec_n = size_t(batch) * kHv * kDrafts * kK, coef_n = size_t(batch) * kHv * kDrafts * kSteps;
  dev_buf<float> d_rvec(rvec_n), d_coef(coef_n);
  const size_t out_n = size_t(batch) * kDrafts * kHv * kV;
  dev_buf<float> d_out(out_n), d_gdbg(size_t(batch) * kHv * kDrafts * kV);
  dev_buf<float> d_sink(size_t(batch) * kHv);
  fill_state_kernel<<<4 * prop.multiProcessorCount * 8, 256, 0, g_stream>>>(d_state.ptr, state_n, 99);
  CK(cudaGetLastError());
  d_slot.upload(slot_idx);
  d_kh.upload(k_hist);
  d_kd.upload(k_draft);
  d_qd.upload(q_draft);
  d_vh.upload(v_hist);
  d_vd.upload(v_draft);
  d_gh.upload(g_hist);
  d_gd.upload(g_draft);
  d_bh.upload(beta_hist);
  d_bd.upload(beta_draft);
  CK(cudaDeviceSynchronize());

  const sweep_params sp{d_kh.ptr, d_kd.ptr, d_qd.ptr, d_gh.ptr, d_gd.ptr, d_bh.ptr, d_bd.ptr, d_rvec.ptr, d_coef.ptr, batch};
  verify_params vp{d_state.ptr, d_slot.ptr, d_vh.ptr, d_vd.ptr, d_rvec.ptr, d_coef.ptr, d_out.ptr, nullptr, batch};
  auto launch_sweep = [&] { sweep_kernel<<<dim3(kHk, batch), kSweepThreads, 0, g_stream>>>(sp); };

  // ---- float64 reference over 16 random rows (all value heads, drafts, v): step by step ----
  const int n_check = std::min(16, batch);
  std::vector<int> check_rows(batch);
  for (int i = 0; i < batch; ++i) check_rows[i] = i;
  for (int i = batch - 1; i > 0; --i) std::swap(check_rows[i], check_rows[rng.next() % uint64_t(i + 1)]);
  check_rows.resize(n_check);
  const size_t per_row = size_t(kDrafts) * kHv * kV;
  std::vector<double> ref(n_check * per_row), head_max(size_t(n_check) * kHv);
  std::vector<double> r_ref(size_t(n_check) * kHv * kDrafts * kK), coef_ref(size_t(n_check) * kHv * kDrafts * kSteps),
      coef_mag(coef_ref.size());
  std::vector<float> S0_rows(size_t(n_check) * kHv * tile);  // checkpoints of the checked rows
  double st_frac = 0.0;
  {
    static head_inputs in;
    float raw[kK];
    for (int ci = 0; ci < n_check; ++ci) {
      const int b = check_rows[ci];
      CK(cudaMemcpy(S0_rows.data() + size_t(ci) * kHv * tile, d_state.ptr + size_t(slot_idx[b]) * kHv * tile,
                    size_t(kHv) * tile * sizeof(float), cudaMemcpyDeviceToHost));
      for (int hv = 0; hv < kHv; ++hv) {
        const int hk = hv / kVPerK;
        const float* S0 = S0_rows.data() + (size_t(ci) * kHv + hv) * tile;
        for (int k = 0; k < kK; ++k)
          for (int v = 0; v < kV; ++v) in.S0[k][v] = S0[k * kV + v];
        for (int s = 0; s < kSteps; ++s) {
          for (int k = 0; k < kK; ++k)
            raw[k] = bf16_to_float(s < kHist ? k_hist[((size_t(b) * kHist + s) * kHk + hk) * kK + k]
                                             : k_draft[((size_t(b) * kDrafts + s - kHist) * kHk + hk) * kK + k]);
          normalise(raw, 1.0, in.k[s]);
          for (int v = 0; v < kV; ++v)
            in.v[s][v] = bf16_to_float(s < kHist ? v_hist[((size_t(b) * kHist + s) * kHv + hv) * kV + v]
                                                 : v_draft[((size_t(b) * kDrafts + s - kHist) * kHv + hv) * kV + v]);
          in.g[s] = s < kHist ? g_hist[(size_t(b) * kHist + s) * kHv + hv] : g_draft[(size_t(b) * kDrafts + s - kHist) * kHv + hv];
          in.beta[s] = s < kHist ? beta_hist[(size_t(b) * kHist + s) * kHv + hv]
                                 : beta_draft[(size_t(b) * kDrafts + s - kHist) * kHv + hv];
        }
        for (int d = 0; d < kDrafts; ++d) {
          for (int k = 0; k < kK; ++k) raw[k] = bf16_to_float(q_draft[((size_t(b) * kDrafts + d) * kHk + hk) * kK + k]);
          normalise(raw, kQScaleD, in.q[d]);
        }
        double o[kDrafts][kV], o_cf[kDrafts][kV], st_term[kDrafts][kV];
        stepwise(in, o);
        closed_form(in, o_cf, st_term);
        double mx = 0.0, mst = 0.0;
        for (int d = 0; d < kDrafts; ++d)
          for (int v = 0; v < kV; ++v) {
            ref[size_t(ci) * per_row + (size_t(d) * kHv + hv) * kV + v] = o[d][v];
            mx = std::max(mx, std::fabs(o[d][v]));
            mst = std::max(mst, std::fabs(st_term[d][v]));
          }
        head_max[size_t(ci) * kHv + hv] = mx;
        st_frac = std::max(st_frac, mst / mx);
        double r[kDrafts][kK], coef[kDrafts][kSteps], mag[kDrafts][kSteps];
        sweep_double(in, r, coef, mag);
        for (int d = 0; d < kDrafts; ++d) {
          const size_t hd = (size_t(ci) * kHv + hv) * kDrafts + d;
          for (int k = 0; k < kK; ++k) r_ref[hd * kK + k] = r[d][k];
          for (int s = 0; s < kSteps; ++s) coef_ref[hd * kSteps + s] = coef[d][s], coef_mag[hd * kSteps + s] = mag[d][s];
        }
      }
    }
  }
  std::printf("Reference: float64 step-by-step recurrence over %d rows x %d value heads x %d drafts x %d v; "
              "max |state term S0^T r_d| / max|o| of a head = %.3f\n\n",
              n_check, kHv, kDrafts, kV, st_frac);

  // ---- kernel 1 correctness ----
  CK(cudaMemsetAsync(d_rvec.ptr, 0xFF, d_rvec.bytes(), g_stream));
  CK(cudaMemsetAsync(d_coef.ptr, 0xFF, d_coef.bytes(), g_stream));
  launch_sweep();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  bool k1_ok = true;
  std::vector<float> rvec, coef;
  d_rvec.download(rvec);
  d_coef.download(coef);
  {
    for (float x : rvec) k1_ok = k1_ok && std::isfinite(x);
    for (float x : coef) k1_ok = k1_ok && std::isfinite(x);
    double r_err = 0.0, c_err = 0.0;
    bool zeros = true;
    for (int ci = 0; ci < n_check; ++ci)
      for (int hv = 0; hv < kHv; ++hv)
        for (int d = 0; d < kDrafts; ++d) {
          const size_t hr = (size_t(ci) * kHv + hv) * kDrafts + d;
          const size_t hg = (size_t(check_rows[ci]) * kHv + hv) * kDrafts + d;
          double e = 0.0, m = 0.0;
          for (int k = 0; k < kK; ++k) {
            e = std::max(e, std::fabs(rvec[hg * kK + k] - r_ref[hr * kK + k]));
            m = std::max(m, std::fabs(r_ref[hr * kK + k]));
          }
          r_err = std::max(r_err, e / m);
          for (int s = 0; s < kSteps; ++s) {
            const double cr = coef_ref[hr * kSteps + s], cm = coef_mag[hr * kSteps + s];
            const float cg = coef[hg * kSteps + s];
            if (s > kHist + d) zeros = zeros && cg == 0.f;
            else c_err = std::max(c_err, std::fabs(cg - cr) / cm);
          }
        }
    k1_ok = k1_ok && zeros && r_err < 1e-5 && c_err < 1e-5;
    std::printf("Kernel 1 (sweep): all finite, zero past 15+d %s; max |r - ref| / max|ref r| %.2e; "
                "max |coef - ref| / (beta |r|) %.2e  [%s]\n\n",
                zeros ? "yes" : "NO", r_err, c_err, k1_ok ? "PASS" : "FAIL");
  }

  // ---- variants: correctness (NaN-poisoned outputs, plain and PDL launches), then timing ----
  const variant variants[] = {
      {"3xTF32", 2, launch_verify<dot_mode::tf32x3, 2>}, {"3xTF32", 4, launch_verify<dot_mode::tf32x3, 4>},
      {"3xTF32", 8, launch_verify<dot_mode::tf32x3, 8>}, {"1xTF32", 2, launch_verify<dot_mode::tf32x1, 2>},
      {"1xTF32", 4, launch_verify<dot_mode::tf32x1, 4>}, {"1xTF32", 8, launch_verify<dot_mode::tf32x1, 8>},
      {"FMA", 2, launch_verify<dot_mode::fma, 2>},       {"FMA", 4, launch_verify<dot_mode::fma, 4>},
      {"FMA", 8, launch_verify<dot_mode::fma, 8>},
  };
  struct result {
    double t_both, t_pdl, t_k2, max_rel, max_abs, max_head, g_err;
    bool finite, pdl_same;
  };
  std::vector<result> results;
  std::vector<float> out, out_pdl, gdbg;
  for (const variant& v : variants) {
    result r{};
    // Plain launches, with G_d written for the contraction-only check.
    verify_params vdbg = vp;
    vdbg.g_dbg = d_gdbg.ptr;
    CK(cudaMemsetAsync(d_out.ptr, 0xFF, d_out.bytes(), g_stream));  // NaN poison
    CK(cudaMemsetAsync(d_gdbg.ptr, 0xFF, d_gdbg.bytes(), g_stream));
    launch_sweep();
    v.launch(vdbg, false);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    d_out.download(out);
    d_gdbg.download(gdbg);
    // PDL launches (the timed pair), outputs must be bit-identical.
    CK(cudaMemsetAsync(d_out.ptr, 0xFF, d_out.bytes(), g_stream));
    launch_sweep();
    v.launch(vp, true);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    d_out.download(out_pdl);
    r.finite = std::all_of(out.begin(), out.end(), [](float f) { return std::isfinite(f); }) &&
               std::all_of(gdbg.begin(), gdbg.end(), [](float f) { return std::isfinite(f); });
    r.pdl_same = std::memcmp(out.data(), out_pdl.data(), out.size() * sizeof(float)) == 0;
    for (int ci = 0; ci < n_check; ++ci) {
      const int b = check_rows[ci];
      for (int hv = 0; hv < kHv; ++hv) {
        const double hm = head_max[size_t(ci) * kHv + hv];
        const float* S0 = S0_rows.data() + (size_t(ci) * kHv + hv) * tile;
        double g_err = 0.0, g_max = 0.0;
        for (int d = 0; d < kDrafts; ++d) {
          const size_t hg = (size_t(b) * kHv + hv) * kDrafts + d;
          for (int x = 0; x < kV; ++x) {
            const double rv = ref[size_t(ci) * per_row + (size_t(d) * kHv + hv) * kV + x];
            const double yv = out[size_t(b) * per_row + (size_t(d) * kHv + hv) * kV + x];
            const double e = std::fabs(yv - rv);
            r.max_abs = std::max(r.max_abs, e);
            r.max_rel = std::max(r.max_rel, e / std::max(std::fabs(rv), 1e-3 * hm));
            r.max_head = std::max(r.max_head, e / hm);
            // Contraction alone: G_d[v] vs sum_k S0[k][v] r_d[k] with kernel 1's own r (double).
            double gref = 0.0;
            for (int k = 0; k < kK; ++k) gref += double(S0[k * kV + x]) * rvec[hg * kK + k];
            g_max = std::max(g_max, std::fabs(gref));
            g_err = std::max(g_err, std::fabs(double(gdbg[hg * kV + x]) - gref));
          }
        }
        r.g_err = std::max(r.g_err, g_err / g_max);
      }
    }
    if (!r.finite) r.max_rel = r.max_abs = r.max_head = r.g_err = INFINITY;
    r.t_both = time_median_us([&] { launch_sweep(); v.launch(vp, false); });
    r.t_pdl = time_median_us([&] { launch_sweep(); v.launch(vp, true); });
    r.t_k2 = time_median_us([&] { v.launch(vp, false); });
    results.push_back(r);
  }
  const double t_sweep = time_median_us(launch_sweep);

  // ---- read floor and copy bandwidth ----
  const double t_read128 = time_median_us([&] { read_state_kernel<128><<<dim3(kHv, batch), 128, 0, g_stream>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read256 = time_median_us([&] { read_state_kernel<256><<<dim3(kHv, batch), 256, 0, g_stream>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read512 = time_median_us([&] { read_state_kernel<512><<<dim3(kHv, batch), 512, 0, g_stream>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read = std::min({t_read128, t_read256, t_read512});
  const size_t copy_bytes = std::min<size_t>(size_t(2) << 30, d_state.bytes());
  double t_copy = 0.0;
  {
    dev_buf<char> dst(copy_bytes);
    t_copy = time_median_us([&] { CK(cudaMemcpyAsync(dst.ptr, d_state.ptr, copy_bytes, cudaMemcpyDeviceToDevice, g_stream)); });
  }

  // ---- report ----
  const double state_bytes = double(batch) * kHv * tile * sizeof(float);
  const double in_bytes = double(k_hist.size() + k_draft.size() + q_draft.size() + v_hist.size() + v_draft.size()) * 2 +
                          double(g_hist.size() + g_draft.size() + beta_hist.size() + beta_draft.size()) * 4 + double(batch) * 4;
  const double ws_bytes = 2.0 * double(rvec_n + coef_n) * 4;  // written by kernel 1, read by kernel 2
  const double out_bytes = double(out_n) * 4;
  const double total_bytes = state_bytes + in_bytes + ws_bytes + out_bytes;
  std::printf("Bytes per call: state %.1f MiB + inputs %.1f MiB + r/coef workspace (write + read) %.1f MiB + "
              "outputs %.1f MiB = %.1f MiB\n",
              state_bytes / 1048576.0, in_bytes / 1048576.0, ws_bytes / 1048576.0, out_bytes / 1048576.0,
              total_bytes / 1048576.0);
  std::printf("Read-only kernel (state of the batch, %.0f MiB): 128 thr %.1f us, 256 thr %.1f us, 512 thr %.1f us "
              "-> floor %.1f us = %.0f GB/s\n",
              state_bytes / 1048576.0, t_read128, t_read256, t_read512, t_read, state_bytes / t_read / 1e3);
  std::printf("cudaMemcpy D2D %.2f GiB: %.1f us = %.0f GB/s copied (%.0f GB/s read + write)\n", copy_bytes / 1073741824.0,
              t_copy, copy_bytes / t_copy / 1e3, 2.0 * copy_bytes / t_copy / 1e3);
  std::printf("Kernel 1 (sweep) alone: %.1f us\n\n", t_sweep);
  std::printf("%-7s %5s | %8s %8s %8s | %6s %7s | %9s %9s %9s %9s | %s\n", "variant", "warps", "K1+K2", "K1+K2pdl", "K2",
              "GB/s", "%read", "max rel", "max abs", "err/hdmx", "G err", "written, pdl==plain");
  std::printf("--------------------------------------------------------------------------------------------------------------------\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    const double best = std::min(r.t_both, r.t_pdl);
    std::printf("%-7s %5d | %8.1f %8.1f %8.1f | %6.0f %6.0f%% | %9.2e %9.2e %9.2e %9.2e | %s, %s\n", variants[i].name,
                variants[i].warps, r.t_both, r.t_pdl, r.t_k2, total_bytes / best / 1e3, 100.0 * best / t_read, r.max_rel,
                r.max_abs, r.max_head, r.g_err, r.finite ? "yes" : "NO (NaN left)", r.pdl_same ? "yes" : "NO");
  }
  std::printf("\nTimes in us (median of 50 after 5 warm-ups). GB/s and %%read use the better of K1+K2 and K1+K2pdl (K2\n"
              "launched with programmatic dependent launch: its state loads start before kernel 1 ends). max rel =\n"
              "|o - ref| / max(|ref|, 1e-3 max|ref| of the head); err/hdmx = |o - ref| / max|ref| of the head (ref: float64\n"
              "step-by-step recurrence, %d rows x %d value heads x %d drafts x %d v). G err: the contraction alone,\n"
              "max|G_d - S0^T r_d| / max|S0^T r_d| of the head, with kernel 1's own r_d (double reference). The state term\n"
              "is at most %.1f%% of the output here (the gates decay it), so err/hdmx hides the contraction: read G err.\n\n",
              n_check, kHv, kDrafts, kV, 100.0 * st_frac);

  // ---- verdict ----
  bool acc_ok = true, all_written = true, all_same = true;
  double best3 = INFINITY, best3_g = INFINITY, fma_g = INFINITY, best_fma = INFINITY, best1 = INFINITY;
  for (size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    const bool is1 = std::strcmp(variants[i].name, "1xTF32") == 0;
    // Bounds: fp32-level for FMA; 3xTF32 gets 5x room for the tensor core's accumulation (not IEEE
    // round-to-nearest, 48 mma per dot); 1xTF32 ~ 2^-11 products.
    const bool is3 = std::strcmp(variants[i].name, "3xTF32") == 0;
    const double g_bound = is1 ? 5e-3 : is3 ? 5e-5 : 1e-5, o_bound = is1 ? 1e-3 : 1e-5;
    const bool ok = r.g_err <= g_bound && r.max_head <= o_bound;
    if (!ok) std::printf("  [FAIL] %s %d warps: accuracy outside its bound (G err <= %.0e, err/hdmx <= %.0e)\n",
                         variants[i].name, variants[i].warps, g_bound, o_bound);
    acc_ok = acc_ok && ok;
    all_written = all_written && r.finite;
    all_same = all_same && r.pdl_same;
    const double t = std::min(r.t_both, r.t_pdl);
    if (std::strcmp(variants[i].name, "3xTF32") == 0 && t < best3) best3 = t, best3_g = r.g_err;
    if (std::strcmp(variants[i].name, "FMA") == 0) best_fma = std::min(best_fma, t), fma_g = std::min(fma_g, r.g_err);
    if (is1) best1 = std::min(best1, t);
  }
  std::printf("Checks: GPU layout probe %s, kernel 1 %s, all outputs written %s, PDL == plain %s, accuracy bounds %s\n",
              probe_ok ? "PASS" : "FAIL", k1_ok ? "PASS" : "FAIL", all_written ? "PASS" : "FAIL",
              all_same ? "PASS" : "FAIL", acc_ok ? "PASS" : "FAIL");
  std::printf("Verdict: best 3xTF32 = %.1f us = %.2fx read-only (G err %.2e); best 1xTF32 %.1f us; best FMA %.1f us "
              "(G err %.2e); library verify at this shape ~610 us\n",
              best3, best3 / t_read, best3_g, best1, best_fma, fma_g);
  return (probe_ok && k1_ok && all_written && all_same && acc_ok) ? 0 : 1;
}

}  // namespace gv

int main(int argc, char** argv) {
  int batch = 256;
  bool host_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host-test") {
      host_only = true;
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--batch N] [--host-test]\n", argv[0]);
      return 2;
    }
  }
  if (batch < 1) {
    std::fprintf(stderr, "--batch must be >= 1\n");
    return 2;
  }
  const bool host_ok = gv::host_self_test();  // before any CUDA call
  if (host_only) return host_ok ? 0 : 1;
  if (!host_ok) {
    std::fprintf(stderr, "host self-test failed: not running on the GPU\n");
    return 1;
  }
  return gv::run_gpu(batch);
}
