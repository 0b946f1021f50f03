#!/usr/bin/env bash
# Twenty-seventh session, call 1: the optimizer in backward with its updates on a stream of their own (the lane off the
# compute streams) and chunked blocks, against the tree before (its updates on stream 0, a few blocks per SM striding
# over each tensor) and against the ordinary step (one AdamW launch after the backward), at small ctx 512, large ctx
# 1024 and 2.7B ctx 1024 (batch 4, bf16, `--grad-dtype bf16 --gemm-tune on`); test_gpu_optim and test_streams first.
# Predicted: the updates overlap the backward's products on the idle multiprocessors: small 5.06 -> ~4.4 ms (AdamW was
# 1.1 ms at the step's end), large 50.7 -> ~47, 2.7B 146.8 -> ~135; the old in-backward form slower than ordinary at
# small (as the H100 measured, +4%) and about equal at 2.7B. STG_ADAMW_ONE=1 (the grid-stride blocks on the new
# stream): slower than the chunks where GEMMs run beside it.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29j-call1.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/old_optim.cu:ops/optim/cuda.cu
perf_build stg test_gpu_optim test_streams || { wait; perf_pack; exit 1; }
for p in test_streams test_gpu_optim; do
    (cd build-gpu && timeout 150 "./$p" > "$out/l/$p.txt" 2>&1; echo "$p: $? $(grep -E 'PASSED|FAILED' "$out/l/$p.txt" | tr '\n' ' ')")
    grep -E "graph|in backward|ERROR|FAIL" "$out/l/$p.txt" | head -8
done
wait
say "tests done"
run1() { # LABEL BIN ENV MODEL ARGS...
    local label=$1 bin=$2 ev=$3 model=$4; shift 4
    env $ev timeout 150 "$bin" bench "$model" "$@" --precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10 --json \
        > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "$label" median_ms min_ms mfu planned_bytes measured_bytes
}
ab() { # SIZE CTX ROUNDS VARIANTS...
    local size=$1 ctx=$2 rounds=$3 r v; shift 3
    for r in $(seq "$rounds"); do
        for v in "$@"; do
            case $v in
                old) run1 "$size $ctx [old, ordinary] r$r" /tmp/old/build-gpu/stg X=0 "models/cs336/$size.yaml" --set ctx="$ctx" ;;
                oldib) run1 "$size $ctx [old, in backward] r$r" /tmp/old/build-gpu/stg X=0 "models/cs336/$size.yaml" --set ctx="$ctx" --optimizer-in-backward ;;
                new) run1 "$size $ctx [new, ordinary] r$r" build-gpu/stg X=0 "models/cs336/$size.yaml" --set ctx="$ctx" ;;
                newib) run1 "$size $ctx [new, in backward] r$r" build-gpu/stg X=0 "models/cs336/$size.yaml" --set ctx="$ctx" --optimizer-in-backward ;;
                one) run1 "$size $ctx [new, in backward, STG_ADAMW_ONE=1] r$r" build-gpu/stg STG_ADAMW_ONE=1 "models/cs336/$size.yaml" --set ctx="$ctx" --optimizer-in-backward ;;
            esac
        done
    done
    say "$size $ctx done"
}
ab small 512 2 old oldib newib one new
ab large 1024 2 old oldib newib one
ab 2.7B 1024 2 old newib
[ "$(el)" -lt 430 ] && ab 2.7B 1024 1 oldib
perf_pack
