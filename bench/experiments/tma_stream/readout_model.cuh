// Shared by tma_stream.cu and prefetch_stream.cu: the model's shape, the read-only floor kernel,
// the register tile's draft-dot loop, the register-tile kernel (the library readout's shape,
// dots only) and the float64 check of its outputs on sampled items.
//
// Shape: Mamba-2 Nemotron-3-Super (batch 256, 128 heads, headdim 64, dstate 128, 8 groups), fp32
// state, 1 GiB per state set, two sets rotated (L2 never holds a tile). Per (row b, head h):
//   G_d[p] = sum_n h[p][n] C_d[n]    (d < T, C_d the row's group's C for draft d)
//   out[b][d][h][p] = scale[h] * G_d[p]   (dots-only kernels)
#pragma once

#include "common.cuh"

#include <cmath>
#include <random>
#include <vector>

namespace model {

constexpr int B = 256, H = 128, P = 64, N = 128, G = 8;
constexpr int64_t tile = int64_t(P) * N;  // floats per (slot, head)
constexpr int64_t set_elems = int64_t(B) * H * tile;
constexpr int num_sets = 2;

// ---------------------------------------------------------------- floor
constexpr int floor_threads = 256;
__global__ void __launch_bounds__(floor_threads) floor_kernel(const float* state, float* sink) {
  constexpr int per = int(tile) / 4 / floor_threads;
  const float4* p = reinterpret_cast<const float4*>(state + int64_t(blockIdx.x) * tile) + threadIdx.x;
  float4 v[per];
#pragma unroll
  for (int i = 0; i < per; ++i) v[i] = __ldcs(p + i * floor_threads);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < per; ++i) s += v[i].x + v[i].y + v[i].z + v[i].w;
  if (s == 12345.678f) sink[blockIdx.x] = s;  // never true for these inputs; keeps the loads
}

// ---------------------------------------------------------------- register tile
// Lane (gi, t) = (lane >> 2, lane & 3) of warp w holds rows 16 w + gi (h0) and 16 w + gi + 8 (h1),
// of each the 32 values at columns 16 i + 4 t + {0..3} (i < 8: one 16-byte load per (row, i)).
//
// The draft dots of the lane's two rows: emit(d, v0, v1) gets, on every lane, the full dots of
// rows 16 w + gi (v0) and 16 w + gi + 8 (v1) with draft d's C (C[d][0..N), shared memory), summed
// over the 4 lanes t by two xor shuffles.
template <int T, class Emit>
__device__ __forceinline__ void g_dots(const float4 (&h0)[8], const float4 (&h1)[8],
                                       const float (*C)[N], int t, Emit&& emit) {
  for (int d = 0; d < T; ++d) {
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 c = *reinterpret_cast<const float4*>(&C[d][16 * i + 4 * t]);
      a0 = fmaf(h0[i].x, c.x, fmaf(h0[i].y, c.y, fmaf(h0[i].z, c.z, fmaf(h0[i].w, c.w, a0))));
      a1 = fmaf(h1[i].x, c.x, fmaf(h1[i].y, c.y, fmaf(h1[i].z, c.z, fmaf(h1[i].w, c.w, a1))));
    }
    a0 += __shfl_xor_sync(0xffffffffu, a0, 1);
    a1 += __shfl_xor_sync(0xffffffffu, a1, 1);
    a0 += __shfl_xor_sync(0xffffffffu, a0, 2);
    a1 += __shfl_xor_sync(0xffffffffu, a1, 2);
    emit(d, a0, a1);
  }
}

/// The library readout's register tile of (slot, head h): lane (gi, t) of warp `warp` holds rows
/// 16 warp + gi (h0) and + 8 (h1), columns 16 i + 4 t + {0..3}, by 16-byte streaming loads.
__device__ __forceinline__ void load_tile(const float* state, int64_t slot, int h, int warp, int gi,
                                          int t, float4 (&h0)[8], float4 (&h1)[8]) {
  const float* row = state + (slot * H + h) * tile + (16 * warp + gi) * N + 4 * t;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    h0[i] = __ldcs(reinterpret_cast<const float4*>(row + 16 * i));
    h1[i] = __ldcs(reinterpret_cast<const float4*>(row + 8 * N + 16 * i));
  }
}

/// reg<T>: the library readout's structure, dots only: one block of 128 threads per (head, row),
/// slot -> 16 x 16 B state loads per thread held in registers, C staged in shared memory, G loop.
template <int T>
__global__ void __launch_bounds__(128, 4)
    reg_kernel(const float* state, const int* slot_idx, const float* C, const float* scale,
               float* out) {
  __shared__ alignas(16) float sC[T][N];
  const int h = blockIdx.x, b = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, t = lane & 3;
  const int64_t slot = slot_idx[b];
  float4 h0[8], h1[8];
  load_tile(state, slot, h, warp, gi, t, h0, h1);
  const int g = h / (H / G);
  for (int i = threadIdx.x; i < T * N / 4; i += 128) {
    const int d = i / (N / 4), c = i % (N / 4);
    reinterpret_cast<float4*>(sC[d])[c] =
        __ldg(reinterpret_cast<const float4*>(C + ((int64_t(b) * T + d) * G + g) * N) + c);
  }
  const float sc = scale[h];
  __syncthreads();
  g_dots<T>(h0, h1, sC, t, [&](int d, float a0, float a1) {
    float* o = out + ((int64_t(b) * T + d) * H + h) * P + 16 * warp + gi;
    if (t == 0) o[0] = sc * a0;
    if (t == 1) o[8] = sc * a1;
  });
}

/// Max relative error (|got - ref| / sum of |terms|) of the dots-only outputs `out_dev`
/// (`[B][T][H][P]` fp32) on 48 sampled items against float64, reading state set `state_dev`.
template <int T>
double check_dots(const float* state_dev, const std::vector<int>& slots, const float* C_dev,
                  const float* scale_dev, const float* out_dev) {
  std::vector<float> out(size_t(B) * T * H * P), C(size_t(B) * T * G * N), sc(H);
  CHECK(cudaMemcpy(out.data(), out_dev, out.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(C.data(), C_dev, C.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sc.data(), scale_dev, H * 4, cudaMemcpyDeviceToHost));
  std::mt19937 rng(5);
  double worst = 0;
  std::vector<float> tl(tile);
  for (int k = 0; k < 48; ++k) {
    const int b = rng() % B, h = rng() % H, g = h / (H / G);
    const float* src = state_dev + (int64_t(slots[b]) * H + h) * tile;
    CHECK(cudaMemcpy(tl.data(), src, tile * 4, cudaMemcpyDeviceToHost));
    for (int dd = 0; dd < T; ++dd)
      for (int p = 0; p < P; ++p) {
        double ref = 0, mag = 0;
        for (int n = 0; n < N; ++n) {
          const double c = C[((size_t(b) * T + dd) * G + g) * N + n];
          ref += double(tl[p * N + n]) * c, mag += std::fabs(double(tl[p * N + n]) * c);
        }
        ref *= sc[h], mag *= std::fabs(sc[h]);
        const double got = out[((size_t(b) * T + dd) * H + h) * P + p];
        // (a NaN left by the poison fails: max(worst, NaN) keeps worst, so test it apart)
        worst = std::isfinite(got) ? std::max(worst, std::fabs(got - ref) / mag) : 1e30;
        if (worst >= 1e30) return worst;
      }
  }
  return worst;
}

}  // namespace model
