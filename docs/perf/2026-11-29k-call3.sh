#!/usr/bin/env bash
# Twenty-eighth session, call 3 (2026-11-29): the captured graphs' structure (STG_GRAPH_DUMP, new in
# runtime/cuda/backend_cuda.c). Call 2's timelines put every layer's attention_cached kernel of the 2.7B decode step
# on a new internal stream of the graph, 1.3-2.3 us after the q/k/v product ends, with or without programmatic
# dependent launch, where every other kernel follows its predecessor by 0.06-0.13 us (STG_NO_PDL=1): a cross-stream
# edge at each attention (~58 us a token). Predicted: the decode graph's attention nodes have two or more parents
# (the lanes plan put an op of each layer on another stream). Also the small model's step graph at ctx 512, whose
# first kernel starts ~38 us after the first node (two input uploads, memcpy nodes).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29k-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
dec_prompt
dec[11]=8
STG_GRAPH_DUMP="$out/l/dec" timeout 120 build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/dec.json" 2> "$out/l/dec.err"; echo "decode: $?"
tail -3 "$out/l/dec.err"
for f in "$out"/l/dec.*.txt; do
    echo "== $f: $(wc -l < "$f") lines"; head -16 "$f" | cut -c1-200; echo ...; awk 'NF > 4' "$f" | head -12 | cut -c1-200
done
STG_GRAPH_DUMP="$out/l/small" timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --grad-dtype bf16 \
    --gemm-tune on --warmup 1 --iters 2 > "$out/l/small.out" 2>&1; echo "small: $?"
for f in "$out"/l/small.*.txt; do
    echo "== $f: $(wc -l < "$f") lines"; head -12 "$f" | cut -c1-200; echo ...; awk 'NF > 4' "$f" | head -12 | cut -c1-200
done
perf_pack
