#!/usr/bin/env bash
# Configure, build and run the ReplaySSM test suite:
#   bash scripts/run_tests.sh [extra CMake configure arguments...]
# Build directory: $BUILD_DIR (default: build). Installs missing Debian build packages.
# scripts/run_demo.sh sources this file for the shared set-up functions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR="${BUILD_DIR:-build}"

# Install the Debian packages the build needs, if any are missing.
replayssm_install_packages() {
  local pkg missing=()
  for pkg in cmake ninja-build g++ catch2; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "error: missing packages (${missing[*]}) and no apt-get to install them" >&2
    exit 1
  fi
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  echo "Installing missing packages: ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}"
}

# Make nvcc available on PATH.
replayssm_find_nvcc() {
  if ! command -v nvcc >/dev/null; then
    if [[ -x /usr/local/cuda/bin/nvcc ]]; then
      export PATH="/usr/local/cuda/bin:$PATH"
    else
      echo "error: nvcc not found (neither on PATH nor in /usr/local/cuda/bin)." >&2
      echo "ReplaySSM needs the CUDA toolkit (nvcc + CCCL) to build; install it first." >&2
      exit 1
    fi
  fi
  echo "Using $(command -v nvcc): $(nvcc --version | tail -n 1)"
}

replayssm_configure() {
  replayssm_install_packages
  replayssm_find_nvcc
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
}

replayssm_have_gpu() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

main() {
  replayssm_configure "$@"
  cmake --build "$BUILD_DIR" --parallel "$(nproc)"
  local rc=0
  ctest --test-dir "$BUILD_DIR" --output-on-failure || rc=$?

  echo
  echo "==== ReplaySSM test summary ===="
  if replayssm_have_gpu; then
    echo "GPU: $(nvidia-smi -L | head -n 1) -- GPU tests were run."
  else
    echo "No GPU detected: the GPU tests (label 'gpu') are reported by CTest as"
    echo "'Not Run (Skipped)'; they are not failures. CPU tests and the package check ran."
  fi
  if [[ $rc -eq 0 ]]; then
    echo "Result: all tests that ran passed."
  else
    echo "Result: FAILURES (ctest exit code $rc); see the output above."
  fi
  return "$rc"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
