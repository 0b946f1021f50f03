#!/usr/bin/env bash
# Twenty-ninth session, call 6 (about 4 minutes; run it under `timeout 500`).
# Call 4's timeline (the batch-1 step, 68.0 us a layer): the 2.7B model's w2 (2560 rows of 10240, k split 8 ways: a
# block a row, 2560 blocks, 5 vectors a lane) ends 17.3 us after the swiglu pair, 3.0 TB/s, against 3.9 for that pair;
# call 3's ncu had it at 2.57 TB/s alone, 42% occupancy achieved of 50. Each block loads its row in one trip and spends
# the rest of its life starting, adding across its warps and ending. The change: with k split, one wave of resident
# blocks (528 on an H200), each group of warps looping over rows the grid apart (5 for w2), the next row's vectors
# loaded while the last one's sums cross the warp, one barrier at the end (STG_NO_GV_LOOP=1: a block a row, as before).
# Predicted: w2 ~17.3 -> ~14.5 us; the batch-1 step 2.205 -> ~2.12 ms; batch 64 (tensor-core few-rows kernels from 2
# rows: unchanged) within noise. Tests: test_gpu_mm_attn (its new case loops over 2-3 rows a group with m = 4, a bias
# and an addend) both ways, test_gpu_sample, memcheck and racecheck of the few-rows tests.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29l-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
for v in "" 1; do
    (cd build-gpu && STG_NO_GV_LOOP=$v timeout 250 ./test_gpu_mm_attn > "$out/l/test_gpu_mm_attn_$v.txt" 2>&1
     echo "test_gpu_mm_attn (STG_NO_GV_LOOP=$v): $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_mm_attn_$v.txt" | tr '\n' ' ')")
done
grep -E "10240x10240|2000x10240|10240 . |blocks" "$out/l/test_gpu_mm_attn_.txt" | head -8
(cd build-gpu && timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1
 echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample.txt" | tr '\n' ' ')")
STG_GPU_TEST_SMALL=1 tools/sanitize_gpu.sh build-gpu "$out/l/san" 240 memcheck:test_gpu_mm_attn:'*few_rows*' racecheck:test_gpu_mm_attn:'*few_rows*'
say "tests done"
dec_prompt
dec_ab build-gpu/stg "env STG_NO_GV_LOOP=1 build-gpu/stg" -- 1 64
say "decode done"
tl_lib && { dec[11]=64; tl loop_b1 build-gpu/stg "${dec[@]}" --batch 1
    python3 tools/timeline.py "$out/l/tl_loop_b1.tsv.gz" --period 'mm_gv_glu' | tail -1
    python3 tools/timeline.py "$out/l/tl_loop_b1.tsv.gz" --list 0.5:0.64 | grep -E "^ +[0-9]+\.[0-9]+ +[0-9]" | awk '{print $1, $2, $3, $7, $13}'; }
perf_pack
