#!/usr/bin/env bash
# Fifteenth session (2026-11-28h), call 1: the three prepared patches (docs/perf/2026-11-28g-{nsplit1,bulk-prefetch,
# dq-mask}.patch) applied to the working tree, .old = the tree before them (git archive HEAD). Builds .old (stg),
# build-np (-DDEC_PFD=0: nsplit1 without the prefetch) and build-gpu (everything) side by side; runs the whole GPU
# suite (the fourteenth session's last refactors and the fp32 head-dim-48 decode case were never run on a GPU);
# memcheck + racecheck of the changed kernels; then the dq-mask A/B (attention backward) and the decode A/B
# (2.7B batch 64 and 1, Llama 3.2-1B batch 1), old and new alternating, 2 rounds; then ncu of the cached attention
# at batch 64. Usage (GPU machine, carrying .deps, .old, peer): docs/perf/2026-11-28h-call1.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
# shellcheck disable=SC2086 # cfg is a word list
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-np $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DDEC_PFD=0 > /dev/null 2>&1 && timeout 300 cmake --build build-np --target stg > "$out/l/build_np.txt" 2>&1; echo "np build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -iE "warning|error" "$out/l/build.txt" | head -5)
wait
say "built"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Not Run|Timeout" "$out/l/ctest.txt" | tail -6)
say "suite done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_sample:'*attention_cached*' \
    racecheck:test_gpu_sample:'*attention_cached*' memcheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_mm_attn:'*attention*'
say "sanitizers done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for r in 1 2; do for b in .old/build-ab build-gpu; do
    echo "== attention backward $b round $r"
    for a in "--batch 4 --heads 16 --dims 64 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096" \
        "--batch 4 --heads 32 --dims 80 --seqs 1024" "--batch 4 --heads 16 --dims 128 --seqs 4096"; do
        # shellcheck disable=SC2086 # a is a word list
        timeout 60 $b/stg attn-bench --device cuda --attention flash $a --iters 20 2>&1 | grep flash
    done
done; done
say "dq-mask A/B done"
for r in 1 2; do for b in .old/build-ab build-np build-gpu; do
    for n in 64 1; do
        echo "$b 2.7B b$n round $r: $(timeout 90 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch $n --temperature 0 2>&1 | tps)"
    done
    echo "$b llama 1B b1 round $r: $(timeout 90 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | tps)"
done; done
say "decode A/B done"
timeout 150 ncu --set full -k regex:attention_cached -s 40 -c 1 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 \
    --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 256 --batch 64 --temperature 0 --json > "$out/l/ncu-dec-b64.txt" 2>&1
say "ncu b64: $?"
grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps Per SM|Warp Cycles Per Issued Instruction) " "$out/l/ncu-dec-b64.txt"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
say "end"
