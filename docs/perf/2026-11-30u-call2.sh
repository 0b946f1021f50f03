#!/usr/bin/env bash
# 2026-11-30, thirty-eighth session, call 2 (~3 min): what the single pass's turns cost. The tree's single pass
# (STG_ATT_BWD_DQ=1: dQ = dS K in the dk/dv blocks, added into f32 sums in a fixed order by turns) ran at about half
# the two launches' rate (2026-11-30t call 2). noord = the tree built with -DWS_DQ1_NOORDER=1 (the additions in any
# order: no turns, no counters waited on; ptxas then drops the C7520 note the single pass's kernels carry).
# Predicted: if the turns (and the serialization they bring) are the loss, noord's single pass at or below the two
# launches' time (5 products a tile pair instead of 7); if the reductions' traffic is, noord near the tree's single pass.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30u-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant noord - "-DWS_DQ1_NOORDER=1" stg
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
serial_report "$out/l/build_noord.txt" noord
ab() { timeout 60 env "${@:3}" "$2" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 \
    --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[$1] /"; }
for r in 1 2; do
    ab "tree two r$r" build-gpu/stg
    ab "tree dq1 r$r" build-gpu/stg STG_ATT_BWD_DQ=1
    ab "noord dq1 r$r" /tmp/noord/build-gpu/stg STG_ATT_BWD_DQ=1
done
say "done"
perf_pack
