#!/usr/bin/env bash
# Twenty-fifth session (2026-11-29), call 3: the weights of the products after the attention over the cache prefetched
# into L2 by that kernel (cp.async.bulk.prefetch.L2, at its blocks' start; ops/decode/cuda.cu dec_prefetch_plan: the
# parameters of the products up to the next attention, in schedule order, at most STG_DEC_PREFETCH_MB; the kernels
# without the ring only). At batch 1 the attention takes ~11 us over 5.6 MB (0.5 TB/s: latency-bound), while wo (13.1 MB)
# right after it runs at 1.6-1.7 TB/s (ncu, twenty-third session).
# Predicted (2.7B, H200): batch 1 2.347 -> 2.25-2.30 ms a step at 13 MB (wo from L2, ~3-4 us a layer), 24 MB a little
# better (the first part of w1 / w3 too), 40 MB no better (L2 is 50 MB; the lines start to evict each other); batch 4
# (tensor-core products, attention 16.7 us) similar; batch 64 (the ring, no prefetch) equal to HEAD (/tmp/head:
# peer/head_decode.cu, HEAD f7aa1b8's file; the ring kernels' spills changed by a few bytes with the argument struct).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
side /tmp/head stg peer/head_decode.cu:ops/decode/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
for mb in 64 0; do
    (cd build-gpu && STG_DEC_PREFETCH_MB=$mb timeout 100 ./test_gpu_sample > "$out/l/tgs_$mb.txt" 2>&1); echo "test_gpu_sample, prefetch $mb MB: $? $(grep -cE '^\[       OK' "$out/l/tgs_$mb.txt") OK $(grep -m1 -E '^\[  (ERROR|FAILED)' "$out/l/tgs_$mb.txt" | cut -c1-120)"
done
STG_DEC_PREFETCH_MB=64 tools/sanitize_gpu.sh build-gpu "$out/l" 150 memcheck:test_gpu_sample:'*decode_vs_forward*' 2>&1 | tail -2
say "tests done"
dec_prompt
dec_ab "env STG_DEC_PREFETCH_MB=0 build-gpu/stg" "env STG_DEC_PREFETCH_MB=13 build-gpu/stg" "env STG_DEC_PREFETCH_MB=24 build-gpu/stg" \
    "env STG_DEC_PREFETCH_MB=40 build-gpu/stg" -- 1 4
dec_ab /tmp/head/build-gpu/stg build-gpu/stg -- 64
say "A/B done"
if [ "$(el)" -lt 430 ]; then
    STG_DEC_PREFETCH_MB=24 BATCHES="1" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 150 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -4
    say "peer done"
fi
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
