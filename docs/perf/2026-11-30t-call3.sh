#!/usr/bin/env bash
# Thirty-seventh session, call 3 (2026-11-30): the step rows that head dim 64's new forward (bbab5f5: Q in shared memory,
# 3 consumer warpgroups; -12% at seq 16384 in call 1) can move, each beside the reduce-overhead peer (cuDNN attention) in
# this call: small ctx 512 batch 4 (issue 28's 0.6 row; call 1 measured only the in-backward form, 4.93 ms, against a
# 7.64-ms peer), xl ctx 4096 batch 1 (attention is a larger share there; last measured in the twenty-sixth session,
# 120.67 ms against 146.79) and xl ctx 1024 batch 4 (0.749-0.750 in the thirty-second session). stg: with options
# (--grad-dtype bf16 --gemm-tune on) and with --optimizer-in-backward as well, two rounds alternating.
# Predicted: small 4.84-4.94 ms (unchanged: its attention is ~0.1 ms of the step); xl 4096 -1 to -3 ms against the
# thirty-first session's 117.45 (its forward attention ~12 ms a step at 25 heads); xl 1024 96.7-97.1 (call 1).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row_ib small 512 4 9999
for r in 1 2; do
    for ib in "" --optimizer-in-backward; do
        stg_step "xl ctx4096 b1 [options $ib] r$r" models/cs336/xl.yaml --set ctx=4096 --set batch=1 --precision bf16 \
            --grad-dtype bf16 --gemm-tune on $ib --warmup 3 --iters 10
    done
done
steps_ab xl 1024 4 2 tree:build-gpu/stg
say "stg rows done"
peer_rows 570 xl:4096:1 xl:1024:4
perf_pack
