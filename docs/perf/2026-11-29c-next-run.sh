#!/usr/bin/env bash
# For the session after the twentieth (2026-11-29), a first call of about 6 minutes. Not run: prepared after the
# twentieth's device time ran out. First, here: `git apply docs/perf/2026-11-29c-dq1-async.patch` (compiled for
# sm_90a; ptxas: no spills at head dim 64; 112 bytes at 80, whose single-pass consumers take 232 registers and the
# producer 40, and read -lse and D from shared memory).
# What it is: the single pass's dQ product (dQ = dS K of a tile) issued inside the ring's turn of the NEXT tile, as
# the first commit group ahead of that tile's Sᵀ and dPᵀ, and written out (f32 tile, turn, bulk reduction) as soon as
# it is done, while those products run; the dS tile is stored after the tile's softmax and read by the next turn.
# Why: call 3 of the twentieth session split the single pass's loss: no additions at all ran at 222 against the two
# launches' 294 (head dim 64, seq 16384), unordered additions 216, ordered 191. What is left without additions is the
# dQ step each warpgroup ran alone every tile: dS stored, a barrier, the product issued outside the ring (behind the
# other warpgroup's products on the tensor cores) and waited for, a 16 KiB f32 tile written, two barriers.
# Predicted: STG_ATT_BWD_DQ=1 at head dim 64, seq 16384, 300-360 TFLOP/s (above the two launches' 295: make it the
# default at 64 in ws_bwd_dq1 and run the suite), 4096 less so; head dim 80 uncertain (its spills).
# Then, in the same call, docs/perf/2026-11-29c-d128-regs.patch, applied by this script after the first build (the
# binary before it kept as stg.old, the two alternating): the dk/dv kernel's consumers at 224 registers and the
# producer at 56 at head dim 128 too (ptxas: spills 112 -> 36 bytes; at 240 / 24 the producer spills). Predicted: head
# dim 128's backward +2-5% (call 1: 289 / 333-338 TFLOP/s at 4096 / 16384); if so, keep it.
# About 8 minutes in all: run it under `timeout 590`.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29c-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
grep -q "issue_dq" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29c-dq1-async.patch first"; exit 2; }
perf_build || { perf_pack; exit 1; }
ok1=1
attn_tests dq1 STG_ATT_BWD_DQ=1 || ok1=0
attn_tests default
say "tests done"
for r in 1 2; do for dq in 0 1; do
    [ $dq = 1 ] && [ $ok1 = 0 ] && continue
    echo "== STG_ATT_BWD_DQ=$dq round $r"
    attn_rates STG_ATT_BWD_DQ=$dq
done; done
say "attention A/B done"
cp build-gpu/stg "$out/l/stg.old"
if git apply docs/perf/2026-11-29c-d128-regs.patch && perf_build; then
    (cd build-gpu && STG_TEST_FILTER='*attention*' timeout 45 ./test_gpu_mm_attn 2>&1 | grep -E "PASSED|FAILED|ERROR" | head -5)
    for r in 1 2; do for b in "$out/l/stg.old" build-gpu/stg; do
        echo "== head dim 128, $b round $r"
        timeout 60 "$b" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    done; done
else
    echo "the head-dim-128 registers patch did not apply or build"
fi
rm -f "$out/l/stg.old"
say "head dim 128 A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
# The two launches' split at head dim 64, seq 16384 (which kernel to work on if the single pass still loses): each
# kernel's time and speed-of-light summary from Nsight Compute, two backwards' worth
if [ "$(el)" -lt 300 ]; then
    timeout 90 ncu -k regex:"att_ws_(dkdv|dq)_kernel" -c 4 --section SpeedOfLight build-gpu/stg attn-bench --device cuda \
        --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1 > "$out/l/ncu.txt" 2>&1
    echo "ncu: $?"; grep -E "att_ws_|Duration|Compute \(SM\) Throughput|Memory Throughput" "$out/l/ncu.txt" | sed 's/  */ /g' | head -24
    say "ncu done"
fi
if [ $ok1 = 1 ]; then
    STG_ATT_BWD_DQ=1 timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 memcheck:test_gpu_mm_attn:'*attention*' \
        racecheck:test_gpu_mm_attn:'*attention*' synccheck:test_gpu_ops:'*attention_gqa*'
    for dq in 0 1; do
        STG_ATT_BWD_DQ=$dq stg_step "small ctx512 b4 STG_ATT_BWD_DQ=$dq" models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40
        STG_ATT_BWD_DQ=$dq stg_step "llama 1B ctx4096 b1 STG_ATT_BWD_DQ=$dq" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
    done
    say "sanitizers and steps done"
fi
# the suite on the final tree (both patches); racecheck above ran test_gpu_mm_attn's head-dim-128 cases on it too
[ "$(el)" -lt 420 ] && (cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
perf_pack
