#!/usr/bin/env bash
# Runs the GPU test suite, compute-sanitizer and the benchmarks on a machine with a GPU, from
# binaries built elsewhere (BIN, default build) when that machine cannot build them itself:
#   BIN=.dev OUT=/tmp/out bash scripts/gpu_check.sh [tests|sanitize|examples|pytorch|bench|all]...
# Test cases run as parallel processes (JOBS, default: the number of cores): the float64
# reference on the host is the slow part. JOB_FILTER / JOB_EXCLUDE (extended regular expressions)
# keep / drop jobs by their line ("*type" for a templated case's type, the case name for the
# others, "case<TAB>section" for a speculative section), to split the suite over two calls.
# Logs and the benchmark JSON go to $OUT (8 files at most, what the lent machine returns).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh" build
JOBS="${JOBS:-$(nproc)}"
tests="$BIN/replayssm_gpu_tests"
[[ -x "$tests" ]] || tests="$BIN/tests/replayssm_gpu_tests"
bench="$BIN/bench_decode"
[[ -x "$bench" ]] || bench="$BIN/bench/bench_decode"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv
tmp=$(mktemp -d)

# The sections of the speculative test cases (tests/gpu/test_speculative.cu: the chain and tree
# cases and the captured round), "case<TAB>section" per line: at full length each section runs for
# minutes, so they run as processes of their own.
spec_sections() {
  python3 - "$(dirname "${BASH_SOURCE[0]}")/../tests/gpu/test_speculative.cu" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
cases = list(re.finditer(r'TEST_CASE\(\s*"([^"]+)"', src))
for k, m in enumerate(cases):
    if not m.group(1).startswith(("speculative rounds verify", "token trees give",
                                  "a captured speculative round")):
        continue
    body = src[m.end():cases[k + 1].start() if k + 1 < len(cases) else len(src)]
    # (a name split over adjacent string literals is joined, as the compiler joins it)
    for lits in re.findall(r'SECTION\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', body):
        print(m.group(1) + "\t" + "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', lits)))
PY
}

# run_cases LOG PREFIX...: every test case in its own process (the speculative chain and tree
# cases: every section), JOBS at a time. Each process's output is appended to LOG as soon as it
# ends (under a lock), so a run cut off by a time limit still returns what finished.
run_cases() {
  local log=$1; shift
  local i=0 job
  : > "$log"
  # Jobs "filter<TAB>section" (no section: the whole filter). The speculative sections first,
  # then the other cases last listed first (the precision cases, the longest of them), so that a
  # run under a time limit is not left waiting on them at the end.
  # A process per filter: a templated case is selected by its type's name (the part after
  # " - "), which selects every test case over that type at once, so each filter runs once.
  local sections
  # (a parse that fails, e.g. the source not found from a copied script, must stop the run: an
  # empty job list would report "0 processes passed, 0 failed" and succeed)
  sections=$(spec_sections) || { echo "error: cannot list the speculative sections" >&2; return 1; }
  mapfile -t jobs_list < <({ echo "$sections"
                            "$tests" --list-test-names-only | sed '/^$/d' | tac |
                              grep -vxF -f <(echo "$sections" | cut -f1 | sort -u) |
                              sed 's/.* - //; s/^/*/' | awk '!seen[$0]++'; } |
                           grep -E -- "${JOB_FILTER:-.}" | grep -vE -- "${JOB_EXCLUDE:-^\$^}")
  for job in "${jobs_list[@]}"; do
    [[ -z $job ]] && continue
    while [[ $(jobs -r | wc -l) -ge $JOBS ]]; do sleep 0.2; done
    local filter=${job%%$'\t'*} section=""
    [[ $job == *$'\t'* ]] && section=${job#*$'\t'}
    ( if [[ -n $section ]]; then
        # (-w NoAssertions: a section name that matches no section runs none and fails)
        "$@" "$tests" "$filter" -c "$section" -w NoAssertions --durations yes > "$tmp/case_$i.log" 2>&1
      else
        "$@" "$tests" "$filter" --durations yes > "$tmp/case_$i.log" 2>&1
      fi
      rc=$?
      # Catch2 exits 0 when a filter matches nothing: that is a failure of this script.
      grep -q "No test cases matched" "$tmp/case_$i.log" && rc=8
      echo "exit $rc :: $filter${section:+ :: $section}" >> "$tmp/case_$i.log"
      flock "$log" cat "$tmp/case_$i.log" >> "$log"
      rm -f "$tmp/case_$i.log" ) &
    i=$((i + 1))
  done
  wait
  local failed passed
  failed=$(grep -c "^exit [^0]" "$log")
  passed=$(grep -c '^exit 0' "$log")
  echo "$passed processes passed, $failed failed ($log)"
  [[ $failed -eq 0 && $passed -gt 0 ]]  # a run with no job ran no test: a failure
}

rc=0
for what in "${@:-all}"; do
  if [[ $what == tests || $what == all ]]; then
    echo "== GPU tests"
    SECONDS=0
    run_cases "$OUT/gpu_tests.log" || rc=1
    grep -E "^\[|^exit [^0]|FAILED" "$OUT/gpu_tests.log" | cut -c1-200
    echo "tests wall ${SECONDS}s"
  fi
  if [[ $what == sanitize || $what == all ]]; then
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer $tool (REPLAYSSM_TEST_STEPS=${SAN_STEPS:-24})"
      SECONDS=0
      REPLAYSSM_TEST_STEPS="${SAN_STEPS:-24}" run_cases "$OUT/sanitizer_$tool.log" \
        compute-sanitizer --tool "$tool" --error-exitcode 9 || rc=1
      grep -E "ERROR SUMMARY" "$OUT/sanitizer_$tool.log" | sort | uniq -c
      echo "$tool wall ${SECONDS}s"
    done
  fi
  if [[ $what == examples || $what == all ]]; then
    for demo in quickstart_mamba2 quickstart_gdn graph_serving; do
      exe="$BIN/$demo"; [[ -x "$exe" ]] || exe="$BIN/examples/$demo"
      echo "== $demo"; "$exe" 2>&1 | tee -a "$OUT/examples.log" | tail -n 3 || rc=1
      [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    done
    exe="$BIN/hybrid_stack_decode"; [[ -x "$exe" ]] || exe="$BIN/examples/hybrid_stack_decode"
    if [[ -x "$exe" ]]; then
      for rule in mamba2 gdn; do
        echo "== hybrid_stack_decode $rule (${HYBRID_TOKENS:-1000} tokens)"
        "$exe" "$rule" "" 256 "${HYBRID_TOKENS:-1000}" 2>&1 | tee -a "$OUT/examples.log" || rc=1
      done
    fi
  fi
  if [[ $what == pytorch || $what == all ]]; then
    echo "== PyTorch binding (examples/pytorch)"
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
      OUT="$OUT" bash examples/pytorch/run_on_gpu.sh > /dev/null 2>&1 || rc=1
      tail -n 3 "$OUT/pytorch_tests.log"
    else
      echo "torch with CUDA not available: skipped"
    fi
  fi
  if [[ $what == bench || $what == all ]]; then
    echo "== benchmarks"
    "$bench" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" --benchmark_repetitions="${BENCH_REPS:-3}" \
      --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench_decode.json" \
      --benchmark_out_format=json ${BENCH_FILTER:+--benchmark_filter="$BENCH_FILTER"} > "$OUT/bench.log" 2>&1 || rc=1
    spec="$BIN/bench_spec"; [[ -x "$spec" ]] || spec="$BIN/bench/bench_spec"
    if [[ -x "$spec" ]]; then
      "$spec" --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" --benchmark_repetitions="${BENCH_REPS:-3}" \
        --benchmark_report_aggregates_only=true --benchmark_out="$OUT/bench_spec.json" \
        --benchmark_out_format=json >> "$OUT/bench.log" 2>&1 || rc=1
    fi
    grep -E "median" "$OUT/bench.log" | sed -e "s/_median//" -e "s/manual_time//" -e "s/bytes_per_step=[^ ]*//" | tr -s ' ' | cut -c1-150
  fi
done
rm -rf "$tmp"
exit $rc
