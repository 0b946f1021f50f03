#!/usr/bin/env bash
# Nineteenth session (2026-11-29), call 2: the single pass (DQ1) after call 1 measured it at half the two
# launches' rate (backward 64 at 16384: 296 -> 151 TFLOP/s). Why, by count: +4.2 us (4096) and +6.5 us (16384) a
# block and row tile. Each warpgroup waited for its own bulk reduction to reach the L2 before passing its turn
# (and warpgroup 1 for warpgroup 0's), inside the tensor-core ring, and the grid (kv heads, key blocks, batch)
# started 8 key blocks of a head together, in lock step. Now turns are passed a tile late (no warpgroup waits for
# its own reduction) and the grid is (kv heads, batch, key blocks). Predicted: DQ1 above the two launches at
# 16384 (295 -> 330-380), nearer at 4096 (the first key blocks' start-up lag is a larger share).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-call2.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
hang=0
for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_TEST_FILTER='*attention*' timeout 60 stdbuf -oL ./$p > "$out/l/${p}.txt" 2>&1)
    rc=$?; echo "$p attention: $rc $(grep -E "PASSED|FAILED" "$out/l/${p}.txt")"; grep -m3 -E "ERROR|differs" "$out/l/${p}.txt"
    if [ $rc = 124 ]; then hang=1; echo "  timed out; last lines:"; tail -3 "$out/l/${p}.txt"; fi
done
say "tests done"
if [ $hang = 1 ]; then say "a test hung: rates skipped"; tar -czf "$out/logs.tgz" -C "$out" l; exit 1; fi
for r in 1 2; do for dq in 0 1; do
    echo "== STG_ATT_BWD_DQ=$dq round $r"
    STG_ATT_BWD_DQ=$dq timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_BWD_DQ=$dq timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for dq in 0 1; do
    STG_ATT_BWD_DQ=$dq timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 STG_ATT_BWD_DQ=$dq"
    STG_ATT_BWD_DQ=$dq timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B ctx4096 b1 STG_ATT_BWD_DQ=$dq"
done
say "steps done"
timeout 120 tools/sanitize_gpu.sh build-gpu "$out/l/san" 110 memcheck:test_gpu_mm_attn:'*attention*' \
    racecheck:test_gpu_mm_attn:'*attention*' synccheck:test_gpu_ops:'*attention_gqa*'
say "sanitizers done"
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
