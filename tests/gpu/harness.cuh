// Shared pieces of the GPU tests: checked CUDA calls, device arrays, random inputs, errors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <replayssm/replayssm.cuh>
#include <string>
#include <vector>

namespace rtest {

#define RTEST_CUDA(expr)                                   \
  do {                                                     \
    const cudaError_t rtest_e_ = (expr);                   \
    INFO(#expr << " -> " << cudaGetErrorString(rtest_e_)); \
    REQUIRE(rtest_e_ == cudaSuccess);                      \
  } while (0)

#define RTEST_OK(expr)                         \
  do {                                         \
    const replayssm::result rtest_r_ = (expr); \
    INFO(#expr << " -> " << rtest_r_.message); \
    REQUIRE(rtest_r_.ok());                    \
  } while (0)

inline float host_to_float(float v) { return v; }
inline float host_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float host_to_float(__half v) { return __half2float(v); }
template <class T>
T host_from_float(float v) {
  if constexpr (std::is_same<T, float>::value)
    return v;
  else if constexpr (std::is_same<T, __nv_bfloat16>::value)
    return __float2bfloat16_rn(v);
  else
    return __float2half_rn(v);
}

/// An owning device array; contents start as random bytes' worth of garbage set by the caller.
template <class T>
struct dev_array {
  T* ptr = nullptr;
  size_t n = 0;
  dev_array() = default;
  explicit dev_array(size_t count) : n(count) {
    RTEST_CUDA(cudaMalloc(&ptr, (n ? n : 1) * sizeof(T)));
  }
  dev_array(const dev_array&) = delete;
  dev_array& operator=(const dev_array&) = delete;
  dev_array(dev_array&& o) noexcept : ptr(o.ptr), n(o.n) {
    o.ptr = nullptr;
    o.n = 0;
  }
  dev_array& operator=(dev_array&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    return *this;
  }
  ~dev_array() {
    if (ptr) cudaFree(ptr);
  }
  size_t bytes() const { return n * sizeof(T); }
  /// Uploads h to elements at .. at + h.size(), which must end the array.
  void upload(const std::vector<T>& h, size_t at = 0) {
    REQUIRE(at + h.size() == n);
    RTEST_CUDA(cudaMemcpy(ptr + at, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    RTEST_CUDA(cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  /// Fills with 0xFF bytes: NaN for floats, so an element nobody wrote is caught.
  void poison() { RTEST_CUDA(cudaMemset(ptr, 0xFF, bytes())); }
  /// Fills with random bytes-derived values (junk that must stay untouched where unused).
  void junk(std::mt19937_64& rng) {
    std::vector<unsigned char> h(bytes());
    for (auto& b : h) b = static_cast<unsigned char>(rng() & 0x3F);  // finite, small
    RTEST_CUDA(cudaMemcpy(ptr, h.data(), bytes(), cudaMemcpyHostToDevice));
  }
};

/// Relative L2 error accumulator: ||a - b|| / ||b||.
struct rel_err {
  double num = 0, den = 0;
  void add(double a, double b) {
    num += (a - b) * (a - b);
    den += b * b;
  }
  double value() const { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }
};

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

/// Value drawn in float, rounded through T, returned as the double the kernel will see.
template <class T, class Dist>
double draw(std::mt19937_64& rng, Dist& d) {
  return host_to_float(host_from_float<T>(static_cast<float>(d(rng))));
}

}  // namespace rtest
