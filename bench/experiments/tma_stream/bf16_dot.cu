// Prototype (NOTES v17): the dot of a 16-bit (bf16) decode step, h[p, :] . C for every state row,
// on FMA units (the library's 16-bit stream kernel: convert each element, one FFMA each) against
// tensor cores (mma.sync m16n8k16 bf16 x bf16 -> fp32: the state fragment as loaded is the A
// operand under a permutation of the dstate index, C the B operand under the same permutation,
// replicated over the 8 columns).
//
// Why: ncu of the library's bf16 replay step (Mamba-2 H128, batch 256, call 12 of v17) shows it
// issue-bound (0.65 warp instructions per scheduler and cycle, 7.9k per 2-head block, integer ops
// for the conversions and addresses outnumbering the FFMAs 5:1) at 195 us for a 0.54 GB state, so
// fewer bytes did not make it faster (8-bit states take the same time). The mma form needs 8 HMMA
// per 16 rows instead of 128 conversions + 128 FFMA per lane.
//
// Shape: batch 256, 128 heads, 64 x 128 bf16 tiles (0.54 GB per set, two sets rotated), 8 groups.
// out[b][h][p] = h[b, h][p, :] . C[b][g(h)][:], checked against float64 on sampled items.
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/experiments/tma_stream/bf16_dot.cu -o bf16_dot
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>


namespace {

using bf16 = __nv_bfloat16;
constexpr int B = 256, H = 128, P = 64, N = 128, G = 8;
constexpr int64_t tile = int64_t(P) * N;
constexpr int64_t set_elems = int64_t(B) * H * tile;
constexpr int num_sets = 2;


__device__ __forceinline__ float lo16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Read-only floor: every block reads 2 tiles (32 KB) with 16-byte loads, 256 threads.
__global__ void __launch_bounds__(256) floor_kernel(const bf16* state, float* sink) {
  const uint4* p = reinterpret_cast<const uint4*>(state + int64_t(blockIdx.x) * 2 * tile) + threadIdx.x;
  uint4 v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = __ldcs(p + i * 256);
  uint32_t s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (s == 0x12345678u) sink[blockIdx.x] = 1.f;
}

// Both kernels: a block = 2 heads (128 rows) of one batch row, 8 warps, warp w rows 16 w ..
// 16 w + 15 (head w / 4). Lane (g = lane >> 2, t = lane & 3) loads rows 16 w + g and + 8, the
// 16 bytes at columns 32 j + 8 t (j < 4) of each: 8 loads of 16 bytes, all issued first.
struct frag {
  uint4 r0[4], r1[4];  // row g, row g + 8; chunk j = columns 32 j + 8 t .. + 7
};
__device__ __forceinline__ void load_frag(frag& f, const bf16* state, const int* slot_idx) {
  const int b = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int h = 2 * blockIdx.x + warp / 4;
  const int64_t slot = __ldg(slot_idx + b);
  const bf16* row = state + (slot * H + h) * tile + int64_t(16 * (warp % 4) + g) * N + 8 * t;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f.r0[j] = __ldcs(reinterpret_cast<const uint4*>(row + 32 * j));
    f.r1[j] = __ldcs(reinterpret_cast<const uint4*>(row + 8 * N + 32 * j));
  }
}

// FMA form: each lane converts its 64 values and dots them with C (fp32, converted once), then
// the 4 lanes t of a row sum (two xor shuffles per row).
__global__ void __launch_bounds__(256)
    fma_kernel(const bf16* state, const int* slot_idx, const bf16* C, float* out) {
  frag f;
  load_frag(f, state, slot_idx);
  const int b = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3, h = 2 * blockIdx.x + warp / 4, grp = h / (H / G);
  const uint4* cp = reinterpret_cast<const uint4*>(C + (int64_t(b) * G + grp) * N + 8 * t);
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4 c = __ldg(cp + 4 * j);
    const uint32_t cw[4] = {c.x, c.y, c.z, c.w};
    const uint32_t u0[4] = {f.r0[j].x, f.r0[j].y, f.r0[j].z, f.r0[j].w};
    const uint32_t u1[4] = {f.r1[j].x, f.r1[j].y, f.r1[j].z, f.r1[j].w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      a0 = fmaf(lo16(u0[e]), lo16(cw[e]), fmaf(hi16(u0[e]), hi16(cw[e]), a0));
      a1 = fmaf(lo16(u1[e]), lo16(cw[e]), fmaf(hi16(u1[e]), hi16(cw[e]), a1));
    }
  }
  a0 += __shfl_xor_sync(0xffffffffu, a0, 1);
  a1 += __shfl_xor_sync(0xffffffffu, a1, 1);
  a0 += __shfl_xor_sync(0xffffffffu, a0, 2);
  a1 += __shfl_xor_sync(0xffffffffu, a1, 2);
  float* o = out + (int64_t(b) * H + h) * P + 16 * (warp % 4) + g;
  if (t == 0) o[0] = a0;
  if (t == 1) o[8] = a1;
}

// mma form. m16n8k16 bf16 fragments (g = lane >> 2, t = lane & 3):
//   A: a0 = (row g, k 2t, 2t+1), a1 = (row g+8, k 2t, 2t+1), a2 = (row g, k 2t+8, 2t+9),
//      a3 = (row g+8, k 2t+8, 2t+9)
//   B: b0 = (k 2t, 2t+1; col g), b1 = (k 2t+8, 2t+9; col g)
//   C/D: c0, c1 = (row g; cols 2t, 2t+1), c2, c3 = (row g+8; cols 2t, 2t+1)
// The k index of k-block q (q < 8) is permuted so that the lane's loaded words are its A
// registers as they are: chunk j (columns 32 j + 8 t .. + 7, words w0..w3) gives k-block 2 j
// {a0, a2} = {w0, w1} of row g and {a1, a3} = {w0, w1} of row g + 8, k-block 2 j + 1 the same with
// {w2, w3}. B takes C's words at the same columns (this lane's 8 t offset), identical for every
// output column g: c0 = c1 = the dot of row g, c2 = c3 = that of row g + 8.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__global__ void __launch_bounds__(256)
    mma_kernel(const bf16* state, const int* slot_idx, const bf16* C, float* out) {
  frag f;
  load_frag(f, state, slot_idx);
  const int b = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3, h = 2 * blockIdx.x + warp / 4, grp = h / (H / G);
  const uint4* cp = reinterpret_cast<const uint4*>(C + (int64_t(b) * G + grp) * N + 8 * t);
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4 c = __ldg(cp + 4 * j);
    mma_bf16(d, f.r0[j].x, f.r1[j].x, f.r0[j].y, f.r1[j].y, c.x, c.y);
    mma_bf16(d, f.r0[j].z, f.r1[j].z, f.r0[j].w, f.r1[j].w, c.z, c.w);
  }
  float* o = out + (int64_t(b) * H + h) * P + 16 * (warp % 4) + g;
  if (t == 0) o[0] = d[0];
  if (t == 1) o[8] = d[2];
}


float bf2f(bf16 v) { return __bfloat162float(v); }

double check(const bf16* state_set, const std::vector<int>& slots, const bf16* C, const float* out) {
  std::vector<float> o(size_t(B) * H * P);
  std::vector<bf16> c(size_t(B) * G * N), tl(tile);
  CHECK(cudaMemcpy(o.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(c.data(), C, c.size() * 2, cudaMemcpyDeviceToHost));
  std::mt19937 rng(3);
  double worst = 0;
  for (int k = 0; k < 64; ++k) {
    const int b = rng() % B, h = rng() % H, g = h / (H / G);
    CHECK(cudaMemcpy(tl.data(), state_set + (int64_t(slots[b]) * H + h) * tile, tile * 2,
                     cudaMemcpyDeviceToHost));
    for (int p = 0; p < P; ++p) {
      double r = 0, mag = 0;
      for (int n = 0; n < N; ++n) {
        const double v = double(bf2f(tl[p * N + n])) * bf2f(c[(size_t(b) * G + g) * N + n]);
        r += v, mag += std::fabs(v);
      }
      worst = std::max(worst, std::fabs(o[(size_t(b) * H + h) * P + p] - r) / mag);
    }
  }
  return worst;
}

}  // namespace

int main() {
  int nsm = 0;
  CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; batch %d, heads %d, %d x %d bf16 tiles, %.2f GB per state set\n",
              prop.name, nsm, B, H, P, N, double(set_elems) * 2 / 1e9);
  bf16 *state, *C;
  float *out, *sink;
  int* slot_idx;
  CHECK(cudaMalloc(&state, size_t(num_sets) * set_elems * 2));
  CHECK(cudaMalloc(&C, size_t(B) * G * N * 2));
  CHECK(cudaMalloc(&out, size_t(B) * H * P * 4));
  CHECK(cudaMalloc(&sink, size_t(B) * H * 4));
  CHECK(cudaMalloc(&slot_idx, B * 4));
  fill_kernel<<<4096, 256>>>(state, num_sets * set_elems, 1, -1.f, 1.f);
  fill_kernel<<<256, 256>>>(C, int64_t(B) * G * N, 2, -0.5f, 0.5f);
  CHECK(cudaGetLastError());
  std::vector<int> slots(B);
  for (int i = 0; i < B; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), std::mt19937(11));
  CHECK(cudaMemcpy(slot_idx, slots.data(), B * 4, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  timer tm(30);
  const double gb = double(set_elems) * 2 / 1e9;
  const double f_us = tm.median_us([&](int r) {
    floor_kernel<<<B * H / 2, 256>>>(state + int64_t(r % num_sets) * set_elems, sink);
  });
  std::printf("floor (read only)        %7.1f us  %5.0f GB/s\n", f_us, gb / (f_us * 1e-6));
  const dim3 grid(H / 2, B);
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaMemset(out, 0xff, size_t(B) * H * P * 4));
    const double us = tm.median_us([&](int r) {
      const bf16* s = state + int64_t(r % num_sets) * set_elems;
      if (k == 0)
        fma_kernel<<<grid, 256>>>(s, slot_idx, C, out);
      else
        mma_kernel<<<grid, 256>>>(s, slot_idx, C, out);
    });
    const double err = check(state + int64_t(29 % num_sets) * set_elems, slots, C, out);
    std::printf("%-24s %7.1f us  %5.0f GB/s  max rel err %.2e%s\n",
                k == 0 ? "fma (convert + FFMA)" : "mma m16n8k16 bf16", us, gb / (us * 1e-6), err,
                err < 1e-5 ? "" : "  FAILED");
  }
  return 0;
}
