#!/usr/bin/env bash
# Twenty-ninth session, call 7 (about 4 minutes; run it under `timeout 500`). The tree: b65db50 with
# docs/perf/2026-11-29l-gv-loop.patch (call 6's loop of the split-k few-rows kernel) and an experiment's switch,
# STG_GV_SPLIT=2|4|8, forcing the split where k is split.
# Call 6: the loop (one wave of blocks, each group of warps looping over rows) moved the batch-1 step only 2.2192 ->
# 2.2143 ms (predicted ~2.12): w2 ended 16.9 us after the swiglu pair against 17.25. Its test runs had STG_NO_GV_LOOP set
# (empty), which the switch read as set: the loop's own test case did not run with the loop. Here: the tests with the
# switch unset and with it 1, racecheck of the loop; then the batch-1 step with k split 8 (the pick), 4 and 2 ways, each
# looping, and without the loop. The question: whether w2's ~3 TB/s is the short slices of each warp (5 vectors a lane
# in one trip, no loads in flight while it adds) rather than the blocks' starts and ends. Predicted: 4 ways (10 vectors
# a lane, two trips) -1 to -2% against 8; 2 ways (one wave of 640 blocks at 4 per SM: 1.2 rows a group) no better.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29l-call7.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
for v in unset 1; do
    if [ $v = unset ]; then e=(env -u STG_NO_GV_LOOP); else e=(env STG_NO_GV_LOOP=1); fi
    (cd build-gpu && timeout 250 "${e[@]}" ./test_gpu_mm_attn > "$out/l/test_gpu_mm_attn_$v.txt" 2>&1
     echo "test_gpu_mm_attn (STG_NO_GV_LOOP $v): $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_mm_attn_$v.txt" | tr '\n' ' ')")
done
grep -E "blocks" "$out/l/test_gpu_mm_attn_unset.txt" | head -6
(cd build-gpu && timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1
 echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample.txt" | tr '\n' ' ')")
STG_GPU_TEST_SMALL=1 tools/sanitize_gpu.sh build-gpu "$out/l/san" 240 racecheck:test_gpu_mm_attn:'*few_rows*'
say "tests done"
dec_prompt
dec_ab build-gpu/stg "env STG_NO_GV_LOOP=1 build-gpu/stg" "env STG_GV_SPLIT=4 build-gpu/stg" "env STG_GV_SPLIT=2 build-gpu/stg" \
    "env STG_GV_SPLIT=4 STG_NO_GV_LOOP=1 build-gpu/stg" -- 1
say "decode done"
perf_pack
