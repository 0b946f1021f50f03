#!/usr/bin/env bash
# 2026-11-29 (twentieth session), call 2 (about 6 minutes). After call 1: the per-warpgroup single pass with its
# convert kernel's offset fixed (warpgroup w's sum at w * nacc * 64 * D), and head dim 128 on the warp-specialised
# backward by default (Pᵀ / dSᵀ in shared memory; call 1: 289 / 338 against the cp.async kernel's 268 / 313).
# Predicted: STG_ATT_BWD_DQ=1 above the two launches (call 1: 296 / 305 at 64 / 80, seq 16384; 246 / 257 at 4096),
# since no warpgroup waits for the other's turn any more; if so it becomes the default at 64 and 80.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29c-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
ok1=1
attn_tests dq1 STG_ATT_BWD_DQ=1 || ok1=0
attn_tests default
say "tests done"
for r in 1 2; do for dq in 0 1; do
    [ $dq = 1 ] && [ $ok1 = 0 ] && continue
    echo "== STG_ATT_BWD_DQ=$dq round $r"
    STG_ATT_BWD_DQ=$dq timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    STG_ATT_BWD_DQ=$dq timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
done; done
echo "== head dim 128 (default now: warp-specialised)"
timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
say "attention A/B done"
# the head-dim-128 kernel's new shared-memory tiles under racecheck; the single pass under memcheck and synccheck
STG_TEST_FILTER='*attention*' timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san" 90 racecheck:test_gpu_mm_attn:'*attention*' \
    memcheck:test_gpu_ops:'*attention_gqa*'
if [ $ok1 = 1 ]; then
    STG_ATT_BWD_DQ=1 timeout 100 tools/sanitize_gpu.sh build-gpu "$out/l/san1" 90 memcheck:test_gpu_mm_attn:'*attention*' \
        synccheck:test_gpu_ops:'*attention_gqa*'
    for dq in 0 1; do
        STG_ATT_BWD_DQ=$dq stg_step "small ctx512 b4 STG_ATT_BWD_DQ=$dq" models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40
        STG_ATT_BWD_DQ=$dq stg_step "llama 1B ctx4096 b1 STG_ATT_BWD_DQ=$dq" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
    done
fi
say "sanitizers and steps done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
perf_pack
