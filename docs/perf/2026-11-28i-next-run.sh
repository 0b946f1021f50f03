#!/usr/bin/env bash
# For the session after the sixteenth (2026-11-28i): the prepared cp.async decode patch, in one call of about 5 minutes.
# First, here: `git apply docs/perf/2026-11-28i-decode-cpa.patch` (compiled for sm_90, not run; ptxas: 128 registers and
# a 4-byte spill in the 2.7B's instantiation, bf16 GB 1 CPL 3). What it does: attention_cached's warps copy their K and
# V rows into shared memory with cp.async one trip ahead (DEC_STAGES 2), each lane reading back only the chunks it
# copied, so a warp's next loads are in flight while it scores the current rows; today's kernel issues a trip's loads
# at the top of the trip and has none in flight while it computes. Why: at batch 64 the kernel reads the cache at about
# 3.2 TB/s against 4.0 of copy, and neither DRAM (61%) nor L2 (77%) was saturated in the fifteenth session's Nsight
# Compute runs. Predicted: the 2.7B batch-64 step 7.03 -> ~6.5 ms tuned (1.2x of the peer needs 6.8), batch 1 equal or
# slightly better, Llama 3.2-1B batch 1 equal. If slower, the patch is not applied.
# Builds build-gpu (the patch) and build-old (-DDEC_CPA=0: today's loads); test_gpu_sample on build-gpu, memcheck and
# racecheck of its cached-attention tests (the kernel now uses shared memory per warp); the decode A/B alternating,
# 2 rounds; the whole GPU suite last. Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28i-next-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q DEC_CPA ops/decode/cuda.cu || say "warning: is docs/perf/2026-11-28i-decode-cpa.patch applied?"
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-old $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DDEC_CPA=0 > /dev/null 2>&1 && timeout 300 cmake --build build-old --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$out/l/sample.txt" 2>&1; echo "test_gpu_sample: $?"; grep -E "PASSED|FAILED" "$out/l/sample.txt")
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
say "sample tests and sanitizers done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
for r in 1 2; do for b in build-old build-gpu; do for bt in 64 1; do
    echo "$b 2.7B b$bt round $r: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch $bt --temperature 0 --gemm-tune on 2>&1 | tps)"
done; done; done
for b in build-old build-gpu; do
    echo "$b llama 1B b1: $(timeout 60 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | tps)"
done
say "decode A/B done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)" "$out/l/ctest.txt" | tail -4)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
