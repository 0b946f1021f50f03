#!/usr/bin/env bash
# For the session after the twenty-ninth (written 2026-11-29, not run; about 8 minutes, run it under `timeout 560`).
# First: git show HEAD:ops/decode/cuda.cu > peer/base_decode.cu and git show HEAD:ops/matmul/cuda.cu > peer/base_matmul.cu
# (for the A/B), then git apply docs/perf/2026-11-29l-dec-staged.patch (compiled here, never run).
# The question (docs/perf/LOG.md, twenty-ninth session): attention_cached ends ~8.4 us after the q/k/v product at
# batch 1 (~2 at copy rate). During that product (240 blocks, 26,624 registers each, two on 108 multiprocessors) 12,288
# registers a multiprocessor are free and an attention block takes 16,384 (124 a thread): its blocks start under the
# product on 24 multiprocessors only, so the work b65db50 moved before its wait runs there only. The patch:
#  (a) always: at most 96 registers (launch bounds 5 blocks; the split stays 16: the ring kernel's shared memory allows
#      4) and one trip of rows a lane in registers (the rest L2-prefetched before the wait): one attention block fits
#      beside two of the product's on every multiprocessor; and four of them leave 16,384 registers, one block of wo.
#      Compiled: the batch-1 kernel 95 registers, no spills beyond the 32 bytes of stack every variant has (the
#      grouped-query <bf16, 4, 1> spills 40 bytes).
#  (b) STG_DEC_STAGED=1: at most one block a multiprocessor (2.7B batch 1: 4 splits a head, 128 blocks, 256 rows each),
#      each copying its whole chunk into its ring (cp.async, ~98 KB) before the wait; after it only the queries, the
#      new row, the scores from shared memory and a combine of 4 splits. The ring kernel 91 registers, no spills.
#  (c) STG_GV_CARVEOUT=100: the one-row few-rows kernels prefer the most shared memory, as the staged kernel does, so
#      that a multiprocessor running the product has the configuration the staged block needs.
# Predicted: (a) if co-residency is the loss, attention's end after the product 8.4 -> ~6 us, wo's 5.5 -> ~4, the batch-1
# step 2.183 -> ~2.12 ms; else equal or slower. (b) without (c) like (a) or worse (the product's multiprocessors on a
# smaller shared memory configuration); (b) with (c) attention's end after the product ~4 us, the step ~2.06 ms. Batch 64
# within 1% ((b) does not apply there: 2048 pairs).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29l-next-staged.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_decode.cu:ops/decode/cuda.cu peer/base_matmul.cu:ops/matmul/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
dec_tests
(cd build-gpu && STG_DEC_STAGED=1 timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample_staged.txt" 2>&1
 echo "test_gpu_sample (STG_DEC_STAGED=1): $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample_staged.txt" | tr '\n' ' ')")
STG_DEC_STAGED=1 tools/sanitize_gpu.sh build-gpu "$out/l/san_staged" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
wait
say "tests done"
dec_prompt
N=build-gpu/stg O=/tmp/old/build-gpu/stg
dec_ab $O $N "env STG_DEC_STAGED=1 $N" "env STG_DEC_STAGED=1 STG_GV_CARVEOUT=100 $N" -- 1
dec_ab $O $N -- 64
say "decode done"
tl_lib && { dec[11]=64
    for v in "old:$O" "new:$N" "staged:env STG_DEC_STAGED=1 STG_GV_CARVEOUT=100 $N"; do
        tl "v_${v%%:*}" "${v#*:}" "${dec[@]}" --batch 1 > /dev/null
        python3 tools/timeline.py "$out/l/tl_v_${v%%:*}.tsv.gz" --period mm_gv_glu | tail -1
        python3 tools/timeline.py "$out/l/tl_v_${v%%:*}.tsv.gz" --list 0.5:0.64 | grep -E "^ +[0-9]+\.[0-9]+ +[0-9]" | awk '{print $1, $2, $3, $7, $13}'
    done; }
perf_pack
