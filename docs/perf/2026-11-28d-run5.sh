#!/usr/bin/env bash
# 2026-11-28, eleventh session, call 5 (GPU machine, repository root, carrying .deps): RMSNorm and
# SwiGLU folded into the few-rows products that read them (decoding; ops/matmul/cuda.cu mm_fold_plan),
# A/B in one build with STG_NO_FOLD=1. Prediction (2.7B, batch 1, ctx 1024, 512 + 512 tokens): 65
# norms and 32 swiglus a token stop launching, ~2.5 us each in replay less ~1 us the products spend on
# the sums of squares: 2.721 -> ~2.55 ms a token.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*fold* racecheck:test_gpu_mm_attn:*fold* || exit 1
grep -hE "folded|FAILED|rel err [0-9.e-]+ *$" "$out/l/ctest.txt" | grep -E "folded|FAILED" | head -20
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec() { timeout 40 build-gpu/stg sample $1 --precision bf16 --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' '; }
echo "== decode, batch 1, ctx 1024, prompt 512, 512 new, greedy: folds on / off (STG_NO_FOLD=1), alternating"
for m in models/cs336/2.7B.yaml models/llama3/1B.yaml; do
    for f in on off on off; do
        if [ $f = on ]; then echo "$m folds on:  $(dec $m)"; else echo "$m folds off: $(STG_NO_FOLD=1 dec $m)"; fi
    done
done
say "done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
