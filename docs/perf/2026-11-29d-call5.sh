#!/usr/bin/env bash
# 2026-11-29 (twenty-first session), call 5: the landed tree (head dim 128's dk/dv kernel at 224 / 56 registers; the
# ring experiments reverted): the GPU suite, memcheck and racecheck of the attention tests, then, while the clock
# allows, the 2.7B ctx 1024 batch 4 row beside the reduce-overhead peer (never run at that row; the default-compile
# peer was slower in every row where both ran).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29d-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
timeout 120 tools/sanitize_gpu.sh build-gpu "$out/l/san" 110 memcheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_mm_attn:'*attention*'
say "sanitizers done"
step_row 2.7B 1024 "cg" 250
perf_pack
