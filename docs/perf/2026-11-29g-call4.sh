#!/usr/bin/env bash
# 2026-11-29 (twenty-fourth session), call 4: the second form with a cost rule, and the fix of call 3's failure.
# Call 3 (each block writes its rows of x g to shared memory and takes their 1 / rms first, mm_gv_norm_rows), A/B in
# one binary: 2.7B batch 1 2.404 -> 2.347 ms (-2.4%), Llama 3.2-1B batch 1 0.990 -> 0.911 (-8%), batch 8 7.194 -> 8.093
# (+12.5%: w1 / w3's 1280-2560 blocks each read 8 rows of x, as many bytes as W). Its test failed: rows of exactly
# 48 KiB plus the kernels' static shared memory are past a launch's limit (invalid argument). Now: rows of at most
# 46 KiB, and the fold only where the prologues read at most half as much as the weights (blocks x (m + 1) rows).
# Predicted: batch 1 as call 3 (the same folds: 2.35 ms); batch 8 back to ~7.2 (w1 / w3 not folded, q / k / v folded
# at 4 rows a warp: 240 blocks, a quarter of W); batches 2 and 4 at or below the fold-off time; Llama as call 3.
# The peer is not run: batch 1 takes the same path as in call 3 (stg / peer 1.205 there).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29g-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
f="$out/l/nf.txt"
(cd build-gpu && STG_TEST_FILTER='*norm_fold*' timeout 90 ./test_gpu_mm_attn > "$f" 2>&1); echo "norm fold tests: $?"
grep -E "norm folded|rmsnorm .*(linear|matmul_group|swiglu) .*rel err|ERROR|FAILED|PASSED" "$f" | cut -c1-170 | head -40
for i in 1 2; do
    (cd build-gpu && timeout 90 ./test_gpu_sample > "$out/l/tgs_$i.txt" 2>&1); echo "test_gpu_sample run $i: $? $(grep -m1 -E "^ERROR" "$out/l/tgs_$i.txt" | cut -c1-160)"
done
grep -E "decode logits against the full forward" "$out/l/tgs_1.txt" | cut -c1-170
tools/sanitize_gpu.sh build-gpu "$out/l" 100 memcheck:test_gpu_mm_attn:'*norm_fold*' racecheck:test_gpu_mm_attn:'*norm_fold*' 2>&1 | tail -4
say "tests done"
(cd build-gpu && timeout 150 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
dec_prompt
dec_ab "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg -- 1 2 4 8
for r in 1 2; do
    for s in "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg; do
        timeout 90 $s sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 \
            --temperature 0 --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 $s $(dec_keys "$out/l/d.json")"
    done
done
say "A/B done"
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
