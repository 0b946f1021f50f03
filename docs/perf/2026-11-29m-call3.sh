#!/usr/bin/env bash
# Thirtieth session, call 3 (2026-11-29). Call 2's timeline of medium ctx 1024 (options, in backward) had the attention
# backward's first kernel, att_bwd_dot_kernel (D = rowsum(dO o O), 16 MB), taking 32-41 us a layer, and starting ~41 us
# after its inputs were ready: the multiprocessors were full of a weight-gradient product's blocks (384 threads x 168
# registers each, a whole register file) and the updates' blocks, so the chain's next kernel waited for free slots.
# Two changes: (1) att_bwd_dot_kernel with eight threads a row (a warp reads four whole rows; before: a thread a row,
# the warp's loads 128 bytes apart); (2) STG_STREAM_PRIO (an experiment switch in ops/cuda/cuda.cu for this call, removed after it: not in the tree): 1 = stream 0 (the main chain) and the
# side stream at the greatest priority, other compute streams the middle, the updates' stream the least; 2 = every
# compute stream greatest, updates least. Whether the capture carries the streams' priorities into the graph's kernel
# nodes: the graph dump's pN.
# Predicted: (1) the kernel alone ~5 us (16 MB at copy rate), in the step 32-41 -> ~10-15 us; medium 1024 in backward
# 24.41 -> ~24.0 ms if it sits on the critical path (0.2-0.5 ms); attn-bench's backward at S1024 0.125 -> ~0.118 ms.
# (2) if the nodes carry priorities: medium 1024 in backward -1 to -3% (the chain's kernels start first when slots
# free); equal if they do not.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_attention.cu:ops/attention/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
attn_tests new
STG_GRAPH_DUMP="$out/l/prio" STG_STREAM_PRIO=1 timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 \
    --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 1 --iters 2 > "$out/l/prio.out" 2>&1; echo "prio dump: $?"
for f in "$out"/l/prio.*.txt; do echo "$f: $(grep -o ' p-\?[0-9]*' "$f" | sort | uniq -c | tr '\n' ' ')"; done
wait
say "tests done"
N=build-gpu/stg O=/tmp/old/build-gpu/stg
for b in $O $N; do
    timeout 60 $b attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 512,1024 --iters 30 2>&1 | grep -E "^\| flash" | sed "s|^|$b |"
    timeout 60 $b attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 30 2>&1 | grep -E "^\| flash" | sed "s|^|$b |"
done
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    STG_BIN=$O stg_step "medium 1024 ib old r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    STG_BIN=$N stg_step "medium 1024 ib new r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    STG_STREAM_PRIO=1 STG_BIN=$N stg_step "medium 1024 ib new prio1 r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    STG_STREAM_PRIO=2 STG_BIN=$N stg_step "medium 1024 ib new prio2 r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
done
say "medium done"
for r in 1 2; do
    STG_BIN=$O stg_step "small 512 ib old r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]}"
    STG_BIN=$N stg_step "small 512 ib new r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]}"
    STG_STREAM_PRIO=1 STG_BIN=$N stg_step "small 512 ib new prio1 r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]}"
    STG_BIN=$O stg_step "small 512 old r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]:0:6}" "${IB[@]:7}"
    STG_BIN=$N stg_step "small 512 new r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]:0:6}" "${IB[@]:7}"
done
say "small done"
tl_lib && STG_STREAM_PRIO=1 tl med_p1 build-gpu/stg bench models/cs336/medium.yaml --set ctx=1024 "${IB[@]}" > /dev/null &&
    python3 tools/timeline.py "$out/l/tl_med_p1.tsv.gz" --top 14 | tail -24
perf_pack
