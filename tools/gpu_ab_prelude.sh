#!/usr/bin/env bash
# The start of a device call that checks and times a change against the tree before it, from the
# repository root on the GPU machine: builds build-gpu (everything) and, when .old holds the tree
# before (git archive HEAD | tar -x -C .old), .old/build-ab (stg only) beside it; then the
# gpu-labelled tests beside the compute-sanitizer runs given (tools/sanitize_gpu.sh), and one summary.
# Usage: tools/gpu_ab_prelude.sh OUT [TOOL:PROGRAM[:PATTERN[:SKIP]]...]   (after source .deps/env.sh)
# Logs in OUT (cmake*.txt, build*.txt, ctest.txt, sanitize.txt and one file per sanitizer run).
# Exits 1 when a build fails (its last lines printed), 0 otherwise: test and sanitizer failures are
# reported in the summary, and the timings after it still run.
set -u
out=${1:?usage: tools/gpu_ab_prelude.sh OUT [TOOL:PROGRAM...]}; shift
mkdir -p "$out" || exit 1
t0=$(date +%s)
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
if [ -d .old ]; then
    (cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/cmake_old.txt" 2>&1 &&
        cmake --build build-ab --target stg > "$out/build_old.txt" 2>&1; echo $? > "$out/build_old.rc") &
fi
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-gpu $cfg > "$out/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/build.txt" 2>&1) || { tail -30 "$out/build.txt"; wait; exit 1; }
wait
if [ -d .old ] && [ "$(cat "$out/build_old.rc" 2>/dev/null)" != 0 ]; then tail -30 "$out/build_old.txt"; exit 1; fi
echo "[$(($(date +%s) - t0)) s] built$([ -d .old ] && echo " (and .old)")"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd build-gpu && timeout 280 ctest -L gpu -j4 --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/ctest.txt") &
[ $# -gt 0 ] && tools/sanitize_gpu.sh build-gpu "$out" 250 "$@" > "$out/sanitize.txt"
wait
echo "[$(($(date +%s) - t0)) s] checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/ctest.txt"
[ $# -gt 0 ] && cat "$out/sanitize.txt"
exit 0
