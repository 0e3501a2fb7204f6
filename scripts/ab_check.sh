#!/usr/bin/env bash
# On a GPU machine, with the folder from scripts/pack_patch_bins.sh: runs the patched GPU tests,
# then HEAD's and the patch's benchmarks back to back in the same run (K = 16: the four model
# shapes at batch 1, 8 and 256, the bf16 single and pair schemes at 256; K = 8 of the sweep; the
# speculative round at T = 4), and prints the patch's times over HEAD's. About 6 minutes on an
# H200; TESTS=0 skips the tests (about 1.5 minutes); DECODE_FILTER and SPEC_FILTER replace the
# benchmark filters.
#   BIN=.dev OUT=/tmp/out bash scripts/ab_check.sh
# Writes to $OUT: gpu_tests.log, {base,patch}_decode.json, {base,patch}_spec.json, ab_table.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh" .dev
rc=0
if [[ ${TESTS:-1} == 1 ]]; then  # TESTS=0: the benchmarks only
  BIN="$BIN" OUT="$OUT" timeout "${TEST_TIMEOUT:-300}" bash scripts/gpu_check.sh tests | tail -n 5 || rc=1
fi
decode_filter=${DECODE_FILTER:-'^(copy/|(mamba2|gdn)/[^/]+/K16/.*batch:(1|8|256)/|sweep/[^/]+/K8/|precision/[^/]+/[^/]+/(bf16|fp32_bf16)/)'}
spec_filter=${SPEC_FILTER:-'/T4/'}
args=(--benchmark_min_time="${BENCH_MIN_TIME:-0.1}" --benchmark_repetitions="${BENCH_REPS:-3}"
      --benchmark_report_aggregates_only=true --benchmark_out_format=json)
for side in base patch; do
  prefix=""; [[ $side == base ]] && prefix="base_"
  "$BIN/${prefix}bench_decode" --benchmark_filter="$decode_filter" "${args[@]}" \
    --benchmark_out="$OUT/${side}_decode.json" > /dev/null 2>&1 || rc=1
  "$BIN/${prefix}bench_spec" --benchmark_filter="$spec_filter" "${args[@]}" \
    --benchmark_out="$OUT/${side}_spec.json" > /dev/null 2>&1 || rc=1
done
python3 - "$OUT" <<'PY' | tee "$OUT/ab_table.txt"
import os, sys
sys.path.insert(0, "bench")
from plot import load, us  # medians of repetitions (or single runs), times in us
out = sys.argv[1]
def medians(path):
    try:
        return {name: us(b) for name, b in load(path)[1].items()}
    except (OSError, ValueError) as e:
        print(f"{path}: {e}")
        return {}
for kind in ("decode", "spec"):
    base = medians(os.path.join(out, f"base_{kind}.json"))
    patch = medians(os.path.join(out, f"patch_{kind}.json"))
    print(f"| {kind} case | HEAD us | patch us | patch / HEAD |")
    print("| --- | --- | --- | --- |")
    for name in base:
        if name in patch:
            print(f"| {name} | {base[name]:.1f} | {patch[name]:.1f} | {patch[name] / base[name]:.3f} |")
PY
exit $rc
