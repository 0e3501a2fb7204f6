#!/usr/bin/env bash
# Builds the GPU binaries twice, from HEAD and from HEAD with a kernel patch of bench/experiments
# applied (in a temporary git worktree), into one folder to carry to a GPU machine, so that one
# device call can test the patch and measure it against HEAD in the same run:
#   bash scripts/pack_patch_bins.sh bench/experiments/<name>.patch [folder, default .dev]
# The folder then holds the patched replayssm_gpu_tests, bench_decode, bench_spec and examples,
# and HEAD's benchmarks as base_bench_decode and base_bench_spec. There: `BIN=.dev OUT=$OUT bash
# scripts/ab_check.sh` (tests, then both sides' benchmarks and a table; ~6 minutes), or by hand:
#   BIN=.dev OUT=$OUT bash scripts/gpu_check.sh tests
#   for b in base_bench_decode bench_decode; do LD_LIBRARY_PATH=.dev .dev/$b \
#     --benchmark_filter='^(mamba2|gdn)/[^/]+/K16/.*batch:256' --benchmark_min_time=0.1 \
#     --benchmark_out=$OUT/$b.json --benchmark_out_format=json; done
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
patch=$(realpath "$1")
dest=$(realpath -m "${2:-.dev}")
wt="$(mktemp -d)/wt"
git worktree add -q --detach "$wt" HEAD
trap 'git worktree remove --force "$wt"' EXIT
git -C "$wt" apply "$patch"
bash scripts/pack_gpu_bins.sh "$dest"  # HEAD
for b in bench_decode bench_spec; do mv "$dest/$b" "$dest/base_$b"; done
(cd "$wt" && BUILD_DIR=build bash scripts/pack_gpu_bins.sh "$dest")  # patched, over HEAD's tests
du -sh "$dest"
