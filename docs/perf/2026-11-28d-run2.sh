#!/usr/bin/env bash
# 2026-11-28, eleventh session, call 2 (GPU machine, repository root, carrying .deps and peer/):
# the GPU suite after test_gpu_ops' fix (an in-place case only where the op has the aliased input:
# embedding_bwd's addend is optional) with its new addend cases, then the strongest-peer rows of
# the large model (tools/speed_run.sh, resumable) for docs/PERF.md.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" || exit 1
grep -E "embedding_bwd \+ addend|FAILED" "$out/l/ctest.txt" | head -20
timeout ${SPEED_S:-430} tools/speed_run.sh build-gpu/stg "$out/speed" large
python3 tools/speed_table.py "$out/speed"
tar -czf "$out/logs.tgz" -C "$out" l speed
