#!/usr/bin/env bash
# For the session after the eighteenth (2026-11-29): the prepared single-pass attention backward, in one call of about
# 7 minutes. First, here: `git apply docs/perf/2026-11-29-dq1.patch` (compiled for sm_90a, not run). What it is: at head
# dims 64 and 80 the warp-specialised dk/dv blocks also take dQ = dS K over their keys (dS staged in shared memory,
# K resident) and add it with one bulk reduction a warpgroup and row tile into an f32 sum in the workspace, in a
# fixed order (a counter per row tile: key block x's warpgroup w after x - 1's; blocks visit their row tiles from
# the last down, kv heads minor in the grid), then one pass writes dq in bf16. No dq launch: 5 tile products a tile
# pair instead of 7. STG_ATT_BWD_DQ=0 runs the landed two launches. ptxas: no spills at 64 and 80. Predicted:
# backward 64 / 80 at 16384 295 / 300 -> ~360-390 TFLOP/s (at most 1.4x less the ordered additions' waits),
# 4096 rows less (the waits are a larger share). A hang (an ordering bug) shows as a test timing out.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29-next-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q "DQ1" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29-dq1.patch first"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
hang=0
for dq in 1 0; do for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_ATT_BWD_DQ=$dq STG_TEST_FILTER='*attention*' timeout 60 stdbuf -oL ./$p > "$out/l/${p}_$dq.txt" 2>&1)
    rc=$?; echo "$p attention, STG_ATT_BWD_DQ=$dq: $rc $(grep -E "PASSED|FAILED" "$out/l/${p}_$dq.txt")"; grep -m3 -E "ERROR|differs" "$out/l/${p}_$dq.txt"
    if [ $rc = 124 ]; then hang=1; echo "  timed out; last lines:"; tail -3 "$out/l/${p}_$dq.txt"; fi
done; done
say "tests done"
if [ $hang = 1 ]; then say "a test hung: sanitizers and rates skipped"; tar -czf "$out/logs.tgz" -C "$out" l; exit 1; fi
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
    racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'test_attention_gqa_small' synccheck:test_gpu_ops:'*attention_gqa*'
grep -hE "Race reported|access at" "$out"/l/san/racecheck_*.txt | sed 's/(const __nv.*float)//' | sort | uniq -c | sort -rn | head -6
say "sanitizers done"
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
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
