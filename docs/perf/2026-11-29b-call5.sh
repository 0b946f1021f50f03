#!/usr/bin/env bash
# Nineteenth session (2026-11-29), call 5 (the last of the session). Call 4: no hang, the GPU suite 14/14, but the
# single pass with turns passed late is no faster (backward 64 at 16384: 140 TFLOP/s; at once: 142; the two
# launches: 296). So neither a warpgroup's wait for its own reduction nor the grid order is the cost. By count,
# call 4 moved the f32 sums at 430-440 GB/s at both lengths (2 x 16 KiB a block and row tile). Suspect now: the
# turn counters' polling (a few hundred threads polling a few L2 lines every 32 ns) slowing the L2 around them.
# A/B of the back-off (STG_ATT_DQ_NS 32 / 512 / 4096). Predicted: if polling is the cost, 512 well above 140;
# if not, flat. Then issue 28's step rows not yet measured on the H200 (2.7B ctx 4096, medium ctx 1024) beside
# the strongest peer, as time allows. Usage (GPU machine, repository root, carrying .deps and peer): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "[$(el) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_TEST_FILTER='*attention*' timeout 45 stdbuf -oL ./$p > "$out/l/${p}.txt" 2>&1)
    echo "$p attention (default: two launches): $? $(grep -E "PASSED|FAILED" "$out/l/${p}.txt")"
    (cd build-gpu && STG_ATT_BWD_DQ=1 STG_TEST_FILTER='*attention*' timeout 45 stdbuf -oL ./$p > "$out/l/${p}_dq1.txt" 2>&1)
    echo "$p attention, STG_ATT_BWD_DQ=1: $? $(grep -E "PASSED|FAILED" "$out/l/${p}_dq1.txt")"
done
say "tests done"
echo "== default (two launches)"
timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
for ns in 32 512 4096; do
    echo "== STG_ATT_BWD_DQ=1 STG_ATT_DQ_NS=$ns"
    STG_ATT_BWD_DQ=1 STG_ATT_DQ_NS=$ns timeout 40 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
done
say "back-off A/B done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu','grad_dtype')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
row() { # size ctx batch peer-modes: run only when started before second $5
    if [ "$(el)" -gt "$5" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    for o in "" "--grad-dtype bf16 --gemm-tune on"; do
        # shellcheck disable=SC2086 # o is a word list
        timeout 120 build-gpu/stg bench "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" --precision bf16 $o --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "$1 ctx$2 b$3 [${o:-default}]"
    done
    for m in $4; do
        if [ "$m" = cg ]; then extra="--compile-mode reduce-overhead"; else extra=""; fi
        # shellcheck disable=SC2086 # extra is a word list
        PYTHONUNBUFFERED=1 timeout 170 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes "$1" --ctx "$2" --batch "$3" --modes bf16c $extra \
            --warm 3 --iters 10 --out "$out/l/peer_$1_$2_$m.json" 2>&1 | grep -E '^\{' | tail -1
    done
    say "$1 ctx $2 done"
}
row 2.7B 4096 1 "c" 200
row medium 1024 4 "c cg" 320
say "done"
tar -czf "$out/logs.tgz" -C "$out" l
