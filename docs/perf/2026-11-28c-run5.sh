#!/usr/bin/env bash
# 2026-11-28 (tenth session), device call 5 (carry .deps, peer): docs/perf/2026-11-28c-run5.sh OUT
# Issue 28's table, the medium and large groups (tools/speed_run.sh; the tree of call 4, c39b4b7).
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF > "$out/l/cmake.txt" 2>&1 &&
 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1) || { tail -30 "$out/l/build.txt"; exit 1; }
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${SPEED_TIMEOUT:-520}" tools/speed_run.sh build-gpu/stg "$out/l/speed" medium,large
say "speed_run exit $?"
python3 tools/speed_table.py "$out/l/speed"
tar -czf "$out/logs.tgz" -C "$out/l" .
