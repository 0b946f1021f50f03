#!/usr/bin/env bash
# For the session after the thirtieth (written 2026-11-29, not run: that session's device time was spent; about 9
# minutes, run it under `timeout 580`). First, in this order: git apply docs/perf/2026-11-29m-att-persist.patch,
# docs/perf/2026-11-29m-dkdv-persist.patch, docs/perf/2026-11-29m-dq-persist.patch (compiled here, never run: the
# forward kernels 168 registers, no stack; the dk/dv kernels 168, no spills (HEAD's head-dim-128 one spills 32 bytes);
# the dq kernels' producer thread (24 registers) spills 76 bytes at head dim 80 and 4 at 64 in its issue loop).
# (1) The sm_90a attention forward persistent: the grid is as many blocks as are resident (STG_ATT_FWD_PERSIST=0: a
#     block a work item, the old schedule but for the order; =N: at most N blocks), each walking work items (row tile,
#     kv head, batch) in one longest-first order over every head and batch; producer and consumers walk the same
#     items, so the K/V stages' ring and its phases continue across them (tm_kv_producer's T0), and the consumer
#     warpgroups' ring of turns balances item by item.
# (2) The dk/dv launch the same way (STG_ATT_DKDV_PERSIST, the same values), its named-barrier stages continuing
#     across items; not with packed documents (their row ends are found by the whole block: a block an item) and not
#     in the single pass (DQ1, whose dQ turns name blocks by the grid).
# (3) The dq launch (beside the dk/dv launch, on the side stream): its blocks start as the dk/dv blocks free
#     multiprocessors, so instead of a fixed share each block takes items from a queue (a device counter; the producer
#     thread takes the next and hands it to the consumers through a two-slot ring of mbarriers; the launch's last
#     block sets the queue back). STG_ATT_DQ_PERSIST: unset, as many blocks as are resident; 0, a block an item; N, N.
#     Two new ctest variants run the attention tests with all three held to 3 blocks, so every shape's blocks take
#     many items.
# Why (the thirtieth session's call 2, Nsight Compute): at S1024 each launch is 512 one-block-a-multiprocessor blocks
# (3.88 waves), the multiprocessors active 77-78% of the elapsed cycles; ~3.5 us a forward key tile against ~1.9 at
# S4096, ~2.9 us a dk/dv row tile against ~2.1: a block's start (barriers, its K/V or Q loads, the first copies) and
# end (the stores) are not hidden. Predicted: B4 H16 D64 S1024 forward 0.052 -> ~0.038 ms, backward 0.121 -> ~0.10;
# S512 forward 0.026 -> ~0.019; S4096 -3 to -5%; S16384 within 2%; small 512 4.84 -> ~4.70 ms; medium 1024 in backward
# 23.07 -> ~22.6; if static assignment hurts where other streams hold multiprocessors (the backward's products), the
# dk/dv half gains less in the step than in attn-bench.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-next-persist.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
attn_tests persistent || echo "persistent: attention tests failed (see above)"
attn_tests p3 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_DQ_PERSIST=3 || echo "p3: failed"
attn_tests p0 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0 || echo "p0: failed"
STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_DQ_PERSIST=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
(cd build-gpu && timeout 200 ctest -L gpu -R "attention|persist" --timeout 190 > "$out/l/ctest_att.txt" 2>&1; echo "ctest -L gpu -R attention|persist: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_att.txt" | grep -v Skipped | head -10
say "tests done"
V=("all:" "fwd:STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0" "none:STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0")
for v in "${V[@]}"; do
    # shellcheck disable=SC2086 # the variables are a word list
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 \
        --seqs 512,1024,4096,16384 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
    # shellcheck disable=SC2086
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 \
        --seqs 1024 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
    # shellcheck disable=SC2086
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 \
        --seqs 4096 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
done
say "rates done"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
step_v() { # NAME FWD BWD: the two rows under STG_ATT_FWD_PERSIST=FWD and STG_ATT_DKDV_PERSIST = STG_ATT_DQ_PERSIST = BWD
    # (empty: unset, persistent)
    STG_ATT_FWD_PERSIST=$2 STG_ATT_DKDV_PERSIST=$3 STG_ATT_DQ_PERSIST=$3 stg_step "small 512 [$1] r$r" models/cs336/small.yaml \
        --set ctx=512 "${OPT[@]}"
    STG_ATT_FWD_PERSIST=$2 STG_ATT_DKDV_PERSIST=$3 STG_ATT_DQ_PERSIST=$3 stg_step "medium 1024 ib [$1] r$r" models/cs336/medium.yaml \
        --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
}
for r in 1 2; do
    step_v all "" ""
    step_v fwd "" 0
    step_v none 0 0
done
perf_pack
