#!/usr/bin/env bash
# Nsight Compute reports of the kernels whose speed is open (bench/NOTES.md v11, list below), one
# launch each after warm-up, clocks left alone. Needs ncu and the benchmark binaries (BIN, as
# for gpu_check.sh):
#   BIN=.dev OUT=/tmp/out [PROFILE_SET=precision|verify] bash scripts/profile_kernels.sh
# Writes $OUT/ncu_kernels.txt (sections: speed of light, occupancy, launch, warp states,
# scheduler, memory workload).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh" build
find_bin() { [[ -x "$BIN/$1" ]] && echo "$BIN/$1" || echo "$BIN/bench/$1"; }
spec=${SPEC_BIN:-$(find_bin bench_spec)}  # SPEC_BIN: another bench_spec (e.g. base_bench_spec)
decode=$(find_bin bench_decode)
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis)
log="$OUT/ncu_kernels.txt"
: > "$log"
# run_ncu LABEL KERNEL_REGEX COMMAND...: the first matching launch after $skip skipped ones.
# bench_spec warms up with 2 K = 32 rounds before its timed loop, and in the verify_nofold /
# verify_fold rows the warm-up never accepts, so every cursor stays 0 there: profile those rows
# at skip 32 (the first timed launch, at K - 1 or K buffered steps), never inside the warm-up
# (v15: at skip 16 the Mamba-2 verification measured 406 us with no buffered steps, 627 with 15).
skip=16
run_ncu() {
  local label=$1 regex=$2; shift 2
  echo "===== $label" | tee -a "$log"
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$regex" --launch-skip "$skip" \
    --launch-count 1 "${sections[@]}" "$@" >> "$log" 2>&1 || echo "ncu failed for $label" | tee -a "$log"
}
# profile LABEL KERNEL_REGEX BINARY FILTER: a benchmark case.
profile() {
  run_ncu "$1" "$2" "$3" --benchmark_filter="$4" --benchmark_min_time=0.05 --benchmark_repetitions=1
}
# Kernel names carry the op: eager = opE0, decode = opE1, verify = opE5
# (include/replayssm/detail/ops.cuh). The open questions of bench/NOTES.md v11, Mamba-2 H128 and
# GDN Hv64 at batch 256, K = 16: why the commit step is 1.4-1.6x the eager step for the same
# state bytes (the commit_step case: every row commits, in the stream kernel's fused branch for
# Mamba-2), why a 16-bit replay step takes 83% of fp32's time for half the bytes, and where the
# verification's time goes at T = 4.
m=mamba2/H128_G8 g=gdn/Hv64_Hk16
# PROFILE_SET=precision: only the open questions of issue 5 (NOTES v18), with source counters:
# the 16-bit replay step (latency-bound), the 8-bit one (issue-bound), and the pair's commit
# step against the fp32 commit (the pair's windows wait on it). ~1 minute.
if [[ ${PROFILE_SET:-all} == precision ]]; then
  sections+=(--section SourceCounters --section InstructionStats)
  profile "replay step bf16, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^precision/$m/bf16/replay_step/"
  profile "replay step fp32+fp8 pair, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^precision/$m/fp32_fp8/replay_step/"
  profile "commit step fp32+bf16 pair, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^precision/$m/fp32_bf16/commit_step/"
  profile "commit step fp32, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^$m/K16/commit_step/.*batch:256/"
  profile "commit step fp32+bf16 pair, GDN Hv64" "gdn_stream_agent" "$decode" "^precision/$g/fp32_bf16/commit_step/"
  grep -E "=====|Duration|Memory Throughput|Registers Per|Stall|No Eligible|Issued Warp|Executed Instructions " "$log"
  exit 0
fi
# PROFILE_SET=verify: the split verifications' readouts at the first timed round of the
# verify_nofold rows (15 buffered steps; each warm-up round launches one coefficient / sweep grid
# and one readout, so the readout regex skips 32 launches: NOTES v24), with source counters, next
# to the decode stream kernels that read the same state at ~90% of the copy ceiling (NOTES Next
# -22 (a): what does a readout do per byte that the stream kernel does not?). ~2 minutes.
if [[ ${PROFILE_SET:-all} == verify ]]; then
  sections+=(--section SourceCounters --section InstructionStats)
  skip=32
  profile "split verify T=4 no fold: readout, Mamba-2 H128" "mamba2_verify_readout_kernel" "$spec" "^spec/${m}_ws/T4/verify_nofold"
  profile "split verify T=4 no fold: readout, GDN Hv64" "gdn_verify_readout_kernel" "$spec" "^spec/${g}_ws/T4/verify_nofold"
  skip=16
  profile "replay step fp32, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^$m/K16/replay_step/.*batch:256/"
  profile "replay step fp32, GDN Hv64" "gdn_stream_agent" "$decode" "^$g/K16/replay_step/.*batch:256/"
  grep -E "=====|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|No Eligible|Issued Warp|Executed Instructions " "$log"
  exit 0
fi
profile "eager step, Mamba-2 H128" "item_kernel.*12mamba2_agent.*opE0" "$decode" "^$m/K16/eager/.*batch:256/"
profile "commit step, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^$m/K16/commit_step/.*batch:256/"
profile "replay step fp32, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^$m/K16/replay_step/.*batch:256/"
profile "replay step bf16, Mamba-2 H128" "mamba2_stream_agent" "$decode" "^precision/$m/bf16/replay_step/"
skip=32
profile "verify T=4, Mamba-2 H128" "item_kernel.*mamba2_agent.*opE5" "$spec" "spec/$m/T4/replay_round"
# The verification alone without folds (every row at K - 1 buffered steps), with source counters:
# where its instructions and stalls are (v14: instruction-bound, ~6x the authors' per (row, head)).
sections+=(--section SourceCounters --section InstructionStats)
profile "verify T=4 no fold, Mamba-2 H128" "item_kernel.*mamba2_agent.*opE5" "$spec" "spec/$m/T4/verify_nofold"
profile "verify T=4 no fold, GDN Hv64" "item_kernel.*gdn_agent.*opE5" "$spec" "spec/$g/T4/verify_nofold"
sections=("${sections[@]:0:12}")
skip=16
profile "eager step, GDN Hv64" "item_kernel.*gdn_agent.*opE0" "$decode" "^$g/K16/eager/.*batch:256/"
profile "commit step, GDN Hv64" "gdn_stream_agent" "$decode" "^$g/K16/commit_step/.*batch:256/"
profile "replay step fp32, GDN Hv64" "gdn_stream_agent" "$decode" "^$g/K16/replay_step/.*batch:256/"
profile "replay step bf16, GDN Hv64" "gdn_stream_agent" "$decode" "^precision/$g/bf16/replay_step/"
skip=32
profile "verify T=4, GDN Hv64" "item_kernel.*gdn_agent.*opE5" "$spec" "spec/$g/T4/replay_round"
# The split verification (bench/experiments/split_verify.patch, 55% slower than the fused one at
# T = 4): its two kernels, if BIN holds sv_bench_spec built from that patch.
if [[ -x "$BIN/sv_bench_spec" ]]; then
  profile "split verify T=4: coefficient kernel, Mamba-2 H128" "mamba2_verify_coef_kernel" \
    "$BIN/sv_bench_spec" "spec/$m/T4/replay_round"
  profile "split verify T=4: stream verify grid, Mamba-2 H128" "mamba2_stream_verify_kernel" \
    "$BIN/sv_bench_spec" "spec/$m/T4/replay_round"
fi
grep -E "=====|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|No Eligible|Issued Warp" "$log" | head -160
