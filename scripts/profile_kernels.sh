#!/usr/bin/env bash
# Nsight Compute reports of the kernels whose speed is open (bench/NOTES.md): the speculative
# verification (T = 4) and the replay decode step, Mamba-2 H128 and GDN Hv64 at batch 256, one
# launch each after warm-up, clocks left alone. Needs ncu and the benchmark binaries (BIN, as for
# gpu_check.sh):
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
# profile LABEL KERNEL_REGEX BINARY FILTER: the first matching launch after 64 skipped ones.
profile() {
  echo "===== $1" | tee -a "$log"
  ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$2" --launch-skip 64 --launch-count 1 \
    "${sections[@]}" "$3" --benchmark_filter="$4" --benchmark_min_time=0.05 \
    --benchmark_repetitions=1 >> "$log" 2>&1 || echo "ncu failed for $1" | tee -a "$log"
}
# Kernel names carry the op: decode = opE1, verify = opE5 (include/replayssm/detail/ops.cuh).
profile "verify T=4, Mamba-2 H128" "item_kernel.*mamba2_agent.*opE5" "$spec" \
  "spec/mamba2/H128_G8/T4/replay_round"
profile "verify T=4, GDN Hv64" "item_kernel.*gdn_agent.*opE5" "$spec" \
  "spec/gdn/Hv64_Hk16/T4/replay_round"
profile "decode replay step, Mamba-2 H128" "item_kernel.*mamba2_agent.*opE1" "$decode" \
  "^mamba2/H128_G8/K16/replay_step/.*batch:256"
profile "decode replay step, GDN Hv64" "item_kernel.*gdn_agent.*opE1" "$decode" \
  "^gdn/Hv64_Hk16/K16/replay_step/.*batch:256"
grep -E "=====|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|No Eligible|Issued Warp" "$log" | head -80
