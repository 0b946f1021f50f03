#!/usr/bin/env bash
# Thirty-third session (2026-11-29), call 4 (~7 min). Issue 28's 2.7B rows with the dk/dv producer publishing before it
# waits (HEAD 32f178f, call 2's tree; the two-lane producer of call 3 was slower and is not in the tree), beside the
# pre-session attention (peer/base = git archive d71cd5d ops/attention) and the reduce-overhead peer, in one call.
# Predicted: 2.7B ctx 4096 batch 1 (head dim 80, 32 heads: the attention backward ~0.75 -> ~0.65 ms a layer, call 2's
# B4 H16 S4096 D80 1.49 -> 1.30 ms halved) with options and in backward 159.5 -> ~156.3 ms, ~0.74 of the peer (211 in the
# thirty-first session); ctx 1024 batch 4 ~140.4 -> ~139.5 (attention a small share there).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29p-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
[ -d peer/base/ops/attention ] || { echo "no peer/base"; exit 2; }
build_rev peer/base
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    STG_BIN=build-gpu/stg stg_step "2.7B 4096 b1 [options ib, new] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
    STG_BIN=/tmp/old/build-gpu/stg stg_step "2.7B 4096 b1 [options ib, base] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
done
for r in 1 2; do
    STG_BIN=build-gpu/stg stg_step "2.7B 1024 b4 [options ib, new] r$r" models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 "${IB[@]}"
    STG_BIN=/tmp/old/build-gpu/stg stg_step "2.7B 1024 b4 [options ib, base] r$r" models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 "${IB[@]}"
done
say "stg done"
PEER_TIMEOUT=200 peer_step 2.7B 4096 1 cg
say "2.7B ctx 4096 reduce-overhead peer done"
if [ "$(el)" -lt 330 ]; then
    PEER_TIMEOUT=$((520 - $(el))) peer_step 2.7B 1024 4 cg
    say "2.7B ctx 1024 reduce-overhead peer done"
fi
perf_pack
