#!/usr/bin/env bash
# Twenty-eighth session, call 1 (2026-11-29): (1) the attention backward's fork fix
# (docs/perf/2026-11-29j-bwd-fork-errors.patch applied: fallible setup before the fork, the join on every path):
# the GPU suite beside compute-sanitizer memcheck of the attention tests (tests do not time; they may share the
# device); (2) the first kernel timelines (docs/perf/2026-11-29j-timeline-run.sh, its predictions in its header).
# Predicted: suite 14/14, memcheck clean (the patch moves host-side setup only; the kernels are unchanged).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29k-call1.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?") &
tools/sanitize_gpu.sh build-gpu "$out/l/san" 250 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention*'
wait
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
perf_pack
mkdir -p "$out/t"
timeout 330 bash docs/perf/2026-11-29j-timeline-run.sh "$out/t"
