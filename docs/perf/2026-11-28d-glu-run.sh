#!/usr/bin/env bash
# For the session after 2026-11-28 (eleventh): docs/perf/2026-11-28d-glu.patch, compiled for sm_90 and
# sm_90a, not run (the device time was spent). In a decoding graph the w1/w3 matmul_group (few-rows
# kernel) writes the swiglu's output itself (mm_gv_glu_kernel: KS warps take row j of both W1 and W3,
# each a slice of k, the sums rounded to bf16 as the product stores a and b, then silu(a) b rounded as
# the swiglu kernel does) and the swiglu launches nothing (cuda_op_folded). KS is 1 or 2, by wave use
# (the 2.7B model's pair: 1280 blocks in 528 slots at 81% against 2560 at 97%); with k whole on both
# sides the result is the two ops' bits. Decided at cuda_prepare (ops/matmul/cuda.cu mm_fold_plan) only
# for inference graphs, a and b read by the swiglu alone, and y's bytes touched by no op that is
# neither before the group nor after the swiglu. STG_NO_FOLD=1 turns it off (the A/B in one build).
# Apply first, here: git apply docs/perf/2026-11-28d-glu.patch; then on the GPU machine (carrying .deps):
#   docs/perf/2026-11-28d-glu-run.sh OUT
# Checks: the GPU suite (test_gpu_mm_attn's test_matmul_glu: against the CPU, and bitwise against the
# same graph prepared with STG_NO_FOLD=1), memcheck of it, test_gpu_sample (decode against full
# forwards, graph against eager) with the fold in its decode graphs.
# Prediction (2.7B, batch 1, 512 + 512): 32 swiglu launches a token gone (~2 us each in replay), the
# pair's waves as today's (k in two): 2.72 -> ~2.66 ms a token. Land it only if it measures faster.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
grep -q mm_gv_glu_kernel ops/matmul/cuda.cu || { echo "apply docs/perf/2026-11-28d-glu.patch first"; exit 2; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*glu* memcheck:test_gpu_sample || exit 1
grep -hE "swiglu folded|bitwise equal to the product|compared with the CPU only" "$out/l/"memcheck_test_gpu_mm_attn.txt | head
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec() { timeout 40 build-gpu/stg sample $1 --precision bf16 --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 512 --batch $2 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
for m in models/cs336/2.7B.yaml models/llama3/1B.yaml; do
    for f in on off on off; do
        if [ $f = on ]; then echo "$m b1 fold on:  $(dec $m 1)"; else echo "$m b1 fold off: $(STG_NO_FOLD=1 dec $m 1)"; fi
    done
done
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
