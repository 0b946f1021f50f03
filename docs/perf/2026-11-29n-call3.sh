#!/usr/bin/env bash
# 2026-11-29, thirty-first session, call 3 (run under `timeout 590`): issue 28's ctx-4096 rows (batch 1), not measured since
# the nineteenth (2.7B) and twenty-sixth (xl) sessions, on the tree of calls 1-2 (a607310 with the four prepared patches),
# with the attention persistence A/B by its switches: [all] (the patched default), [none] (STG_ATT_FWD_PERSIST=0
# STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0). The 2.7B peer in both modes (its faster mode at 4096 is not known on the H200).
# Predicted: 2.7B with options and in backward ~163 ms (168.47 with options alone in the nineteenth session), ~0.75 against
# ~216; [all] 1-2% under [none] (attention is a larger share at 4096; call 1: the S4096 backward -2.5%); xl ~118 ms, ~0.80.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
NONE="STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0"
row() { # SIZE ROUNDS
    local r
    for r in $(seq 1 "$2"); do
        stg_step "$1 4096 b1 [options, all] r$r" "models/cs336/$1.yaml" --set ctx=4096 --set batch=1 --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10
        stg_step "$1 4096 b1 [options ib, all] r$r" "models/cs336/$1.yaml" --set ctx=4096 --set batch=1 --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10
        # shellcheck disable=SC2086 # a word list
        ( export $NONE; stg_step "$1 4096 b1 [options ib, none] r$r" "models/cs336/$1.yaml" --set ctx=4096 --set batch=1 \
            --precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10 )
    done
}
row 2.7B 2
say "2.7B stg done"
peer_step 2.7B 4096 1 cg
say "2.7B reduce-overhead peer done"
peer_step 2.7B 4096 1 c
say "2.7B default peer done"
if [ "$(el)" -lt 420 ]; then row xl 1; peer_step xl 4096 1 cg; say "xl done"; else say "xl skipped (time)"; fi
perf_pack
