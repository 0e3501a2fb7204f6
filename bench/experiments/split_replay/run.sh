#!/usr/bin/env bash
# The split-replay prototypes in one device call (NOTES v9, Next -5).
#   bash bench/experiments/split_replay/run.sh build [folder, default .dev3]   (here: nvcc, no GPU)
#   bash bench/experiments/split_replay/run.sh run   [folder]                  (on the GPU machine)
# build: both prototypes, plus the library's bench_decode and the Google Benchmark library, so
# the library's replay step is measured in the same run. run: each prototype at batch 256, 64 and
# 512 (seconds each), then the library's eager / replay step / window rows of both rules at batch
# 256; logs go to $OUT (default gpu_out). Carry the folder (`carry: [".dev3"]`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
mode="${1:?build or run}"
dir="${2:-.dev3}"
here=bench/experiments/split_replay
if [[ $mode == build ]]; then
  set -e
  mkdir -p "$dir"
  for p in split_replay split_replay_gdn; do
    nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -o "$dir/$p" "$here/$p.cu" &
  done
  source scripts/run_tests.sh  # the shared set-up functions (main does not run when sourced)
  replayssm_configure
  cmake --build "$BUILD_DIR" --target bench_decode --parallel "$(nproc)"
  wait
  cp "$BUILD_DIR/bench/bench_decode" "$dir/"
  lib=$(ldconfig -p | awk '/libbenchmark.so.1debian/ {print $NF; exit}')
  [[ -n "$lib" ]] && cp "$lib" "$dir/"
  ls -la "$dir"
  exit 0
fi
BIN="$dir"
source scripts/gpu_env.sh "$dir"
rc=0
for p in split_replay split_replay_gdn; do
  for batch in 256 64 512; do
    timeout 60 "$dir/$p" "$batch" > "$OUT/${p}_$batch.log" 2>&1
    r=$?
    echo "$p $batch: exit $r" | tee -a "$OUT/summary.log"
    [[ $r -eq 0 ]] || rc=1
  done
done
timeout 60 "$dir/bench_decode" --benchmark_min_time=0.1 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true \
  --benchmark_filter='^(copy/|(mamba2|gdn)/(H128_G8|Hv64_Hk16)/K16/(eager|replay_step|replay_window_avg)/.*batch:256/)' \
  > "$OUT/library_b256.log" 2>&1 || rc=1
grep median "$OUT/library_b256.log" | cut -c1-110 | tee -a "$OUT/summary.log"
exit $rc
