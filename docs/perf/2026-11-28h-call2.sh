#!/usr/bin/env bash
# Fifteenth session (2026-11-28h), call 2, on f8126c7 (nsplit1 and the dq-mask landed): Llama 3.2-1B at ctx 4096,
# batch 1, plain head, with and without --gemm-tune on, alternating (2 rounds), beside tools/ref/llama3_peer.py
# (reduce-overhead, cuDNN attention) in the same call, and the tuned step's profile (which GEMM shapes the tuning
# changes); then the attention table at head dims 64, 80 and 128 (seq 4096 and 16384, batch 4, 16 heads) beside
# peer/torch_attn.py (cuDNN, FlashAttention-2). Usage (GPU machine, carrying .deps, peer): docs/perf/2026-11-28h-call2.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
for r in 1 2; do for t in off on; do
    timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune $t \
        --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('llama 1B gemm-tune', sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $t || tail -3 "$out/l/l1b.err"
done; done
say "stg done"
timeout 120 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune on \
    --warmup 3 --iters 5 --profile > "$out/l/l1b-tuned-profile.txt" 2>&1
say "tuned profile done: $?"
sed -n '/gemms/,$p' "$out/l/l1b-tuned-profile.txt" | head -16
PYTHONUNBUFFERED=1 timeout 220 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
    --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "peer done"
timeout 90 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "flash|head"
say "stg attention done"
PYTHONUNBUFFERED=1 timeout 180 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -v EFFICIENT
say "torch_attn done"
tar -czf "$out/logs.tgz" -C "$out" l
