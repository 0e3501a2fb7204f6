#!/usr/bin/env bash
# Build and run the quick-start decode examples. With a GPU they run the decode loop and check it
# against the float64 reference; without one they say so and run the CPU part:
#   bash scripts/run_demo.sh [extra CMake configure arguments...]
# Build directory: $BUILD_DIR (default: build), shared with scripts/run_tests.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/run_tests.sh

demos=(quickstart_mamba2 quickstart_gdn)

# The demos need neither Catch2 nor Google Benchmark: configure without tests and benchmarks (the
# build directory is shared: scripts/run_tests.sh turns the tests back on).
REPLAYSSM_NEED_CATCH2=0 replayssm_configure -DREPLAYSSM_BUILD_TESTS=OFF \
  -DREPLAYSSM_BUILD_BENCHMARKS=OFF "$@"
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target "${demos[@]}"

if ! replayssm_have_gpu; then
  echo "note: no GPU detected (nvidia-smi): the demos run their CPU part only." >&2
fi
for demo in "${demos[@]}"; do
  echo
  echo "==== $demo ===="
  "$BUILD_DIR/examples/$demo"
done
