#!/usr/bin/env bash
# The order in which a kernel issues its global loads, shared stores, barriers and atomics, from
# its SASS: where the compiler really put the state loads relative to the cursor read and the
# buffer staging (bench/NOTES.md, v6). CPU only; installs cuobjdump and nvdisasm from PyPI if it is missing.
#   bash scripts/sass_order.sh FILE.cu [KERNEL_REGEX]     (default regex: item_kernel)
# FILE.cu instantiates the launches to look at, e.g.
#   #include <replayssm/replayssm.cuh>
#   using pol = replayssm::replay_policy<replayssm::rules::mamba2<64, 128, __nv_bfloat16>, 16, 16>;
#   replayssm::result f(const replayssm::mamba2_params<pol>& p) { return replayssm::decode_step(p, nullptr); }
# Prints, per kernel: line, instruction (LDG.E.EF.128 = state tile, LDG.E.128.CONSTANT = buffer
# rows, LDG.E.CONSTANT = slot index, STS = staging, BAR = block barrier, ATOM/RED = arrivals).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=$1
regex=${2:-item_kernel}
tools="${REPLAYSSM_CUDA_TOOLS:-/tmp/replayssm_cuda_tools}"
if ! command -v cuobjdump >/dev/null; then
  [[ -x "$tools/nvidia/cu13/bin/cuobjdump" && -x "$tools/nvidia/cu13/bin/nvdisasm" ]] ||
    python3 -m pip install -q --target "$tools" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null 2>&1
  export PATH="$tools/nvidia/cu13/bin:$PATH"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -std=c++17 -O3 -arch=sm_90 -Iinclude -cubin -o "$work/k.cubin" "$src"
cuobjdump -sass "$work/k.cubin" > "$work/k.sass"
awk -v re="$regex" '
  /Function :/ { on = ($3 ~ re); if (on) print "== " substr($3, 1, 160); next }
  on && /(LDG|STG|STS|BAR|ATOM|RED|STL|LDL|EXIT)/ {
    line = $0; gsub(/ +/, " ", line); sub(/^ /, "", line); sub(/ ;.*/, "", line); print "  " line
  }' "$work/k.sass"
