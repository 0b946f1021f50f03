#!/usr/bin/env bash
# Thirty-second session (2026-11-29), call 3 (~7 min), tree = call 2's (the head-batch groups landed by rule).
# (1) The groups' balance question. Call 1's groups of 4 and 16 slowed B4 H16 D64 S4096's forward 34% and 18%; a static
# model of the persistent blocks' shares (item cost = its tiles + 1; block x takes x, x + G, ...) gives the same order:
# 132 blocks over 32 levels x 64 head-batches, the longest share / the average is 1.50 in groups of 4, 1.15 in groups of
# 16, 1.06 in one group (back and forth as call 1 ran: 1.50, 1.27, 1.00). And head dim 128 at S4096 (2 MB a head,
# 128 MB in all, one group under the landed rule) ran its forward at 0.565-0.568 ms in the twenty-second session (a
# block an item, one head's row tiles after another), against 0.613-0.624 in call 2. Sweep STG_ATT_HGROUP at D64 and
# D128, S4096 and S16384, persistent (the default grid) and a block an item (STG_ATT_FWD_PERSIST=0,
# STG_ATT_DKDV_PERSIST=0: the hardware's placement, which balances any order). Predicted: persistent, the model's ranks
# (S4096: groups of 2 or 6 near one group, 4 and 8 worst); a block an item in groups of 1 near the twenty-second
# session's 0.565 at D128 S4096.
# (2) xl ctx 1024 beside the reduce-overhead peer (no ratio in the last two sessions: the peer outran the limit).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
ab() { # LABEL VAR=VALUE...
    env "${@:2}" timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 \
        --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[$1] /"
}
ab "rule" STG_X=0
for g in 1 2 4 6 8 12 16 25 64; do ab "persistent, groups of $g" STG_ATT_HGROUP=$g; done
for g in 1 2 64; do ab "a block an item, groups of $g" STG_ATT_HGROUP=$g STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0; done
ab "rule, again" STG_X=0
say "sweep done"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "xl 1024 [options] r$r" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}"
    stg_step "xl 1024 [options, --optimizer-in-backward] r$r" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
done
peer_step xl 1024 4 cg
say "xl done"
perf_pack
