#!/usr/bin/env bash
# For the session after the twenty-sixth (written 2026-11-29, not run): the rows the attention backward's dq stream
# (0be4fa5) moves, beside their peers. One call of about 9 minutes (run it under `timeout 570`).
# 1. Llama 3.2-1B ctx 4096 batch 1 (grouped-query 32 / 8, head dim 64): the step with STG_ATT_BWD_SIDE=0 and the
#    default, alternating, and the GQA attention row both ways; then the Llama peer (reduce-overhead).
#    Predicted: the GQA backward (0.612 ms at seq 4096, call 1) -3 to -6% as MHA's at 4096 (call 6); the step ~-0.3%
#    (16 layers x ~30 us); issue 24's row 0.745 with options (twenty-fourth session) ~unchanged.
# 2. 2.7B ctx 1024 batch 4 beside the reduce-overhead peer (issue 28: >= 60% MFU and <= 0.7): predicted 146.8 ->
#    ~146 ms with options (32 layers x ~15 us of backward at 1024), 0.776 -> ~0.77.
# 3. medium ctx 512 beside the peer: call 6 measured 15.56 -> 15.37 ms (default); predicted 0.806 / 0.783 -> ~0.79 / 0.77.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29i-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
for r in 1 2; do
    for m in "STG_ATT_BWD_SIDE=0" "STG_ATT_BWD_SIDE=1"; do
        env $m timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 \
            --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[$m] /"
        env $m timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "llama 1B ctx4096 b1 options [$m] r$r"
    done
done
PYTHONUNBUFFERED=1 timeout 200 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 \
    --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "llama done"
step_row 2.7B 1024 cg 330
step_row medium 512 cg 470
perf_pack
