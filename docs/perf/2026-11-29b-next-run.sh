#!/usr/bin/env bash
# For the session after the nineteenth (2026-11-29), a first call of about 6 minutes. Not run: prepared when the
# nineteenth's device time ran out. First, here: `git apply docs/perf/2026-11-29b-dq1-per-wg.patch` (compiled for
# sm_90a; ptxas: no spills at 64 and 80; the pending turn kept in shared memory).
# What it is: the single-pass backward (STG_ATT_BWD_DQ=1) with a sum and turn counters per consumer warpgroup (the
# convert kernel adds the two sums in order, so the bits stay fixed). Why: call 5's back-off A/B (longer polls ->
# slower: 32 ns 140, 512 ns 132, 4096 ns 83 TFLOP/s) says the single pass waits on its turn hand-offs; with one
# shared sum, warpgroup 1 of a block waited for warpgroup 0's turn at every tile, so the two no longer ping-pong.
# Predicted: STG_ATT_BWD_DQ=1 above the two launches (296 at 64, 16384; 306 at 80), 4096 less so (the first key
# blocks' lag is a larger share). If so, make it the default at 64 and 80 (ws_bwd_dq1) and rerun the suite.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-next-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q "ws_pend" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29b-dq1-per-wg.patch first"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
ok1=1
for v in "1 1" "0 1"; do set -- $v; for p in test_gpu_mm_attn test_gpu_ops; do
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
[ $ok1 = 1 ] && STG_ATT_BWD_DQ=1 timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 memcheck:test_gpu_mm_attn:'*attention*' \
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
