#!/usr/bin/env bash
# Fourteenth session (2026-11-28g), call 6: attention over the cache with each trip's successor prefetched to L2
# (DEC_PF=1) against the same tree without it (-DDEC_PF=0), alternating, 2 rounds: the 2.7B decode at batch 1 and 64
# and Llama 3.2-1B at batch 1; then the whole GPU suite (ctest -L gpu) on the default build.
# Predicted: batch 64 7.49 -> ~7.0 ms a step (the loads of a trip wait on L2 rather than memory), batch 1 unchanged.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28g-pf-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-np $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DDEC_PF=0 > /dev/null 2>&1 && timeout 300 cmake --build build-np --target stg > "$out/l/build_np.txt" 2>&1; echo "build np: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 400 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1; echo "test_gpu_sample: $?"; grep -E "^\[  (PASSED|FAILED)" "$out/l/test_gpu_sample.txt")
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for r in 1 2; do for b in build-np build-gpu; do
    for n in 1 64; do
        echo "$b 2.7B b$n round $r: $(timeout 90 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch $n --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
    done
    echo "$b llama 1B b1 round $r: $(timeout 90 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
done; done
say "A/B done"
(cd build-gpu && timeout 300 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|Failed|\(Failed\)|Passed|Not Run" "$out/l/ctest.txt" | tail -16)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
