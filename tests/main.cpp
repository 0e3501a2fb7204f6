// The one Catch2 runner of ReplaySSM's tests. Built twice: the CPU suite runs anywhere; the GPU
// suite (REPLAYSSM_TESTS_NEED_GPU=1) exits with 77, which CTest reports as skipped, when no CUDA
// device is present, except when Catch is only listing tests.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#ifndef REPLAYSSM_TESTS_NEED_GPU
#define REPLAYSSM_TESTS_NEED_GPU 0
#endif

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& cfg = session.configData();
  const bool listing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags || cfg.listReporters;
  if (REPLAYSSM_TESTS_NEED_GPU && !listing) {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      std::printf("SKIPPED: no CUDA device (%s); the GPU tests need one.\n",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
      return 77;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      std::printf("GPU tests on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
                  prop.multiProcessorCount);
  }
  return session.run();
}
