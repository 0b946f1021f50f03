#!/usr/bin/env bash
# 2026-11-29 (twenty-fourth session), call 3: the RMSNorm folded into the few-rows products that read it, second form.
# Call 2 (the first form: every warp summed x's squares and multiplied x by g per vector inside its loop over W):
# batch 1 2.378 -> 2.419 ms (slower), batch 8 7.20 -> 10.06 (the loop at 8 rows is bound by its instructions, and the
# first form added ~40% to them), Llama 3.2-1B batch 1 0.983 -> 0.976. Now each block of a product first writes its
# rows of x g (bf16) to shared memory and takes each row's 1 / rms with one block reduction (mm_gv_norm_rows), and
# the loop over W reads x from shared memory as before from global: the loop's instructions are the unfused ones.
# One binary, A/B by STG_NO_NORM_FOLD=1 (the fold off), alternating.
# Predicted: 2.7B batch 1 2.38 -> 2.30-2.33 ms a token (64 norm kernels of ~2.5 us gone, each product one block
# reduction and an L2 round trip longer before its loop); batch 8 7.20 -> 7.0-7.2; batch 64 unchanged (no few-rows
# products, not run); Llama 3.2-1B batch 1 0.983 -> ~0.95; stg / peer at batch 1 1.17 -> ~1.20.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29g-call3.sh OUT
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
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
dec_prompt
dec_ab "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg -- 1 8
for r in 1 2; do
    for s in "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg; do
        timeout 90 $s sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 \
            --temperature 0 --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 $s $(dec_keys "$out/l/d.json")"
    done
done
say "A/B done"
if [ "$(el)" -lt 420 ]; then
    BATCHES="1" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 150 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -4
    say "peer done"
fi
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
