#!/usr/bin/env bash
# 2026-11-30, thirty-eighth session, call 5 (~5 min, under `timeout 480`): where the single pass's time goes, after call 2
# found it 1.6x the two launches without its turns. Four builds of stg, each with -DWS_DQ1_NOORDER=1 and
# -DWS_DQ1_PROBE=P: p0 the single pass without turns; p1 without its bulk reductions; p2 without dQ's product and
# tile either (the dS tile and the barriers kept); p3 none of the single pass's work in the loop (the dk/dv kernel as
# the single pass launches it). Every probe but p0 computes a wrong dq: timing only, STG_ATT_BWD_DQ=1, B4 H16 causal,
# head dims 64 and 80, seq 4096 and 16384, beside the tree's two launches.
# Predicted (head dim 64, seq 16384; call 2: p0 23.2 ms, two launches 14.3): p3 ~9-10 ms (the dk/dv launch alone, 4 of
# the 7 products); the reductions (p0 - p1) and dQ's product with its synchronous wait and f32 stores (p1 - p2) the most of
# the 13 ms between p0 and p3.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30u-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
for p in 0 1 2 3; do variant "p$p" - "-DWS_DQ1_NOORDER=1 -DWS_DQ1_PROBE=$p" stg; done
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
ab() { timeout 60 env "${@:3}" "$2" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 \
    --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[$1] /"; }
ab "tree two" build-gpu/stg
for p in 0 1 2 3; do ab "p$p dq1" "/tmp/p$p/build-gpu/stg" STG_ATT_BWD_DQ=1; done
ab "tree two r2" build-gpu/stg
say "done"
perf_pack
