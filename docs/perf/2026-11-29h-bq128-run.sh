#!/usr/bin/env bash
# For a session after the twenty-fifth (2026-11-29): the dk/dv blocks with row tiles of 128 (issue 28, the attention
# backward against cuDNN). One call of about 5 minutes (run it under `timeout 400`). Before it, here:
# `git show HEAD:ops/attention/sm90a/attention_ws_bwd.cu > peer/old_ws_bwd.cu && git apply docs/perf/2026-11-29h-dkdv-bq128.patch`
# The patch (compiled in the twenty-fifth session, never run): att_ws_dkdv_kernel's BQT = 128 at head dim 64 in the two
# launches, selected by STG_ATT_DKDV_BQ=128 (the default stays 64): a consumer warpgroup takes its 64 keys against 128
# rows a tile, Sᵀ and dPᵀ as two 64 x 64 halves each (four commit groups, each half's softmax once its product is
# done), Pᵀ and dSᵀ through shared memory as head dim 128 does, the dV / dK products over k-steps of 128 rows; the
# producer stores both statistics of its row, each 64-row half laid out as a 64-row tile's; registers 232 / 40.
# Why (docs/perf/LOG.md, twenty-first session): the dk/dv kernel is latency-bound on its consumers' chain, about half
# of whose ~290 instructions a tile are fixed (barriers, tests, descriptors, waits): paid once per twice the products.
# Predicted: head dim 64 backward at seq 16384 ~320 -> 360-400 TFLOP/s (cuDNN ~428), seq 4096 ~264 -> 290-320; the
# forward unchanged. If the tests fail: the likeliest places are the statistics' slots (producer against consumer) and
# the Pᵀ / dSᵀ panels (half h at h x 8 KiB).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-bq128-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg test_gpu_mm_attn test_gpu_ops || { perf_pack; exit 1; }
ok=1
attn_tests bq128 STG_ATT_DKDV_BQ=128 || ok=0
attn_tests bq64 || ok=0
say "tests done"
if [ $ok = 1 ]; then
    STG_ATT_DKDV_BQ=128 tools/sanitize_gpu.sh build-gpu "$out/l" 120 racecheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention*' 2>&1 | tail -3
    say "sanitizers done"
fi
for r in 1 2; do
    echo "== 64-row tiles, round $r"; attn_rates
    [ $ok = 1 ] && { echo "== 128-row tiles, round $r"; attn_rates STG_ATT_DKDV_BQ=128; }
done
say "A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "cuDNN done"
[ $ok = 1 ] && [ "$(el)" -lt 300 ] && for m in "" "STG_ATT_DKDV_BQ=128"; do
    echo "== step, Llama 3.2-1B ctx 4096 batch 1 [$m]"
    env $m timeout 60 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --precision bf16 --warmup 3 --iters 10 --json > "$out/l/b.json" 2>&1
    med "$out/l/b.json" "llama 1B ctx4096 [$m]"
done
perf_pack
