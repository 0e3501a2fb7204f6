#!/usr/bin/env bash
# Builds and runs the whole benchmark suite on this machine's GPU, then regenerates the JSON,
# the summary table and the plot under bench/results/:
#   bash scripts/run_bench.sh
# Installs the Debian packages it needs (cmake, ninja, Catch2, Google Benchmark) if missing;
# matplotlib (pip) is needed only for the PNG. BENCH_MIN_TIME / BENCH_REPS tune the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/run_tests.sh  # the shared set-up functions (main does not run when sourced)
if ! dpkg-query -W -f='${Status}' libbenchmark-dev 2>/dev/null | grep -q 'install ok installed'; then
  sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update && "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends libbenchmark-dev
fi
replayssm_configure -DREPLAYSSM_BUILD_TESTS=ON -DREPLAYSSM_BUILD_BENCHMARKS=ON
cmake --build "$BUILD_DIR" --target bench_decode bench_spec --parallel "$(nproc)"
if ! replayssm_have_gpu; then
  echo "No GPU on this machine: the benchmarks need one. Built them under $BUILD_DIR/bench/."
  exit 0
fi
out=bench/results
mkdir -p "$out"
"$BUILD_DIR/bench/bench_decode" --benchmark_min_time="${BENCH_MIN_TIME:-0.1}" \
  --benchmark_repetitions="${BENCH_REPS:-3}" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/decode.json" --benchmark_out_format=json
"$BUILD_DIR/bench/bench_spec" --benchmark_min_time="${BENCH_MIN_TIME:-0.1}" \
  --benchmark_repetitions="${BENCH_REPS:-3}" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/spec.json" --benchmark_out_format=json
# The commit measured, in each JSON's context (Google Benchmark records the device and date).
python3 - "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" "$out/decode.json" \
  "$out/spec.json" <<'PY'
import json, sys
for path in sys.argv[2:]:
    data = json.load(open(path))
    data["context"]["replayssm_commit"] = sys.argv[1]
    json.dump(data, open(path, "w"), indent=2)
PY
python3 bench/plot.py "$out/decode.json" --spec "$out/spec.json" --out-dir "$out"
