#!/usr/bin/env bash
# On the GPU machine, one call: build, every GPU test (four at a time), and compute-sanitizer
# memcheck of the GPU test programs (side by side). Usage: tools/session_gpu.sh OUT [MEMCHECK_TESTS]
# (MEMCHECK_TESTS: a space-separated list; default every test_gpu_* program). Needs .deps
# (../shared/device/prep.sh). CPUS (a taskset list) confines the build, tests and memcheck to those
# CPUs, leaving the others to whatever else runs in the same call (a fuzzing segment, say).
set -u
out=${1:-/tmp/stg-session}; mkdir -p "$out"
source .deps/env.sh
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
pin=()
[ -n "${CPUS:-}" ] && pin=(taskset -c "$CPUS")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/cmake.txt" 2>&1 &&
  "${pin[@]}" cmake --build build-gpu > "$out/build.txt" 2>&1 || { tail -40 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
(cd build-gpu && "${pin[@]}" timeout 420 ctest -L gpu -j4 --output-on-failure > "$out/ctest_gpu.txt" 2>&1; echo "ctest rc=$?" >> "$out/ctest_gpu.txt")
grep -E "tests passed|Failed|\*\*\*|ctest rc|Not Run" "$out/ctest_gpu.txt" | tail -25
echo "tests: $(( $(date +%s) - t0 )) s"
runs=()
for t in ${2:-$(cd build-gpu && ls test_gpu_*)}; do runs+=("memcheck:$t"); done
SAN_ARGS="--report-api-errors no" "${pin[@]}" tools/sanitize_gpu.sh build-gpu "$out" 240 "${runs[@]}"
echo "total: $(( $(date +%s) - t0 )) s"
