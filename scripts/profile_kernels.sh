#!/usr/bin/env bash
# Nsight Compute reports of the kernels whose speed is open (bench/NOTES.md): the speculative
# verification (T = 4), the replay decode step fused and split (with a workspace), Mamba-2 H128
# and GDN Hv64 at batch 256, and the split_replay prototype's stream kernel beside them (NOTES
# v10: 277 us against the library's 351), one launch each after warm-up, clocks left alone.
# Needs ncu and the benchmark binaries (BIN, as for gpu_check.sh; the prototype binaries
# split_replay and split_replay_gdn in BIN too, if present):
#   BIN=.dev OUT=/tmp/out bash scripts/profile_kernels.sh
# Writes $OUT/ncu_kernels.txt (sections: speed of light, occupancy, launch, warp states,
# scheduler, memory workload).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh" build
find_bin() { [[ -x "$BIN/$1" ]] && echo "$BIN/$1" || echo "$BIN/bench/$1"; }
spec=$(find_bin bench_spec)
decode=$(find_bin bench_decode)
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section SchedulerStats --section MemoryWorkloadAnalysis)
log="$OUT/ncu_kernels.txt"
: > "$log"
# run_ncu LABEL KERNEL_REGEX COMMAND...: the first matching launch after 64 skipped ones.
run_ncu() {
  local label=$1 regex=$2; shift 2
  echo "===== $label" | tee -a "$log"
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$regex" --launch-skip 64 \
    --launch-count 1 "${sections[@]}" "$@" >> "$log" 2>&1 || echo "ncu failed for $label" | tee -a "$log"
}
# profile LABEL KERNEL_REGEX BINARY FILTER: a benchmark case.
profile() {
  run_ncu "$1" "$2" "$3" --benchmark_filter="$4" --benchmark_min_time=0.05 --benchmark_repetitions=1
}
# Kernel names carry the op: decode = opE1, verify = opE5 (include/replayssm/detail/ops.cuh).
profile "verify T=4, Mamba-2 H128" "item_kernel.*mamba2_agent.*opE5" "$spec" \
  "spec/mamba2/H128_G8/T4/replay_round"
profile "verify T=4, GDN Hv64" "item_kernel.*gdn_agent.*opE5" "$spec" \
  "spec/gdn/Hv64_Hk16/T4/replay_round"
# Decode: the agent's template arguments end <op, MaxDraft, Branch, Split>; the bench passes a
# workspace (split kernel, ...Lb0ELb1E) unless REPLAYSSM_BENCH_WORKSPACE=0 (fused, ...Lb0ELb0E).
for rule in "mamba2 mamba2/H128_G8" "gdn gdn/Hv64_Hk16"; do
  set -- $rule
  REPLAYSSM_BENCH_WORKSPACE=0 profile "decode replay step, fused, $2" \
    "item_kernel.*$1_agent.*opE1ELi1ELb0ELb0E" "$decode" "^$2/K16/replay_step/.*batch:256"
  profile "decode replay step, split, $2" "item_kernel.*$1_agent.*opE1ELi1ELb0ELb1E" "$decode" \
    "^$2/K16/replay_step/.*batch:256"
  profile "split step coefficient kernel, $2" "$1_coef_kernel" "$decode" \
    "^$2/K16/replay_step/.*batch:256"
done
# The prototypes' fastest stream kernels (bench/experiments/split_replay), batch 256.
[[ -x "$BIN/split_replay" ]] && run_ncu "prototype stream kernel B8, Mamba-2 H128" \
  "^_Z13stream_kernelILi8E" "$BIN/split_replay" 256
[[ -x "$BIN/split_replay_gdn" ]] && run_ncu "prototype stream kernel B128w16, GDN Hv64" \
  "^_Z13stream_kernelILi128ELi16E" "$BIN/split_replay_gdn" 256
grep -E "=====|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|No Eligible|Issued Warp" "$log" | head -160
