#!/usr/bin/env bash
# Twelfth session, last device call: the mma.sync and CUDA-core attention backward kernels (the
# fallback on GPUs without sm_90a, and fp32) without integer divisions in their loops, as the wgmma
# one (ops/attention/rows.cuh att_grp); then the strongest-peer rows of the small model.
# GPU machine, repository root, carrying .deps, peer/ and .old (git archive of the tree before both
# changes):   docs/perf/2026-11-28e-final-run.sh OUT
#  1. builds: build-gpu (all), build-nowg (-DSTG_NO_WGMMA_BWD: the bf16 backward on mma.sync) and
#     .old/build-nowg (the same flag, the tree before), side by side;
#  2. ctest -L gpu on build-gpu, and test_gpu_ops of build-nowg (its attention cases on mma.sync), with
#     memcheck and racecheck of its small grouped-query cases;
#  3. stg attn-bench, old and new mma.sync builds alternating: MHA B4 H16 and GQA B1 H32/8, Dh64, S4096;
#  4. tools/speed_run.sh build-gpu/stg OUT/speed small (ctx 512 and 1024 beside the peer, both modes).
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-nowg $cfg -DCMAKE_CUDA_FLAGS=-DSTG_NO_WGMMA_BWD > "$out/l/cmake_nowg.txt" 2>&1 &&
    cmake --build build-nowg --target stg test_gpu_ops > "$out/l/build_nowg.txt" 2>&1; echo "build-nowg: $?") &
# shellcheck disable=SC2086
(cd .old && cmake -S . -B build-nowg $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DSTG_NO_WGMMA_BWD > /dev/null 2>&1 &&
    cmake --build build-nowg --target stg > "$out/l/build_old_nowg.txt" 2>&1; echo "old build-nowg: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build-gpu: $?")
wait
say "built"
(cd build-gpu && timeout 200 ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
(cd build-nowg && timeout 200 ./test_gpu_ops > "$out/l/ops_nowg.txt" 2>&1; echo "test_gpu_ops (mma.sync backward) exit $?" >> "$out/l/ops_nowg.txt") &
tools/sanitize_gpu.sh build-nowg "$out/l" 180 memcheck:test_gpu_ops:*gqa_small* racecheck:test_gpu_ops:*gqa_small* > "$out/l/sanitize_nowg.txt" 2>&1 &
wait
say "checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"; grep -E "PASSED|FAILED|exit" "$out/l/ops_nowg.txt"; cat "$out/l/sanitize_nowg.txt"
for i in 1 2; do
    for b in .old/build-nowg build-nowg; do
        echo "== $b (backward on mma.sync)"
        $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 64 --seqs 4096 --iters 10 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 10 2>&1 | grep flash
    done
done
say "attention done"
timeout 300 tools/speed_run.sh build-gpu/stg "$out/speed" small
python3 tools/speed_table.py "$out/speed"
say "done"
tar -czf "$out/logs.tgz" -C "$out" l speed
