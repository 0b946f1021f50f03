#!/usr/bin/env bash
# 2026-11-29, call 3: the warp-specialised attention backward after call 2 (racecheck: the dk/dv consumers' lanes
# 1..31 read a stage's statistics unordered before lane 0 released it; now __syncwarp first) with head dim 128 left
# on the cp.async kernels unless STG_ATT_WS_BWD=all (slower there in call 2). Tests for the three settings,
# sanitizers for default and all, the attention rates beside cuDNN, small and Llama 1B steps A/B, the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29-call3.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
for ws in 1 all; do
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 100 stdbuf -oL ./test_gpu_mm_attn > "$out/l/mm_$ws.txt" 2>&1; echo "test_gpu_mm_attn attention, STG_ATT_WS_BWD=$ws: $?"; grep -E "PASSED|FAILED" "$out/l/mm_$ws.txt")
done
say "tests done"
for ws in 1 all; do
    STG_ATT_WS_BWD=$ws timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san$ws" 190 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
        racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'test_attention_gqa_small' synccheck:test_gpu_ops:'*attention_gqa*'
    grep -hE "Race reported|access at" "$out"/l/san$ws/racecheck_*.txt | sed 's/(const __nv.*float)//' | sort | uniq -c | sort -rn | head -8
    say "sanitizers STG_ATT_WS_BWD=$ws done"
done
for ws in 0 1; do
    echo "== STG_ATT_WS_BWD=$ws"
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for ws in 0 1; do
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 STG_ATT_WS_BWD=$ws"
    STG_ATT_WS_BWD=$ws timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B ctx4096 b1 STG_ATT_WS_BWD=$ws"
done; done
say "steps done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
