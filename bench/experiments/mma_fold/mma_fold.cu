// mma_fold.cu: standalone prototype of the Mamba-2 window commit (fold) on tensor cores.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 mma_fold.cu -o mma_fold
// Run:   ./mma_fold [--batch N]      (host self-test first, then the GPU measurement)
//        ./mma_fold --host-test      (host self-test only; makes no CUDA call)
//
// The operation. A row's state for one head is h[p][n] (P = 64 rows of N = 128 fp32, n
// contiguous). m = 16 buffered Mamba-2 steps h_j = exp(A dt_j) h_{j-1} + dt_j x_j B_j^T fold into
//
//     h' = decay * h + sum_j c_j x_j B_j^T,   decay = exp(A sum_j dt_j),
//                                             c_j   = dt_j exp(A sum_{i>j} dt_i),
//
// i.e. h'[p][n] = decay h[p][n] + sum_j X[j][p] W[j][n] = decay h + X^T W with X[j][p] = x_j[p]
// (bf16) and W[j][n] = c_j B_j[n] (fp32): a rank-16 update of a 64 x 128 tile. The state is
// read once and written once; the arithmetic (16 MACs per element) is what makes a CUDA-core
// version partly instruction-bound. Here the MACs go to mma.sync m16n8k8 TF32 with the state
// tile held in the accumulator registers.
//
// Variants (template parameter `variant`):
//   fma        : CUDA cores; the same thread -> state-element mapping as the mma variants,
//                W and X staged in shared memory, 16 FMAs per element (reference structure).
//   mma_2xtf32 : D = decay*h + X^T W_small + X^T W_big, W_big = tf32(W), W_small = tf32(W - W_big).
//                X is bf16, exactly representable in TF32, so only W is split.
//   mma_1xtf32 : D = decay*h + X^T W_big (accuracy/speed comparison).
// Each has a split template parameter: 1 = a block of 4 warps per (row, head), a warp owning
// 16 p rows x all 128 n; 2 = 8 warps per (row, head), a warp owning 16 p rows x 64 n.
//
// ---------------------------------------------------------------------------------------------
// Fragment layouts of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k8", .tf32 operands; cross-checked against CUTLASS's SM80 16x8x8 TF32
// traits). g = lane >> 2 (groupID), t = lane & 3 (threadID_in_group):
//   A (16 x 8, row = M, col = K): a0 = (g, t)   a1 = (g+8, t)   a2 = (g, t+4)   a3 = (g+8, t+4)
//        (NB: differs from the f16/bf16 m16n8k8 A layout, where a1 is (g, 2t+1).)
//   B ( 8 x 8, row = K, col = N): b0 = (t, g)   b1 = (t+4, g)
//   C/D (16 x 8, row = M, col = N): c0 = (g, 2t) c1 = (g, 2t+1) c2 = (g+8, 2t) c3 = (g+8, 2t+1)
// Our GEMM: M = p (16 rows per warp tile), N = n (8 per n-tile, 16 tiles), K = step j (two
// k-steps of 8). A = X^T (A[p][j] = x_j[p]), B = W (B[j][n]).
//
// n permutation. Logical n-tiles 2i and 2i+1 (i = 0..7, "pair i") together cover the 16
// physical columns 16i..16i+15; logical column c of tile 2i+s is physical column
//     phys_n(2i+s, c) = 16i + 4 (c >> 1) + 2s + (c & 1).
// So thread t's accumulator columns {2t, 2t+1} of tile 2i and {2t, 2t+1} of tile 2i+1 are the
// physical columns 16i + 4t + {0, 1, 2, 3}: for each pair and each of its two rows (g, g+8) a
// thread holds one aligned float4 of the state, loaded and stored with one 16-byte access.
// The thread keeps acc[pair][half][e] = h[p = 16 wm + g + 8 half][n = 16 pair + 4t + e]; the mma
// on tile 2i+s uses c_ci = acc[i][ci >> 1][2s + (ci & 1)]. The B operand of tile 2i+s reads W at
// the same physical column: b_r = W[8 kstep + t + 4r][phys_n(2i+s, g)].
// Both operands are staged in shared memory already in fragment order, so a lane gets all it
// needs for one mma pair with one 16-byte shared load (no bank conflicts):
//   x_frag[((wm * 2 + kstep) * 32 + lane) * 4 + r] = A-fragment register r of that lane
//   w_frag float4 w_frag_slot(kstep, pair, lane) = the B registers of tiles 2i and 2i+1, register
//   r of tile 2i+s at element w_frag_pos(pair, s, r); the slot is lane ^ 4*(bit 4 of lane) and the
//   element (2s + r) ^ 2*(pair & 1): XOR swizzles that make the scattered staging stores hit 32
//   distinct banks (16-way conflicts without them) while reads stay conflict-free.
// Every index map below is a __host__ __device__ constexpr function used by both the kernels
// and the host self-test (--host-test), which emulates the warp's mma from the PTX layout.
// ---------------------------------------------------------------------------------------------

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// ------------------------------------------------------------------------------------------ shape
constexpr int k_steps = 16;                  // m: buffered steps folded at once
constexpr int k_nheads = 128;                // H
constexpr int k_headdim = 64;                // P
constexpr int k_dstate = 128;                // N
constexpr int k_ngroups = 8;                 // G
constexpr int k_heads_per_group = k_nheads / k_ngroups;
constexpr int k_ksteps = k_steps / 8;        // mma k-steps (K = 8 each)
constexpr int k_pairs = k_dstate / 16;       // pairs of n-tiles (16 physical columns each)
constexpr int k_warps_m = k_headdim / 16;    // warps along p (16 rows each)
constexpr int k_tile_elems = k_headdim * k_dstate;
constexpr int k_x_frag_elems = k_warps_m * k_ksteps * 32 * 4;  // = k_steps * k_headdim
constexpr int k_w_frag_elems = k_ksteps * k_pairs * 32 * 4;    // = k_steps * k_dstate
static_assert(k_x_frag_elems == k_steps * k_headdim, "x fragments cover X exactly");
static_assert(k_w_frag_elems == k_steps * k_dstate, "w fragments cover W exactly");
static_assert(k_steps % 8 == 0 && k_dstate % 16 == 0 && k_headdim % 16 == 0, "tile shape");

enum class variant { fma, mma_2xtf32, mma_1xtf32 };

// ------------------------------------------------------------------------------- index mappings
struct rc_t {
  int row;
  int col;
};

__host__ __device__ constexpr int lane_g(int lane) { return lane >> 2; }  // groupID
__host__ __device__ constexpr int lane_t(int lane) { return lane & 3; }   // threadID_in_group

// (row, col) of A-fragment register `reg` (0..3) of `lane`: A is 16 x 8, row = M (p), col = K (j).
__host__ __device__ constexpr rc_t mma_a_rc(int lane, int reg) {
  return {lane_g(lane) + 8 * (reg & 1), lane_t(lane) + 4 * (reg >> 1)};
}
// (row, col) of B-fragment register `reg` (0..1): B is 8 x 8, row = K (j), col = N (n).
__host__ __device__ constexpr rc_t mma_b_rc(int lane, int reg) {
  return {lane_t(lane) + 4 * reg, lane_g(lane)};
}
// (row, col) of accumulator register `reg` (0..3): C/D is 16 x 8, row = M (p), col = N (n).
__host__ __device__ constexpr rc_t mma_c_rc(int lane, int reg) {
  return {lane_g(lane) + 8 * (reg >> 1), 2 * lane_t(lane) + (reg & 1)};
}

// Physical state column of logical column `col` (0..7) of logical n-tile `tile` (0..15).
__host__ __device__ constexpr int phys_n(int tile, int col) {
  return 16 * (tile >> 1) + 4 * (col >> 1) + 2 * (tile & 1) + (col & 1);
}

// Accumulator storage acc[pair][half][e]: register c_ci of tile 2*pair + s lives in
// acc[pair][acc_half(ci)][acc_elem(s, ci)].
__host__ __device__ constexpr int acc_half(int ci) { return ci >> 1; }
__host__ __device__ constexpr int acc_elem(int s, int ci) { return 2 * s + (ci & 1); }
// State element held in acc[pair][half][e] by `lane` of a warp owning rows 16*wm..16*wm+15.
__host__ __device__ constexpr int acc_p(int wm, int lane, int half) {
  return 16 * wm + lane_g(lane) + 8 * half;
}
__host__ __device__ constexpr int acc_n(int lane, int pair, int e) {
  return 16 * pair + 4 * lane_t(lane) + e;
}

// x_frag: index -> (j, p) it holds, and its inverse (j, p) -> index.
__host__ __device__ constexpr rc_t x_frag_source(int idx) {  // returns {j, p}
  const int reg = idx & 3, lane = (idx >> 2) & 31, kstep = (idx >> 7) % k_ksteps;
  const int wm = (idx >> 7) / k_ksteps;
  const rc_t a = mma_a_rc(lane, reg);  // a.row = p within the warp tile, a.col = j within k-step
  return {8 * kstep + a.col, 16 * wm + a.row};
}
__host__ __device__ constexpr int x_frag_index(int j, int p) {
  const int wm = p >> 4, row = p & 15, kstep = j >> 3, col = j & 7;
  const int lane = 4 * (row & 7) + (col & 3), reg = (row >> 3) + 2 * (col >> 2);
  return ((wm * k_ksteps + kstep) * 32 + lane) * 4 + reg;
}

// w_frag, swizzled so the staging stores are free of bank conflicts (see stage_b_vec): the
// B registers of tiles 2*pair and 2*pair+1 for `lane` at k-step `kstep` are the float4 number
// w_frag_slot(kstep, pair, lane); register `reg` of tile 2*pair+s is its element
// w_frag_pos(pair, s, reg). Both XORs stay inside what one lane or one aligned 8-lane group
// reads, so the mma loop's 16-byte reads stay conflict-free and its element choice compile-time.
__host__ __device__ constexpr int w_frag_slot(int kstep, int pair, int lane) {
  return (kstep * k_pairs + pair) * 32 + (lane ^ (4 * ((lane >> 4) & 1)));
}
__host__ __device__ constexpr int w_frag_pos(int pair, int s, int reg) {
  return (2 * s + reg) ^ (2 * (pair & 1));
}
// Inverse and forward maps between W[k][n_phys] and the w_frag element index.
__host__ __device__ constexpr int w_frag_index(int k, int n) {
  const int kstep = k >> 3, kk = k & 7, pair = n >> 4, within = n & 15;
  const int s = (within >> 1) & 1;
  const int col = 2 * (within >> 2) + (within & 1);  // logical column (= g of the lane)
  const int lane = 4 * col + (kk & 3), reg = kk >> 2;
  return 4 * w_frag_slot(kstep, pair, lane) + w_frag_pos(pair, s, reg);
}
__host__ __device__ constexpr rc_t w_frag_source(int idx) {  // returns {k = j, n = physical n}
  const int slot = idx >> 2, pos = idx & 3;
  const int pair = (slot >> 5) % k_pairs, kstep = (slot >> 5) / k_pairs;
  const int lane = (slot & 31) ^ (4 * (((slot & 31) >> 4) & 1));  // the slot XOR is an involution
  const int r = pos ^ (2 * (pair & 1)), s = r >> 1, reg = r & 1;
  const rc_t b = mma_b_rc(lane, reg);  // b.row = k within k-step, b.col = logical column
  return {8 * kstep + b.row, phys_n(2 * pair + s, b.col)};
}

// Staging: which 8-element input vector thread-iteration `vi` loads. X vectors are x_j[p8..p8+7]
// of this head (128 of them), B vectors B_k[n8..n8+7] of this group (256). For the mma variants
// a warp covers 8 consecutive steps and 4 vectors along p / n, so each of its 8 scattered
// stores per vector goes to 32 distinct banks (W) or 16 (X); for fma the natural order, so the
// stores are two contiguous float4 per vector.
__host__ __device__ constexpr rc_t stage_x_vec(int vi, bool frag_order) {  // {j, p8}
  return frag_order ? rc_t{(vi & 7) + 8 * ((vi >> 5) & 1), 8 * (((vi >> 3) & 3) + 4 * ((vi >> 6) & 1))}
                    : rc_t{vi >> 3, 8 * (vi & 7)};
}
__host__ __device__ constexpr rc_t stage_b_vec(int vi, bool frag_order) {  // {k, n8}
  return frag_order ? rc_t{(vi & 7) + 8 * ((vi >> 7) & 1), 8 * (((vi >> 3) & 3) + 4 * ((vi >> 5) & 3))}
                    : rc_t{vi >> 4, 8 * (vi & 15)};
}

// Compile-time spot checks (the host self-test checks every index).
static_assert(phys_n(0, 0) == 0 && phys_n(0, 1) == 1 && phys_n(1, 0) == 2 && phys_n(1, 1) == 3,
              "thread t = 0 of pair 0 holds n = 0..3");
static_assert(phys_n(2 * 7 + 1, 7) == 127, "last column");
static_assert(w_frag_index(w_frag_source(1234).row, w_frag_source(1234).col) == 1234, "w inverse");
static_assert(x_frag_index(x_frag_source(777).row, x_frag_source(777).col) == 777, "x inverse");

// ------------------------------------------------------------------------------- number formats
__host__ __device__ inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16_bits(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
// Host emulation of cvt.rna.tf32.f32: round to nearest, ties away from zero, keeping 10
// explicit mantissa bits (low 13 bits zero). Adding half of the dropped range to the
// sign-magnitude bits rounds the magnitude half-up, i.e. ties away. Finite inputs only.
inline float tf32_rna_host(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xFFFFE000u;
  float r;
  memcpy(&r, &u, 4);
  return r;
}
// What the tensor core reads of a .tf32 operand register: the top 19 bits.
inline float tf32_truncate_host(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u &= 0xFFFFE000u;
  float r;
  memcpy(&r, &u, 4);
  return r;
}

#if defined(__CUDACC__)
__device__ __forceinline__ float tf32_rna_device(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return __uint_as_float(r & 0xFFFFE000u);  // mask: keep W_big exactly the TF32 value
}

// D = A * B + C on one m16n8k8 TF32 tile, accumulators in place.
__device__ __forceinline__ void mma_tf32(float& c0, float& c1, float& c2, float& c3,
                                         const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element q (0..7) of 8 bf16 packed little-endian in a uint4 (element 0 in the low half of .x).
__device__ __forceinline__ float bf16_pair_get(const uint4& v, int q) {
  const uint32_t w = q < 2 ? v.x : q < 4 ? v.y : q < 6 ? v.z : v.w;
  return __uint_as_float((q & 1) ? (w & 0xFFFF0000u) : (w << 16));
}
// 16-byte state accesses with the default cache operators (ld.global.ca / st.global.wb). Plain
// float4 dereferences were split into four 4-byte stores by the compiler (seen in the PTX).
__device__ __forceinline__ float4 load_state4(const float* p) {
  return __ldca(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ void store_state4(float* p, float4 v) {
  __stwb(reinterpret_cast<float4*>(p), v);
}
#endif

// ----------------------------------------------------------------------------------- kernels
struct fold_args {
  float* pool;              // [slots][H][P][N] fp32, folded in place
  const int* slot_idx;      // [batch]
  const uint16_t* x_buf;    // [batch][m][H][P] bf16 bits
  const uint16_t* b_buf;    // [batch][m][G][N] bf16 bits
  const float* dt_buf;      // [batch][m][H], after softplus
  const float* a_vec;       // [H], < 0
};

#if defined(__CUDACC__)
// One block per (row, head): 4 * split warps; warp (wm, wn) owns p rows 16wm..16wm+15 and
// pairs wn * (8 / split) .. +8/split. Each thread holds 64 / split state floats in registers.
template <variant var, int split>
__global__ void __launch_bounds__(128 * split) fold_kernel(fold_args args) {
  constexpr int threads = 128 * split;
  constexpr int pairs_per_warp = k_pairs / split;
  constexpr bool is_mma = var != variant::fma;
  constexpr bool two_terms = var == variant::mma_2xtf32;

  const int row = blockIdx.x / k_nheads;
  const int head = blockIdx.x % k_nheads;
  const int grp = head / k_heads_per_group;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp % k_warps_m, wn = warp / k_warps_m;
  const int pair0 = wn * pairs_per_warp;

  // fma: x_s[j][p] and w_s[j][n] in natural order; mma: x_frag / w_frag in fragment order.
  __shared__ __align__(16) float x_s[k_x_frag_elems];
  __shared__ __align__(16) float w_s[k_w_frag_elems];  // W (fma) or W_big (mma)
  __shared__ __align__(16) float w_small_s[two_terms ? k_w_frag_elems : 4];
  __shared__ float dt_s[k_steps];
  __shared__ float c_s[k_steps];
  __shared__ float decay_s;

  // 1. Request the whole state tile first (16-byte loads), so it is in flight while the
  //    inputs are staged (64 / split floats per thread).
  float* state = args.pool + (size_t(args.slot_idx[row]) * k_nheads + head) * k_tile_elems;
  float acc[pairs_per_warp][2][4];
#pragma unroll
  for (int pp = 0; pp < pairs_per_warp; ++pp) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float4 q =
          load_state4(state + acc_p(wm, lane, half) * k_dstate + acc_n(lane, pair0 + pp, 0));
      acc[pp][half][0] = q.x;
      acc[pp][half][1] = q.y;
      acc[pp][half][2] = q.z;
      acc[pp][half][3] = q.w;
    }
  }

  // 2. Request the inputs too: X (this head) and B (its group) as 16-byte vectors of 8 bf16,
  //    dt of the 16 steps.
  constexpr int x_vecs = k_steps * k_headdim / 8, b_vecs = k_steps * k_dstate / 8;
  constexpr int x_iters = (x_vecs + threads - 1) / threads;
  constexpr int b_iters = (b_vecs + threads - 1) / threads;
  const uint16_t* x_row = args.x_buf + size_t(row) * k_steps * k_nheads * k_headdim;
  const uint16_t* b_row = args.b_buf + size_t(row) * k_steps * k_ngroups * k_dstate;
  uint4 x_raw[x_iters], b_raw[b_iters];
#pragma unroll
  for (int i = 0; i < x_iters; ++i) {
    const int vi = tid + i * threads;
    const rc_t v = stage_x_vec(vi, is_mma);
    if (vi < x_vecs)
      x_raw[i] = __ldg(reinterpret_cast<const uint4*>(x_row + (size_t(v.row) * k_nheads + head) * k_headdim + v.col));
  }
#pragma unroll
  for (int i = 0; i < b_iters; ++i) {
    const int vi = tid + i * threads;
    const rc_t v = stage_b_vec(vi, is_mma);
    if (vi < b_vecs)
      b_raw[i] = __ldg(reinterpret_cast<const uint4*>(b_row + (v.row * k_ngroups + grp) * k_dstate + v.col));
  }
  if (tid < k_steps) dt_s[tid] = __ldg(args.dt_buf + (size_t(row) * k_steps + tid) * k_nheads + head);
  __syncthreads();

  // 3. Coefficients: c_j = dt_j exp(A sum_{i>j} dt_i), decay = exp(A sum_j dt_j).
  if (tid < k_steps) {
    const float a = __ldg(args.a_vec + head);
    float suffix = 0.f;
    for (int i = k_steps - 1; i > tid; --i) suffix += dt_s[i];
    c_s[tid] = dt_s[tid] * expf(a * suffix);
    if (tid == 0) decay_s = expf(a * (suffix + dt_s[0]));
  }
  __syncthreads();

  // 4. Stage X and W = c_j B_j in shared memory: fragment order for the mma variants (W split
  //    into its TF32 terms), natural order ([j][p], [j][n]) for fma.
#pragma unroll
  for (int i = 0; i < x_iters; ++i) {
    const int vi = tid + i * threads;
    const rc_t v = stage_x_vec(vi, is_mma);  // {j, p8}
    if (vi < x_vecs) {
      float x[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) x[q] = bf16_pair_get(x_raw[i], q);
      if constexpr (is_mma) {
#pragma unroll
        for (int q = 0; q < 8; ++q) x_s[x_frag_index(v.row, v.col + q)] = x[q];
      } else {
        float4* dst = reinterpret_cast<float4*>(&x_s[v.row * k_headdim + v.col]);
        dst[0] = make_float4(x[0], x[1], x[2], x[3]);
        dst[1] = make_float4(x[4], x[5], x[6], x[7]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < b_iters; ++i) {
    const int vi = tid + i * threads;
    const rc_t v = stage_b_vec(vi, is_mma);  // {k, n8}
    if (vi < b_vecs) {
      const float c = c_s[v.row];
      float w[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) w[q] = c * bf16_pair_get(b_raw[i], q);
      if constexpr (is_mma) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int idx = w_frag_index(v.row, v.col + q);
          const float big = tf32_rna_device(w[q]);
          w_s[idx] = big;
          if constexpr (two_terms) w_small_s[idx] = tf32_rna_device(w[q] - big);
        }
      } else {
        float4* dst = reinterpret_cast<float4*>(&w_s[v.row * k_dstate + v.col]);
        dst[0] = make_float4(w[0], w[1], w[2], w[3]);
        dst[1] = make_float4(w[4], w[5], w[6], w[7]);
      }
    }
  }
  __syncthreads();

  // 5. h <- decay * h (the accumulators' starting value).
  const float decay = decay_s;
#pragma unroll
  for (int pp = 0; pp < pairs_per_warp; ++pp)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[pp][half][e] *= decay;

  // 6. h += X^T W.
  if constexpr (is_mma) {
#pragma unroll
    for (int kstep = 0; kstep < k_ksteps; ++kstep) {
      const float4 xa =
          reinterpret_cast<const float4*>(x_s)[(wm * k_ksteps + kstep) * 32 + lane];
      const uint32_t a[4] = {__float_as_uint(xa.x), __float_as_uint(xa.y),
                             __float_as_uint(xa.z), __float_as_uint(xa.w)};
#pragma unroll
      for (int pp = 0; pp < pairs_per_warp; ++pp) {
        const int frag = w_frag_slot(kstep, pair0 + pp, lane);
        const float4 qb = reinterpret_cast<const float4*>(w_s)[frag];
        const uint32_t big[4] = {__float_as_uint(qb.x), __float_as_uint(qb.y),
                                 __float_as_uint(qb.z), __float_as_uint(qb.w)};
        uint32_t small[4] = {0u, 0u, 0u, 0u};
        if constexpr (two_terms) {
          const float4 qs = reinterpret_cast<const float4*>(w_small_s)[frag];
          small[0] = __float_as_uint(qs.x);
          small[1] = __float_as_uint(qs.y);
          small[2] = __float_as_uint(qs.z);
          small[3] = __float_as_uint(qs.w);
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {  // tile 2 * pair + s
          float& c0 = acc[pp][acc_half(0)][acc_elem(s, 0)];
          float& c1 = acc[pp][acc_half(1)][acc_elem(s, 1)];
          float& c2 = acc[pp][acc_half(2)][acc_elem(s, 2)];
          float& c3 = acc[pp][acc_half(3)][acc_elem(s, 3)];
          const int e0 = w_frag_pos(pair0 + pp, s, 0), e1 = w_frag_pos(pair0 + pp, s, 1);
          if constexpr (two_terms) mma_tf32(c0, c1, c2, c3, a, small[e0], small[e1]);
          mma_tf32(c0, c1, c2, c3, a, big[e0], big[e1]);
        }
      }
    }
  } else {
    const int p0 = acc_p(wm, lane, 0), p1 = acc_p(wm, lane, 1);
#pragma unroll
    for (int j = 0; j < k_steps; ++j) {
      const float x0 = x_s[j * k_headdim + p0], x1 = x_s[j * k_headdim + p1];
#pragma unroll
      for (int pp = 0; pp < pairs_per_warp; ++pp) {
        const float4 w =
            *reinterpret_cast<const float4*>(&w_s[j * k_dstate + acc_n(lane, pair0 + pp, 0)]);
        acc[pp][0][0] = fmaf(x0, w.x, acc[pp][0][0]);
        acc[pp][0][1] = fmaf(x0, w.y, acc[pp][0][1]);
        acc[pp][0][2] = fmaf(x0, w.z, acc[pp][0][2]);
        acc[pp][0][3] = fmaf(x0, w.w, acc[pp][0][3]);
        acc[pp][1][0] = fmaf(x1, w.x, acc[pp][1][0]);
        acc[pp][1][1] = fmaf(x1, w.y, acc[pp][1][1]);
        acc[pp][1][2] = fmaf(x1, w.z, acc[pp][1][2]);
        acc[pp][1][3] = fmaf(x1, w.w, acc[pp][1][3]);
      }
    }
  }

  // 7. Write the tile back (16-byte stores, same addresses as the loads).
#pragma unroll
  for (int pp = 0; pp < pairs_per_warp; ++pp)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_state4(state + acc_p(wm, lane, half) * k_dstate + acc_n(lane, pair0 + pp, 0),
                   make_float4(acc[pp][half][0], acc[pp][half][1], acc[pp][half][2], acc[pp][half][3]));
}

// The floor: the same blocks, addresses and 16-byte accesses, no inputs, no math beyond a
// multiply by a runtime 1.0f (so the compiler cannot drop the store of the loaded value).
__global__ void __launch_bounds__(128) copy_kernel(float* pool, const int* slot_idx, float scale) {
  const int row = blockIdx.x / k_nheads, head = blockIdx.x % k_nheads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* state = pool + (size_t(slot_idx[row]) * k_nheads + head) * k_tile_elems;
  float4 q[k_pairs][2];
#pragma unroll
  for (int pair = 0; pair < k_pairs; ++pair)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      q[pair][half] = load_state4(state + acc_p(warp, lane, half) * k_dstate + acc_n(lane, pair, 0));
#pragma unroll
  for (int pair = 0; pair < k_pairs; ++pair)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float4 r = q[pair][half];
      r.x *= scale;
      r.y *= scale;
      r.z *= scale;
      r.w *= scale;
      store_state4(state + acc_p(warp, lane, half) * k_dstate + acc_n(lane, pair, 0), r);
    }
}

// Pristine state: a hash of the element index -> uniform [-0.5, 0.5).
__device__ __host__ inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__global__ void init_state_kernel(float* pool, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    pool[i] = float(mix64(seed ^ i) >> 40) * (1.0f / 16777216.0f) - 0.5f;
}
#endif  // __CUDACC__

// ------------------------------------------------------------------------------- host helpers
struct rng_t {  // splitmix64
  uint64_t s;
  explicit rng_t(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
};

// ------------------------------------------------------------------------ host self-test (no CUDA)
namespace host_test {

int failures = 0;
void check(bool ok, const char* what, double value = 0.0) {
  std::printf("  [%s] %s", ok ? "pass" : "FAIL", what);
  if (value != 0.0) std::printf(" (%.3e)", value);
  std::printf("\n");
  if (!ok) ++failures;
}

// The hardware model of one m16n8k8 TF32 mma, written literally from the PTX ISA text (not from
// the mapping functions above, which it cross-checks): gather A and B from the 32 lanes'
// registers, multiply in double the TF32 values the tensor core reads, add C, scatter D.
void hw_mma_m16n8k8(const float (&a)[32][4], const float (&b)[32][2], double (&c)[32][4]) {
  double am[16][8] = {}, bm[8][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int group_id = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = (i == 0 || i == 2) ? group_id : group_id + 8;  // "for a0 and a2"
      const int col = (i == 0 || i == 1) ? tig : tig + 4;            // "for a0 and a1"
      am[row][col] = tf32_truncate_host(a[lane][i]);
    }
    for (int i = 0; i < 2; ++i) bm[i == 0 ? tig : tig + 4][group_id] = tf32_truncate_host(b[lane][i]);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int group_id = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? group_id : group_id + 8;
      const int col = tig * 2 + (i & 1);
      double sum = c[lane][i];
      for (int k = 0; k < 8; ++k) sum += am[row][k] * bm[k][col];
      c[lane][i] = sum;
    }
  }
}

void test_layouts() {
  std::printf("fragment layouts and permutations:\n");
  // Each fragment map covers its matrix exactly once.
  int a_seen[16][8] = {}, b_seen[8][8] = {}, c_seen[16][8] = {};
  bool in_range = true;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const rc_t a = mma_a_rc(lane, r), c = mma_c_rc(lane, r);
      in_range &= a.row >= 0 && a.row < 16 && a.col >= 0 && a.col < 8;
      in_range &= c.row >= 0 && c.row < 16 && c.col >= 0 && c.col < 8;
      if (in_range) ++a_seen[a.row][a.col], ++c_seen[c.row][c.col];
    }
    for (int r = 0; r < 2; ++r) {
      const rc_t b = mma_b_rc(lane, r);
      in_range &= b.row >= 0 && b.row < 8 && b.col >= 0 && b.col < 8;
      if (in_range) ++b_seen[b.row][b.col];
    }
  }
  bool once = in_range;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) once &= a_seen[i][j] == 1 && c_seen[i][j] == 1 && (i >= 8 || b_seen[i][j] == 1);
  check(once, "A, B, C/D fragment maps each cover their matrix exactly once");

  // n permutation: a bijection on [0, 128), and each thread's 4 accumulator slots of a pair and
  // half are the 4 contiguous physical columns 16 pair + 4t + e, in the row the C map says.
  int n_seen[k_dstate] = {};
  for (int tile = 0; tile < 2 * k_pairs; ++tile)
    for (int col = 0; col < 8; ++col) ++n_seen[phys_n(tile, col)];
  bool bij = true;
  for (int n = 0; n < k_dstate; ++n) bij &= n_seen[n] == 1;
  check(bij, "phys_n is a permutation of 0..127");

  bool acc_ok = true;
  for (int wm = 0; wm < k_warps_m; ++wm)
    for (int lane = 0; lane < 32; ++lane)
      for (int pair = 0; pair < k_pairs; ++pair)
        for (int s = 0; s < 2; ++s)
          for (int ci = 0; ci < 4; ++ci) {
            const rc_t c = mma_c_rc(lane, ci);
            acc_ok &= acc_p(wm, lane, acc_half(ci)) == 16 * wm + c.row;
            acc_ok &= acc_n(lane, pair, acc_elem(s, ci)) == phys_n(2 * pair + s, c.col);
          }
  check(acc_ok, "acc[pair][half][e] slots hold the C/D registers of tiles 2*pair+s at phys_n");
  bool contiguous = true;
  for (int lane = 0; lane < 32; ++lane)
    for (int pair = 0; pair < k_pairs; ++pair) {
      contiguous &= acc_n(lane, pair, 0) % 4 == 0;  // float4-aligned
      for (int e = 1; e < 4; ++e) contiguous &= acc_n(lane, pair, e) == acc_n(lane, pair, 0) + e;
    }
  check(contiguous, "a thread's 4 slots per pair and half are one aligned float4");

  // Shared fragment buffers: forward and inverse maps agree and cover X and W exactly once,
  // and each slot holds what the lane's mma register needs.
  std::vector<int> seen(k_w_frag_elems, 0);
  bool w_ok = true;
  for (int k = 0; k < k_steps; ++k)
    for (int n = 0; n < k_dstate; ++n) {
      const int idx = w_frag_index(k, n);
      w_ok &= idx >= 0 && idx < k_w_frag_elems;
      if (!w_ok) break;
      ++seen[idx];
      const rc_t src = w_frag_source(idx);
      w_ok &= src.row == k && src.col == n;
    }
  for (int v : seen) w_ok &= v == 1;
  for (int kstep = 0; kstep < k_ksteps; ++kstep)
    for (int pair = 0; pair < k_pairs; ++pair)
      for (int lane = 0; lane < 32; ++lane)
        for (int s = 0; s < 2; ++s)
          for (int r = 0; r < 2; ++r) {
            const rc_t src = w_frag_source(4 * w_frag_slot(kstep, pair, lane) + w_frag_pos(pair, s, r));
            const rc_t b = mma_b_rc(lane, r);
            w_ok &= src.row == 8 * kstep + b.row && src.col == phys_n(2 * pair + s, b.col);
          }
  check(w_ok, "w_frag maps: inverse, exact cover, B registers at the permuted column");

  std::vector<int> xseen(k_x_frag_elems, 0);
  bool x_ok = true;
  for (int j = 0; j < k_steps; ++j)
    for (int p = 0; p < k_headdim; ++p) {
      const int idx = x_frag_index(j, p);
      x_ok &= idx >= 0 && idx < k_x_frag_elems;
      if (!x_ok) break;
      ++xseen[idx];
      const rc_t src = x_frag_source(idx);
      x_ok &= src.row == j && src.col == p;
    }
  for (int v : xseen) x_ok &= v == 1;
  for (int wm = 0; wm < k_warps_m; ++wm)
    for (int kstep = 0; kstep < k_ksteps; ++kstep)
      for (int lane = 0; lane < 32; ++lane)
        for (int r = 0; r < 4; ++r) {
          const rc_t src = x_frag_source(((wm * k_ksteps + kstep) * 32 + lane) * 4 + r);
          const rc_t a = mma_a_rc(lane, r);
          x_ok &= src.row == 8 * kstep + a.col && src.col == 16 * wm + a.row;
        }
  check(x_ok, "x_frag maps: inverse, exact cover, A registers hold X^T[p][j]");
}

// Shared-memory banks (4-byte words mod 32): the staging stores of the mma variants and the
// mma loop's 16-byte fragment reads. Returns the worst number of ways over all store
// instructions of every warp (1 = conflict-free).
void test_banks() {
  std::printf("staging maps and shared-memory banks:\n");
  for (int frag_order = 0; frag_order < 2; ++frag_order) {
    std::vector<int> xs(k_steps * k_headdim, 0), bs(k_steps * k_dstate, 0);
    bool ok = true;
    for (int vi = 0; vi < k_steps * k_headdim / 8; ++vi) {
      const rc_t v = stage_x_vec(vi, frag_order != 0);
      ok &= v.row >= 0 && v.row < k_steps && v.col >= 0 && v.col + 8 <= k_headdim && v.col % 8 == 0;
      if (ok) ++xs[v.row * k_headdim + v.col];
    }
    for (int vi = 0; vi < k_steps * k_dstate / 8; ++vi) {
      const rc_t v = stage_b_vec(vi, frag_order != 0);
      ok &= v.row >= 0 && v.row < k_steps && v.col >= 0 && v.col + 8 <= k_dstate && v.col % 8 == 0;
      if (ok) ++bs[v.row * k_dstate + v.col];
    }
    for (int j = 0; j < k_steps; ++j) {
      for (int p = 0; p < k_headdim; p += 8) ok &= xs[j * k_headdim + p] == 1;
      for (int n = 0; n < k_dstate; n += 8) ok &= bs[j * k_dstate + n] == 1;
    }
    check(ok, frag_order ? "stage_x_vec / stage_b_vec (mma order) load every input vector once"
                         : "stage_x_vec / stage_b_vec (fma order) load every input vector once");
  }
  for (int threads = 128; threads <= 256; threads *= 2) {
    int worst_w = 0, worst_x = 0;
    for (int base = 0; base < k_steps * k_dstate / 8; base += 32) {  // one warp's 32 vectors
      for (int q = 0; q < 8; ++q) {
        int wb[32] = {}, xb[32] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const rc_t b = stage_b_vec(base + lane, true);
          ++wb[w_frag_index(b.row, b.col + q) % 32];
          if (base + lane < k_steps * k_headdim / 8) {
            const rc_t x = stage_x_vec(base + lane, true);
            ++xb[x_frag_index(x.row, x.col + q) % 32];
          }
        }
        for (int i = 0; i < 32; ++i) worst_w = std::max(worst_w, wb[i]), worst_x = std::max(worst_x, xb[i]);
      }
    }
    char what[160];
    std::snprintf(what, sizeof what, "%d threads: W staging stores conflict-free (worst %d-way); X stores worst %d-way",
                  threads, worst_w, worst_x);
    check(worst_w == 1 && worst_x <= 2, what);
  }
  // Reads: a 16-byte shared load is served per quarter warp (8 lanes, 128 bytes); conflict-free
  // when the 8 lanes' float4 slots differ mod 8.
  bool reads_ok = true;
  for (int kstep = 0; kstep < k_ksteps; ++kstep)
    for (int pair = 0; pair < k_pairs; ++pair)
      for (int quarter = 0; quarter < 4; ++quarter) {
        int seen[8] = {};
        for (int l = 0; l < 8; ++l) ++seen[w_frag_slot(kstep, pair, 8 * quarter + l) % 8];
        for (int v : seen) reads_ok &= v == 1;
      }
  check(reads_ok, "mma loop's 16-byte W fragment reads conflict-free (X reads: slot = lane)");
}

// One warp's mma over random matrices, distributed with the mapping functions, run through the
// PTX-literal hardware model, gathered back with the C map: must equal A B + C.
void test_single_mma(rng_t& rng) {
  std::printf("one m16n8k8 mma (double, TF32-exact operands):\n");
  float am[16][8], bm[8][8];
  double cm[16][8];
  for (auto& r : am)
    for (float& v : r) v = tf32_rna_host(float(rng.uniform(-1, 1)));
  for (auto& r : bm)
    for (float& v : r) v = tf32_rna_host(float(rng.uniform(-1, 1)));
  for (auto& r : cm)
    for (double& v : r) v = rng.uniform(-1, 1);
  float a[32][4], b[32][2];
  double c[32][4];
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const rc_t ar = mma_a_rc(lane, r), cr = mma_c_rc(lane, r);
      a[lane][r] = am[ar.row][ar.col];
      c[lane][r] = cm[cr.row][cr.col];
    }
    for (int r = 0; r < 2; ++r) {
      const rc_t br = mma_b_rc(lane, r);
      b[lane][r] = bm[br.row][br.col];
    }
  }
  hw_mma_m16n8k8(a, b, c);
  double max_err = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      const rc_t cr = mma_c_rc(lane, r);
      double ref = cm[cr.row][cr.col];
      for (int k = 0; k < 8; ++k) ref += double(am[cr.row][k]) * double(bm[k][cr.col]);
      max_err = std::max(max_err, std::fabs(c[lane][r] - ref));
    }
  check(max_err < 1e-12, "D = A B + C through the mapping functions, max abs err", max_err + 1e-300);
}

enum class w_mode { exact, two_tf32, one_tf32, fp32_fma };

// The whole fold of one (row, head) tile as the kernel does it, warp by warp, with 4 * split
// warps (each 16 p rows x 128 / split n), from the mapping functions; returns the errors against
// the direct double loop h' = decay h + sum_j x_j[p] W[j][n] (see fold_error).
struct fold_error {
  double rel;   // max |got - ref| / max(|ref|, 1e-3 max|ref|)  (the brief's metric)
  double norm;  // max |got - ref| / max|ref|                     (normwise)
};
fold_error emulate_fold(rng_t& rng, w_mode mode, int split) {
  std::vector<float> h(k_tile_elems), xs(k_steps * k_headdim), ws(k_steps * k_dstate);
  for (float& v : h) v = float(rng.uniform(-0.5, 0.5));
  for (float& v : xs) v = bf16_bits_to_float(float_to_bf16_bits(float(rng.uniform(-1, 1))));
  double dt[k_steps];
  for (double& d : dt) d = float(rng.uniform(0.01, 0.1));
  const float a_coef = float(rng.uniform(-4, -1));
  float c[k_steps];
  double total = 0;
  for (int j = k_steps - 1; j >= 0; --j) {
    c[j] = float(dt[j] * std::exp(a_coef * total));
    total += dt[j];
  }
  const float decay = float(std::exp(a_coef * total));
  for (int k = 0; k < k_steps; ++k)
    for (int n = 0; n < k_dstate; ++n)
      ws[k * k_dstate + n] = c[k] * bf16_bits_to_float(float_to_bf16_bits(float(rng.uniform(-1, 1))));

  // Shared buffers in fragment order (the kernel's step 4).
  std::vector<float> x_frag(k_x_frag_elems), w_big(k_w_frag_elems), w_small(k_w_frag_elems);
  for (int j = 0; j < k_steps; ++j)
    for (int p = 0; p < k_headdim; ++p) x_frag[x_frag_index(j, p)] = xs[j * k_headdim + p];
  for (int k = 0; k < k_steps; ++k)
    for (int n = 0; n < k_dstate; ++n) {
      const float w = ws[k * k_dstate + n];
      const int idx = w_frag_index(k, n);
      const float big = mode == w_mode::exact ? w : tf32_rna_host(w);
      w_big[idx] = big;
      w_small[idx] = mode == w_mode::two_tf32 ? tf32_rna_host(w - big) : 0.f;
    }

  // The B-operand terms, in the kernel's order (small, then big). The model reads TF32
  // operands, so the exact mode feeds W as three exactly representable TF32 parts
  // (11 + 11 + at most 2 of a float's 24 significant bits): it checks the mapping alone.
  std::vector<std::vector<float>> terms;
  if (mode == w_mode::exact) {
    std::vector<float> t0(k_w_frag_elems), t1(k_w_frag_elems), t2(k_w_frag_elems);
    for (int i = 0; i < k_w_frag_elems; ++i) {
      t0[i] = tf32_truncate_host(w_big[i]);
      t1[i] = tf32_truncate_host(w_big[i] - t0[i]);
      t2[i] = w_big[i] - t0[i] - t1[i];
    }
    terms = {t2, t1, t0};
  } else if (mode == w_mode::two_tf32) {
    terms = {w_small, w_big};
  } else {
    terms = {w_big};
  }

  // The warps (the kernel's steps 1, 5, 6, 7). fp32_fma instead runs the fma variant's
  // arithmetic (fp32, one fmaf per step, j ascending) as the baseline for the error metric.
  std::vector<double> out(k_tile_elems);
  const int pairs_per_warp = k_pairs / split;
  if (mode == w_mode::fp32_fma) {
    for (int p = 0; p < k_headdim; ++p)
      for (int n = 0; n < k_dstate; ++n) {
        float acc = decay * h[p * k_dstate + n];
        for (int j = 0; j < k_steps; ++j) acc = std::fmaf(xs[j * k_headdim + p], ws[j * k_dstate + n], acc);
        out[p * k_dstate + n] = acc;
      }
  }
  for (int warp = 0; warp < (mode == w_mode::fp32_fma ? 0 : 4 * split); ++warp) {
    const int wm = warp % k_warps_m, wn = warp / k_warps_m, pair0 = wn * pairs_per_warp;
    std::vector<double> acc(32 * pairs_per_warp * 8);  // [lane][pp][half][e]
    auto acc_at = [&](int lane, int pp, int half, int e) -> double& {
      return acc[((lane * pairs_per_warp + pp) * 2 + half) * 4 + e];
    };
    for (int lane = 0; lane < 32; ++lane)
      for (int pp = 0; pp < pairs_per_warp; ++pp)
        for (int half = 0; half < 2; ++half)
          for (int e = 0; e < 4; ++e)
            acc_at(lane, pp, half, e) =
                double(decay * h[acc_p(wm, lane, half) * k_dstate + acc_n(lane, pair0 + pp, e)]);
    for (int kstep = 0; kstep < k_ksteps; ++kstep)
      for (int pp = 0; pp < pairs_per_warp; ++pp)
        for (int s = 0; s < 2; ++s) {
          for (const std::vector<float>& term : terms) {
            float a[32][4], b[32][2];
            double cc[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              for (int r = 0; r < 4; ++r)
                a[lane][r] = x_frag[((wm * k_ksteps + kstep) * 32 + lane) * 4 + r];
              for (int r = 0; r < 2; ++r)
                b[lane][r] = term[4 * w_frag_slot(kstep, pair0 + pp, lane) + w_frag_pos(pair0 + pp, s, r)];
              for (int ci = 0; ci < 4; ++ci) cc[lane][ci] = acc_at(lane, pp, acc_half(ci), acc_elem(s, ci));
            }
            hw_mma_m16n8k8(a, b, cc);
            for (int lane = 0; lane < 32; ++lane)
              for (int ci = 0; ci < 4; ++ci) acc_at(lane, pp, acc_half(ci), acc_elem(s, ci)) = cc[lane][ci];
          }
        }
    for (int lane = 0; lane < 32; ++lane)
      for (int pp = 0; pp < pairs_per_warp; ++pp)
        for (int half = 0; half < 2; ++half)
          for (int e = 0; e < 4; ++e)
            out[acc_p(wm, lane, half) * k_dstate + acc_n(lane, pair0 + pp, e)] = acc_at(lane, pp, half, e);
  }

  double max_ref = 0;
  std::vector<double> ref(k_tile_elems);
  for (int p = 0; p < k_headdim; ++p)
    for (int n = 0; n < k_dstate; ++n) {
      double sum = double(decay * h[p * k_dstate + n]);
      for (int j = 0; j < k_steps; ++j) sum += double(xs[j * k_headdim + p]) * double(ws[j * k_dstate + n]);
      ref[p * k_dstate + n] = sum;
      max_ref = std::max(max_ref, std::fabs(sum));
    }
  fold_error r{0, 0};
  for (int i = 0; i < k_tile_elems; ++i) {
    const double abs_err = std::fabs(out[i] - ref[i]);
    const double rel = abs_err / std::max(std::fabs(ref[i]), 1e-3 * max_ref);
    r.rel = std::isnan(rel) ? INFINITY : std::max(r.rel, rel);
    r.norm = std::isnan(abs_err) ? INFINITY : std::max(r.norm, abs_err / max_ref);
  }
  return r;
}

void test_fold(rng_t& rng) {
  std::printf("whole-tile fold emulation (64 x 128 = 4 warp slices of 16 x 128) vs a double loop,\n"
              "8 random tiles per mode; rel = |got - ref| / max(|ref|, 1e-3 max|ref|), norm = |got - ref| / max|ref|:\n");
  constexpr int tiles = 8;
  auto worst = [&](w_mode mode, int split) {
    fold_error w{0, 0};
    for (int i = 0; i < tiles; ++i) {
      const fold_error e = emulate_fold(rng, mode, split);
      w.rel = std::max(w.rel, e.rel);
      w.norm = std::max(w.norm, e.norm);
    }
    return w;
  };
  for (int split = 1; split <= 2; split *= 2) {
    const fold_error e_exact = worst(w_mode::exact, split), e_fma = worst(w_mode::fp32_fma, split);
    const fold_error e_two = worst(w_mode::two_tf32, split), e_one = worst(w_mode::one_tf32, split);
    std::printf("  split %d: max err   rel        norm\n", split);
    std::printf("    exact W, mma model %.3e  %.3e   (mapping check: must be ~1e-16)\n", e_exact.rel, e_exact.norm);
    std::printf("    fp32 fmaf loop     %.3e  %.3e   (what the fma variant computes)\n", e_fma.rel, e_fma.norm);
    std::printf("    2xTF32 (double)    %.3e  %.3e\n", e_two.rel, e_two.norm);
    std::printf("    1xTF32 (double)    %.3e  %.3e\n", e_one.rel, e_one.norm);
    char what[200];
    std::snprintf(what, sizeof what, "split %d: exact W through the mma model matches (norm < 1e-12)", split);
    check(e_exact.norm < 1e-12, what);
    std::snprintf(what, sizeof what, "split %d: 2xTF32 norm err <= 1e-6 and rel err <= the fp32 loop's", split);
    check(e_two.norm <= 1e-6 && e_two.rel <= std::max(1e-6, e_fma.rel), what);
    std::snprintf(what, sizeof what, "split %d: 1xTF32 norm err < 1e-2 (no mapping bug)", split);
    check(e_one.norm < 1e-2, what);
  }
}

void test_tf32_split(rng_t& rng) {
  std::printf("TF32 rounding and the 2xTF32 split:\n");
  // cvt.rna: ties away from zero, 13 low bits cleared.
  const float one_tie = 1.0f + 0x1.0p-11f;  // exactly half an ulp of TF32 above 1
  const float below_tie = 1.0f + 0x1.0p-11f - 0x1.0p-23f;
  bool rna = tf32_rna_host(one_tie) == 1.0f + 0x1.0p-10f && tf32_rna_host(-one_tie) == -(1.0f + 0x1.0p-10f) &&
             tf32_rna_host(below_tie) == 1.0f && tf32_rna_host(1.5f) == 1.5f;
  check(rna, "tf32_rna_host rounds to nearest, ties away, keeps exact TF32 values");
  bool bf16_exact = true;
  for (int i = 0; i < 100000; ++i) {
    const float x = bf16_bits_to_float(float_to_bf16_bits(float(rng.uniform(-1, 1))));
    bf16_exact &= tf32_truncate_host(x) == x;
  }
  check(bf16_exact, "bf16 values are exact TF32 operands (X needs no split)");
  double max_two = 0, max_one = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float x = bf16_bits_to_float(float_to_bf16_bits(float(rng.uniform(-1, 1))));
    const float w = float(rng.uniform(0.001, 0.1)) *
                    bf16_bits_to_float(float_to_bf16_bits(float(rng.uniform(-1, 1))));
    if (x == 0.f || w == 0.f) continue;
    const float big = tf32_rna_host(w), small = tf32_rna_host(w - big);
    const double exact = double(x) * double(w);
    const double two = double(x) * double(big) + double(x) * double(small);
    const double one = double(x) * double(big);
    max_two = std::max(max_two, std::fabs(two - exact) / std::fabs(exact));
    max_one = std::max(max_one, std::fabs(one - exact) / std::fabs(exact));
  }
  check(max_two < 1e-6, "x (W_big + W_small) vs x W, max rel err over 1e6 products", max_two);
  check(max_one < 1e-3, "x W_big vs x W (1xTF32, for information)", max_one);
}

int run() {
  std::printf("== host self-test (no CUDA calls) ==\n");
  rng_t rng(12345);
  test_layouts();
  test_banks();
  test_single_mma(rng);
  test_tf32_split(rng);
  test_fold(rng);
  std::printf("host self-test: %s (%d failure%s)\n\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures;
}

}  // namespace host_test

// ---------------------------------------------------------------------------------- GPU driver
#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, \
                   __LINE__, cudaGetErrorString(err_));                                     \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

struct timing_t {
  double median_us;
  double min_us;
};

// 5 warm-ups, then 50 launches each between its own pair of events; median and min.
timing_t time_launches(const std::function<void()>& launch) {
  constexpr int warmups = 5, iters = 50;
  for (int i = 0; i < warmups; ++i) launch();
  CUDA_CHECK(cudaGetLastError());
  std::vector<cudaEvent_t> ev(2 * iters);
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(ev[2 * i]));
    launch();
    CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us[i] = 1000.0 * ms;
  }
  for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  return {0.5 * (us[iters / 2 - 1] + us[iters / 2]), us[0]};
}

int main(int argc, char** argv) {
  int batch = 256;
  bool host_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--host-test") {
      host_only = true;
    } else if (arg == "--batch" && i + 1 < argc) {
      batch = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--host-test] [--batch N]\n", argv[0]);
      return 1;
    }
  }
  if (batch < 1) {
    std::fprintf(stderr, "--batch must be >= 1\n");
    return 1;
  }
  if (host_test::run() != 0) return 1;
  if (host_only) return 0;
  std::fflush(stdout);

  // ---------------------------------------------------------------- set-up
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("== GPU: %s, %d SMs, cc %d.%d ==\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor);
  const int slots = 2 * batch;
  const size_t slot_elems = size_t(k_nheads) * k_tile_elems;
  const size_t pool_elems = size_t(slots) * slot_elems;
  const size_t x_elems = size_t(batch) * k_steps * k_nheads * k_headdim;
  const size_t b_elems = size_t(batch) * k_steps * k_ngroups * k_dstate;
  const size_t dt_elems = size_t(batch) * k_steps * k_nheads;
  const double state_bytes = 2.0 * double(batch) * double(slot_elems) * 4.0;  // read + write
  const double input_bytes = double(x_elems) * 2 + double(b_elems) * 2 + double(dt_elems) * 4 +
                             double(batch) * 4 + double(k_nheads) * 4;
  std::printf("batch %d, pool %d slots (%.2f GiB each pool), H %d P %d N %d G %d m %d\n", batch, slots,
              double(pool_elems) * 4 / (1 << 30), k_nheads, k_headdim, k_dstate, k_ngroups, k_steps);
  std::printf("traffic per fold: state %.3f GB (read + write) + inputs %.3f GB\n\n", state_bytes / 1e9,
              input_bytes / 1e9);

  rng_t rng(2024);
  std::vector<int> perm(slots);
  for (int i = 0; i < slots; ++i) perm[i] = i;
  for (int i = slots - 1; i > 0; --i) std::swap(perm[i], perm[int(rng.next() % uint64_t(i + 1))]);
  std::vector<int> slot_idx(perm.begin(), perm.begin() + batch);
  const int unused_slot = perm[batch];  // a slot no row folds into: must stay pristine
  std::vector<uint16_t> x_host(x_elems), b_host(b_elems);
  std::vector<float> dt_host(dt_elems), a_host(k_nheads);
  for (uint16_t& v : x_host) v = float_to_bf16_bits(float(rng.uniform(-1, 1)));
  for (uint16_t& v : b_host) v = float_to_bf16_bits(float(rng.uniform(-1, 1)));
  for (float& v : dt_host) v = float(rng.uniform(0.01, 0.1));
  for (float& v : a_host) v = float(rng.uniform(-4, -1));

  float *d_pristine = nullptr, *d_pool = nullptr, *d_dt = nullptr, *d_a = nullptr;
  uint16_t *d_x = nullptr, *d_b = nullptr;
  int* d_slot = nullptr;
  CUDA_CHECK(cudaMalloc(&d_pristine, pool_elems * 4));
  CUDA_CHECK(cudaMalloc(&d_pool, pool_elems * 4));
  CUDA_CHECK(cudaMalloc(&d_x, x_elems * 2));
  CUDA_CHECK(cudaMalloc(&d_b, b_elems * 2));
  CUDA_CHECK(cudaMalloc(&d_dt, dt_elems * 4));
  CUDA_CHECK(cudaMalloc(&d_a, k_nheads * 4));
  CUDA_CHECK(cudaMalloc(&d_slot, batch * 4));
  CUDA_CHECK(cudaMemcpy(d_x, x_host.data(), x_elems * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_b, b_host.data(), b_elems * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_dt, dt_host.data(), dt_elems * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_a, a_host.data(), k_nheads * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_slot, slot_idx.data(), batch * 4, cudaMemcpyHostToDevice));
  init_state_kernel<<<4 * prop.multiProcessorCount, 1024>>>(d_pristine, pool_elems, 0xC0FFEEull);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());

  // ---------------------------------------------------------------- float64 reference
  std::vector<int> check_rows;
  {
    std::vector<int> rows(batch);
    for (int i = 0; i < batch; ++i) rows[i] = i;
    for (int i = batch - 1; i > 0; --i) std::swap(rows[i], rows[int(rng.next() % uint64_t(i + 1))]);
    check_rows.assign(rows.begin(), rows.begin() + std::min(batch, 16));
  }
  const size_t n_check = check_rows.size();
  std::vector<double> ref(n_check * slot_elems);
  std::vector<double> ref_head_max(n_check * k_nheads, 0.0);
  {
    std::vector<float> h0(slot_elems);
    std::vector<double> w(k_steps * k_dstate);
    for (size_t ci = 0; ci < n_check; ++ci) {
      const int row = check_rows[ci];
      CUDA_CHECK(cudaMemcpy(h0.data(), d_pristine + size_t(slot_idx[row]) * slot_elems, slot_elems * 4,
                            cudaMemcpyDeviceToHost));
      for (int head = 0; head < k_nheads; ++head) {
        const int grp = head / k_heads_per_group;
        const double a = a_host[head];
        double c[k_steps], suffix = 0;
        for (int j = k_steps - 1; j >= 0; --j) {
          const double dt = dt_host[(size_t(row) * k_steps + j) * k_nheads + head];
          c[j] = dt * std::exp(a * suffix);
          suffix += dt;
        }
        const double decay = std::exp(a * suffix);
        for (int j = 0; j < k_steps; ++j)
          for (int n = 0; n < k_dstate; ++n)
            w[j * k_dstate + n] =
                c[j] * bf16_bits_to_float(b_host[((size_t(row) * k_steps + j) * k_ngroups + grp) * k_dstate + n]);
        double head_max = 0;
        for (int p = 0; p < k_headdim; ++p) {
          double xp[k_steps];
          for (int j = 0; j < k_steps; ++j)
            xp[j] = bf16_bits_to_float(x_host[((size_t(row) * k_steps + j) * k_nheads + head) * k_headdim + p]);
          for (int n = 0; n < k_dstate; ++n) {
            const size_t e = size_t(head) * k_tile_elems + size_t(p) * k_dstate + n;
            double sum = decay * double(h0[e]);
            for (int j = 0; j < k_steps; ++j) sum += xp[j] * w[j * k_dstate + n];
            ref[ci * slot_elems + e] = sum;
            head_max = std::max(head_max, std::fabs(sum));
          }
        }
        ref_head_max[ci * k_nheads + head] = head_max;
      }
    }
  }
  std::vector<float> unused_pristine(slot_elems);
  CUDA_CHECK(cudaMemcpy(unused_pristine.data(), d_pristine + size_t(unused_slot) * slot_elems,
                        slot_elems * 4, cudaMemcpyDeviceToHost));

  auto restore = [&] {
    CUDA_CHECK(cudaMemcpy(d_pool, d_pristine, pool_elems * 4, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  };

  struct error_t {
    double max_rel;   // max |h' - ref| / max(|ref|, 1e-3 max|ref| of the head)  (brief's metric)
    double max_norm;  // max |h' - ref| / max|ref| of the head                    (normwise)
    double max_abs;
    bool untouched_ok;
  };
  auto check_pool = [&]() -> error_t {
    error_t r{0, 0, 0, true};
    std::vector<float> got(slot_elems);
    for (size_t ci = 0; ci < n_check; ++ci) {
      CUDA_CHECK(cudaMemcpy(got.data(), d_pool + size_t(slot_idx[check_rows[ci]]) * slot_elems,
                            slot_elems * 4, cudaMemcpyDeviceToHost));
      for (size_t e = 0; e < slot_elems; ++e) {
        const double rv = ref[ci * slot_elems + e];
        const double head_max = ref_head_max[ci * k_nheads + e / k_tile_elems];
        const double abs_err = std::fabs(double(got[e]) - rv);
        const double rel = abs_err / std::max(std::fabs(rv), 1e-3 * head_max);
        if (std::isnan(rel) || std::isnan(abs_err)) {
          r.max_rel = r.max_norm = r.max_abs = INFINITY;
        } else {
          r.max_rel = std::max(r.max_rel, rel);
          r.max_norm = std::max(r.max_norm, abs_err / head_max);
          r.max_abs = std::max(r.max_abs, abs_err);
        }
      }
    }
    CUDA_CHECK(cudaMemcpy(got.data(), d_pool + size_t(unused_slot) * slot_elems, slot_elems * 4,
                          cudaMemcpyDeviceToHost));
    r.untouched_ok = std::memcmp(got.data(), unused_pristine.data(), slot_elems * 4) == 0;
    return r;
  };

  const fold_args args{d_pool, d_slot, d_x, d_b, d_dt, d_a};
  const dim3 grid(unsigned(batch) * k_nheads);

  struct row_t {
    std::string name;
    timing_t t;
    double bytes;
    bool has_err;
    error_t err;
    double tolerance;
  };
  std::vector<row_t> rows;

  auto run_variant = [&](const char* name, double tolerance, const std::function<void()>& launch) {
    restore();
    launch();
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const error_t err = check_pool();
    const timing_t t = time_launches(launch);
    rows.push_back({name, t, state_bytes + input_bytes, true, err, tolerance});
    std::printf("  %-20s %9.1f us   max rel %.3e   norm %.3e   abs %.3e%s\n", name, t.median_us,
                err.max_rel, err.max_norm, err.max_abs, err.untouched_ok ? "" : "   UNUSED SLOT MODIFIED");
  };

  std::printf("== runs (accuracy on %zu rows x %d heads vs float64; then 5 + 50 timed) ==\n", n_check,
              k_nheads);
  // Pass/fail on the normwise error (the brief's rel metric is ~1e-4 even for exact fp32
  // arithmetic: its floor 1e-3 max|ref| makes near-zero outputs count; see the host test).
  run_variant("fma", 1e-6, [&] { fold_kernel<variant::fma, 1><<<grid, 128>>>(args); });
  run_variant("fma split2", 1e-6, [&] { fold_kernel<variant::fma, 2><<<grid, 256>>>(args); });
  run_variant("mma 2xtf32", 1e-6, [&] { fold_kernel<variant::mma_2xtf32, 1><<<grid, 128>>>(args); });
  run_variant("mma 2xtf32 split2", 1e-6,
              [&] { fold_kernel<variant::mma_2xtf32, 2><<<grid, 256>>>(args); });
  run_variant("mma 1xtf32", 1e-2, [&] { fold_kernel<variant::mma_1xtf32, 1><<<grid, 128>>>(args); });
  run_variant("mma 1xtf32 split2", 1e-2,
              [&] { fold_kernel<variant::mma_1xtf32, 2><<<grid, 256>>>(args); });

  restore();
  const timing_t t_copy = time_launches([&] { copy_kernel<<<grid, 128>>>(d_pool, d_slot, 1.0f); });
  rows.push_back({"copy kernel (floor)", t_copy, state_bytes, false, {}, 0});
  const size_t memcpy_bytes = size_t(batch) * slot_elems * 4;  // batch slots' worth
  const timing_t t_memcpy = time_launches([&] {
    CUDA_CHECK(cudaMemcpyAsync(d_pool, d_pristine, memcpy_bytes, cudaMemcpyDeviceToDevice));
  });
  rows.push_back({"cudaMemcpy D2D", t_memcpy, 2.0 * double(memcpy_bytes), false, {}, 0});
  std::printf("  copy kernel %.1f us, cudaMemcpy D2D (%.2f GiB) %.1f us\n\n", t_copy.median_us,
              double(memcpy_bytes) / (1 << 30), t_memcpy.median_us);

  // ---------------------------------------------------------------- table
  std::printf("== results (batch %d; GB/s = (state read + write + inputs) / median time) ==\n", batch);
  std::printf("| variant | median us | min us | GB/s | %% of copy kernel | max rel err | max norm err | max abs err | ok |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  bool all_ok = true;
  for (const row_t& r : rows) {
    const double gbs = r.bytes / (r.t.median_us * 1e-6) / 1e9;
    const double pct = 100.0 * r.t.median_us / t_copy.median_us;
    if (r.has_err) {
      const bool ok = r.err.max_norm <= r.tolerance && r.err.untouched_ok;
      all_ok &= ok;
      std::printf("| %s | %.1f | %.1f | %.0f | %.1f%% | %.3e | %.3e | %.3e | %s |\n", r.name.c_str(),
                  r.t.median_us, r.t.min_us, gbs, pct, r.err.max_rel, r.err.max_norm, r.err.max_abs,
                  ok ? "yes" : (r.err.untouched_ok ? "NO (error)" : "NO (wrote an unused slot)"));
    } else {
      std::printf("| %s | %.1f | %.1f | %.0f | %.1f%% | - | - | - | - |\n", r.name.c_str(), r.t.median_us,
                  r.t.min_us, gbs, pct);
    }
  }
  std::printf("\nrel = |h' - ref| / max(|ref|, 1e-3 max|ref| of the head); norm = |h' - ref| / max|ref| of the head\n"
              "pass/fail: norm <= 1e-6 for fma and 2xtf32, <= 1e-2 for 1xtf32 (host emulation: fp32 loop\n"
              "~2e-7 norm / ~5e-5 rel; 2xtf32 with exact sums ~7e-8 / ~3e-5; 1xtf32 ~3e-4 / ~0.15)\n");
  std::printf("%s\n", all_ok ? "ALL CHECKS PASSED" : "SOME CHECKS FAILED");

  CUDA_CHECK(cudaFree(d_pristine));
  CUDA_CHECK(cudaFree(d_pool));
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_b));
  CUDA_CHECK(cudaFree(d_dt));
  CUDA_CHECK(cudaFree(d_a));
  CUDA_CHECK(cudaFree(d_slot));
  return all_ok ? 0 : 3;
}
