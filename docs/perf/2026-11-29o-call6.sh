#!/usr/bin/env bash
# Thirty-second session (2026-11-29), call 6 (~3 min): do the attention tests fail when the work-item walk is wrong?
# Two mutants of the landed tree, each built beside it (side), run under the tests' switches:
#   mut:  tm_item_split's level of a partial last group wrong (r / hg for r / gs: some items twice, some never) - the
#         ctest variant hgroup3 (a block an item, groups of 3: the model shapes' 2 x 25 head-batches end in a group of 2);
#   mut2: the forward's persistent walk skipping items after a block's first two (producer and consumers alike, so
#         nothing waits) - the ctest variant persist3 (3 blocks).
# Predicted: both fail (outputs left at their NaN poison, or rows against the CPU), and mut passes under the default
# grouping (its mutation touches partial groups only).
# Files here: peer/mut/ops/attention/sm90a/tma.cuh, peer/mut2/ops/attention/sm90a/attention_ws.cu (the tree's with the
# marked line changed). Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
side /tmp/mut test_gpu_mm_attn peer/mut/ops/attention/sm90a/tma.cuh:ops/attention/sm90a/tma.cuh
side /tmp/mut2 test_gpu_mm_attn peer/mut2/ops/attention/sm90a/attention_ws.cu:ops/attention/sm90a/attention_ws.cu
wait
say "built"
mt() { # NAME DIR FILTER VAR=VALUE...
    local f="$out/l/mut_$1.txt"
    (cd "$2/build-gpu" && env "${@:4}" STG_TEST_FILTER="$3" timeout 60 ./test_gpu_mm_attn > "$f" 2>&1)
    echo "[$1: ${*:4}] exit $? $(grep -E "PASSED|FAILED" "$f" | tr '\n' ' ')"; grep -m2 -E "differs|NaN|ERROR|rel" "$f"
}
mt mut_hgroup3 /tmp/mut '*attention_model_shapes*' STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3
mt mut_default /tmp/mut '*attention_model_shapes*' STG_X=0
mt mut2_persist3 /tmp/mut2 '*attention_model_shapes*' STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4
say "done"
perf_pack
