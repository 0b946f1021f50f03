#!/usr/bin/env bash
# Seventeenth session (2026-11-28j), call 4 (the last): the warp-specialised attention forward with the shapes call 3
# chose (head dim 64: 2 warpgroups, 128-key tiles; 80: 3 warpgroups; 128: 4 stages): its attention tests, memcheck and
# racecheck (the attention tests only: the sanitizer fails on cuBLAS's kernels in test_gpu_mm_attn's matmul tests), the
# attention table beside peer/torch_attn.py (cuDNN) and STG_ATT_WS=0; the 2.7B at ctx 1024 (batch 4) and, if time is
# left, ctx 4096 (batch 1), stg default and with --grad-dtype bf16 --gemm-tune on beside torch_lm.py --flash --sdpa cudnn
# (default compile); the GPU suite last. Usage (GPU machine, repository root, carrying .deps and peer): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "[$(el) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
(cd build-gpu && STG_TEST_FILTER='*attention*' timeout 120 ./test_gpu_ops > "$out/l/ops.txt" 2>&1; echo "test_gpu_ops attention: $?"; grep -E "PASSED|FAILED" "$out/l/ops.txt")
(cd build-gpu && timeout 120 ./test_gpu_mm_attn > "$out/l/mm.txt" 2>&1; echo "test_gpu_mm_attn: $?"; grep -E "PASSED|FAILED" "$out/l/mm.txt")
timeout 150 tools/sanitize_gpu.sh build-gpu "$out/l/san" 140 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
    racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'test_attention_gqa_small'
say "tests and sanitizers done"
for ws in 1 0; do
    echo "== STG_ATT_WS=$ws"
    STG_ATT_WS=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "CUDNN|FLASH_ATT"
say "attention table done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu','grad_dtype')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for shape in "1024 4" "4096 1"; do
    set -- $shape
    if [ "$(el)" -gt 300 ]; then say "ctx $1 skipped (time)"; continue; fi
    for o in "" "--grad-dtype bf16 --gemm-tune on"; do
        # shellcheck disable=SC2086 # o is a word list
        timeout 120 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=$1 --set batch=$2 --precision bf16 $o --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "2.7B ctx$1 b$2 [${o:-default}]"
    done
    PYTHONUNBUFFERED=1 timeout 170 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes 2.7B --ctx $1 --batch $2 --modes bf16c --warm 3 --iters 10 \
        --out "$out/l/peer_2.7B_$1.json" 2>&1 | grep -E '^\{' | tail -1
    say "2.7B ctx $1 done"
done
if [ "$(el)" -lt 440 ]; then
    (cd build-gpu && timeout 140 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
else
    say "suite skipped (time)"
fi
say "done"
tar -czf "$out/logs.tgz" -C "$out" l
