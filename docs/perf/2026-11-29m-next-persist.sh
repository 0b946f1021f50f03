#!/usr/bin/env bash
# For the session after the thirtieth (written 2026-11-29, not run: that session's device time was spent; about 8
# minutes, run it under `timeout 570`). First: git apply docs/perf/2026-11-29m-att-persist.patch (compiled here: the
# forward kernels 168 registers, no stack; never run). It makes the sm_90a attention forward persistent: the grid is
# as many blocks as are resident (or STG_ATT_FWD_PERSIST=0: a block a work item, the old schedule but for the order;
# =N: at most N blocks), each walking work items (row tile, kv head, batch) in one longest-first order over every head
# and batch; its producer and consumers walk the same items, so the K/V stages' ring and its phases continue across
# them (tm_kv_producer's T0), and the consumer warpgroups' ring of turns balances item by item. Two new ctest variants
# run the attention tests with at most 3 blocks, so every shape's blocks take many items.
# Why (call 2, Nsight Compute): at S1024 the forward is 512 one-block-a-multiprocessor blocks (3.88 waves), the
# multiprocessors active 78% of the elapsed cycles, ~3.5 us a key tile against ~1.9 at S4096: a block's start (Q's load,
# the first copies) and end (the stores) are not hidden. Predicted: forward at B4 H16 D64 S1024 0.052 -> ~0.038 ms, S512
# 0.026 -> ~0.019, S4096 -3 to -5%, S16384 within 2%; small 512 4.84 -> ~4.75 ms, medium 1024 in backward 23.07 ->
# ~22.75; if the order alone mattered, STG_ATT_FWD_PERSIST=0 would gain too.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-next-persist.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
attn_tests persistent
attn_tests p3 STG_ATT_FWD_PERSIST=3
attn_tests p0 STG_ATT_FWD_PERSIST=0
STG_ATT_FWD_PERSIST=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
(cd build-gpu && timeout 250 ctest -L gpu --timeout 240 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
for v in "" 0; do
    echo "== STG_ATT_FWD_PERSIST=${v:-(unset)}"
    STG_ATT_FWD_PERSIST=$v attn_rates | sed "s/^/[$v] /"
    STG_ATT_FWD_PERSIST=$v timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 \
        --seqs 512,1024 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[$v] /"
    STG_ATT_FWD_PERSIST=$v attn_d128 | sed "s/^/[$v] /"
done
say "rates done"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "small 512 persistent r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    STG_ATT_FWD_PERSIST=0 stg_step "small 512 a block an item r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    stg_step "medium 1024 ib persistent r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
    STG_ATT_FWD_PERSIST=0 stg_step "medium 1024 ib a block an item r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
done
perf_pack
