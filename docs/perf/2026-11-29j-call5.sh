#!/usr/bin/env bash
# Twenty-seventh session, call 5: more of issue 28's rows (every other size at ctx 512 and 1024: <= 0.75 of the strongest
# peer) with the optimizer in backward (2c90914), beside the reduce-overhead peer, as call 4.
# Predicted (call 3's A/B: medium 512 -3.0%, xl 1024 -2.1%): xl 512 0.764 (twentieth session, with options) -> ~0.745;
# large 512 0.747 -> ~0.73; medium 512 0.783 -> ~0.76 (not met); xl 1024 0.793 -> ~0.775 (not met).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29j-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
rowib() { # SIZE CTX BATCH GATE
    local r
    if [ "$(el)" -gt "$4" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    for r in 1 2; do
        stg_step "$1 ctx$2 b$3 [options] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10
        stg_step "$1 ctx$2 b$3 [options, --optimizer-in-backward] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" \
            --precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10
    done
    peer_step "$1" "$2" "$3" cg
    say "$1 ctx $2 done"
}
rowib xl 512 4 60
rowib large 512 4 170
rowib medium 512 4 260
rowib xl 1024 4 330
perf_pack
