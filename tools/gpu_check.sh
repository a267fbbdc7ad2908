#!/usr/bin/env bash
# tools/gpu_check.sh — what a session with a GPU runs on the device machine, in one go
# (machine start-up costs minutes): the GPU specs and the GPU benchmark, logs into $OUT.
# Prepare here, then run it through the device tool:
#   make && bash ../shared/gpu/fetch-debs.sh lua-cjson
#   run(command = "bash tools/gpu_check.sh",
#       carry = [".gpu", "build/libcrescent.so", "build/libcrescent_cuda.so",
#                "build/crescent_cdef.h", "build/crescent_loop.so"])
# Args: "specs" or "bench" to run only one part.
set -u -o pipefail
cd "$(dirname "$0")/.."
source .gpu/setup.sh
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
status=0
export CRESCENT_TORCH_PYTHON=${CRESCENT_TORCH_PYTHON:-python3}
if [ "${1:-all}" != bench ]; then
  $BUSTED -o utfTerminal spec/cuda_*spec.lua 2>&1 | tee "$out/cuda_spec.txt" | tail -40 || status=1
fi
if [ "${1:-all}" != specs ]; then
  luajit bench/gpu_swav.lua 2>&1 | tee "$out/gpu_swav.txt" || status=1
fi
exit $status
