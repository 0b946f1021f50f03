#!/usr/bin/env bash
# Twenty-seventh session, call 2: why the updates on their own stream did not overlap the backward (call 1: small 5.06
# ordinary, 5.50-5.55 in backward with chunked blocks, 5.22-5.26 with the grid-stride blocks). Two readings, each a
# switch of this build (experiments, not landed as such):
#  - STG_IB_LAG=K (planner): a gradient lives until the K-th update after its own (-1: to the step's end), so the
#    backward's next ops do not reuse its bytes and wait on the updates' stream for it. Predicted: if reuse is what
#    serialises, small with the grid-stride updates 5.22 -> below 5.06 with K = -1.
#  - STG_ADAMW_BLOCKS=N: the grid-stride form with N blocks in all (default: as many as fit, every multiprocessor),
#    so the updates hold at most N of them. Predicted: N = 132 better than the full grid where the critical path's
#    kernels (attention, a multiprocessor each) wait for multiprocessors.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29j-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
run1() { # LABEL ENV MODEL ARGS...
    local label=$1 ev=$2 model=$3; shift 3
    env $ev timeout 150 build-gpu/stg bench "$model" "$@" --precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10 --json \
        > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "$label" median_ms min_ms planned_bytes
}
ab() { # SIZE CTX ROUNDS VARIANT...   (a variant: ord, or the environment of an in-backward run, e.g. STG_ADAMW_ONE=1,STG_IB_LAG=-1)
    local size=$1 ctx=$2 rounds=$3 r v; shift 3
    for r in $(seq "$rounds"); do
        for v in "$@"; do
            if [ "$v" = ord ]; then
                run1 "$size $ctx [ordinary] r$r" X=0 "models/cs336/$size.yaml" --set ctx="$ctx"
            else
                run1 "$size $ctx [in backward ${v//,/ }] r$r" "${v//,/ }" "models/cs336/$size.yaml" --set ctx="$ctx" --optimizer-in-backward
            fi
        done
    done
    say "$size $ctx done"
}
V="ord STG_ADAMW_ONE=1 STG_ADAMW_ONE=1,STG_IB_LAG=-1 STG_ADAMW_ONE=1,STG_IB_LAG=-1,STG_ADAMW_BLOCKS=132 STG_ADAMW_ONE=1,STG_IB_LAG=-1,STG_ADAMW_BLOCKS=264 STG_ADAMW_ONE=1,STG_IB_LAG=-1,STG_ADAMW_BLOCKS=33 STG_IB_LAG=-1 STG_ADAMW_ONE=1,STG_IB_LAG=9"
ab small 512 2 $V
ab large 1024 2 $V
ab 2.7B 1024 1 $V
ab small 1024 1 $V
perf_pack
