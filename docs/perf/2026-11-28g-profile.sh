#!/usr/bin/env bash
# Fourteenth session (2026-11-28g), call 4: where the time goes before the next changes. The Llama 3.2-1B
# step at ctx 4096 batch 1 (plain head) op by op, the 2.7B decode step at batch 1 and 64 op by op, and
# Nsight Compute on attention over the cache at both batches (the kernel the batch-64 step spends most in).
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28g-profile.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; say "build: $?"
timeout 120 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 \
    --warmup 3 --iters 5 --profile > "$out/l/llama1b-profile.txt" 2>&1; say "llama profile: $?"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for b in 1 64; do
    timeout 120 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
        -n 256 --batch $b --temperature 0 --json --profile > "$out/l/dec-b$b-profile.txt" 2>&1; say "decode b$b profile: $?"
    timeout 150 ncu --set full -k regex:attention_cached -s 40 -c 1 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 \
        --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 256 --batch $b --temperature 0 --json > "$out/l/ncu-dec-b$b.txt" 2>&1
    say "ncu b$b: $?"
done
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
