#!/usr/bin/env bash
# Sixteenth session (2026-11-28i), call 2: --grad-dtype bf16 (the products' weight gradients stored in bf16, as autocast
# rounds dW; the norm and AdamW read 2 bytes a parameter less, the products write 2 less). Builds build-gpu with the
# tests; the whole GPU suite (new: test_gpu_ops' optimizer with bf16 gradients beside fp32 ones in one table, and
# test_gpu_train's bf16-gradient steps against the CPU and graph replay against eager); memcheck of both; then Llama
# 3.2-1B (ctx 4096, batch 1, plain head) with gradients fp32 / bf16 / bf16 and --gemm-tune on, alternating, 2 rounds,
# and the Llama peer (torch.compile reduce-overhead, cuDNN attention) in the same call. Predicted: 973M of the 1.236G
# parameters get bf16 gradients: the norm and AdamW move ~3.9 GB less, ~1.0 ms at 4 TB/s, so 65.3 -> ~64.3 ms.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28i-call2.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -iE "warning|error" "$out/l/build.txt" | head -5)
say "built"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Not Run|Timeout" "$out/l/ctest.txt" | tail -6)
grep -E "optimizer bf16|bf16 flash|head dim 64" "$out/l/ctest.txt" | head -30
say "suite done"
timeout 150 tools/sanitize_gpu.sh build-gpu "$out/l/san" 140 memcheck:test_gpu_ops:'*optimizer*' memcheck:test_gpu_train:'*bf16_grads*'
tail -n 3 "$out"/l/san/*.txt
say "sanitizers done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for m in "fp32 off" "bf16 off" "bf16 on"; do
    set -- $m
    timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --grad-dtype "$1" \
        --gemm-tune "$2" --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B grads $1 tune $2 round $r"
done; done
say "llama A/B done"
timeout 120 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --grad-dtype bf16 \
    --warmup 3 --iters 5 --profile > "$out/l/l1b-bf16g-profile.txt" 2>&1
grep -E "adamw|global_norm" "$out/l/l1b-bf16g-profile.txt" | head -6
say "profile done"
PYTHONUNBUFFERED=1 timeout 150 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
    --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "llama peer done"
tar -czf "$out/logs.tgz" -C "$out" l
