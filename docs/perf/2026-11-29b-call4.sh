#!/usr/bin/env bash
# Nineteenth session (2026-11-29), call 4. Call 3 hung again with turns passed a tile late, and its A/B showed the
# new grid order alone does not help (turns passed at once: 142 / 161 TFLOP/s at 16384, call 1 151 / 166). The
# hang's cause: a stage was published by one barrier that every consumer warp waits at, so warpgroup 0 could not
# start the tile after warpgroup 1's, while warpgroup 1 waited for warpgroup 0's turn from that tile. Now each
# consumer warpgroup has its own barrier per stage (the producer arrives on both). Predicted: no hang; with turns
# passed late no warpgroup waits for its own reduction, so DQ1 near the dk/dv pass's rate plus a fifth product:
# backward 64 at 16384 296 -> 330-400 TFLOP/s. Also: the two launches (STG_ATT_BWD_DQ=0) use the new barriers.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-call4.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
ok1=1
for v in "1 1" "0 1" "1 0"; do set -- $v; for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_ATT_BWD_DQ=$1 STG_ATT_DQ_DEFER=$2 STG_TEST_FILTER='*attention*' timeout 45 stdbuf -oL ./$p > "$out/l/${p}_$1$2.txt" 2>&1)
    rc=$?; echo "$p attention, STG_ATT_BWD_DQ=$1 STG_ATT_DQ_DEFER=$2: $rc $(grep -E "PASSED|FAILED" "$out/l/${p}_$1$2.txt")"; grep -m3 -E "ERROR|differs" "$out/l/${p}_$1$2.txt"
    if [ $rc != 0 ]; then [ "$v" = "1 1" ] && ok1=0; echo "  last lines:"; tail -2 "$out/l/${p}_$1$2.txt"; break; fi
done; [ $ok1 = 0 ] && break; done
say "tests done"
if [ $ok1 = 0 ]; then
    f=$(find build-gpu -name "attention_ws_bwd.cu.o" | head -1)
    cuobjdump -sass "$f" > "$out/l/ws_bwd.sass" 2>&1; echo "sass: $(wc -l < "$out/l/ws_bwd.sass") lines"
fi
for r in 1 2; do for v in "0 1" "1 1"; do
    set -- $v; [ "$v" = "1 1" ] && [ $ok1 = 0 ] && continue
    echo "== STG_ATT_BWD_DQ=$1 STG_ATT_DQ_DEFER=$2 round $r"
    STG_ATT_BWD_DQ=$1 STG_ATT_DQ_DEFER=$2 timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_BWD_DQ=$1 STG_ATT_DQ_DEFER=$2 timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
[ $ok1 = 1 ] && timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 memcheck:test_gpu_mm_attn:'*attention*' \
    racecheck:test_gpu_mm_attn:'*attention*' synccheck:test_gpu_ops:'*attention_gqa*'
say "sanitizers done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
[ $ok1 = 1 ] && for dq in 0 1; do
    STG_ATT_BWD_DQ=$dq timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 STG_ATT_BWD_DQ=$dq"
    STG_ATT_BWD_DQ=$dq timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B ctx4096 b1 STG_ATT_BWD_DQ=$dq"
done
say "steps done"
[ $ok1 = 1 ] && (cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
