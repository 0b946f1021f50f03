#!/usr/bin/env bash
# 2026-11-28 (tenth session), device call 3 (carry .deps, .old, .peers): docs/perf/2026-11-28c-run3.sh OUT
# 1. The fused head's last V mod 8 vocabulary columns in products of their own (ops/loss/cuda.cu):
#    ctest -L gpu, memcheck of test_gpu_head; GPT-2 124M at its defaults (vocab 50257, fused head) and
#    at 50304, new against .old (cb39626's files). Prediction from call 2's profile: the head's forward
#    3.87 -> ~0.7 ms and its backward 2.37 -> ~1.9 ms, so the step 14.85 -> ~11.2 ms; 50304 unchanged.
# 2. Issue 27's small row: small, ctx 512, micro-batch 4, 8 micro-batches, beside torch.compile with
#    cuDNN attention, default and reduce-overhead (tools/issue_perf.sh OUT small_accum).
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
echo "== GPT-2 124M, batch 4, ctx 1024, bf16, new against .old"
for v in "50257 on" "50304 on"; do
    set -- $v
    for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
        echo "$s vocab $1 fused_head $2: $($s bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=$1 --set fused_head=$2 \
            --precision bf16 --warmup 5 --iters 30 | grep -E '^  time')"
    done
done
build-gpu/stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --precision bf16 --warmup 3 --iters 10 --profile 2>&1 |
    grep -E "^  time|^  profile|linear_cross_entropy" | head -8
say "gpt2 done"
tools/issue_perf.sh "$out/l/perf" small_accum
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" .
