#!/usr/bin/env bash
# For the session after the twenty-ninth (written 2026-11-29, not run; about 5 minutes, run it under `timeout 450`).
# First: git show HEAD:ops/decode/cuda.cu > peer/base_decode.cu (for the A/B), then
# git apply docs/perf/2026-11-29l-dec-minb5.patch (compiled here: the batch-1 kernel <bf16, 1, 3, no ring> 95 registers,
# no spills beyond the 32 bytes of stack every variant has; the grouped-query <bf16, 4, 1, no ring> spills 40 bytes).
# The question (docs/perf/LOG.md, twenty-ninth session): attention_cached ends ~8.4 us after the q/k/v product at batch 1.
# During that product (240 blocks, 26,624 registers each, two on 108 multiprocessors) 12,288 registers a
# multiprocessor are free and an attention block takes 16,384 (124 a thread): its blocks start under the product on
# 24 multiprocessors only, and the work moved before its wait (b65db50) runs there only. The patch: at most 96 registers
# (5 blocks a multiprocessor by registers; the split stays 16, the ring kernel's shared memory allows 4) and one trip
# of rows a lane loaded into registers (the rest L2-prefetched before the wait): one block fits beside two of the
# product's on every multiprocessor. Predicted: if co-residency is the loss, the attention's end after the product's
# 8.4 -> ~6 us and the batch-1 step 2.183 -> ~2.12 ms; else equal or slower (a second round trip for the second trip).
# A second effect the same way: four attention blocks now hold 49,152 registers a multiprocessor, not all 65,536, so one
# block of wo (256 threads at 59: 16,384) fits beside them and loads its first trip before attention ends: wo's end
# after attention's 5.5 -> ~4 us. Batch 64 (the ring) within 1%.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29l-next-minb5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_decode.cu:ops/decode/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
dec_tests
wait
say "tests done"
dec_prompt
dec_ab build-gpu/stg /tmp/old/build-gpu/stg -- 1 64
say "decode done"
tl_lib && { dec[11]=64
    for b in new:build-gpu/stg old:/tmp/old/build-gpu/stg; do
        tl "minb_${b%%:*}" "${b#*:}" "${dec[@]}" --batch 1 > /dev/null
        python3 tools/timeline.py "$out/l/tl_minb_${b%%:*}.tsv.gz" --period mm_gv_glu | tail -1
        python3 tools/timeline.py "$out/l/tl_minb_${b%%:*}.tsv.gz" --list 0.5:0.64 | grep -E "^ +[0-9]+\.[0-9]+ +[0-9]" | awk '{print $1, $2, $3, $7, $13}'
    done; }
perf_pack
