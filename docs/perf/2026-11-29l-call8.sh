#!/usr/bin/env bash
# Twenty-ninth session, call 8 (about 5 minutes; run it under `timeout 340`), the session's last device time. The tree:
# b65db50 with the loop of the split-k few-rows kernel and its pick (ops/matmul/cuda.cu, mm_gv_pick_m: the least split
# giving each warp a full trip and two waves of row groups; the 2.7B model's w2 at 4 ways, looping). The GPU suite, memcheck
# of the few-rows tests, then the decode step at batches 1 and 64 against STG_NO_GV_LOOP=1 (a block a group and the wave
# rule alone: HEAD's behaviour). Predicted (call 7): batch 1 2.217 -> ~2.192 ms; batch 64 unchanged (from 2 rows the
# tensor-core kernels run every product).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29l-call8.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 200 ctest -L gpu --timeout 190 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
STG_GPU_TEST_SMALL=1 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 memcheck:test_gpu_mm_attn:'*few_rows*'
say "tests done"
dec_prompt
dec_ab build-gpu/stg "env STG_NO_GV_LOOP=1 build-gpu/stg" -- 1 64
say "decode done"
perf_pack
