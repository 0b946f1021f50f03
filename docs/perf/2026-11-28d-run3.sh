#!/usr/bin/env bash
# 2026-11-28, eleventh session, call 3 (GPU machine, repository root, carrying .deps, .old and peer/):
# the few-rows (decode) product with split k (ops/matmul/cuda.cu: KS warps share a row's k and add
# their slices' sums in shared memory in order, chosen at prepare when a grid of one row a warp
# leaves resident block slots empty). .old: the tree before (git archive HEAD).
# Prediction (2.7B decode, batch 1, ctx 1024, 512 + 512 tokens): w2 (2560 rows of 10240) from 320
# blocks in 528 slots to 2560 (k in 8 slices), 2.24 -> ~3.3 TB/s in the eager profile (0.75 -> ~0.5
# ms over 32 layers); wo (2560 of 2560) k in 4, 1.3 -> ~1.8 TB/s (0.32 -> ~0.23 ms): decode
# 2.835 -> ~2.5 ms a token. Batch 64 (cuBLASLt) and training unchanged.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*few_rows* racecheck:test_gpu_mm_attn:*few_rows* \
    memcheck:test_gpu_sample racecheck:test_gpu_sample || exit 1
grep -E "few-rows kernel:" "$out/l/ctest.txt" | head
echo "== decode, 2.7B, ctx 1024, prompt 512, 512 new, greedy: new against .old, batch 1 (alternating) and 64"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec() { timeout 60 $1 sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 512 --batch $2 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' '; }
for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do echo "$s batch 1: $(dec $s 1)"; done
for s in build-gpu/stg .old/build-ab/stg; do echo "$s batch 64: $(dec $s 64)"; done
for s in build-gpu/stg .old/build-ab/stg; do # one decode step op by op: the products' rate
    echo "$s --profile:"; timeout 60 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
        -n 64 --temperature 0 --json --profile 2>&1 | grep -E "^  profile|matmul_group|linear|few-rows" | head -14
done
echo "== decode, Llama 3.2-1B, batch 1 (GQA; tied head): new against .old"
for s in build-gpu/stg .old/build-ab/stg; do echo "$s: $(timeout 60 $s sample models/llama3/1B.yaml --precision bf16 --init fill --json \
    --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 256 --batch 1 --temperature 0 2>&1 |
    grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"; done
say "decode done"
if [ -n "${SPEED_SIZES:-}" ]; then timeout ${SPEED_S:-300} tools/speed_run.sh build-gpu/stg "$out/speed" "$SPEED_SIZES"; python3 tools/speed_table.py "$out/speed"; fi
say "done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l $( [ -d "$out/speed" ] && echo speed)
