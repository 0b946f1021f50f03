#!/usr/bin/env bash
# Thirty-second session (2026-11-29), call 5 (~3 min): the attention table's rows, stg (the tree of call 4, c4c4c8a: the
# landed tm_item_plan) beside cuDNN and FlashAttention-2 (torch_attn.py) in the same call, B4 H16 causal bf16, head dims
# 64, 80, 128 at seq 4096 and 16384. Predicted from calls 2 and 4: head dim 64 forward 0.95 / 1.01 of cuDNN, backward
# 0.92 / 0.73; head dim 128 forward 0.87 / 0.96, backward 0.76 / 0.69.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
for r in 1 2; do
    timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 \
        --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[stg r$r] /"
done
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | grep -E "CUDNN|FLASH"
say "done"
perf_pack
