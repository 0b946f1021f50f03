#!/usr/bin/env bash
# For the session after the seventeenth (2026-11-28j): the prepared warp-specialised attention backward, in one call of
# about 6 minutes. First, here: `git apply docs/perf/2026-11-28j-ws-bwd.patch`, then (optional, after it)
# `git apply docs/perf/2026-11-28j-drop-cpasync-fwd.patch` (both compiled for sm_90a, not run). The second deletes the
# cp.async wgmma forward that the warp-specialised one replaced (STG_ATT_WS=0 then runs mma.sync, the issue's fallback;
# the duplicate softmax code goes with it). What the first is:
# ops/attention/sm90a/attention_ws_bwd.cu, the backward's dq and dk/dv blocks scheduled as the landed forward is (a
# producer warpgroup, mbarrier stages, two consumer warpgroups taking turns on the tensor cores through a ring of named
# barriers, no block barrier in the loops): dq blocks stream K and V by tensor copy (tm_kv_producer, shared with the
# forward now), dk/dv blocks stream the grouped query rows with cp.async from 128 producer threads whose copies complete
# on the stage's full barrier (cp.async.mbarrier.arrive). Two launches (the landed head dims 64 and 80 fuse dk/dv and dq
# blocks in one). ptxas: no spills but at head dim 128's dk/dv (160 bytes at 240 registers). STG_ATT_WS_BWD=0 runs the
# landed kernels in the same binary. Predicted: head dim 128's backward 269 / 314 -> ~330 / ~380 TFLOP/s (the forward's
# gain at 128 was 30%, its consumers were spilling too); 64 and 80 +5-15%. If a head dim is slower, att_ws_bwd_supported
# leaves it out. A hang (a barrier bug) shows as a test timing out: each run below is under `timeout`.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-28j-next-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
[ -f ops/attention/sm90a/attention_ws_bwd.cu ] || { echo "apply docs/perf/2026-11-28j-ws-bwd.patch first"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
for ws in 1 0; do
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 120 ./test_gpu_ops > "$out/l/ops_$ws.txt" 2>&1; echo "test_gpu_ops attention, STG_ATT_WS_BWD=$ws: $?"; grep -E "PASSED|FAILED" "$out/l/ops_$ws.txt")
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 120 ./test_gpu_mm_attn > "$out/l/mm_$ws.txt" 2>&1; echo "test_gpu_mm_attn attention, STG_ATT_WS_BWD=$ws: $?"; grep -E "PASSED|FAILED" "$out/l/mm_$ws.txt")
done
say "tests done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
    racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'test_attention_gqa_small' synccheck:test_gpu_ops:'*attention_gqa*'
say "sanitizers done"
for r in 1 2; do for ws in 0 1; do
    echo "== STG_ATT_WS_BWD=$ws round $r"
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS_BWD=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_WS_BWD=$ws timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for ws in 0 1; do
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 STG_ATT_WS_BWD=$ws"
    STG_ATT_WS_BWD=$ws timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B ctx4096 b1 STG_ATT_WS_BWD=$ws"
done
say "steps done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
say "suite done"
if [ "${MUTATE:-0}" = 1 ]; then timeout 400 tools/mutate_wgmma.sh build-gpu; say "mutation check done: $?"; fi
tar -czf "$out/logs.tgz" -C "$out" l
