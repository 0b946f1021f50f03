#!/usr/bin/env bash
# Sixteenth session (2026-11-28i), call 5: issue 24's Llama row once more with --grad-dtype bf16 (call 2: 0.740 of a peer at
# 87.25 ms, which other calls measured at 85.3-86.3): Llama 3.2-1B (ctx 4096, batch 1, plain head) gradients fp32 / bf16 /
# bf16 with --gemm-tune on, alternating, 2 rounds, beside the peer (torch.compile reduce-overhead, cuDNN attention); and
# 2.7B at ctx 1024 (issue 28's 60% MFU row) with bf16 gradients, --gemm-tune off / on.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28i-call5.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for m in "fp32 off" "bf16 off" "bf16 on"; do
    set -- $m
    timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --grad-dtype "$1" \
        --gemm-tune "$2" --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B grads $1 tune $2 round $r"
done; done
say "llama done"
PYTHONUNBUFFERED=1 timeout 150 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
    --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "llama peer done"
for t in off on; do
    timeout 120 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 --precision bf16 --grad-dtype bf16 --gemm-tune $t \
        --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "2.7B ctx1024 b4 grads bf16 tune $t"
done
say "2.7B done"
tar -czf "$out/logs.tgz" -C "$out" l
