#!/usr/bin/env bash
# Fifteenth session (2026-11-28h), call 6: `stg sample --gemm-tune on` (new) against off, the 2.7B decode at batch 64 and 1
# (512-token prompt, 512 new tokens, greedy), alternating, 2 rounds at batch 64. The eager profile of the 2.7B batch-64
# step (docs/perf/2026-11-28g-call4/dec-b64-profile.txt) has its products reading the weights at 2.2 TB/s (the wo
# product at 1.2 TB/s); tuning may pick split-K kernels for those few-row shapes.
# Usage (GPU machine, carrying .deps): docs/perf/2026-11-28h-call6.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF > /dev/null 2>&1 &&
    timeout 200 cmake --build build-gpu --target stg > "$out/build.txt" 2>&1; echo "build: $?"
say "built"
head -c 512 /dev/urandom > "$out/p.txt" && build-gpu/stg tokens "$out/p.txt" -o "$out/p.bin" > /dev/null
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
for r in 1 2; do for t in off on; do
    echo "2.7B b64 tune $t round $r: $(timeout 60 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/p.bin" -n 512 --batch 64 --temperature 0 --gemm-tune $t 2>&1 | tps)"
done; done
for t in off on; do
    echo "2.7B b1 tune $t: $(timeout 60 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/p.bin" -n 512 --batch 1 --temperature 0 --gemm-tune $t 2>&1 | tps)"
done
say "end"
rm -f "$out/p.bin"
