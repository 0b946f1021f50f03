#!/usr/bin/env bash
# For the session after the fifteenth (2026-11-28h): the prepared split-K patch, in one call of about 5 minutes.
# First, here: `git apply docs/perf/2026-11-28h-splitk.patch` (compiled, not run). With --gemm-tune on, the tuner
# also times split-K forms (k in 2, 4, 8, 16 parts, reduced in the compute type: deterministic) of the heuristic's
# first answer. Why: the 2.7B batch-64 decode step's products read the weights at 2.2 TB/s (wo at 1.2 TB/s: a
# 64 x 2560 x 2560 product makes 20-40 output tiles for 132 multiprocessors), and tuning among the heuristic's
# first 8 answers (none split k) found nothing (call 6: 7.152 -> 7.144 ms). Builds build-gpu (the patch) and
# build-nosk (-DMM_TUNE_SPLITK=0: the tuner as before); the GPU suite on build-gpu (test_matmul_tuned runs the
# tuner); the 2.7B decode at batch 64 and 1 with --gemm-tune off / on in both builds, 2 rounds at batch 64; the
# tuned batch-64 step's profile (stg sample --profile: device time per product and the weights' TB/s; it does not
# print the algorithms, stg bench --profile does);
# Llama 3.2-1B's training step tuned in both builds. Predicted: batch 64 7.15 -> ~6.8 ms a step if the few-row
# products reach ~3.5 TB/s (the issue's 1.2x of the peer's 7778 tokens/s is 6.86 ms); batch 1 unchanged (the
# few-rows kernel runs it); Llama unchanged (its products fill the device).
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28h-next-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q mm_splitk_forms ops/matmul/cuda.cu || say "warning: is docs/perf/2026-11-28h-splitk.patch applied?"
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-nosk $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DMM_TUNE_SPLITK=0 > /dev/null 2>&1 && timeout 300 cmake --build build-nosk --target stg > "$out/l/build_nosk.txt" 2>&1; echo "nosk build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)" "$out/l/ctest.txt" | tail -4)
say "suite done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
for r in 1 2; do for b in build-nosk build-gpu; do for t in off on; do
    echo "$b 2.7B b64 tune $t round $r: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 64 --temperature 0 --gemm-tune $t 2>&1 | tps)"
done; done; done
for b in build-nosk build-gpu; do
    echo "$b 2.7B b1 tune on: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 --gemm-tune on 2>&1 | tps)"
done
say "decode A/B done"
timeout 90 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 256 --batch 64 --temperature 0 --gemm-tune on --profile > /dev/null 2> "$out/l/b64-tuned-profile.txt"
say "profile: $?"
grep -E "matmul_group|linear|params" "$out/l/b64-tuned-profile.txt" | head -12
for b in build-nosk build-gpu; do
    timeout 90 $b/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune on \
        --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'llama 1B tuned', {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $b || tail -3 "$out/l/l1b.err"
done
say "llama done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
