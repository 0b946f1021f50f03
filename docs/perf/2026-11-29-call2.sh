#!/usr/bin/env bash
# 2026-11-29, call 2: the warp-specialised attention backward after call 1's hang at head dim 128 (the dk/dv
# consumers asked setmaxnreg for 2 x 240 + 32 registers a thread pair, past the 3 x 168 a 384-thread block is
# launched with; now 240 + 24, checked by tm_regs_fit). Tests with the new backward on and off, sanitizers
# (racecheck's hazard lines printed), the attention A/B beside cuDNN, the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29-call2.sh OUT
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
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 100 stdbuf -oL ./test_gpu_ops > "$out/l/ops_$ws.txt" 2>&1; echo "test_gpu_ops attention, STG_ATT_WS_BWD=$ws: $?"; grep -E "PASSED|FAILED" "$out/l/ops_$ws.txt")
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 100 stdbuf -oL ./test_gpu_mm_attn > "$out/l/mm_$ws.txt" 2>&1; echo "test_gpu_mm_attn attention, STG_ATT_WS_BWD=$ws: $?"; grep -E "PASSED|FAILED" "$out/l/mm_$ws.txt")
done
say "tests done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
    racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'test_attention_gqa_small' synccheck:test_gpu_ops:'*attention_gqa*'
grep -hE "Race reported|Error|access at|hazard" "$out"/l/san/racecheck_*.txt | sort | uniq -c | sort -rn | head -30
say "sanitizers done"
for ws in 0 1; do
    echo "== STG_ATT_WS_BWD=$ws"
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS_BWD=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
