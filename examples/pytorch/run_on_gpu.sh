#!/usr/bin/env bash
# Runs the PyTorch binding's tests on a GPU machine (torch, nvcc and ninja installed; no network
# needed): JIT-builds the extension for sm_90 and runs the pytest. From the repository root:
#   bash examples/pytorch/run_on_gpu.sh [extra pytest args...]
# With OUT set (the lent GPU machine), the log also goes to $OUT/pytorch_tests.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export REPLAYSSM_CUDA_ARCH="${REPLAYSSM_CUDA_ARCH:-sm_90}"
export REPLAYSSM_VERBOSE_BUILD="${REPLAYSSM_VERBOSE_BUILD:-1}"  # show the nvcc command and warnings
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export PYTHONUNBUFFERED=1
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
log="${OUT:-/tmp}/pytorch_tests.log"
mkdir -p "$(dirname "$log")"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
      "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
  nvcc --version | tail -1
  python3 -m pytest -q -s -rs -p no:cacheprovider test_replayssm_torch.py "$@"
} 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "exit $rc (log: $log)"
exit "$rc"
