#!/usr/bin/env bash
# Runs the GPU test suite, compute-sanitizer and the benchmarks on a machine with a GPU, from
# binaries built elsewhere (BIN, default build) when that machine cannot build them itself:
#   BIN=.dev OUT=/tmp/out bash scripts/gpu_check.sh [tests|sanitize|bench|all]...
# Logs and the benchmark JSON go to $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="${BIN:-build}"
OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tests="$BIN/replayssm_gpu_tests"
[[ -x "$tests" ]] || tests="$BIN/tests/replayssm_gpu_tests"
bench="$BIN/bench_decode"
[[ -x "$bench" ]] || bench="$BIN/bench/bench_decode"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
rc=0
for what in "${@:-all}"; do
  if [[ $what == tests || $what == all ]]; then
    echo "== GPU tests"
    /usr/bin/time -f "tests wall %e s" "$tests" --durations yes 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[|passed|failed|FAILED|wall|GPU tests" || true
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  fi
  if [[ $what == sanitize || $what == all ]]; then
    echo "== compute-sanitizer (short runs: REPLAYSSM_TEST_STEPS=${SAN_STEPS:-40})"
    for tool in memcheck racecheck; do
      REPLAYSSM_TEST_STEPS="${SAN_STEPS:-40}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$tests" > "$OUT/sanitizer_$tool.log" 2>&1
      code=$?
      echo "$tool exit $code: $(grep -E 'ERROR SUMMARY|test cases' "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
      [[ $code -eq 0 ]] || rc=1
    done
  fi
  if [[ $what == bench || $what == all ]]; then
    echo "== benchmarks"
    "$bench" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" --benchmark_repetitions="${BENCH_REPS:-3}" \
      --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench_decode.json" \
      --benchmark_out_format=json ${BENCH_FILTER:+--benchmark_filter="$BENCH_FILTER"} > "$OUT/bench.log" 2>&1 || rc=1
    grep -E "median" "$OUT/bench.log" | sed "s/_median//" | cut -c1-160
  fi
done
exit $rc
