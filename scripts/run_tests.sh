#!/usr/bin/env bash
# Configure, build and run the ReplaySSM test suite:
#   bash scripts/run_tests.sh [extra CMake configure arguments...]
# Build directory: $BUILD_DIR (default: build). Installs missing Debian build packages.
# scripts/run_demo.sh sources this file for the shared set-up functions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR="${BUILD_DIR:-build}"

# Install the Debian packages the build needs (cmake, ninja, g++; Catch2 v2 for the tests), if
# any are missing. What is already on PATH (or Catch2 v2's header) counts as present, so a
# non-Debian machine with the tools installed needs no apt-get.
replayssm_install_packages() {
  local want=(cmake ninja-build g++) missing=() pkg
  [[ ${REPLAYSSM_NEED_CATCH2:-1} == 1 ]] && want+=(catch2)
  for pkg in "${want[@]}"; do
    case $pkg in
      ninja-build) command -v ninja >/dev/null && continue ;;
      catch2) [[ -f /usr/include/catch2/catch.hpp || -f /usr/local/include/catch2/catch.hpp ]] &&
                continue ;;
      *) command -v "$pkg" >/dev/null && continue ;;
    esac
    missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "error: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
  fi
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  echo "Installing missing packages: ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}"
  if [[ " ${missing[*]} " == *" catch2 "* && ! -f /usr/include/catch2/catch.hpp ]]; then
    echo "error: the tests need Catch2 v2 (catch2/catch.hpp); this distribution's catch2" >&2
    echo "package is another major version (Ubuntu 24.04 ships v3): install Catch2 2.13." >&2
    exit 1
  fi
}

# Make nvcc available on PATH.
replayssm_find_nvcc() {
  if ! command -v nvcc >/dev/null; then
    if [[ -x /usr/local/cuda/bin/nvcc ]]; then
      export PATH="/usr/local/cuda/bin:$PATH"
    else
      echo "error: nvcc not found (neither on PATH nor in /usr/local/cuda/bin)." >&2
      echo "ReplaySSM needs the CUDA toolkit (nvcc) to build; install it first." >&2
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
  replayssm_configure -DREPLAYSSM_BUILD_TESTS=ON -DREPLAYSSM_BUILD_BENCHMARKS=ON "$@"
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
