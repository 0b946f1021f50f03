#!/usr/bin/env bash
# 2026-11-30, thirty-fifth session, call 5 (~3-4 minutes; run under `timeout 300`). Call 4's timeline of the 2.7B ctx-4096
# step had the attention backward at ~724 us a layer (dk/dv 411 + dq 313) against ~610 for the same work alone
# (attn-bench B4 H16 D80 S4096, 1.215 ms for twice the heads): the dq launch (its own stream) overlapped the dk/dv launch
# for 2.78 ms of the step, the dk/dv launch a dW GEMM for 4.24 ms and AdamW for 2.21. Does the step gain from the
# existing launch switches? The 2.7B ctx-4096 b1 step (options, in backward), alternating, two rounds: default
# (STG_NONE=1 sets nothing stg reads); one stream for the two backward launches (STG_ATT_BWD_SIDE=0); the dk/dv grid
# not persistent (STG_ATT_DKDV_PERSIST=0).
# Predicted: within +-0.5% (the overlaps trade SMs; the work is the same), unless the persistent grid loses its SMs to
# the co-running GEMM (then PERSIST=0 gains up to ~2 ms).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30r-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    for e in STG_NONE=1 STG_ATT_BWD_SIDE=0 STG_ATT_DKDV_PERSIST=0; do
        (export "$e"; stg_step "2.7B 4096 b1 [ib $e] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}")
    done
done
perf_pack
