#!/usr/bin/env bash
# Thirtieth session, call 4 (2026-11-29). Call 3's timeline (medium ctx 1024) had the device idle ~7.8 us before and
# ~5 us after a memset node that precedes each grouped product (the cuBLASLt pointer-array launches: q/k/v and w1/w3
# forward, one in the backward): 73 memsets a step. The memset is not stg's (no cudaMemsetAsync on that path): cuBLASLt's?
# This call: (1) the graph dump (now with each memset's address, value and bytes) of small ctx 512 with options, with and
# without --gemm-tune, the kernels around each memset; (2) the step with --group-matmuls off against on.
# Predicted: the memsets sit in cuBLASLt's workspace (its pointer-array path), ~12 us of idle each: with the groups off
# the memsets and their gaps go, at the cost of three launches for one (H100, third session: the groups -1 to -3%).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29m-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
for v in "tune:--gemm-tune on" "heur:--gemm-tune off"; do
    # shellcheck disable=SC2086
    STG_GRAPH_DUMP="$out/l/g_${v%%:*}" timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --grad-dtype bf16 \
        ${v#*:} --warmup 1 --iters 2 > "$out/l/g_${v%%:*}.out" 2>&1; echo "dump ${v%%:*}: $?"
    for f in "$out"/l/g_"${v%%:*}".*.txt; do
        echo "$f: $(($(wc -l < "$f") - 1)) nodes, $(grep -c ' ms:' "$f") memsets"
        python3 - "$f" <<'PY'
import sys, collections
rows = {}
for ln in open(sys.argv[1]):
    if ln.startswith("#"): continue
    w = ln.split()
    rows[int(w[0])] = w
kids = collections.defaultdict(list)
for i, w in rows.items():
    for d in w[3:]:
        if d.count(":") == 2 and not d.startswith("ms:"): kids[int(d.split(":")[0])].append(i)
seen = collections.Counter()
for i, w in rows.items():
    ms = [x for x in w if x.startswith("ms:")]
    if not ms: continue
    par = [rows[int(d.split(":")[0])][2] for d in w[3:] if d.count(":") == 2 and not d.startswith("ms:")]
    ch = [rows[k][2] for k in kids[i]]
    seen[(ms[0].split(":", 2)[2], tuple(par), tuple(ch))] += 1
for k, n in seen.most_common(8): print("  ", n, "x", k)
PY
    done
done
say "dumps done"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "medium 1024 ib groups on r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    stg_step "medium 1024 ib groups off r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}" --group-matmuls off
    stg_step "small 512 groups on r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]:0:6}" "${IB[@]:7}"
    stg_step "small 512 groups off r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]:0:6}" "${IB[@]:7}" --group-matmuls off
done
perf_pack
