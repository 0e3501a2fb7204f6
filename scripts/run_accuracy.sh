#!/usr/bin/env bash
# Builds and runs the accuracy study of the precision schemes (CPU only, a few minutes), then
# writes bench/results/accuracy.json, accuracy_summary.md and accuracy.png:
#   bash scripts/run_accuracy.sh [steps]      (default 8192)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/run_tests.sh  # the shared set-up functions (main does not run when sourced)
replayssm_configure -DREPLAYSSM_BUILD_TESTS=ON -DREPLAYSSM_BUILD_BENCHMARKS=ON
cmake --build "$BUILD_DIR" --target accuracy_study --parallel "$(nproc)"
mkdir -p bench/results
"$BUILD_DIR/bench/accuracy_study" "${1:-8192}" bench/results/accuracy.json
python3 bench/plot_accuracy.py bench/results/accuracy.json
