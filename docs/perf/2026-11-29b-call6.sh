#!/usr/bin/env bash
# Not run: prepared in the nineteenth session (2026-11-29), whose device time ran out. First, here:
# `git apply docs/perf/2026-11-29b-dq1-per-wg.patch` (compiled for sm_90a; ptxas: head dim 80's single pass spills
# 112 bytes, 64's 4). Call 5's back-off A/B
# (longer polls -> slower: 32 ns 140, 512 ns 132, 4096 ns 83 TFLOP/s) says the single pass waits on its turn
# hand-offs, not on the L2. Where: with one shared sum, warpgroup 1 of a block waited for warpgroup 0's turn at
# every tile, so the two no longer ping-pong. Now each warpgroup has a sum and counters of its own (the convert
# kernel adds the two in order). Predicted: DQ1 above the two launches (296) at 64, 16384.
# Usage (GPU machine, repository root, carrying .deps): THIS OUT
set -u
out=${1:?usage: $0 OUT}; t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q "acc_w" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29b-dq1-per-wg.patch first"; exit 2; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1
timeout 100 cmake --build build-gpu --target stg test_gpu_ops > "$out/build.txt" 2>&1; echo "build: $?"
say "built"
(cd build-gpu && STG_ATT_BWD_DQ=1 STG_TEST_FILTER='*attention*' timeout 30 ./test_gpu_ops > "$out/t.txt" 2>&1; echo "test_gpu_ops attention, STG_ATT_BWD_DQ=1: $? $(grep -E "PASSED|FAILED" "$out/t.txt")")
for dq in 0 1; do
    echo "== STG_ATT_BWD_DQ=$dq"
    STG_ATT_BWD_DQ=$dq timeout 25 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 10 2>&1 | grep -E "^\| flash"
done
say "done"
