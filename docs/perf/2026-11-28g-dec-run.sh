#!/usr/bin/env bash
# Fourteenth session (2026-11-28g): attention over the cache in the new lane layout (R lanes a row, CPL chunks a
# lane, GB heads a pass; one wave of splits) against the tree before it (.old = b4777d9), one call: builds,
# test_gpu_sample, the 2.7B decode at batch 1 and 64 alternating (2 rounds), Llama 3.2-1B's grouped-query decode,
# the new kernel's profile line, compute-sanitizer (memcheck of test_gpu_sample, racecheck and synccheck of the
# cached attention), then tools/sample_peer.sh (the peer at batch 1 and 64 in the same call).
# Predicted: batch 64 step 7.9 -> ~6.5 ms (the kernel from 2.9 to ~3.7 TB/s: 5.5 -> ~4.3 ms of an eager step),
# batch 1 2.55 -> ~2.40 ms (one wave of 512 blocks instead of 544 in two, 17 -> ~12 us a call).
# Usage (GPU machine, repository root, carrying .deps, .old, peer): docs/perf/2026-11-28g-dec-run.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg test_gpu_sample > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1; echo "test_gpu_sample: $?"; grep -E "PASSED|FAILED|ERROR|rel err" "$out/l/test_gpu_sample.txt" | grep -E "PASSED|FAILED|ERROR|B (140|64) " | tail -12)
say "test done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for r in 1 2; do for b in .old/build-ab build-gpu; do for n in 1 64; do
    echo "$b 2.7B b$n round $r: $(timeout 90 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch $n --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
done; done; done
for b in .old/build-ab build-gpu; do
    echo "$b llama 1B b1: $(timeout 90 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
    for n in 1 64; do
        echo "$b profile b$n: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
            -n 256 --batch $n --temperature 0 --json --profile 2>&1 | grep -E "x attention_cached " | head -1)"
    done
done
say "decode A/B done"
timeout 250 tools/sanitize_gpu.sh build-gpu "$out/l/san" 240 memcheck:test_gpu_sample racecheck:test_gpu_sample:'*attention_cached*' \
    synccheck:test_gpu_sample:'*attention_cached*'
say "sanitizers done"
CHECK=0 timeout 200 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | tail -2
say "peer done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
