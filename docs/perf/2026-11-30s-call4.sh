#!/usr/bin/env bash
# Thirty-sixth session, call 4 (2026-11-30): the landed tree (head dim 128's forward with Q in shared memory and 128-key
# tiles in 3 stages, ws_fwd_qs; call 3 measured it -13% at seq 16384) through the GPU suite, memcheck and racecheck of
# the bf16 attention tests, memcheck of the GQA tests, and a mutant (docs/perf/2026-11-30s-qss-mutant.patch: Q's rows
# written without the 128-byte swizzle) that the bf16 attention tests must fail; then the attention rates beside cuDNN.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30s-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant mut docs/perf/2026-11-30s-qss-mutant.patch "" test_gpu_mm_attn
perf_build || { wait; perf_pack; exit 1; }
wait
say "builds done"
(cd /tmp/mut/build-gpu && STG_TEST_FILTER='*attention_bf16*' timeout 60 ./test_gpu_mm_attn > "$out/l/mutant.txt" 2>&1
 echo "mutant (must fail): exit $? $(grep -cE "differs|ERROR|FAILED" "$out/l/mutant.txt") failure lines"; grep -m2 -E "differs|FAILED" "$out/l/mutant.txt")
gpu_suite 300
tools/sanitize_gpu.sh build-gpu "$out/l/san" 120 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "sanitizers done"
attn_ab 1 tree:build-gpu/stg
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN"
say "cuDNN done"
perf_pack
