#!/usr/bin/env bash
# 2026-11-29 (twentieth session), call 3 (about 8 minutes), with docs/perf/2026-11-29c-dq-order-experiment.patch
# applied (an experiment, not landed: STG_ATT_DQ_ORDER=0 adds the single pass's dQ tiles in no fixed order, "skip"
# adds none, wrong dQ, for timing only).
# Question: why is the single pass (call 2: 192 / 203 TFLOP/s at 64 / 80, seq 16384) slower than two launches
# (295 / 305)? If unordered additions run near "skip", the turns cost the difference; if "skip" itself is near 192,
# the dQ product and its staging inside the dk/dv consumers (serialised: dS store, product, wait, store, reduce) cost
# it, and the turns do not. Predicted: skip ~ 250-300, unordered ~ skip (the turn hand-offs are cheap once no
# warpgroup waits for the other).
# Then the small rows of issue 28 beside the strongest peer (PERF.md table): small ctx 512 and 1024, batch 4.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29c-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
grep -q "EXPERIMENT" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29c-dq-order-experiment.patch first"; exit 2; }
perf_build stg test_gpu_mm_attn test_gpu_ops || { perf_pack; exit 1; }
attn_tests unordered STG_ATT_BWD_DQ=1 STG_ATT_DQ_ORDER=0
for r in 1 2; do for m in "0 x" "1 x" "1 0" "1 skip"; do
    set -- $m
    echo "== STG_ATT_BWD_DQ=$1 STG_ATT_DQ_ORDER=$2 round $r"
    STG_ATT_BWD_DQ=$1 STG_ATT_DQ_ORDER=$2 timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "attention A/B done"
step_row small 512 "cg" 300
step_row small 1024 "c cg" 380
say "done"
perf_pack
