#!/usr/bin/env bash
# Nineteenth session (2026-11-29), call 3. Call 2 (turns passed a tile late, grid (kv heads, batch, key blocks))
# hung in the first bf16 backward test (S 200). A CPU model of the protocol (turns, ring, stages) finds no cycle,
# so the suspect is warp 0 of a warpgroup: its lane 0 spins for a turn while the other lanes go on to .aligned
# barriers and products. Now every one-lane step ends with __syncwarp. STG_ATT_DQ_DEFER=0 passes each turn at once
# (call 1's protocol) with the new grid order: the A/B that separates the two changes.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-call3.sh OUT
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
for df in 0 1; do for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_ATT_DQ_DEFER=$df STG_TEST_FILTER='*attention*' timeout 45 stdbuf -oL ./$p > "$out/l/${p}_$df.txt" 2>&1)
    rc=$?; echo "$p attention, STG_ATT_DQ_DEFER=$df: $rc $(grep -E "PASSED|FAILED" "$out/l/${p}_$df.txt")"; grep -m3 -E "ERROR|differs" "$out/l/${p}_$df.txt"
    if [ $rc != 0 ]; then [ $df = 1 ] && ok1=0; echo "  last lines:"; tail -2 "$out/l/${p}_$df.txt"; break; fi
done; done
say "tests done"
if [ $ok1 = 0 ]; then
    f=$(find build-gpu -name "attention_ws_bwd.cu.o" | head -1)
    cuobjdump -sass "$f" > "$out/l/ws_bwd.sass" 2>&1; echo "sass: $(wc -l < "$out/l/ws_bwd.sass") lines"
fi
for r in 1 2; do for v in "0 1" "1 0" "1 1"; do
    set -- $v; [ $2 = 1 ] && [ $ok1 = 0 ] && continue
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
tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"
