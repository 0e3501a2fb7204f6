// Shared by the split replay prototypes (split_replay.cu: Mamba-2, split_replay_gdn.cu: Gated
// DeltaNet): error checks, bf16 packs, the transposed warp sum, counter-based random fills, the
// event timer, host-side bf16 and copies, and the results table. Standalone: no library headers.
// Everything sits in an anonymous namespace: include it from one .cu file only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

static void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: CUDA error in %s: %s\n", file, line, what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define CHECK(expr) check_cuda((expr), #expr, __FILE__, __LINE__)

namespace {

using bf16 = __nv_bfloat16;
constexpr unsigned full_mask = 0xffffffffu;

// bf16 -> fp32 is a shift; the two halves of a 32-bit word hold elements 2i (low) and 2i + 1.
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float load_bf16(const bf16* p) {
  return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

// R bf16 values (R = 4 or 8) taken with one 8- or 16-byte load.
template <int R>
struct bf16_pack {
  static_assert(R == 4 || R == 8, "one 8- or 16-byte load");
  uint32_t w[R / 2];
  __device__ __forceinline__ float operator[](int k) const {
    return (k & 1) ? bf16_hi(w[k / 2]) : bf16_lo(w[k / 2]);
  }
};
template <int R>
__device__ __forceinline__ bf16_pack<R> load_pack(const bf16* p) {
  bf16_pack<R> out;
  if constexpr (R == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    out.w[0] = v.x, out.w[1] = v.y, out.w[2] = v.z, out.w[3] = v.w;
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    out.w[0] = v.x, out.w[1] = v.y;
  }
  return out;
}
template <int R>
__device__ __forceinline__ void store_pack(bf16* p, const bf16_pack<R>& v) {
  if constexpr (R == 8)
    *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  else
    *reinterpret_cast<uint2*>(p) = make_uint2(v.w[0], v.w[1]);
}
template <int R>
__device__ __forceinline__ bf16_pack<R> zero_pack() {
  bf16_pack<R> out;
#pragma unroll
  for (int i = 0; i < R / 2; ++i) out.w[i] = 0;
  return out;
}

/// Sums R values per lane over groups of W consecutive lanes, transposed: R - 1 + log2(W / R)
/// shuffles instead of R log2(W). Afterwards the lane at position i of its group holds the sum of
/// value i / (W / R). At each halving stage a lane keeps one half of its values and sends the
/// other.
template <int R, int W>
__device__ __forceinline__ float transposed_sum(float (&v)[R], int lane) {
  static_assert(R >= 1 && R <= W && W <= 32, "R values over W lanes");
#pragma unroll
  for (int half = R / 2, o = W / 2; half >= 1; half /= 2, o /= 2) {
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int k = 0; k < half; ++k) {
      const float keep = upper ? v[k + half] : v[k];
      const float send = upper ? v[k] : v[k + half];
      v[k] = keep + __shfl_xor_sync(full_mask, send, o);
    }
  }
#pragma unroll
  for (int o = W / R / 2; o >= 1; o /= 2) v[0] += __shfl_xor_sync(full_mask, v[0], o);
  return v[0];
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// ---------------------------------------------------------------------------------------------
// Random fills (counter-based, so any size fills in place on the device).

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 33);
}
// Uniform in (0, 1].
__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
  return (float(mix64((i + 1) * 0x9E3779B97F4A7C15ull ^ seed) >> 40) + 1.f) * (1.f / 16777216.f);
}
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(bf16* p, float v) { *p = __float2bfloat16(v); }

template <class T>
__global__ void fill_normal_kernel(T* p, size_t n, uint64_t seed, float mean, float sd) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
    put(p + i, mean + sd * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}
template <class T>
__global__ void fill_uniform_kernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    put(p + i, lo + (hi - lo) * uniform01(seed, i));
}

template <class T>
void fill_normal(T* p, size_t n, uint64_t seed, float mean, float sd) {
  fill_normal_kernel<<<2048, 256>>>(p, n, seed, mean, sd);
  CHECK(cudaGetLastError());
}
template <class T>
void fill_uniform(T* p, size_t n, uint64_t seed, float lo, float hi) {
  fill_uniform_kernel<<<2048, 256>>>(p, n, seed, lo, hi);
  CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// Host side

template <class T>
T* dev_alloc(size_t count, std::vector<void*>& owned) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  owned.push_back(p);
  return static_cast<T*>(p);
}

/// CUDA events on an explicit stream. Each sample queues a ~50 us spin kernel before its start
/// event, so the GPU is still busy while the host issues the launches being timed.
struct sample_timer {
  cudaStream_t stream;
  cudaEvent_t start{}, stop{};
  long long spin_cycles = 100000;  // ~50 us at the H200's ~1.98 GHz
  explicit sample_timer(cudaStream_t s) : stream(s) {
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
  }
  ~sample_timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  /// Median in us of `reps` samples of launch(i) after 3 warm-up calls (i counts on throughout, so
  /// callers rotate through their state sets with it).
  template <class F>
  double median_us(int reps, F&& launch) {
    int i = 0;
    for (; i < 3; ++i) launch(i);
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms;
    for (int k = 0; k < reps; ++k, ++i) {
      spin_kernel<<<1, 32, 0, stream>>>(spin_cycles);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(start, stream));
      launch(i);
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float t = 0.f;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const size_t m = ms.size();
    return 1e3 * (m % 2 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]));
  }
};

float host_bf16(uint16_t u) {
  const uint32_t w = uint32_t(u) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

template <class T>
std::vector<T> to_host(const T* d, size_t count) {
  std::vector<T> h(count);
  CHECK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
// `rows` rows of `width` elements, `pitch` elements apart on the device.
template <class T>
std::vector<T> rows_to_host(const T* d, size_t width, size_t pitch, size_t rows) {
  std::vector<T> h(width * rows);
  CHECK(cudaMemcpy2D(h.data(), width * sizeof(T), d, pitch * sizeof(T), width * sizeof(T), rows,
                     cudaMemcpyDeviceToHost));
  return h;
}

struct row_result {
  std::string name;
  double us, bytes;
};

/// The timing table. rows[0] is the read-only floor: every row's TB/s and time are given
/// relative to it.
void print_table(const std::vector<row_result>& rows, int reps, int num_sets) {
  const double floor_us = rows[0].us, floor_tbps = rows[0].bytes / (floor_us * 1e-6) / 1e12;
  std::printf(
      "\ntiming: median of %d launches each (CUDA events, spin before start, %d state sets "
      "rotated)\n",
      reps, num_sets);
  std::printf("%-32s %10s %9s %8s %12s %14s\n", "kernel", "us", "GB", "TB/s", "% floor BW",
              "x floor time");
  for (const auto& r : rows) {
    const double tbps = r.bytes / (r.us * 1e-6) / 1e12;
    std::printf("%-32s %10.1f %9.3f %8.2f %11.1f%% %14.3f\n", r.name.c_str(), r.us, r.bytes / 1e9,
                tbps, 100.0 * tbps / floor_tbps, r.us / floor_us);
  }
}

/// The copy ceiling of the same run: a 2 GiB device-to-device cudaMemcpyAsync (bytes counted
/// read + written).
inline row_result copy_row(sample_timer& timer, int reps) {
  const size_t copy_bytes = size_t(2) << 30;
  void *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, copy_bytes));
  CHECK(cudaMalloc(&dst, copy_bytes));
  CHECK(cudaMemset(src, 0x3c, copy_bytes));
  CHECK(cudaDeviceSynchronize());
  const double us = timer.median_us(reps, [&](int) {
    CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, timer.stream));
  });
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return {"D2D copy 2 GiB (read + write)", us, 2.0 * copy_bytes};
}

/// The split step's rows: kernel A alone (`a_name`), each stream variant alone, and A followed by
/// each variant, plain and with PDL. A variant has `name` and `launch(args, stream, pdl)`;
/// `set_of(i)` is the state set of timed launch i.
template <class Variants, class LaunchA, class SetOf>
void add_split_rows(std::vector<row_result>& rows, sample_timer& timer, int reps,
                    const char* a_name, LaunchA&& launch_a, const Variants& variants,
                    SetOf&& set_of, double bytes_a, double bytes_b) {
  cudaStream_t s = timer.stream;
  rows.push_back({a_name, timer.median_us(reps, [&](int i) { launch_a(set_of(i), s); }), bytes_a});
  for (const auto& v : variants)
    rows.push_back({std::string(v.name) + " stream alone",
                    timer.median_us(reps, [&](int i) { v.launch(set_of(i), s, false); }),
                    bytes_b});
  for (const auto& v : variants)
    for (bool pdl : {false, true})
      rows.push_back({std::string("A + ") + v.name + (pdl ? ", PDL" : ", plain"),
                      timer.median_us(reps,
                                      [&](int i) {
                                        launch_a(set_of(i), s);
                                        v.launch(set_of(i), s, pdl);
                                      }),
                      bytes_a + bytes_b});
  CHECK(cudaStreamSynchronize(s));
}

/// The fastest "A + ..." row (the split step's best configuration).
inline const row_result& best_split_row(const std::vector<row_result>& rows) {
  const row_result* best = &rows[0];
  double us = 1e30;
  for (const auto& r : rows)
    if (r.name.rfind("A + B", 0) == 0 && r.us < us) us = r.us, best = &r;
  return *best;
}

}  // namespace
