// Prototype (NOTES v17): can a persistent kernel that streams the state tiles through shared
// memory with bulk asynchronous copies (cp.async.bulk + mbarrier, several tiles in flight per SM,
// the loads decoupled from each tile's compute) read the fp32 state at the read-only floor while
// it computes T draft dots per state row, where the library's register-tile readout (4 blocks of
// 128 threads per SM, each block holding its 64 x 128 tile in registers from load to output)
// reaches only ~60% of it?
//
// Shape: Mamba-2 Nemotron-3-Super (batch 256, 128 heads, headdim 64, dstate 128, 8 groups), fp32
// state, 1 GiB per state set, two sets rotated (L2 never holds a tile). Per (row b, head h):
//   G_d[p] = sum_n h[p][n] C_d[n]    (d < T, C_d the row's group's C for draft d)
//   out[b][d][h][p] = scale[h] * G_d[p]
// (the readout's state part; the x terms and weights are state-independent and left out).
// Kernels, each checked against a float64 host computation on sampled items:
//   floor      every block reads one 32 KB tile (256 threads, 8 x 16 B per thread) and sums it
//   reg<T>     the library readout's structure: slot -> 16 x 16 B state loads per thread held in
//              registers, C staged in shared memory, G loop, two xor shuffles per row pair
//   tma<T,S>   persistent blocks of 128 threads; thread 0 keeps S - 1 tiles (and their C rows) in
//              flight by cp.async.bulk into an S-stage ring, each stage completing on its own
//              mbarrier; all threads wait on the stage, read their 64 values from shared memory
//              (conflict-free: a quarter warp reads 128 contiguous bytes), dot them with C and
//              reduce 4 rows per lane by a transposing sum (4 shuffles per draft)
// (floor, reg and the float64 check of the dots: readout_model.cuh, shared with prefetch_stream.cu)
// Build: nvcc -O3 -std=c++17 -arch=sm_90 bench/experiments/tma_stream/tma_stream.cu -o tma_stream
#include <cuda_runtime.h>

#include "readout_model.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>


namespace {

using namespace model;

// ---------------------------------------------------------------- bulk-copy stream
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory");
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

template <int T>
struct stage_t {
  alignas(128) float h[P * N];
  alignas(16) float C[T][N];
};

template <int T, int S>
__global__ void __launch_bounds__(128)
    tma_kernel(const float* state, const int* slot_idx, const float* C, const float* scale,
               float* out, int items) {
  extern __shared__ __align__(128) unsigned char dyn[];
  auto* st = reinterpret_cast<stage_t<T>*>(dyn);
  auto* full = reinterpret_cast<uint64_t*>(dyn + S * sizeof(stage_t<T>));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 3, t = lane & 7;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int64_t next_slot = blockIdx.x < items ? __ldg(slot_idx + blockIdx.x / H) : 0;  // thread 0's
  auto issue = [&](int k) {  // thread 0: item k of this block into stage k % S
    const int item = blockIdx.x + k * gridDim.x;
    if (item >= items) return;
    const int b = item / H, h = item % H, g = h / (H / G);
    const int64_t slot = next_slot;  // loaded one issue ahead: no load latency on warp 0 here
    const int nitem = item + gridDim.x;
    if (nitem < items) next_slot = __ldg(slot_idx + nitem / H);
    stage_t<T>& s = st[k % S];
    mbar_expect_tx(&full[k % S], uint32_t(sizeof(float) * (P * N + T * N)));
    const float* src = state + (slot * H + h) * tile;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      bulk_g2s(s.h + q * (P * N / 4), src + q * (P * N / 4), sizeof(float) * P * N / 4, &full[k % S]);
#pragma unroll
    for (int d = 0; d < T; ++d)
      bulk_g2s(s.C[d], C + ((int64_t(b) * T + d) * G + g) * N, sizeof(float) * N, &full[k % S]);
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < S - 1; ++k) issue(k);
  for (int k = 0;; ++k) {
    const int item = blockIdx.x + k * gridDim.x;
    if (item >= items) break;
    if (threadIdx.x == 0) issue(k + S - 1);  // its stage was read in iteration k - 1 (barrier)
    const int b = item / H, h = item % H;
    const float sc = __ldg(scale + h);
    mbar_wait(&full[k % S], uint32_t((k / S) & 1));
    const stage_t<T>& s = st[k % S];
    // lane (gi, t): rows 16 warp + gi + 4 r (r < 4), columns 32 i + 4 t (i < 4)
    float4 v[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[r][i] = *reinterpret_cast<const float4*>(&s.h[(16 * warp + gi + 4 * r) * N + 32 * i + 4 * t]);
#pragma unroll
    for (int d = 0; d < T; ++d) {
      float a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 c = *reinterpret_cast<const float4*>(&s.C[d][32 * i + 4 * t]);
#pragma unroll
        for (int r = 0; r < 4; ++r)
          a[r] = fmaf(v[r][i].x, c.x, fmaf(v[r][i].y, c.y, fmaf(v[r][i].z, c.z, fmaf(v[r][i].w, c.w, a[r]))));
      }
      // transposing sum over the 8 lanes t of a row group: lane t ends with row
      // 2 ((t >> 2) & 1) + ((t >> 1) & 1) (lanes t and t ^ 1 alike)
      const bool hi = t & 4;
      float k0 = hi ? a[2] : a[0], k1 = hi ? a[3] : a[1];
      k0 += __shfl_xor_sync(0xffffffffu, hi ? a[0] : a[2], 4);
      k1 += __shfl_xor_sync(0xffffffffu, hi ? a[1] : a[3], 4);
      const bool mid = t & 2;
      float kk = mid ? k1 : k0;
      kk += __shfl_xor_sync(0xffffffffu, mid ? k0 : k1, 2);
      kk += __shfl_xor_sync(0xffffffffu, kk, 1);
      const int r = 2 * ((t >> 2) & 1) + ((t >> 1) & 1);
      if ((t & 1) == 0) out[((int64_t(b) * T + d) * H + h) * P + 16 * warp + gi + 4 * r] = sc * kk;
    }
    __syncthreads();  // stage k % S free for issue(k + S) in iteration k + 1
  }
}

// The same stream for rows that fold their window first (every row here): per item the stage
// also receives the window's x rows (16 x P, the head's) and B rows (16 x N, the group's);
//   h'[p][n] = a_h h[p][n] + sum_j x_j[p] B_j[n]     (16 steps, one FMA per element and step)
// is written back to the stage and stored to `dst` by a bulk copy (cp.async.bulk global <- shared,
// bulk groups), and the drafts' outputs are read against h'. With a store pending on a stage,
// the producer keeps S - 2 loads in flight and waits (wait_group.read 1) for the store issued two
// iterations back before it reloads that stage.
constexpr int W = 16;  // window steps folded
template <int T>
struct fold_stage_t {
  alignas(128) float h[P * N];
  alignas(16) float C[T][N];
  alignas(16) float x[W][P];
  alignas(16) float Bw[W][N];
};

template <int T, int S>
__global__ void __launch_bounds__(128)
    tma_fold_kernel(const float* state, float* dst_state, const int* slot_idx, const float* C,
                    const float* xbuf, const float* Bbuf, const float* scale, float* out,
                    int items) {
  static_assert(S >= 3, "a stage is stored while S - 2 others load");
  extern __shared__ __align__(128) unsigned char dyn[];
  auto* st = reinterpret_cast<fold_stage_t<T>*>(dyn);
  auto* full = reinterpret_cast<uint64_t*>(dyn + S * sizeof(fold_stage_t<T>));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 3, t = lane & 7;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int64_t next_slot = blockIdx.x < items ? __ldg(slot_idx + blockIdx.x / H) : 0;  // thread 0's
  auto issue = [&](int k) {
    const int item = blockIdx.x + k * gridDim.x;
    if (item >= items) return;
    const int b = item / H, h = item % H, g = h / (H / G);
    const int64_t slot = next_slot;  // loaded one issue ahead: no load latency on warp 0 here
    const int nitem = item + gridDim.x;
    if (nitem < items) next_slot = __ldg(slot_idx + nitem / H);
    fold_stage_t<T>& s = st[k % S];
    uint64_t* bar = &full[k % S];
    mbar_expect_tx(bar, uint32_t(sizeof(float) * (P * N + T * N + W * P + W * N)));
    const float* src = state + (slot * H + h) * tile;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      bulk_g2s(s.h + q * (P * N / 4), src + q * (P * N / 4), sizeof(float) * P * N / 4, bar);
#pragma unroll
    for (int d = 0; d < T; ++d)
      bulk_g2s(s.C[d], C + ((int64_t(b) * T + d) * G + g) * N, sizeof(float) * N, bar);
    for (int j = 0; j < W; ++j) {
      bulk_g2s(s.x[j], xbuf + ((slot * W + j) * H + h) * int64_t(P), sizeof(float) * P, bar);
      bulk_g2s(s.Bw[j], Bbuf + ((slot * W + j) * G + g) * int64_t(N), sizeof(float) * N, bar);
    }
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < S - 2; ++k) issue(k);
  for (int k = 0;; ++k) {
    const int item = blockIdx.x + k * gridDim.x;
    if (item >= items) break;
    if (threadIdx.x == 0) {
      // stage (k + S - 2) % S = (k - 2) % S: its store (iteration k - 2) must have read it
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      issue(k + S - 2);
    }
    const int b = item / H, h = item % H;
    const float a = __ldg(scale + h);
    const int64_t slot_cur = __ldg(slot_idx + b);  // for the store (used after the fold)
    mbar_wait(&full[k % S], uint32_t((k / S) & 1));
    fold_stage_t<T>& s = st[k % S];
    float4 v[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 q = *reinterpret_cast<const float4*>(&s.h[(16 * warp + gi + 4 * r) * N + 32 * i + 4 * t]);
        v[r][i] = make_float4(a * q.x, a * q.y, a * q.z, a * q.w);
      }
#pragma unroll 2
    for (int j = 0; j < W; ++j) {
      float xr[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) xr[r] = s.x[j][16 * warp + gi + 4 * r];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 bv = *reinterpret_cast<const float4*>(&s.Bw[j][32 * i + 4 * t]);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          v[r][i].x = fmaf(xr[r], bv.x, v[r][i].x);
          v[r][i].y = fmaf(xr[r], bv.y, v[r][i].y);
          v[r][i].z = fmaf(xr[r], bv.z, v[r][i].z);
          v[r][i].w = fmaf(xr[r], bv.w, v[r][i].w);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        *reinterpret_cast<float4*>(&s.h[(16 * warp + gi + 4 * r) * N + 32 * i + 4 * t]) = v[r][i];
    // the generic-proxy writes of the stage, visible to the bulk copy (async proxy)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                       dst_state + (slot_cur * H + h) * tile),
                   "r"(smem_addr(s.h)), "r"(uint32_t(sizeof(float) * P * N))
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
#pragma unroll
    for (int d = 0; d < T; ++d) {
      float acc[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 c = *reinterpret_cast<const float4*>(&s.C[d][32 * i + 4 * t]);
#pragma unroll
        for (int r = 0; r < 4; ++r)
          acc[r] = fmaf(v[r][i].x, c.x, fmaf(v[r][i].y, c.y, fmaf(v[r][i].z, c.z, fmaf(v[r][i].w, c.w, acc[r]))));
      }
      const bool hi = t & 4;
      float k0 = hi ? acc[2] : acc[0], k1 = hi ? acc[3] : acc[1];
      k0 += __shfl_xor_sync(0xffffffffu, hi ? acc[0] : acc[2], 4);
      k1 += __shfl_xor_sync(0xffffffffu, hi ? acc[1] : acc[3], 4);
      const bool mid = t & 2;
      float kk = mid ? k1 : k0;
      kk += __shfl_xor_sync(0xffffffffu, mid ? k0 : k1, 2);
      kk += __shfl_xor_sync(0xffffffffu, kk, 1);
      const int r = 2 * ((t >> 2) & 1) + ((t >> 1) & 1);
      if ((t & 1) == 0) out[((int64_t(b) * T + d) * H + h) * P + 16 * warp + gi + 4 * r] = kk;
    }
    __syncthreads();  // every read of stage k % S done before it is reloaded
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}


struct data {
  float *state, *C, *scale, *out, *sink, *xbuf, *Bbuf;
  int* slot_idx;
  std::vector<int> slots;
};

template <int T>
double check(const data& d, int set) {
  return check_dots<T>(d.state + int64_t(set) * set_elems, d.slots, d.C, d.scale, d.out);
}

template <int T>
void run_T(data& d, timer& tm, int nsm) {
  const double gb = double(set_elems) * 4 / 1e9;
  auto poison = [&] { CHECK(cudaMemset(d.out, 0xff, size_t(B) * T * H * P * 4)); };
  auto report = [&](const std::string& name, double us, double err) {
    std::printf("T=%d %-28s %8.1f us  %6.0f GB/s  max rel err %.2e%s\n", T, name.c_str(), us,
                gb / (us * 1e-6), err, err < 1e-5 ? "" : "  FAILED");
  };
  {
    poison();
    const double us = tm.median_us([&](int r) {
      reg_kernel<T><<<dim3(H, B), 128>>>(d.state + int64_t(r % num_sets) * set_elems, d.slot_idx,
                                         d.C, d.scale, d.out);
    });
    // the last launch used set (19 % 2) = 1
    report("reg (library shape)", us, check<T>(d, 19 % num_sets));
  }
  auto tma = [&](auto S_c, int cps) {
    constexpr int S = decltype(S_c)::value;
    const size_t smem = S * sizeof(stage_t<T>) + S * 8;
    auto kern = tma_kernel<T, S>;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int occ = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 128, smem));
    if (occ < cps) {
      std::printf("T=%d tma S=%d x%d: only %d blocks/SM fit (smem %zu)\n", T, S, cps, occ, smem);
      return;
    }
    const int items = B * H, grid = std::min(items, nsm * cps);
    poison();
    const double us = tm.median_us([&](int r) {
      kern<<<grid, 128, smem>>>(d.state + int64_t(r % num_sets) * set_elems, d.slot_idx, d.C,
                                d.scale, d.out, items);
    });
    report("tma S=" + std::to_string(S) + " blocks/SM=" + std::to_string(cps), us,
           check<T>(d, 19 % num_sets));
  };
  using std::integral_constant;
  tma(integral_constant<int, 2>{}, 1);
  tma(integral_constant<int, 4>{}, 1);
  tma(integral_constant<int, 6>{}, 1);
  tma(integral_constant<int, 2>{}, 2);
  tma(integral_constant<int, 3>{}, 2);
  tma(integral_constant<int, 2>{}, 3);
}


// Folding rows: the last launch (r = 19) read set 1 and wrote set 0.
template <int T>
void check_fold(const data& d, double& err_state, double& err_out) {
  std::vector<float> out(size_t(B) * T * H * P), C(size_t(B) * T * G * N), sc(H);
  CHECK(cudaMemcpy(out.data(), d.out, out.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(C.data(), d.C, C.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(sc.data(), d.scale, H * 4, cudaMemcpyDeviceToHost));
  std::mt19937 rng(6);
  err_state = err_out = 0;
  std::vector<float> in(tile), got(tile), xw(W * P), bw(W * N);
  for (int k = 0; k < 24; ++k) {
    const int b = rng() % B, h = rng() % H, g = h / (H / G);
    const int64_t slot = d.slots[b];
    CHECK(cudaMemcpy(in.data(), d.state + set_elems + (slot * H + h) * tile, tile * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got.data(), d.state + (slot * H + h) * tile, tile * 4, cudaMemcpyDeviceToHost));
    for (int j = 0; j < W; ++j) {
      CHECK(cudaMemcpy(xw.data() + j * P, d.xbuf + ((slot * W + j) * H + h) * P, P * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(bw.data() + j * N, d.Bbuf + ((slot * W + j) * G + g) * N, N * 4, cudaMemcpyDeviceToHost));
    }
    std::vector<double> ref(tile);
    for (int p = 0; p < P; ++p)
      for (int n = 0; n < N; ++n) {
        double v = double(sc[h]) * in[p * N + n], mag = std::fabs(v);
        for (int j = 0; j < W; ++j) v += double(xw[j * P + p]) * bw[j * N + n], mag += std::fabs(double(xw[j * P + p]) * bw[j * N + n]);
        ref[p * N + n] = v;
        err_state = std::max(err_state, std::fabs(got[p * N + n] - v) / mag);
      }
    for (int dd = 0; dd < T; ++dd)
      for (int p = 0; p < P; ++p) {
        double r = 0, mag = 0;
        for (int n = 0; n < N; ++n) {
          const double c = C[((size_t(b) * T + dd) * G + g) * N + n];
          r += ref[p * N + n] * c, mag += std::fabs(ref[p * N + n] * c);
        }
        err_out = std::max(err_out, std::fabs(out[((size_t(b) * T + dd) * H + h) * P + p] - r) / mag);
      }
  }
}

template <int T>
void run_fold(data& d, timer& tm, int nsm) {
  auto fold = [&](auto S_c, int cps) {
    constexpr int S = decltype(S_c)::value;
    const size_t smem = S * sizeof(fold_stage_t<T>) + S * 8;
    auto kern = tma_fold_kernel<T, S>;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int occ = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 128, smem));
    if (occ < cps) {
      std::printf("T=%d fold S=%d x%d: only %d blocks/SM fit (smem %zu)\n", T, S, cps, occ, smem);
      return;
    }
    const int items = B * H, grid = std::min(items, nsm * cps);
    CHECK(cudaMemset(d.out, 0xff, size_t(B) * T * H * P * 4));
    const double us = tm.median_us([&](int r) {
      kern<<<grid, 128, smem>>>(d.state + int64_t(r % 2) * set_elems,
                                d.state + int64_t((r + 1) % 2) * set_elems, d.slot_idx, d.C,
                                d.xbuf, d.Bbuf, d.scale, d.out, items);
    });
    double es, eo;
    check_fold<T>(d, es, eo);
    std::printf("T=%d fold S=%d blocks/SM=%d        %8.1f us  %6.0f GB/s (read + write)  state err %.2e, out err %.2e%s\n",
                T, S, cps, us, 2 * double(set_elems) * 4 / 1e9 / (us * 1e-6), es, eo,
                es < 1e-5 && eo < 1e-5 ? "" : "  FAILED");
    // refill: the folds grow the state by up to 1.5x per launch
    fill_kernel<<<4096, 256>>>(d.state, num_sets * set_elems, 1, -1.f, 1.f);
    CHECK(cudaGetLastError());
  };
  using std::integral_constant;
  fold(integral_constant<int, 3>{}, 1);
  fold(integral_constant<int, 4>{}, 1);
  fold(integral_constant<int, 3>{}, 2);
}

}  // namespace

int main() {
  int dev = 0, nsm = 0;
  CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs; batch %d, heads %d, %d x %d fp32 tiles, %.2f GB per state set\n",
              prop.name, nsm, B, H, P, N, double(set_elems) * 4 / 1e9);
  data d;
  CHECK(cudaMalloc(&d.state, size_t(num_sets) * set_elems * 4));
  CHECK(cudaMalloc(&d.C, size_t(B) * 8 * G * N * 4));
  CHECK(cudaMalloc(&d.scale, H * 4));
  CHECK(cudaMalloc(&d.out, size_t(B) * 8 * H * P * 4));
  CHECK(cudaMalloc(&d.sink, size_t(B) * H * 4));
  CHECK(cudaMalloc(&d.slot_idx, B * 4));
  CHECK(cudaMalloc(&d.xbuf, size_t(B) * W * H * P * 4));
  CHECK(cudaMalloc(&d.Bbuf, size_t(B) * W * G * N * 4));
  fill_kernel<<<4096, 256>>>(d.state, num_sets * set_elems, 1, -1.f, 1.f);
  fill_kernel<<<256, 256>>>(d.C, int64_t(B) * 8 * G * N, 2, -0.3f, 0.3f);
  fill_kernel<<<1, 128>>>(d.scale, H, 3, 0.5f, 1.5f);
  fill_kernel<<<1024, 256>>>(d.xbuf, int64_t(B) * W * H * P, 4, -0.5f, 0.5f);
  fill_kernel<<<256, 256>>>(d.Bbuf, int64_t(B) * W * G * N, 5, -0.5f, 0.5f);
  CHECK(cudaGetLastError());
  d.slots.resize(B);
  for (int i = 0; i < B; ++i) d.slots[i] = i;
  std::shuffle(d.slots.begin(), d.slots.end(), std::mt19937(11));
  CHECK(cudaMemcpy(d.slot_idx, d.slots.data(), B * 4, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  timer tm(20);
  const double us = tm.median_us([&](int r) {
    floor_kernel<<<B * H, floor_threads>>>(d.state + int64_t(r % num_sets) * set_elems, d.sink);
  });
  std::printf("floor (read only, 256 thr)        %8.1f us  %6.0f GB/s\n", us,
              double(set_elems) * 4 / 1e9 / (us * 1e-6));
  run_T<1>(d, tm, nsm);
  run_T<4>(d, tm, nsm);
  run_T<8>(d, tm, nsm);
  const double cus = tm.median_us([&](int r) {
    CHECK(cudaMemcpyAsync(d.state + int64_t((r + 1) % 2) * set_elems, d.state + int64_t(r % 2) * set_elems,
                          set_elems * 4, cudaMemcpyDeviceToDevice));
  });
  std::printf("copy floor (1 set, D2D memcpy)    %8.1f us  %6.0f GB/s (read + write)\n", cus,
              2 * double(set_elems) * 4 / 1e9 / (cus * 1e-6));
  run_fold<1>(d, tm, nsm);
  run_fold<4>(d, tm, nsm);
  return 0;
}
