// Shared pieces of the benchmarks: checked CUDA calls, an event timer, device fills.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <replayssm/replayssm.cuh>
#include <string>
#include <vector>

namespace rbench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
inline void check(const replayssm::result& r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "ReplaySSM error in %s: %s\n", what, r.message);
    std::exit(1);
  }
}
#define RBENCH_CHECK(expr) ::rbench::check((expr), #expr)

/// A device allocation that lives for the whole benchmark case.
template <class T>
struct dev_array {
  T* ptr = nullptr;
  size_t n = 0;
  explicit dev_array(size_t count = 0) : n(count) {
    if (n) RBENCH_CHECK(cudaMalloc(&ptr, n * sizeof(T)));
  }
  dev_array(const dev_array&) = delete;
  dev_array& operator=(const dev_array&) = delete;
  ~dev_array() {
    if (ptr) cudaFree(ptr);
  }
};

template <class T>
__global__ void fill_random_kernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 33;
    const float u = float(x >> 40) * (1.0f / 16777216.0f);
    p[i] = T(lo + (hi - lo) * u);
  }
}
/// Uniform random values in [lo, hi): realistic non-zero data everywhere.
template <class T>
void fill_random(dev_array<T>& a, uint64_t seed, float lo, float hi) {
  if (!a.n) return;
  fill_random_kernel<<<1024, 256>>>(a.ptr, a.n, seed, lo, hi);
  RBENCH_CHECK(cudaGetLastError());
}

/// Cursor set-up outside the timed region: every row at n, or rows staggered (row b at
/// (b + offset) % K; with the offset advancing by one per timed step, every row, even of a batch
/// smaller than K, passes through the whole commit window).
__global__ void set_cursors_kernel(int32_t* cursor, const int32_t* slot_idx, int batch, int n,
                                   int k, bool staggered, int offset) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < batch) cursor[slot_idx[b]] = staggered ? (b + offset) % k : n;
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

/// CUDA-event timer on an explicit stream.
struct event_timer {
  cudaEvent_t start{}, stop{};
  cudaStream_t stream;
  explicit event_timer(cudaStream_t s) : stream(s) {
    RBENCH_CHECK(cudaEventCreate(&start));
    RBENCH_CHECK(cudaEventCreate(&stop));
  }
  ~event_timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  /// Starts timing. A ~50 us spin is queued first so that the GPU is still busy while the host
  /// prepares the launches to be timed (parameter checks, launch calls): their host-side cost
  /// is not counted as GPU time.
  void begin() {
    spin_kernel<<<1, 32, 0, stream>>>(100000);
    RBENCH_CHECK(cudaGetLastError());
    RBENCH_CHECK(cudaEventRecord(start, stream));
  }
  /// Seconds since begin().
  double end() {
    RBENCH_CHECK(cudaEventRecord(stop, stream));
    RBENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    RBENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e-3;
  }
};

/// Number of disjoint slot sets so that the rotated working set is far larger than L2.
inline int rotation_sets(size_t bytes_per_set, size_t target = size_t(1) << 30) {
  size_t sets = (target + bytes_per_set - 1) / bytes_per_set;
  return int(sets < 1 ? 1 : (sets > 4096 ? 4096 : sets));
}

inline void add_device_context() {
  cudaDeviceProp prop{};
  RBENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("sm_count", std::to_string(prop.multiProcessorCount));
}

}  // namespace rbench
