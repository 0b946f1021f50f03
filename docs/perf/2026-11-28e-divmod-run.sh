#!/usr/bin/env bash
# Twelfth session: the attention backward's key-tile blocks without integer divisions in their loop
# (ops/attention/rows.cuh att_grp: R / G and R % G by a multiply-high and one correction; Q and dO
# rows share one offset). ncu of the tree before (docs/perf/2026-11-28e-h200-ncu.txt): the dk/dv
# kernel issues ~800 instructions a warp per 64 x 64 tile pair at G = 1 and ~1010 at G = 4, 2 warps a
# scheduler, 23-33% of issue slots, stalls on fixed-latency dependencies (the division chains).
# GPU machine, repository root, carrying .deps (and .old: git archive of the tree before):
#   docs/perf/2026-11-28e-divmod-run.sh OUT
# Checks: ctest -L gpu (test_gpu_ops gained 3:1 groups), memcheck and racecheck of the attention
# tests; times: stg attn-bench, old and new builds alternating, MHA B4 H16 and GQA B1 H32/8 at S 4096,
# and Llama 3.2-1B's step (ctx 4096, batch 1, bf16, plain head).
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_ops:*gqa* racecheck:test_gpu_ops:*gqa_small* || exit 1
for i in 1 2; do
    for b in .old/build-ab build-gpu; do
        echo "== $b"
        $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 64 --seqs 4096 --iters 20 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 1 --heads 24 --kv-heads 8 --dims 128 --seqs 4096 --iters 20 2>&1 | grep flash
    done
done
for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
    timeout 120 $b/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'llama 1B', {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $b || tail -3 "$out/l/l1b.err"
done
tar -czf "$out/logs.tgz" -C "$out" l
