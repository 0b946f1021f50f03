#!/usr/bin/env bash
# 2026-11-28 (tenth session), device call 4 (carry .deps, .old, peer): docs/perf/2026-11-28c-run4.sh OUT
# 1. The fused head's backward tail (the last V mod 8 columns) with its dlogits rows 8 elements apart
#    (16-byte aligned) for cuBLASLt: call 3 measured the tail's products at ~0.78 ms of the backward's
#    2.63 ms with 2-element rows. Prediction: the backward 2.63 -> ~1.9 ms, the GPT-2 defaults 12.03 -> ~11.3.
#    Checks: ctest -L gpu, memcheck of test_gpu_head. .old = cb39626 (before the tail split).
# 2. Issue 28's table, the small group: tools/speed_run.sh build-gpu/stg OUT small.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/l/cmake_old.txt" 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1) &
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1) || { tail -30 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd build-gpu && timeout 260 ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
tools/sanitize_gpu.sh build-gpu "$out/l" 200 memcheck:test_gpu_head > "$out/l/sanitize.txt"
wait
say "checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"
cat "$out/l/sanitize.txt"
echo "== GPT-2 124M, batch 4, ctx 1024, bf16, vocab 50257, fused head: new against .old"
for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
    echo "$s: $($s bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --precision bf16 --warmup 5 --iters 30 | grep -E '^  time')"
done
build-gpu/stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --precision bf16 --warmup 3 --iters 10 --profile 2>&1 |
    grep -E "^  time|^  profile|linear_cross_entropy" | head -6
say "gpt2 done"
tools/speed_run.sh build-gpu/stg "$out/l/speed" small
python3 tools/speed_table.py "$out/l/speed"
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" .
