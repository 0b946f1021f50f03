#!/usr/bin/env bash
# 2026-11-29 (twenty-fourth session), call 2: the RMSNorm folded into the few-rows products that read it.
# Call 2 of the twenty-third session (ncu, 2.7B batch 1): two norm kernels a layer at ~2.6 us each, 64 in a 2.40 ms step,
# each a serial hop between the product before it and the one after (the norm is not launched programmatically: that
# lost, 2.398 -> 2.414). Now (ops/matmul/cuda.cu, mm_fold_norms) the products that read a norm's output read its input
# and gain instead and scale each row's sums by 1 / rms, summing the squares in the same loop; the norm enqueues
# nothing. One binary, A/B by STG_NO_NORM_FOLD=1 (the fold off), alternating.
# Predicted: 2.7B batch 1 2.40 -> 2.25-2.30 ms a token (64 x ~2 us); batch 8 a little less; batch 64 unchanged (no
# few-rows products there); Llama 3.2-1B batch 1 0.99 -> ~0.93 (32 norms; the attention norm feeds q apart from the
# k / v group: both fold it); stg / peer at batch 1 1.18 -> ~1.24.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29g-call2.sh OUT
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
dec_ab "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg -- 1 8 64
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
