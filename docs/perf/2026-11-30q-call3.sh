#!/usr/bin/env bash
# 2026-11-30, thirty-fourth session, call 3 (~8-9 minutes; run under `timeout 580`). The tree: the TMA dk/dv producer and
# head dim 128's stmatrix stores (both landed after calls 1-2), with the macros WS_DKDV_TQ_PR / WS_DKDV_TQ_RG (the
# registers of the TMA instantiation's producer and consumers; by default the cp.async one's 56 / 224, unchanged).
# rg = the tree built with -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240: the TMA producer needs no row addresses, so it gives
# 32 more registers back and each consumer gets 16 more (ptxas: 0 spills either way). Predicted: the backward 0-2%
# faster (the consumers do not spill at 224; more registers only free the scheduler), the forward unchanged.
# Then the 2.7B rows of issue 28 with the landed tree beside the reduce-overhead peer in this call: ctx 4096 batch 1
# (predicted ~154.5-155 ms, call 1's 154.7-154.9 for the TMA tree; stmatrix is D128 only, the 2.7B is head dim 80) and
# ctx 1024 batch 4 (~139.5).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30q-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
rm -rf /tmp/rg && mkdir -p /tmp/rg && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/rg
(cd /tmp/rg && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    "-DCMAKE_CUDA_FLAGS=-DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240" > "$out/l/cmake_rg.txt" 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg --target test_gpu_mm_attn --target test_gpu_ops > "$out/l/build_rg.txt" 2>&1
    echo "rg build: $?") &
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
B=("tree:build-gpu/stg")
if (cd /tmp/rg && attn_tests default && attn_tests hgroup3 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 &&
    attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4); then
    B+=("rg:/tmp/rg/build-gpu/stg")
    tools/sanitize_gpu.sh /tmp/rg/build-gpu "$out/l/san_rg" 120 racecheck:test_gpu_mm_attn:'*attention_bf16*'
fi
say "tests done"
attn_ab 2 "${B[@]}"
say "rates done"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    for b in "${B[@]}"; do
        STG_BIN=${b#*:} stg_step "2.7B 4096 b1 [options ib, ${b%%:*}] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
    done
    stg_step "2.7B 1024 b4 [options ib, tree] r$r" models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 "${IB[@]}"
done
say "stg done"
PEER_TIMEOUT=200 peer_step 2.7B 4096 1 cg
say "2.7B ctx 4096 reduce-overhead peer done"
if [ "$(el)" -lt 420 ]; then
    PEER_TIMEOUT=$((570 - $(el))) peer_step 2.7B 1024 4 cg
    say "2.7B ctx 1024 reduce-overhead peer done"
fi
perf_pack
