#!/usr/bin/env bash
# The whole gpu-labelled suite on the GPU machine, then compute-sanitizer memcheck of every GPU test
# program, the programs side by side (memcheck checks accesses, not timing; tools/sanitize_gpu.sh),
# then racecheck and synccheck (tools/race_gpu.sh). NCCL's own
# cudaFuncGetAttributes probes are API errors, not memory errors: not reported.
# Usage: tools/final_gpu.sh BUILD_DIR [OUT_DIR]
set -u
B=${1:-build-gpu}; O=${2:-/tmp}
export NCCL_NVLS_ENABLE=0
(cd $B && ctest -L gpu --output-on-failure 2>&1 | tail -9)
runs=()
for t in $(cd "$B" && ls test_gpu_*); do runs+=("memcheck:$t"); done
SAN_ARGS="--report-api-errors no" tools/sanitize_gpu.sh "$B" "$O" 300 "${runs[@]}"

tools/race_gpu.sh "$B" "$O"
