#!/usr/bin/env bash
# 2026-11-30, thirty-fifth session, call 3 (~6-7 minutes; run under `timeout 560`). The tree with head dim 128's m64n128
# products landed (docs/perf/2026-11-30q-n128.patch with its three switches removed: the dk/dv kernel's dK/dV SS
# products, the dq kernel's dQ RS product and the forward's O RS product, each one m64n128 for two m64n64; call 2 measured
# the variant "all" against the tree). This call: the full build and its ptxas serialization notes, the GPU suite, memcheck
# and racecheck of the bf16 attention tests (head dim 128 among them), memcheck of the GQA tests, then one round of the
# attention rates (alternating and, at D128 S16384, phases) beside cuDNN / FlashAttention-2 (torch_attn.py) for the table.
# Predicted: suite 20/20, sanitizers clean; D128 backward as call 2's "all" (S4096 ~1.61, S16384 ~24.8 ms).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30r-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
serial_report "$out/l/build.txt" tree
gpu_suite 300
tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "sanitizers done"
attn_ab 1 tree:build-gpu/stg
timeout 40 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 16384 --iters 20 \
    --order phases 2>&1 | grep -E "^\| flash" | sed "s/^/[tree phases] /"
say "rates done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
perf_pack
