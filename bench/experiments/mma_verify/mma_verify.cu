// mma_verify.cu: standalone prototype of a 2-kernel Mamba-2 speculative verification (T = 4 drafts
// per row) whose h0 . C_d contraction runs on tensor cores (mma.sync m16n8k8 TF32) in a
// near-fp32-exact 3xTF32 split, compared with 1xTF32, with a 2xTF32 form (C is bf16, so its small
// part is zero) and with plain fp32 FMAs of the same structure; plus the read floor (a kernel that
// only reads the state) and the device-to-device copy bandwidth.
//
// Build:  nvcc -O3 -std=c++17 -arch=sm_90 mma_verify.cu -o mma_verify
// Run:    ./mma_verify [--batch N]     (GPU; prints checks, timing table and accuracy)
//         ./mma_verify --host-test     (host-only self-test of the fragment mapping; no CUDA call)
//
// ---------------------------------------------------------------------------------------------
// The math (per row b, head h, draft d = 0..3; steps s = 0..14 history, 15..18 drafts 0..3):
//   draft d applies steps 0..last(d) with last(d) = 15 + d, from the checkpoint h0:
//   y_d[p] = decay_d * G_d[p] + sum_{s <= last(d)} w[d][s] * x_s[p] + D * x_d[p]
//     G_d[p]    = h0[p, :] . C_d                                   (the 1 GiB contraction)
//     decay_d   = exp(A * sum_{s <= last(d)} dt_s)
//     w[d][s]   = exp(A * sum_{s < s' <= last(d)} dt_s') * dt_s * bc[s][d],  bc[s][d] = B_s . C_d
// Kernel 1 (bc_kernel), grid (G, batch): bc[b][g][s][d] in fp32 FMA dots (19 x 4 per group).
// Kernel 2 (verify_kernel<Mode, Warps>), grid (H, batch), one block per (row, head): loads the
//   fp32 state tile [64 x 128] once into registers (16-byte loads), computes G_d for the 4 drafts
//   (Mode: 3xTF32 / 2xTF32 / 1xTF32 mma, or fp32 FMA + shuffles), one warp turns bc, dt, A, D into
//   w and decay in shared memory, then each thread produces outputs y_d[p] (fp32) with <= 19 FMAs.
//
// ---------------------------------------------------------------------------------------------
// Fragment mapping (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32). PTX ISA layouts with
// g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group):
//   A (16 x 8, row-major): a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)
//   B (8 x 8, K x N):      b0 = (k = t, n = g), b1 = (k = t+4, n = g)
//   C/D (16 x 8):          c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1)
// (A checked against the PTX ISA text "Matrix Fragments for mma.m16n8k8", .tf32; B and C/D are the
// documented layouts as given in the brief; the host test emulates them and the GPU run probes the
// hardware with `dots_probe_kernel` before anything else, so a wrong B/C assumption shows up as a
// FAIL line rather than as silently wrong numbers.)
//
// Our use: M = p (state rows), K = n (dstate), N = d (drafts; columns 4..7 are zero).
// A warp owns RW = 64 / Warps rows = MT m-tiles of 16 rows. Lane (g, t) holds, for each m-tile mt
// and row half rh (0: row g, 1: row g + 8), 32 values st[mt][rh][e], e = 0..31, of that row at
//     n = frag_n(t, e) = 16 * (e >> 2) + 4 * t + (e & 3)
// i.e. 8 float4 loads per row (e = 4q..4q+3 <- n = 16q + 4t .. 16q + 4t + 3). One warp-wide load
// instruction q covers, for 8 rows, 64 contiguous bytes each (4 lanes x 16 B): full 32-B sectors.
// The k index of the mma is permuted: for k-step j (0..15), mma column k = 4h + t (h = 0, 1) maps to
// the lane's value e = 2j + h, i.e. to physical n = frag_n(t, 2j + h). Because the same function of
// (j, h, t) picks the A element (state row, n) and the B element (C_d[n]) for mma index k, every
// mma sums state[p][n] * C_d[n] over the same set of n, and over 16 k-steps the (t, e) pairs cover
// n = 0..127 exactly once (host test checks it). So:
//   A reg i (k-step j): row half a_reg_rh(i) = i & 1, value e = a_reg_e(j, i) = 2j + (i >> 1)
//   B reg i (k-step j): value e = b_reg_e(j, i) = 2j + i of draft column d = g (zero for g >= 4);
//                       the pair (i = 0, 1) is n, n + 1: one 8-byte shared-memory load
//   acc reg i:          row acc_row(lane, i) = g + 8 * (i >> 1), draft acc_d(lane, i) = 2t + (i & 1)
//                       (only lanes with t < 2 hold real drafts 0..3)
// 3xTF32: a = a_big + a_small, a_big = cvt.rna.tf32(a), a_small = cvt.rna.tf32(a - a_big);
//   a*b ~ a_small*b_big + a_big*b_small + a_big*b_big (fp32 accumulation). C comes from bf16, which
//   is exactly representable in tf32, so b_small == 0: the 2xTF32 variant drops that mma and gives
//   the same result (kept as a separate variant to see what the third mma costs).
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

#define MV_HD __host__ __device__

namespace mv {

// ---- problem shape (fixed, as in the brief; batch is a run-time argument) ----
constexpr int kHeads = 128;
constexpr int kHeadDim = 64;   // P
constexpr int kDState = 128;   // N
constexpr int kGroups = 8;     // G
constexpr int kHeadsPerGroup = kHeads / kGroups;
constexpr int kHist = 15;      // buffered history steps
constexpr int kDrafts = 4;     // T
constexpr int kSteps = kHist + kDrafts;  // 19
constexpr int kPoolMin = 512;  // state pool slots
constexpr int kKSteps = kDState / 8;     // 16 mma k-steps of 8
constexpr int kRowVals = kDState / 4;    // 32 values of a row per lane
constexpr int kCStride = kDState + 16;   // padded shared row of C (bank-conflict-free 16-B reads)

static_assert(kDrafts == 4, "the FMA variant's write-out gives lane t draft d = t");
static_assert(kSteps <= 32, "one lane per step in the coefficient warp");

enum class dot_mode { tf32x3, tf32x2, tf32x1, fma };

// ---- PTX ISA fragment layouts of m16n8k8 tf32 (the hardware's view). Used by the host emulator
// and by nothing on the device, so the emulator checks the kernel's mapping against them. ----
MV_HD constexpr int ptx_a_row(int lane, int i) { return (lane >> 2) + ((i & 1) ? 8 : 0); }
MV_HD constexpr int ptx_a_col(int lane, int i) { return (lane & 3) + ((i & 2) ? 4 : 0); }
MV_HD constexpr int ptx_b_row(int lane, int i) { return (lane & 3) + (i ? 4 : 0); }
MV_HD constexpr int ptx_b_col(int lane, int /*i*/) { return lane >> 2; }
MV_HD constexpr int ptx_c_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); }
MV_HD constexpr int ptx_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// ---- the kernel's mapping (used by the kernels and by the host emulator) ----
/// Physical dstate index n of value e (0..31) of a row held by a lane with threadID_in_group t.
MV_HD constexpr int frag_n(int t, int e) { return 16 * (e >> 2) + 4 * t + (e & 3); }
/// Row (within the m-tile) of row half rh of lane group g.
MV_HD constexpr int frag_row(int g, int rh) { return g + 8 * rh; }
/// A register i of k-step j: which row half and which of the lane's row values.
MV_HD constexpr int a_reg_rh(int i) { return i & 1; }
MV_HD constexpr int a_reg_e(int j, int i) { return 2 * j + (i >> 1); }
/// B register i of k-step j: which of the lane's C values (column d = b_lane_d(lane)).
MV_HD constexpr int b_reg_e(int j, int i) { return 2 * j + i; }
MV_HD constexpr int b_lane_d(int lane) { return lane >> 2; }
/// Accumulator register i: row within the m-tile and draft column.
MV_HD constexpr int acc_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
MV_HD constexpr int acc_d(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// ---- bf16 stored as uint16_t bits (no dependence on cuda_bf16.h host support) ----
MV_HD inline float bf16_to_float(uint16_t u) {
  uint32_t bits = uint32_t(u) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even (no NaN inputs here)
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
/// Host emulation of cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 explicit
/// mantissa bits (the low 13 bits become zero). Finite inputs only.
inline float host_rna_tf32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x1000u) & 0xFFFFE000u;  // sign-magnitude: adding half an ulp rounds ties away
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// ---- inputs / parameters ----
// Layouts (all row-major, last index contiguous):
//   state    fp32 [pool][H][P][N]         slot_idx int [batch]
//   x_hist   bf16 [batch][15][H][P]       x_draft  bf16 [batch][4][H][P]
//   B_hist   bf16 [batch][15][G][N]       B_draft  bf16 [batch][4][G][N]   C_draft bf16 [batch][4][G][N]
//   dt_hist  fp32 [batch][15][H]          dt_draft fp32 [batch][4][H]      A, D fp32 [H]
//   bc       fp32 [batch][G][19][4]       (workspace written by kernel 1)
//   out      fp32 [batch][4][H][P]
struct verify_params {
  const float* state;
  const int* slot_idx;
  const uint16_t* x_hist;
  const uint16_t* x_draft;
  const uint16_t* C_draft;
  const float* dt_hist;
  const float* dt_draft;
  const float* A;
  const float* D;
  const float* bc;
  float* out;
  int batch;
};
struct bc_params {
  const uint16_t* B_hist;
  const uint16_t* B_draft;
  const uint16_t* C_draft;
  float* bc;
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
__device__ __forceinline__ void mma_tf32(float (&acc)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// Loads a warp's MT m-tiles of state rows (row 0 at `rows`, stride kDState floats) into the
/// fragment layout st[mt][rh][e] (8 x 16-byte streaming loads per row half).
template <int MT, int RH = 2>
__device__ __forceinline__ void load_state_frag(const float* __restrict__ rows,
                                                float (&st)[MT][RH][kRowVals], int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rh = 0; rh < RH; ++rh) {
      const float* row = rows + (mt * 16 + frag_row(g, rh)) * kDState;
#pragma unroll
      for (int q = 0; q < kRowVals / 4; ++q) {
        const float4 v = __ldcs(reinterpret_cast<const float4*>(row + frag_n(t, 4 * q)));
        st[mt][rh][4 * q + 0] = v.x;
        st[mt][rh][4 * q + 1] = v.y;
        st[mt][rh][4 * q + 2] = v.z;
        st[mt][rh][4 * q + 3] = v.w;
      }
    }
}

/// G_d[p] = state[p, :] . C_d for the warp's rows, written to gs[d][row0 + p_local].
/// cs: the 4 drafts' C as fp32 in shared memory (row stride kCStride).
template <dot_mode Mode, int MT, int RH = 2>
__device__ __forceinline__ void warp_dots(const float (&st)[MT][RH][kRowVals],
                                          const float (*cs)[kCStride], float (*gs)[kHeadDim],
                                          int row0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  if constexpr (Mode == dot_mode::fma) {
    // Each lane: partial dots over its 32 values of each row, then a sum over the 4 lanes of the
    // group (t = 0..3 together cover n = 0..127).
    float part[MT][RH][kDrafts];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rh = 0; rh < RH; ++rh)
#pragma unroll
        for (int d = 0; d < kDrafts; ++d) part[mt][rh][d] = 0.f;
#pragma unroll
    for (int q = 0; q < kRowVals / 4; ++q)
#pragma unroll
      for (int d = 0; d < kDrafts; ++d) {
        const float4 c = *reinterpret_cast<const float4*>(&cs[d][frag_n(t, 4 * q)]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int rh = 0; rh < RH; ++rh) {
            float v = part[mt][rh][d];
            v = fmaf(st[mt][rh][4 * q + 0], c.x, v);
            v = fmaf(st[mt][rh][4 * q + 1], c.y, v);
            v = fmaf(st[mt][rh][4 * q + 2], c.z, v);
            v = fmaf(st[mt][rh][4 * q + 3], c.w, v);
            part[mt][rh][d] = v;
          }
      }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rh = 0; rh < RH; ++rh) {
        float mine = 0.f;
#pragma unroll
        for (int d = 0; d < kDrafts; ++d) {
          float v = part[mt][rh][d];
          v += __shfl_xor_sync(0xffffffffu, v, 1);
          v += __shfl_xor_sync(0xffffffffu, v, 2);
          if (t == d) mine = v;  // lane t writes draft t (kDrafts == 4 lanes per group)
        }
        gs[t][row0 + mt * 16 + frag_row(g, rh)] = mine;
      }
  } else {
    static_assert(RH == 2, "the mma modes use both row halves of an m-tile");
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][i] = 0.f;
    const int bd = b_lane_d(lane);  // B column (draft) of this lane; columns 4..7 are zero
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      // B fragment: C_bd at n = frag_n(t, 2j) and frag_n(t, 2j + 1) = that + 1 (one 8-B load).
      float2 cb = make_float2(0.f, 0.f);
      if (bd < kDrafts) cb = *reinterpret_cast<const float2*>(&cs[bd][frag_n(t, b_reg_e(j, 0))]);
      const float bv[2] = {cb.x, cb.y};
      uint32_t b_big[2], b_small[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        b_big[i] = to_tf32(bv[i]);
        b_small[i] = to_tf32(bv[i] - __uint_as_float(b_big[i]));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a_big[4], a_small[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float v = st[mt][a_reg_rh(i)][a_reg_e(j, i)];
          a_big[i] = to_tf32(v);
          a_small[i] = to_tf32(v - __uint_as_float(a_big[i]));
        }
        if constexpr (Mode == dot_mode::tf32x3) {
          mma_tf32(acc[mt], a_small, b_big);
          mma_tf32(acc[mt], a_big, b_small);
        } else if constexpr (Mode == dot_mode::tf32x2) {
          mma_tf32(acc[mt], a_small, b_big);  // b_small == 0 exactly (C is bf16)
        }
        mma_tf32(acc[mt], a_big, b_big);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = acc_d(lane, i);
        if (d < kDrafts) gs[d][row0 + mt * 16 + acc_row(lane, i)] = acc[mt][i];
      }
  }
}

/// Kernel 1: bc[b][grp][s][d] = B_s . C_d (fp32 FMA), one block of 4 warps per (group, row).
__global__ void __launch_bounds__(128) bc_kernel(bc_params prm) {
  const int grp = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ __align__(16) float bs[kSteps][kDState];
  __shared__ __align__(16) float cs[kDrafts][kDState];
  // Stage B_s (19 steps) and C_d (4 drafts) as fp32: chunks of 4 bf16 (8 bytes).
  constexpr int kChunks = (kSteps + kDrafts) * kDState / 4;
  for (int c = threadIdx.x; c < kChunks; c += blockDim.x) {
    const int r = c / (kDState / 4), n = (c % (kDState / 4)) * 4;
    const uint16_t* src;
    float* dst;
    if (r < kHist) {
      src = prm.B_hist + ((int64_t(b) * kHist + r) * kGroups + grp) * kDState + n;
      dst = &bs[r][n];
    } else if (r < kSteps) {
      src = prm.B_draft + ((int64_t(b) * kDrafts + (r - kHist)) * kGroups + grp) * kDState + n;
      dst = &bs[r][n];
    } else {
      src = prm.C_draft + ((int64_t(b) * kDrafts + (r - kSteps)) * kGroups + grp) * kDState + n;
      dst = &cs[r - kSteps][n];
    }
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));
    dst[0] = __uint_as_float(raw.x << 16);
    dst[1] = __uint_as_float(raw.x & 0xFFFF0000u);
    dst[2] = __uint_as_float(raw.y << 16);
    dst[3] = __uint_as_float(raw.y & 0xFFFF0000u);
  }
  __syncthreads();
  // A warp per dot: lane covers n = 4 lane .. 4 lane + 3, then a butterfly sum.
  for (int idx = warp; idx < kSteps * kDrafts; idx += 4) {
    const int s = idx / kDrafts, d = idx % kDrafts;
    const float4 bv = *reinterpret_cast<const float4*>(&bs[s][4 * lane]);
    const float4 cv = *reinterpret_cast<const float4*>(&cs[d][4 * lane]);
    float v = bv.x * cv.x;
    v = fmaf(bv.y, cv.y, v);
    v = fmaf(bv.z, cv.z, v);
    v = fmaf(bv.w, cv.w, v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) prm.bc[((int64_t(b) * kGroups + grp) * kSteps + s) * kDrafts + d] = v;
  }
}

/// Kernel 2: outputs of the 4 drafts of one (row, head). Warps = 2 or 4.
template <dot_mode Mode, int Warps>
__device__ __forceinline__ void verify_body(const verify_params& prm) {
  constexpr int kThreads = Warps * 32;
  constexpr int kRowsPerWarp = kHeadDim / Warps;  // 32, 16 or 8
  // m-tiles per warp and row halves per lane: 8 warps (v15, FMA only) hold one row per lane
  constexpr int MT = kRowsPerWarp >= 16 ? kRowsPerWarp / 16 : 1;
  constexpr int RH = kRowsPerWarp >= 16 ? 2 : 1;
  constexpr int kDraftsPerThread = kDrafts * kHeadDim / kThreads;  // output phase: 4, 2 or 1
  static_assert((kRowsPerWarp % 16 == 0 || kRowsPerWarp == 8) && kDraftsPerThread >= 1,
                "warps must be 2, 4 or 8");

  const int h = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = h / kHeadsPerGroup;

  __shared__ __align__(16) float cs[kDrafts][kCStride];  // C_d as fp32
  __shared__ float ws[kDrafts][kSteps];                  // w[d][s] (D folded into s = last(d))
  __shared__ float decay_s[kDrafts];
  __shared__ float gs[kDrafts][kHeadDim];                // G_d[p]

  // 1. Request the whole state tile of this warp (the 1 GiB stream) first.
  const int64_t slot = prm.slot_idx[b];
  const float* tile = prm.state + (slot * kHeads + h) * int64_t(kHeadDim * kDState);
  float st[MT][RH][kRowVals];
  load_state_frag<MT, RH>(tile + warp * kRowsPerWarp * kDState, st, lane);

  // 2. This thread's outputs: p = tid % 64, drafts d0 .. d0 + kDraftsPerThread - 1. Request x.
  const int op = threadIdx.x % kHeadDim;
  const int d0 = (threadIdx.x / kHeadDim) * kDraftsPerThread;
  float xs[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const uint16_t* src =
        s < kHist ? prm.x_hist + ((int64_t(b) * kHist + s) * kHeads + h) * kHeadDim + op
                  : prm.x_draft + ((int64_t(b) * kDrafts + (s - kHist)) * kHeads + h) * kHeadDim + op;
    xs[s] = bf16_to_float(__ldg(src));
  }

  // 3. Stage the drafts' C (this head's group) as fp32: 4 x 128 values, chunks of 4.
  for (int c = threadIdx.x; c < kDrafts * kDState / 4; c += kThreads) {
    const int d = c / (kDState / 4), n = (c % (kDState / 4)) * 4;
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(
        prm.C_draft + ((int64_t(b) * kDrafts + d) * kGroups + grp) * kDState + n));
    *reinterpret_cast<float4*>(&cs[d][n]) =
        make_float4(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xFFFF0000u),
                    __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xFFFF0000u));
  }

  // 4. Coefficients (last warp): lane s holds dt_s; w[d][s] = bc[s][d] dt_s exp(A suffix),
  //    suffix = sum of dt over (s, last(d)], summed from the end; decay_d over [0, last(d)].
  if (warp == Warps - 1) {
    const float a = prm.A[h];
    const float dh = prm.D[h];
    float dt = 0.f;
    if (lane < kSteps)
      dt = lane < kHist ? prm.dt_hist[(int64_t(b) * kHist + lane) * kHeads + h]
                        : prm.dt_draft[(int64_t(b) * kDrafts + (lane - kHist)) * kHeads + h];
    const float* bc = prm.bc + (int64_t(b) * kGroups + grp) * (kSteps * kDrafts);
#pragma unroll
    for (int d = 0; d < kDrafts; ++d) {
      const int last = kHist + d;
      float suf = 0.f;
#pragma unroll
      for (int s2 = kSteps - 1; s2 >= 1; --s2) {
        const float v = __shfl_sync(0xffffffffu, dt, s2);
        if (s2 > lane && s2 <= last) suf += v;
      }
      if (lane < kSteps) {
        float w = 0.f;
        if (lane <= last) w = bc[lane * kDrafts + d] * dt * expf(a * suf);
        if (lane == last) w += dh;  // the skip term D x_d uses the same x as step last(d)
        ws[d][lane] = w;
      }
      if (lane == 0) decay_s[d] = expf(a * (suf + dt));
    }
  }
  __syncthreads();

  // 5. G_d[p] for the warp's rows.
  warp_dots<Mode, MT, RH>(st, cs, gs, warp * kRowsPerWarp, lane);
  __syncthreads();

  // 6. y_d[p] = decay_d G_d[p] + sum_s w[d][s] x_s[p]  (fp32 FMAs, steps in order).
#pragma unroll
  for (int k = 0; k < kDraftsPerThread; ++k) {
    const int d = d0 + k;
    float y = decay_s[d] * gs[d][op];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) y = fmaf(ws[d][s], xs[s], y);
    __stcs(prm.out + ((int64_t(b) * kDrafts + d) * kHeads + h) * kHeadDim + op, y);
  }
}

template <dot_mode Mode, int Warps>
__global__ void __launch_bounds__(Warps * 32) verify_kernel(verify_params prm) {
  verify_body<Mode, Warps>(prm);
}
/// v15: the same at 4 blocks per SM (the library's 64-register bound at 256 threads).
template <dot_mode Mode, int Warps>
__global__ void __launch_bounds__(Warps * 32, 4) verify_kernel_b4(verify_params prm) {
  verify_body<Mode, Warps>(prm);
}

/// Read floor: reads every (row, head) state tile of the batch once (same grid and addressing as
/// verify_kernel) and writes one sum per block.
template <int Threads>
__global__ void __launch_bounds__(Threads) read_state_kernel(const float* __restrict__ state,
                                                             const int* __restrict__ slot_idx,
                                                             float* __restrict__ sink) {
  constexpr int kVec = kHeadDim * kDState / 4;  // float4s per tile
  constexpr int kPer = kVec / Threads;
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t slot = slot_idx[b];
  const float4* tile =
      reinterpret_cast<const float4*>(state + (slot * kHeads + h) * int64_t(kHeadDim * kDState));
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
    sink[int64_t(b) * kHeads + h] = s;
  }
}

/// One warp: G = S (16 x 128) . C^T (4 drafts) through warp_dots, to probe the fragment layouts on
/// the hardware with the kernel's own code. g_out[d * 16 + p].
template <dot_mode Mode>
__global__ void dots_probe_kernel(const float* __restrict__ s16, const float* __restrict__ c4,
                                  float* __restrict__ g_out) {
  __shared__ __align__(16) float cs[kDrafts][kCStride];
  __shared__ float gs[kDrafts][kHeadDim];
  const int lane = threadIdx.x;
  for (int i = lane; i < kDrafts * kDState; i += 32) cs[i / kDState][i % kDState] = c4[i];
  float st[1][2][kRowVals];
  load_state_frag<1>(s16, st, lane);
  __syncwarp();
  warp_dots<Mode, 1>(st, cs, gs, 0, lane);
  __syncwarp();
  for (int i = lane; i < kDrafts * 16; i += 32) g_out[i] = gs[i / 16][i % 16];
}

/// Device-side random fill of the state pool: uniform in [-0.5, 0.5).
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__global__ void fill_state_kernel(float* __restrict__ s, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
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

// ---------------------------------------------------------------------------------------------
// Host self-test (no CUDA call)
// ---------------------------------------------------------------------------------------------

static bool report(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? "PASS" : "FAIL", what);
  return ok;
}

/// frag_n covers n = 0..127 once over (t, e); loads are 4 contiguous, 16-byte aligned floats;
/// the B pair of a k-step is contiguous.
static bool test_frag_n() {
  bool ok = true;
  std::vector<int> hits(kDState, 0);
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < kRowVals; ++e) {
      const int n = frag_n(t, e);
      if (n < 0 || n >= kDState) ok = false;
      else ++hits[n];
    }
  for (int n = 0; n < kDState; ++n) ok = ok && hits[n] == 1;
  bool contiguous = true;
  for (int t = 0; t < 4; ++t) {
    for (int q = 0; q < kRowVals / 4; ++q) {
      contiguous = contiguous && frag_n(t, 4 * q) % 4 == 0;
      for (int r = 0; r < 4; ++r) contiguous = contiguous && frag_n(t, 4 * q + r) == frag_n(t, 4 * q) + r;
    }
    for (int j = 0; j < kKSteps; ++j)
      contiguous = contiguous && frag_n(t, b_reg_e(j, 1)) == frag_n(t, b_reg_e(j, 0)) + 1 &&
                   frag_n(t, b_reg_e(j, 0)) % 2 == 0;
  }
  // Every k-step uses each of the lane's values once (A: per row half; B: once).
  bool uses = true;
  for (int rh = 0; rh < 2; ++rh) {
    std::vector<int> a_use(kRowVals, 0), b_use(kRowVals, 0);
    for (int j = 0; j < kKSteps; ++j) {
      for (int i = 0; i < 4; ++i)
        if (a_reg_rh(i) == rh) ++a_use[a_reg_e(j, i)];
      for (int i = 0; i < 2; ++i) ++b_use[b_reg_e(j, i)];
    }
    for (int e = 0; e < kRowVals; ++e) uses = uses && a_use[e] == 1 && b_use[e] == 1;
  }
  report(ok, "frag_n is a bijection (t, e) -> n = 0..127");
  report(contiguous, "each lane's row loads are 16-byte aligned float4 runs; B pairs contiguous");
  report(uses, "every lane value enters exactly one A and one B register over the 16 k-steps");
  return ok && contiguous && uses;
}

/// Emulates one warp's 16 mma k-steps: registers filled with the kernel's mapping, placed in the
/// hardware tiles by the PTX layout, D += A B in double; then the accumulators read with the
/// kernel's acc mapping must equal S . C^T. Also emulates the FMA variant's lane sums.
static bool test_mma_emulation(host_rng& rng) {
  double S[16][kDState], Cm[kDrafts][kDState], ref[16][kDrafts];
  for (auto& r : S)
    for (double& v : r) v = rng.uniform() - 0.5;
  for (auto& r : Cm)
    for (double& v : r) v = 2.0 * rng.uniform() - 1.0;
  for (int p = 0; p < 16; ++p)
    for (int d = 0; d < kDrafts; ++d) {
      double s = 0.0;
      for (int n = 0; n < kDState; ++n) s += S[p][n] * Cm[d][n];
      ref[p][d] = s;
    }
  double D[16][8] = {};
  bool coverage = true;
  for (int j = 0; j < kKSteps; ++j) {
    double At[16][8] = {}, Bt[8][8] = {};
    int a_hits[16][8] = {}, b_hits[8][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      for (int i = 0; i < 4; ++i) {  // what the kernel puts in A register i
        const double v = S[frag_row(g, a_reg_rh(i))][frag_n(t, a_reg_e(j, i))];
        const int r = ptx_a_row(lane, i), c = ptx_a_col(lane, i);
        At[r][c] = v;
        ++a_hits[r][c];
      }
      for (int i = 0; i < 2; ++i) {  // what the kernel puts in B register i
        const int d = b_lane_d(lane);
        const double v = d < kDrafts ? Cm[d][frag_n(t, b_reg_e(j, i))] : 0.0;
        const int r = ptx_b_row(lane, i), c = ptx_b_col(lane, i);
        Bt[r][c] = v;
        ++b_hits[r][c];
      }
    }
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) coverage = coverage && a_hits[r][c] == 1;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) coverage = coverage && b_hits[r][c] == 1;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c)
        for (int k = 0; k < 8; ++k) D[r][c] += At[r][k] * Bt[k][c];
  }
  double max_err = 0.0;
  std::vector<int> seen(16 * kDrafts, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const double v = D[ptx_c_row(lane, i)][ptx_c_col(lane, i)];  // what the lane's acc[i] holds
      const int p = acc_row(lane, i), d = acc_d(lane, i);           // what the kernel takes it for
      const double want = d < kDrafts ? ref[p][d] : 0.0;
      max_err = std::max(max_err, std::fabs(v - want));
      if (d < kDrafts) ++seen[p * kDrafts + d];
    }
  bool all_seen = true;
  for (int v : seen) all_seen = all_seen && v == 1;
  // FMA variant: lane (g, t) sums its 32 values of rows g, g + 8; the group sums over t.
  double fma_err = 0.0;
  for (int g = 0; g < 8; ++g)
    for (int rh = 0; rh < 2; ++rh)
      for (int d = 0; d < kDrafts; ++d) {
        double s = 0.0;
        for (int t = 0; t < 4; ++t)
          for (int e = 0; e < kRowVals; ++e) s += S[frag_row(g, rh)][frag_n(t, e)] * Cm[d][frag_n(t, e)];
        fma_err = std::max(fma_err, std::fabs(s - ref[frag_row(g, rh)][d]));
      }
  char buf[160];
  std::snprintf(buf, sizeof buf, "emulated warp mma (kernel mapping vs PTX layout) = S.C^T: max abs err %.2e", max_err);
  const bool ok1 = report(max_err < 1e-12 && coverage && all_seen, buf);
  report(coverage, "every A/B tile element written by exactly one lane register per k-step");
  report(all_seen, "every (p, d < 4) output held by exactly one accumulator register");
  std::snprintf(buf, sizeof buf, "emulated FMA-variant lane sums = S.C^T: max abs err %.2e", fma_err);
  const bool ok2 = report(fma_err < 1e-12, buf);
  return ok1 && ok2 && coverage && all_seen;
}

/// cvt.rna emulation and the 3xTF32 / 2xTF32 split accuracy.
static bool test_tf32_split(host_rng& rng) {
  bool ok = true;
  // Rounding: ties away from zero, 10 explicit mantissa bits.
  ok = ok && host_rna_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f;     // tie -> away
  ok = ok && host_rna_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f);
  ok = ok && host_rna_tf32(1.0f + 0x1p-12f) == 1.0f;                 // below half -> down
  ok = ok && host_rna_tf32(1.0f + 3 * 0x1p-12f) == 1.0f + 0x1p-10f;  // above half -> up
  ok = ok && host_rna_tf32(1.5f) == 1.5f;
  report(ok, "cvt.rna.tf32 emulation: ties away from zero at 10 mantissa bits");
  bool bf16_exact = true;
  for (int i = 0; i < 100000; ++i) {
    const float c = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
    bf16_exact = bf16_exact && host_rna_tf32(c) == c;
  }
  report(bf16_exact, "bf16 values are exact in tf32 (so b_small == 0: 2xTF32 == 3xTF32 here)");
  auto split = [](float x, float& big, float& small) {
    big = host_rna_tf32(x);
    small = host_rna_tf32(x - big);  // x - big is exact in fp32
  };
  double max3 = 0.0, max2 = 0.0, max1 = 0.0, dot3 = 0.0, dot1 = 0.0;
  for (int i = 0; i < 1000000; ++i) {
    const float a = float((rng.uniform() - 0.5) * std::ldexp(1.0, int(rng.next() % 40) - 20));
    const float b = float((rng.uniform() - 0.5) * std::ldexp(1.0, int(rng.next() % 40) - 20));
    if (a == 0.f || b == 0.f) continue;
    float ab, as, bb, bsm;
    split(a, ab, as);
    split(b, bb, bsm);
    const double exact = double(a) * double(b);
    // Each tf32 x tf32 product is exact in double (11 x 11 significant bits).
    const double p3 = double(as) * bb + double(ab) * bsm + double(ab) * bb;
    const double p1 = double(ab) * bb;
    max3 = std::max(max3, std::fabs(p3 - exact) / std::fabs(exact));
    max1 = std::max(max1, std::fabs(p1 - exact) / std::fabs(exact));
    // 2xTF32 with a bf16 b (exact in tf32).
    const float b16 = bf16_to_float(float_to_bf16(b));
    float b16b, b16s;
    split(b16, b16b, b16s);
    if (b16 != 0.f) {
      const double e2 = double(a) * b16;
      const double p2 = double(as) * b16b + double(ab) * b16b;
      max2 = std::max(max2, std::fabs(p2 - e2) / std::fabs(e2) + (b16s != 0.f ? 1.0 : 0.0));
    }
  }
  // Dots of 128 (state in [-0.5, 0.5], C bf16 in [-1, 1]), error relative to sum |a_i b_i|.
  for (int rep = 0; rep < 2000; ++rep) {
    double exact = 0.0, mag = 0.0, s3 = 0.0, s1 = 0.0;
    for (int n = 0; n < kDState; ++n) {
      const float a = rng.uniform(-0.5f, 0.5f);
      const float c = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
      float ab, as;
      split(a, ab, as);
      exact += double(a) * c;
      mag += std::fabs(double(a) * c);
      s3 += double(as) * c + double(ab) * c;
      s1 += double(ab) * c;
    }
    dot3 = std::max(dot3, std::fabs(s3 - exact) / mag);
    dot1 = std::max(dot1, std::fabs(s1 - exact) / mag);
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "3xTF32 products: max rel err %.2e (want <= 1e-6)", max3);
  const bool ok3 = report(max3 <= 1e-6, buf);
  std::snprintf(buf, sizeof buf, "2xTF32 products with bf16 b: max rel err %.2e (want <= 1e-6)", max2);
  const bool ok2 = report(max2 <= 1e-6, buf);
  std::snprintf(buf, sizeof buf,
                "info: 1xTF32 products max rel err %.2e; 128-dots (rel. to sum|ab|): 3x %.2e, 1x %.2e "
                "(exact products; the tensor core's fp32 accumulation adds its own rounding)",
                max1, dot3, dot1);
  report(true, buf);
  return ok && bf16_exact && ok3 && ok2;
}

// ---- closed-form reference (double) and its check against the literal recurrence ----
struct row_inputs {  // one (row, head) in double, for the reference
  double h0[kHeadDim][kDState];
  double x[kSteps][kHeadDim];  // x_s for s = 0..18 (drafts at 15..18)
  double Bm[kSteps][kDState];
  double Cm[kDrafts][kDState];
  double dt[kSteps];
  double A, D;
};

/// y[d][p] by the closed form (the one the kernels implement), in double.
static void reference_closed_form(const row_inputs& in, double (*y)[kHeadDim]) {
  for (int d = 0; d < kDrafts; ++d) {
    const int last = kHist + d;
    double bc[kSteps], w[kSteps];
    for (int s = 0; s <= last; ++s) {
      double dot = 0.0;
      for (int n = 0; n < kDState; ++n) dot += in.Bm[s][n] * in.Cm[d][n];
      bc[s] = dot;
    }
    double suf = 0.0;  // sum of dt over (s, last]
    for (int s = last; s >= 0; --s) {
      w[s] = std::exp(in.A * suf) * in.dt[s] * bc[s];
      suf += in.dt[s];
    }
    const double decay = std::exp(in.A * suf);
    for (int p = 0; p < kHeadDim; ++p) {
      double g = 0.0;
      for (int n = 0; n < kDState; ++n) g += in.h0[p][n] * in.Cm[d][n];
      double v = decay * g + in.D * in.x[last][p];
      for (int s = 0; s <= last; ++s) v += w[s] * in.x[s][p];
      y[d][p] = v;
    }
  }
}

static bool test_closed_form(host_rng& rng) {
  static row_inputs in;  // large: keep off the stack
  for (auto& r : in.h0)
    for (double& v : r) v = rng.uniform() - 0.5;
  for (auto& r : in.x)
    for (double& v : r) v = 2 * rng.uniform() - 1;
  for (auto& r : in.Bm)
    for (double& v : r) v = 2 * rng.uniform() - 1;
  for (auto& r : in.Cm)
    for (double& v : r) v = 2 * rng.uniform() - 1;
  for (double& v : in.dt) v = 0.01 + 0.09 * rng.uniform();
  in.A = -1 - 3 * rng.uniform();
  in.D = 0.5 + rng.uniform();
  double y[kDrafts][kHeadDim];
  reference_closed_form(in, y);
  // Literal recurrence: h_t = exp(A dt_t) h_{t-1} + dt_t x_t B_t^T; y_t = h_t C_t + D x_t.
  static double hs[kHeadDim][kDState];
  std::memcpy(hs, in.h0, sizeof hs);
  double max_err = 0.0, max_ref = 0.0;
  for (int s = 0; s < kSteps; ++s) {
    const double dA = std::exp(in.A * in.dt[s]);
    for (int p = 0; p < kHeadDim; ++p)
      for (int n = 0; n < kDState; ++n) hs[p][n] = dA * hs[p][n] + in.dt[s] * in.x[s][p] * in.Bm[s][n];
    if (s >= kHist) {
      const int d = s - kHist;
      for (int p = 0; p < kHeadDim; ++p) {
        double v = in.D * in.x[s][p];
        for (int n = 0; n < kDState; ++n) v += hs[p][n] * in.Cm[d][n];
        max_err = std::max(max_err, std::fabs(v - y[d][p]));
        max_ref = std::max(max_ref, std::fabs(v));
      }
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "closed form == step-by-step recurrence (double): max abs err %.2e (max |y| %.2f)",
                max_err, max_ref);
  return report(max_err <= 1e-12 * std::max(1.0, max_ref), buf);
}

static bool host_self_test() {
  std::printf("Host self-test (no GPU):\n");
  host_rng rng(12345);
  bool ok = test_frag_n();
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
    std::fflush(stdout);  // keep the log in order
    std::fprintf(stderr, "CUDA error %s at %s:%d in %s\n", cudaGetErrorString(e), file, line, what);
    std::exit(2);
  }
}
#define CK(expr) ::mv::check_cuda((expr), #expr, __FILE__, __LINE__)

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
};

/// Median time in microseconds of `launch` (5 warm-ups, `iters` timed runs, one event pair each).
template <class F>
static double time_median_us(F&& launch, int iters = 50, int warmups = 5) {
  for (int i = 0; i < warmups; ++i) launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(ev[2 * i]));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1]));
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
  void (*launch)(const verify_params&);
};
template <dot_mode M, int W>
static void launch_verify(const verify_params& p) {
  verify_kernel<M, W><<<dim3(kHeads, p.batch), W * 32>>>(p);
}
template <dot_mode M, int W>
static void launch_verify_b4(const verify_params& p) {
  verify_kernel_b4<M, W><<<dim3(kHeads, p.batch), W * 32>>>(p);
}

/// Runs the fragment-layout probe on the GPU for every mode; returns false on a mismatch.
static bool gpu_probe() {
  host_rng rng(777);
  std::vector<float> S(16 * kDState), C(kDrafts * kDState);
  for (float& v : S) v = rng.uniform(-0.5f, 0.5f);
  for (float& v : C) v = bf16_to_float(float_to_bf16(rng.uniform(-1.f, 1.f)));
  dev_buf<float> dS(S.size()), dC(C.size()), dG(kDrafts * 16);
  dS.upload(S);
  dC.upload(C);
  struct probe { const char* name; void (*fn)(const float*, const float*, float*); double tol; };
  const probe probes[] = {
      {"3xTF32", [](const float* a, const float* b, float* c) { dots_probe_kernel<dot_mode::tf32x3><<<1, 32>>>(a, b, c); }, 1e-5},
      {"2xTF32", [](const float* a, const float* b, float* c) { dots_probe_kernel<dot_mode::tf32x2><<<1, 32>>>(a, b, c); }, 1e-5},
      {"1xTF32", [](const float* a, const float* b, float* c) { dots_probe_kernel<dot_mode::tf32x1><<<1, 32>>>(a, b, c); }, 1e-2},
      {"FMA", [](const float* a, const float* b, float* c) { dots_probe_kernel<dot_mode::fma><<<1, 32>>>(a, b, c); }, 1e-5},
  };
  bool all = true;
  std::printf("GPU fragment-layout probe (one warp, G = S[16x128] . C[4x128]^T, kernel's warp_dots):\n");
  for (const probe& pr : probes) {
    CK(cudaMemset(dG.ptr, 0xFF, dG.bytes()));  // NaN
    pr.fn(dS.ptr, dC.ptr, dG.ptr);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> G(kDrafts * 16);
    CK(cudaMemcpy(G.data(), dG.ptr, dG.bytes(), cudaMemcpyDeviceToHost));
    double max_err = 0.0, max_ref = 0.0;
    for (int d = 0; d < kDrafts; ++d)
      for (int p = 0; p < 16; ++p) {
        double ref = 0.0;
        for (int n = 0; n < kDState; ++n) ref += double(S[p * kDState + n]) * C[d * kDState + n];
        max_ref = std::max(max_ref, std::fabs(ref));
        const double e = std::fabs(double(G[d * 16 + p]) - ref);
        max_err = std::isnan(G[d * 16 + p]) ? INFINITY : std::max(max_err, e);
      }
    const double rel = max_err / max_ref;
    const bool ok = rel <= pr.tol;
    all = all && ok;
    std::printf("  [%s] %-7s max err / max|G| = %.2e (tolerance %.0e)%s\n", ok ? "PASS" : "FAIL", pr.name, rel,
                pr.tol, ok ? "" : "  <- fragment layout / mapping mismatch");
  }
  std::printf("\n");
  return all;
}

static int run_gpu(int batch) {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("Device: %s, %d SMs, sm_%d%d, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor, prop.totalGlobalMem / 1073741824.0);
  const int pool = std::max(kPoolMin, batch);
  std::printf("Shape: batch %d, heads %d, headdim %d, dstate %d, groups %d, history %d, drafts %d, pool %d slots\n\n",
              batch, kHeads, kHeadDim, kDState, kGroups, kHist, kDrafts, pool);
  const bool probe_ok = gpu_probe();

  // ---- inputs ----
  host_rng rng(2024);
  const size_t tile = size_t(kHeadDim) * kDState;
  const size_t state_n = size_t(pool) * kHeads * tile;
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
  const auto x_hist = bf16_vec(size_t(batch) * kHist * kHeads * kHeadDim, -1.f, 1.f);
  const auto x_draft = bf16_vec(size_t(batch) * kDrafts * kHeads * kHeadDim, -1.f, 1.f);
  const auto B_hist = bf16_vec(size_t(batch) * kHist * kGroups * kDState, -1.f, 1.f);
  const auto B_draft = bf16_vec(size_t(batch) * kDrafts * kGroups * kDState, -1.f, 1.f);
  const auto C_draft = bf16_vec(size_t(batch) * kDrafts * kGroups * kDState, -1.f, 1.f);
  const auto dt_hist = f32_vec(size_t(batch) * kHist * kHeads, 0.01f, 0.1f);
  const auto dt_draft = f32_vec(size_t(batch) * kDrafts * kHeads, 0.01f, 0.1f);
  const auto A = f32_vec(kHeads, -4.f, -1.f);
  const auto D = f32_vec(kHeads, 0.5f, 1.5f);

  dev_buf<float> d_state(state_n);
  dev_buf<int> d_slot(batch);
  dev_buf<uint16_t> d_xh(x_hist.size()), d_xd(x_draft.size()), d_Bh(B_hist.size()), d_Bd(B_draft.size()),
      d_Cd(C_draft.size());
  dev_buf<float> d_dth(dt_hist.size()), d_dtd(dt_draft.size()), d_A(kHeads), d_D(kHeads);
  dev_buf<float> d_bc(size_t(batch) * kGroups * kSteps * kDrafts);
  const size_t out_n = size_t(batch) * kDrafts * kHeads * kHeadDim;
  dev_buf<float> d_out(out_n);
  dev_buf<float> d_sink(size_t(batch) * kHeads);
  fill_state_kernel<<<4 * prop.multiProcessorCount * 8, 256>>>(d_state.ptr, state_n, 99);
  CK(cudaGetLastError());
  d_slot.upload(slot_idx);
  d_xh.upload(x_hist);
  d_xd.upload(x_draft);
  d_Bh.upload(B_hist);
  d_Bd.upload(B_draft);
  d_Cd.upload(C_draft);
  d_dth.upload(dt_hist);
  d_dtd.upload(dt_draft);
  d_A.upload(A);
  d_D.upload(D);
  CK(cudaDeviceSynchronize());

  verify_params vp{d_state.ptr, d_slot.ptr, d_xh.ptr, d_xd.ptr, d_Cd.ptr, d_dth.ptr, d_dtd.ptr,
                   d_A.ptr,     d_D.ptr,    d_bc.ptr, d_out.ptr, batch};
  bc_params bp{d_Bh.ptr, d_Bd.ptr, d_Cd.ptr, d_bc.ptr, batch};
  auto launch_bc = [&] { bc_kernel<<<dim3(kGroups, batch), 128>>>(bp); };

  // ---- float64 reference over 16 random rows (all heads, drafts, p) ----
  const int n_check = std::min(16, batch);
  std::vector<int> check_rows(batch);
  for (int i = 0; i < batch; ++i) check_rows[i] = i;
  for (int i = batch - 1; i > 0; --i) std::swap(check_rows[i], check_rows[rng.next() % uint64_t(i + 1)]);
  check_rows.resize(n_check);
  std::vector<double> ref(size_t(n_check) * kDrafts * kHeads * kHeadDim);
  std::vector<double> head_max(size_t(n_check) * kHeads);
  std::vector<double> bc_ref(size_t(n_check) * kGroups * kSteps * kDrafts);
  std::vector<double> bc_mag(bc_ref.size());  // sum |B_s[n] C_d[n]|: the scale of a dot's rounding
  {
    std::vector<float> h0(size_t(kHeads) * tile);
    static row_inputs in;
    for (int ci = 0; ci < n_check; ++ci) {
      const int b = check_rows[ci];
      CK(cudaMemcpy(h0.data(), d_state.ptr + size_t(slot_idx[b]) * kHeads * tile, h0.size() * sizeof(float),
                    cudaMemcpyDeviceToHost));
      for (int h = 0; h < kHeads; ++h) {
        const int grp = h / kHeadsPerGroup;
        for (int p = 0; p < kHeadDim; ++p)
          for (int n = 0; n < kDState; ++n) in.h0[p][n] = h0[(size_t(h) * kHeadDim + p) * kDState + n];
        for (int s = 0; s < kSteps; ++s) {
          for (int p = 0; p < kHeadDim; ++p)
            in.x[s][p] = s < kHist ? bf16_to_float(x_hist[((size_t(b) * kHist + s) * kHeads + h) * kHeadDim + p])
                                   : bf16_to_float(x_draft[((size_t(b) * kDrafts + s - kHist) * kHeads + h) * kHeadDim + p]);
          for (int n = 0; n < kDState; ++n)
            in.Bm[s][n] = s < kHist ? bf16_to_float(B_hist[((size_t(b) * kHist + s) * kGroups + grp) * kDState + n])
                                    : bf16_to_float(B_draft[((size_t(b) * kDrafts + s - kHist) * kGroups + grp) * kDState + n]);
          in.dt[s] = s < kHist ? dt_hist[(size_t(b) * kHist + s) * kHeads + h]
                               : dt_draft[(size_t(b) * kDrafts + s - kHist) * kHeads + h];
        }
        for (int d = 0; d < kDrafts; ++d)
          for (int n = 0; n < kDState; ++n)
            in.Cm[d][n] = bf16_to_float(C_draft[((size_t(b) * kDrafts + d) * kGroups + grp) * kDState + n]);
        in.A = A[h];
        in.D = D[h];
        double y[kDrafts][kHeadDim];
        reference_closed_form(in, y);
        double mx = 0.0;
        for (int d = 0; d < kDrafts; ++d)
          for (int p = 0; p < kHeadDim; ++p) {
            ref[((size_t(ci) * kDrafts + d) * kHeads + h) * kHeadDim + p] = y[d][p];
            mx = std::max(mx, std::fabs(y[d][p]));
          }
        head_max[size_t(ci) * kHeads + h] = mx;
        if (h % kHeadsPerGroup == 0)
          for (int s = 0; s < kSteps; ++s)
            for (int d = 0; d < kDrafts; ++d) {
              double dot = 0.0, mag = 0.0;
              for (int n = 0; n < kDState; ++n) {
                dot += in.Bm[s][n] * in.Cm[d][n];
                mag += std::fabs(in.Bm[s][n] * in.Cm[d][n]);
              }
              bc_ref[((size_t(ci) * kGroups + grp) * kSteps + s) * kDrafts + d] = dot;
              bc_mag[((size_t(ci) * kGroups + grp) * kSteps + s) * kDrafts + d] = mag;
            }
      }
    }
  }

  // ---- kernel 1 correctness ----
  CK(cudaMemset(d_bc.ptr, 0xFF, d_bc.bytes()));
  launch_bc();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  bool bc_ok = true;
  {
    std::vector<float> bc(d_bc.n);
    CK(cudaMemcpy(bc.data(), d_bc.ptr, d_bc.bytes(), cudaMemcpyDeviceToHost));
    double max_rel = 0.0;
    for (float v : bc) bc_ok = bc_ok && std::isfinite(v);
    for (int ci = 0; ci < n_check; ++ci)
      for (size_t k = 0; k < size_t(kGroups) * kSteps * kDrafts; ++k) {
        const double r = bc_ref[size_t(ci) * kGroups * kSteps * kDrafts + k];
        const double m = bc_mag[size_t(ci) * kGroups * kSteps * kDrafts + k];
        const double v = bc[size_t(check_rows[ci]) * kGroups * kSteps * kDrafts + k];
        max_rel = std::max(max_rel, std::fabs(v - r) / std::max(m, 1e-30));
      }
    bc_ok = bc_ok && max_rel < 1e-5;
    std::printf("Kernel 1 (B.C coefficients): all finite %s, max |err| / sum|B_n C_n| vs float64 %.2e  [%s]\n\n",
                bc_ok ? "yes" : "NO", max_rel, bc_ok ? "PASS" : "FAIL");
  }

  // ---- variants: correctness (NaN-poisoned output), then timing ----
  const variant variants[] = {
      {"3xTF32", 2, launch_verify<dot_mode::tf32x3, 2>}, {"3xTF32", 4, launch_verify<dot_mode::tf32x3, 4>},
      {"2xTF32", 2, launch_verify<dot_mode::tf32x2, 2>}, {"2xTF32", 4, launch_verify<dot_mode::tf32x2, 4>},
      {"1xTF32", 2, launch_verify<dot_mode::tf32x1, 2>}, {"1xTF32", 4, launch_verify<dot_mode::tf32x1, 4>},
      {"FMA", 2, launch_verify<dot_mode::fma, 2>},       {"FMA", 4, launch_verify<dot_mode::fma, 4>},
      {"FMA", 8, launch_verify<dot_mode::fma, 8>},  // v15: the library's block size, one row per lane
      {"FMA/64r", 8, launch_verify_b4<dot_mode::fma, 8>},  // v15: and its 64-register bound
  };
  struct result { double t_both, t_k2, max_rel, max_abs, max_head; bool finite; };
  std::vector<result> results;
  std::vector<float> out(out_n);
  for (const variant& v : variants) {
    result r{};
    CK(cudaMemset(d_out.ptr, 0xFF, d_out.bytes()));  // NaN poison
    launch_bc();
    v.launch(vp);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out.data(), d_out.ptr, d_out.bytes(), cudaMemcpyDeviceToHost));
    r.finite = std::all_of(out.begin(), out.end(), [](float f) { return std::isfinite(f); });
    for (int ci = 0; ci < n_check; ++ci)
      for (int d = 0; d < kDrafts; ++d)
        for (int h = 0; h < kHeads; ++h) {
          const double hm = head_max[size_t(ci) * kHeads + h];
          for (int p = 0; p < kHeadDim; ++p) {
            const double rv = ref[((size_t(ci) * kDrafts + d) * kHeads + h) * kHeadDim + p];
            const double yv = out[((size_t(check_rows[ci]) * kDrafts + d) * kHeads + h) * kHeadDim + p];
            const double e = std::fabs(yv - rv);
            r.max_abs = std::max(r.max_abs, e);
            r.max_rel = std::max(r.max_rel, e / std::max(std::fabs(rv), 1e-3 * hm));
            r.max_head = std::max(r.max_head, e / hm);
          }
        }
    if (!r.finite) r.max_rel = r.max_abs = r.max_head = INFINITY;
    r.t_both = time_median_us([&] { launch_bc(); v.launch(vp); });
    r.t_k2 = time_median_us([&] { v.launch(vp); });
    results.push_back(r);
  }
  const double t_bc = time_median_us(launch_bc);

  // ---- read floor and copy bandwidth ----
  const double t_read64 = time_median_us([&] { read_state_kernel<64><<<dim3(kHeads, batch), 64>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read128 = time_median_us([&] { read_state_kernel<128><<<dim3(kHeads, batch), 128>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read256 = time_median_us([&] { read_state_kernel<256><<<dim3(kHeads, batch), 256>>>(d_state.ptr, d_slot.ptr, d_sink.ptr); });
  const double t_read = std::min({t_read64, t_read128, t_read256});
  const size_t copy_bytes = std::min<size_t>(size_t(2) << 30, d_state.bytes());
  double t_copy = 0.0;
  {
    dev_buf<char> dst(copy_bytes);
    t_copy = time_median_us([&] { CK(cudaMemcpyAsync(dst.ptr, d_state.ptr, copy_bytes, cudaMemcpyDeviceToDevice)); });
  }

  // ---- report ----
  const double state_bytes = double(batch) * kHeads * tile * sizeof(float);
  const double in_bytes = double(x_hist.size() + x_draft.size() + B_hist.size() + B_draft.size() + C_draft.size()) * 2 +
                          double(dt_hist.size() + dt_draft.size() + 2 * kHeads) * 4 + double(batch) * 4;
  const double out_bytes = double(out_n) * 4;
  const double total_bytes = state_bytes + in_bytes + out_bytes;
  std::printf("Bytes per call: state %.1f MiB + inputs %.1f MiB + outputs %.1f MiB = %.1f MiB\n",
              state_bytes / 1048576.0, in_bytes / 1048576.0, out_bytes / 1048576.0, total_bytes / 1048576.0);
  std::printf("Read-only kernel (state of the batch, %.0f MiB): 64 thr %.1f us, 128 thr %.1f us, 256 thr %.1f us "
              "-> floor %.1f us = %.0f GB/s\n",
              state_bytes / 1048576.0, t_read64, t_read128, t_read256, t_read, state_bytes / t_read / 1e3);
  std::printf("cudaMemcpy D2D %.2f GiB: %.1f us = %.0f GB/s copied (%.0f GB/s read + write)\n",
              copy_bytes / 1073741824.0, t_copy, copy_bytes / t_copy / 1e3, 2.0 * copy_bytes / t_copy / 1e3);
  std::printf("Kernel 1 (bc) alone: %.1f us\n\n", t_bc);
  std::printf("%-8s %5s | %9s %9s | %8s %9s | %10s %10s %10s | %s\n", "variant", "warps", "K1+K2 us", "K2 us", "GB/s",
              "% of read", "max rel", "max abs", "err/hdmax", "finite");
  std::printf("---------------------------------------------------------------------------------------------------------\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    std::printf("%-8s %5d | %9.1f %9.1f | %8.0f %8.0f%% | %10.2e %10.2e %10.2e | %s\n", variants[i].name,
                variants[i].warps, r.t_both, r.t_k2, total_bytes / r.t_both / 1e3, 100.0 * r.t_both / t_read, r.max_rel,
                r.max_abs, r.max_head, r.finite ? "yes" : "NO (NaN/inf left)");
  }
  std::printf("\nGB/s and %% of read use K1+K2 (both launches, back to back). max rel = |y - ref| / max(|ref|, 1e-3 *\n"
              "max|ref| of the head); err/hdmax = |y - ref| / max|ref| of the head; ref = float64 closed form over %d\n"
              "rows x %d heads x %d drafts x %d p. FMA is the fp32 floor of this structure: 3xTF32 near it = fp32-exact.\n\n",
              n_check, kHeads, kDrafts, kHeadDim);

  // ---- verdict ----
  double best3 = INFINITY, best3_rel = INFINITY, fma_rel = INFINITY;
  for (size_t i = 0; i < results.size(); ++i) {
    if (std::strcmp(variants[i].name, "3xTF32") == 0 && results[i].t_both < best3) {
      best3 = results[i].t_both;
      best3_rel = results[i].max_rel;
    }
    if (std::strcmp(variants[i].name, "FMA") == 0) fma_rel = std::min(fma_rel, results[i].max_rel);
  }
  bool all_finite = true;
  for (const result& r : results) all_finite = all_finite && r.finite;
  // Gross-error check on err/hdmax, so that a wrong index or coefficient (err/hdmax ~1e-2 and up)
  // fails the run: FMA <= 1e-5, 3x/2xTF32 <= 1e-4, 1xTF32 <= 1e-2 (expected ~1e-7, ~1e-7, ~1e-4).
  bool acc_ok = true;
  for (size_t i = 0; i < results.size(); ++i) {
    const char* nm = variants[i].name;
    const double tol = std::strcmp(nm, "FMA") == 0 ? 1e-5 : std::strcmp(nm, "1xTF32") == 0 ? 1e-2 : 1e-4;
    acc_ok = acc_ok && results[i].max_head <= tol;
  }
  std::printf("Checks: GPU layout probe %s, kernel 1 %s, all outputs written %s, err/hdmax sanity %s\n",
              probe_ok ? "PASS" : "FAIL", bc_ok ? "PASS" : "FAIL", all_finite ? "PASS" : "FAIL",
              acc_ok ? "PASS" : "FAIL");
  std::printf("Verdict: best 3xTF32 = %.1f us = %.2fx read-only (target <= ~1.2x); max rel %.2e (target <= ~1e-5; "
              "FMA floor %.2e)\n",
              best3, best3 / t_read, best3_rel, fma_rel);
  return (probe_ok && bc_ok && all_finite && acc_ok) ? 0 : 1;
}

}  // namespace mv

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
  const bool host_ok = mv::host_self_test();  // before any CUDA call
  if (host_only) return host_ok ? 0 : 1;
  if (!host_ok) {
    std::fprintf(stderr, "host self-test failed: not running on the GPU\n");
    return 1;
  }
  return mv::run_gpu(batch);
}
