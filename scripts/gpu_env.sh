# Sourced by the scripts that run prebuilt binaries on a GPU machine:
#   source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh" <default BIN>
# Moves to the repository root and sets BIN (the folder of binaries, default the argument), OUT
# (the log folder, default gpu_out, created) and the library path, so that the Google Benchmark
# library carried in BIN is found.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="${BIN:-$1}"
OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
