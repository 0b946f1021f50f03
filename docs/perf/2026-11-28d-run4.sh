#!/usr/bin/env bash
# 2026-11-28, eleventh session, call 4 (GPU machine, repository root, carrying .deps, .old and peer/):
# the split-k few-rows product after call 3, with at least 128 vectors a warp (call 3: the 2.7B
# model's wo, 320 vectors a row, split in four took 0.336 ms over 32 layers against 0.318 whole; w2
# split in 8 went 0.743 -> 0.622 ms). Prediction: wo back to ~0.318 ms, w2 unchanged (still 8 slices
# of 160 vectors), the decode step 2.753 -> ~2.735 ms. Then Llama 3.2-1B (ctx 4096, batch 1) beside
# its peer, both compile modes (tools/issue_perf.sh llama1b). .old: git archive HEAD (no split).
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*few_rows* racecheck:test_gpu_mm_attn:*few_rows* || exit 1
grep -hE "few-rows kernel:" "$out/l/"*_test_gpu_mm_attn.txt | sort -u | head
echo "== decode, 2.7B, ctx 1024, prompt 512, 512 new, greedy: new against .old, batch 1 (alternating)"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec() { timeout 60 $1 sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 512 --batch $2 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' '; }
for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do echo "$s batch 1: $(dec $s 1)"; done
echo "build-gpu/stg --profile:"; timeout 60 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 \
    --prompt-ids "$out/l/p.bin" -n 64 --temperature 0 --json --profile 2>&1 | grep -E "^  profile|matmul_group|linear" | head -8
say "decode done"
tools/issue_perf.sh "$out/l" llama1b
say "done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
