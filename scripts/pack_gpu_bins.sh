#!/usr/bin/env bash
# Builds the GPU test runner, the benchmarks and the examples here and copies them, with the
# Google Benchmark shared library, into one folder to carry to a GPU machine that cannot build:
#   bash scripts/pack_gpu_bins.sh [folder]        (default .dev, which git ignores)
# then, there: BIN=<folder> bash scripts/gpu_check.sh tests sanitize examples bench
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest="${1:-.dev}"
source scripts/run_tests.sh  # the shared set-up functions (main does not run when sourced)
replayssm_configure -DREPLAYSSM_BUILD_TESTS=ON -DREPLAYSSM_BUILD_BENCHMARKS=ON
examples=(quickstart_mamba2 quickstart_gdn graph_serving hybrid_stack_decode)
targets=(replayssm_gpu_tests bench_decode bench_spec "${examples[@]}")
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target "${targets[@]}"
mkdir -p "$dest"
cp "$BUILD_DIR/tests/replayssm_gpu_tests" "$BUILD_DIR/bench/bench_decode" \
   "$BUILD_DIR/bench/bench_spec" "${examples[@]/#/$BUILD_DIR/examples/}" "$dest/"
lib=$(ldconfig -p | awk '/libbenchmark.so.1debian/ {print $NF; exit}')
[[ -n "$lib" ]] && cp "$lib" "$dest/"
ls -la "$dest"
