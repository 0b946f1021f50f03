#!/usr/bin/env bash
# Twenty-seventh session, call 3: the optimizer in backward's updates now grid-stride at 2 blocks a multiprocessor (call 2:
# 2 / SM fastest of 1 / SM, 2 / SM, the full grid, 33 blocks; chunked blocks slower). Here, at small 512, large 1024,
# 2.7B 1024, xl 1024 and medium 512 (bf16, `--grad-dtype bf16 --gemm-tune on`), against the ordinary step:
#  - STG_IB_LAG=K, a gradient's bytes kept until the K-th update after its own: K = 1, 3, 9, -1 (the end). Call 2 had
#    9 and -1 equal (2.7B 141.9 / 141.3 ms, large 48.7 / 48.9). Predicted: 3 as good as 9; 1 worse.
#  - 3 blocks a multiprocessor (STG_ADAMW_BLOCKS=396): predicted between 2 / SM and the full grid.
#  - STG_GEMM_SMS=124 / 116: the products told to target fewer multiprocessors (cuBLASLt's SM count target), leaving
#    the updates the rest. Predicted: slower (the products lose 6-12% of their multiprocessors for the whole step).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29j-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
which nsys ncu | tr '\n' ' '; echo
perf_build stg || { perf_pack; exit 1; }
run1() { # LABEL ENV MODEL ARGS...
    local label=$1 ev=$2 model=$3; shift 3
    env $ev timeout 150 build-gpu/stg bench "$model" "$@" --precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10 --json \
        > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "$label" median_ms min_ms planned_bytes
}
ab() { # SIZE CTX ROUNDS VARIANT...   (a variant: ord, or the environment of an in-backward run, e.g. STG_IB_LAG=-1,STG_ADAMW_BLOCKS=264)
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
V="ord X=0 STG_IB_LAG=1 STG_IB_LAG=3 STG_IB_LAG=9 STG_IB_LAG=-1 STG_IB_LAG=9,STG_ADAMW_BLOCKS=396 STG_IB_LAG=9,STG_GEMM_SMS=124 STG_IB_LAG=9,STG_GEMM_SMS=116"
ab small 512 2 $V
ab large 1024 2 $V
ab 2.7B 1024 1 $V
ab xl 1024 1 ord STG_IB_LAG=3 STG_IB_LAG=9 STG_IB_LAG=-1
ab medium 512 1 ord STG_IB_LAG=3 STG_IB_LAG=9 STG_IB_LAG=-1
ab 2.7B 512 1 ord STG_IB_LAG=3 STG_IB_LAG=9 STG_IB_LAG=-1
perf_pack
