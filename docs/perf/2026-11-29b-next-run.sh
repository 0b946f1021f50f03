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
# Also, when docs/perf/2026-11-29b-d128-ssa.patch is applied as well (it applies beside the first; compiled, not run):
# head dim 128's warp-specialised backward (STG_ATT_WS_BWD=all) with Pᵀ and dSᵀ in shared memory instead of 32
# registers (ptxas: its spills 196 -> 112 bytes). Predicted: above its 203 / 231 TFLOP/s of 2026-11-29 call 2, and
# if above the cp.async kernel's 269 / 314, make it the default at 128 (att_ws_bwd_supported).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
grep -q "ws_pend" ops/attention/sm90a/attention_ws_bwd.cu || { echo "apply docs/perf/2026-11-29b-dq1-per-wg.patch first"; exit 2; }
perf_build || { perf_pack; exit 1; }
# the backward kernels' SASS, for reading where the spills sit (ptxas -v gives no places): local loads and stores
f=$(find build-gpu -name "attention_ws_bwd.cu.o" | head -1)
cuobjdump -sass "$f" > "$out/l/ws_bwd.sass" 2>&1 && echo "sass: local loads/stores $(grep -cE "LDL|STL" "$out/l/ws_bwd.sass")"
ok1=1
attn_tests dq1 STG_ATT_BWD_DQ=1 || ok1=0
attn_tests dq0 STG_ATT_BWD_DQ=0
ssa=0; grep -q "constexpr bool SSA" ops/attention/sm90a/attention_ws_bwd.cu && ssa=1
[ $ssa = 1 ] && { attn_tests ws_all STG_ATT_WS_BWD=all || ssa=0; }
say "tests done"
for r in 1 2; do for dq in 0 1; do
    [ $dq = 1 ] && [ $ok1 = 0 ] && continue
    echo "== STG_ATT_BWD_DQ=$dq round $r"
    STG_ATT_BWD_DQ=$dq timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_BWD_DQ=$dq timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done; done
if [ $ssa = 1 ]; then for r in 1 2; do for m in 1 all; do
    echo "== head dim 128, STG_ATT_WS_BWD=$m round $r"
    STG_ATT_WS_BWD=$m timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
done; done; fi
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
if [ $ok1 = 1 ]; then
    STG_ATT_BWD_DQ=1 timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 memcheck:test_gpu_mm_attn:'*attention*' \
        racecheck:test_gpu_mm_attn:'*attention*' synccheck:test_gpu_ops:'*attention_gqa*'
    say "sanitizers done"
    for dq in 0 1; do
        STG_ATT_BWD_DQ=$dq stg_step "small ctx512 b4 STG_ATT_BWD_DQ=$dq" models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40
        STG_ATT_BWD_DQ=$dq stg_step "llama 1B ctx4096 b1 STG_ATT_BWD_DQ=$dq" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
    done
    say "steps done"
    (cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
    say "suite done"
fi
perf_pack
