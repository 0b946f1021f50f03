#!/usr/bin/env bash
# For the session after the twenty-eighth (written 2026-11-29, not run; about 4 minutes, run it under `timeout 400`).
# First apply the patch: git apply docs/perf/2026-11-29k-dec-cluster.patch (compiled here with the build's nvcc
# command: the cluster kernel 127 registers, no spills; never run).
# (1) attention_cached's combine inside a thread block cluster (the splits of a pair one cluster of up to 16 blocks,
#     their sums in shared memory, read through distributed shared memory after a cluster barrier) in place of global
#     partials, a fence and an atomic count: test_gpu_sample with it and with STG_NO_DEC_CLUSTER=1 (the global combine),
#     memcheck and racecheck of the attention_cached tests; decode at batches 1 and 64 both ways; the timeline.
#     Predicted: the batch-1 step 2.24 -> ~2.19 ms (the chain after the scores: ~1.5 us a layer), batch 64 unchanged
#     (one split a pair: no combine), the Llama 3.2-1B (32 splits: the global combine) unchanged.
# (2) The captured training step's graph (small ctx 512, STG_GRAPH_DUMP): how many nodes have more than two parents.
#     The twenty-eighth session found the decode graph's views carrying every earlier layer's product into each
#     attention node; training graphs put work on the views' streams, which should consume what their waits add.
#     Predicted: few nodes with more than two parents.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29k-next-cluster.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
for v in 0 1; do
    (cd build-gpu && STG_NO_DEC_CLUSTER=$v timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample_$v.txt" 2>&1
     echo "test_gpu_sample (STG_NO_DEC_CLUSTER=$v): $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample_$v.txt" | tr '\n' ' ')")
done
tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
say "tests done"
dec_prompt
dec_ab build-gpu/stg "env STG_NO_DEC_CLUSTER=1 build-gpu/stg" -- 1 64
say "decode done"
tl_lib && { dec[11]=64; tl cluster_b1 build-gpu/stg "${dec[@]}" --batch 1; }
STG_GRAPH_DUMP="$out/l/small" timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --grad-dtype bf16 \
    --gemm-tune on --warmup 1 --iters 2 > "$out/l/small.out" 2>&1; echo "small dump: $?"
for f in "$out"/l/small.*.txt; do
    echo "$f: $(($(wc -l < "$f") - 1)) nodes; parents: $(awk 'NR > 1 {print NF - 3}' "$f" | sort -n | uniq -c | tr '\n' ' ')"
done
perf_pack
