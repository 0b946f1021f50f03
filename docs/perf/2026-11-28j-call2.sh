#!/usr/bin/env bash
# Seventeenth session (2026-11-28j), call 2: the warp-specialised attention forward (ops/attention/sm90a/attention_ws.cu:
# a producer's tensor copies into mbarrier stages, consumer warpgroups taking turns on the tensor cores), first run.
# Its attention tests (test_gpu_ops, test_gpu_mm_attn) with it and with STG_ATT_WS=0 (the cp.async kernel), memcheck and
# racecheck of them; the attention table A/B (STG_ATT_WS=0 / 1 alternating, 2 rounds) beside peer/torch_attn.py (cuDNN)
# in the same call; the small and 2.7B steps A/B. Usage (GPU machine, repository root, carrying .deps and peer): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
for ws in 1 0; do
    (cd build-gpu && STG_ATT_WS=$ws STG_TEST_FILTER='*attention*' timeout 120 ./test_gpu_ops > "$out/l/ops_ws$ws.txt" 2>&1; echo "test_gpu_ops attention, STG_ATT_WS=$ws: $?"; grep -E "PASSED|FAILED|rel|ERROR" "$out/l/ops_ws$ws.txt" | head -8)
    (cd build-gpu && STG_ATT_WS=$ws timeout 120 ./test_gpu_mm_attn > "$out/l/mm_ws$ws.txt" 2>&1; echo "test_gpu_mm_attn, STG_ATT_WS=$ws: $?"; grep -E "PASSED|FAILED|ERROR" "$out/l/mm_ws$ws.txt" | head -8)
done
say "tests done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_ops:'*attention*' racecheck:test_gpu_ops:'*attention*' \
    memcheck:test_gpu_mm_attn synccheck:test_gpu_ops:'*attention*'
say "sanitizers done"
for r in 1 2; do for ws in 0 1; do
    echo "== STG_ATT_WS=$ws round $r"
    STG_ATT_WS=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "stg attention done"
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for ws in 0 1; do
    STG_ATT_WS=$ws timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 STG_ATT_WS=$ws round $r"
    STG_ATT_WS=$ws timeout 60 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 --precision bf16 --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "2.7B ctx4096 b1 STG_ATT_WS=$ws round $r"
done; done
say "steps done"
tar -czf "$out/logs.tgz" -C "$out" l
