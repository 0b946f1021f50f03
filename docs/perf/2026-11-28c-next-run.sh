#!/usr/bin/env bash
# For the session after 2026-11-28 (tenth): two patches compiled for CUDA, not run on a GPU (the
# device time was spent): docs/perf/2026-11-28c-late-dw.patch (tested on the CPU: every CPU test, also
# under ASan/UBSan) and docs/perf/2026-11-28c-gemv-waves.patch. Apply them first, here:
#   rm -rf .old && mkdir .old && git archive HEAD | tar -x -C .old    (the tree before them, for the A/B)
#   git apply docs/perf/2026-11-28c-late-dw.patch docs/perf/2026-11-28c-gemv-waves.patch
# then on the GPU machine from the repository root, carrying .deps and .old:
#   docs/perf/2026-11-28c-next-run.sh OUT
# The patch (issue 24's fused-head memory row):
#  - linear_cross_entropy(..., late_dw=1) (model option fused_head=late in cs336/lm, gpt2 and llama3):
#    the backward is two ops, linear_cross_entropy_dx (now) and linear_cross_entropy_dw, which the
#    scheduler places just before the first op that reads dW (stg_op_def.late), the logits recomputed
#    once more. CUDA: the same by-vocabulary loop, each form skipping the other's product.
#  - embedding_bwd takes an addend (the other use of a tied weight's gradient) and takes its buffer in
#    place: the tied head's gradient is summed without an add op and without a second (V, d) buffer,
#    in every head mode (CUDA: copies the addend first when the plan did not share the buffer).
#  - --memory-budget plans a step with the fused head both ways (its weight gradient early, and late),
#    each with recomputation as needed, and keeps the one that fits with fewer added FLOPs.
# Planned (stg memreport, bf16): Llama 3.2-1B ctx 4096 batch 1: off 22.75 GiB, on 21.91, late 20.96 GiB
# (1.79 GiB below off; before the patch on was 21.93 and off 22.78). Predictions: measured within 1% of
# those; the late step ~3.5 ms slower than on (2 x 4096 x 128256 x 2048 FLOPs more at ~650 TFLOP/s);
# GPT-2 defaults unchanged or a little faster (one add of 154 MB fp32 less).
# The gemv patch: the few-rows product picks its rows a warp (1, 2 or 4) by how well the grid fills the
# resident block slots over its waves (occupancy queried at prepare, outside any capture), not by "the most rows that
# still give two blocks per SM": at the 2.7B model's w1/w3 pair (batch 1) 2.42 waves of 4-row blocks
# (81% of the slots busy) become 4.85 waves of 1-row blocks (97%), and the LM head 59% -> 79%. Same bits
# (a row's sum does not depend on its warp's rows). Prediction: decode 2.7B batch 1 2.87 -> ~2.70 ms a
# token (w1/w3 ~5 us a layer, the head ~5 us); batch 64 (cuBLASLt) unchanged.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
grep -q LINEAR_CROSS_ENTROPY_DW ops/base/oplist.h && grep -q mm_gv_wave_use ops/matmul/cuda.cu ||
    { echo "apply docs/perf/2026-11-28c-late-dw.patch and docs/perf/2026-11-28c-gemv-waves.patch first"; exit 2; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_head memcheck:test_gpu_families memcheck:test_gpu_sample || exit 1
echo "== Llama 3.2-1B, ctx 4096, batch 1, bf16: fused_head off, on, late (planned and measured bytes, step time)"
for f in off on late; do
    build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=$f --precision bf16 --warmup 3 --iters 10 \
        --json > "$out/l/l1b_$f.json" 2> "$out/l/l1b_$f.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('fused_head=$f', {k: d[k] for k in ('median_ms','min_ms','mfu','planned_bytes','measured_bytes')})" \
        "$out/l/l1b_$f.json" || tail -3 "$out/l/l1b_$f.err"
done
echo "== --memory-budget 21.0G (planned: the late head gradient alone fits, 20.96 GiB) and 21.5G (recomputation, +3.7% FLOPs)"
for bud in 21.0G 21.5G; do
    build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --precision bf16 --warmup 3 --iters 10 --memory-budget $bud \
        --json 2> "$out/l/l1b_bud_$bud.err" > "$out/l/l1b_bud_$bud.json"
    grep -E "^stg: memory budget" "$out/l/l1b_bud_$bud.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('budget $bud', {k: d[k] for k in ('median_ms','planned_bytes','measured_bytes','recomputed','extra_flops')})" \
        "$out/l/l1b_bud_$bud.json" || tail -3 "$out/l/l1b_bud_$bud.err"
done
echo "== the same on .old (before the patch): off, on"
for f in off on; do
    .old/build-ab/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=$f --precision bf16 --warmup 3 --iters 10 \
        --json > "$out/l/l1b_old_$f.json" 2> "$out/l/l1b_old_$f.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('old fused_head=$f', {k: d[k] for k in ('median_ms','min_ms','mfu','planned_bytes','measured_bytes')})" \
        "$out/l/l1b_old_$f.json" || tail -3 "$out/l/l1b_old_$f.err"
done
echo "== where Llama 3.2-1B's step goes (issue 24: 0.90 of the peer, 0.75 asked): stg bench --profile, plain head"
build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 3 --iters 5 \
    --profile > "$out/l/l1b_profile.txt" 2>&1
grep -A45 "^  profile" "$out/l/l1b_profile.txt"
echo "== GPT-2 124M defaults (tied, fused head), batch 4, ctx 1024: new against .old, and late"
for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
    echo "$s: $($s bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --precision bf16 --warmup 5 --iters 30 | grep -E '^  time')"
done
echo "late: $(build-gpu/stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set fused_head=late --precision bf16 --warmup 5 --iters 30 | grep -E '^  time')"
echo "== decode, 2.7B, ctx 1024, prompt 512, 512 new, greedy: new against .old, batch 1 and 64, alternating"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for b in 1 64; do
    for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
        echo "$s batch $b: $(timeout 40 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch $b --temperature 0 2>&1 |
            grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"
    done
done
for s in build-gpu/stg .old/build-ab/stg; do # one decode step op by op: the products' rate
    echo "$s --profile:"; timeout 60 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
        -n 64 --temperature 0 --json --profile 2>&1 | grep -E "^  profile|matmul_group|linear|bytes over" | head -8
done
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude="*.bin" .
