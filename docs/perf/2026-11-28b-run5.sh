#!/usr/bin/env bash
# 2026-11-28 (ninth session), device call 5: attention_cached with __launch_bounds__(128, 4) (call 4's
# build used 96 registers with spills and decoded batch 64 17% slower than call 3's, which used 128),
# checked and timed beside the tree before this session's decode changes (.old: 272c05b) and, at batch 1,
# the decode peer. Carry .deps and .old:  docs/perf/2026-11-28b-run5.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/l/cmake_old.txt" 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1) &
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu --target stg test_gpu_sample > "$out/l/build.txt" 2>&1) ||
    { tail -30 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(timeout 100 build-gpu/test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1; echo "exit $?" >> "$out/l/test_gpu_sample.txt") &
(STG_GPU_TEST_SMALL=1 STG_TEST_FILTER='*attention_cached*' timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/test_gpu_sample > "$out/l/memcheck_sample.txt" 2>&1
 echo "exit $?" >> "$out/l/memcheck_sample.txt") &
(STG_TEST_FILTER='*attention_cached*' timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/test_gpu_sample \
    > "$out/l/racecheck_sample.txt" 2>&1; echo "exit $?" >> "$out/l/racecheck_sample.txt") &
wait
say "checks done"
for f in "$out"/l/test_gpu_*.txt "$out"/l/memcheck_*.txt "$out"/l/racecheck_*.txt; do
    echo "$(basename "$f" .txt): $(tail -1 "$f") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
done
echo "== decode at batch 1, new tree and its peer (tools/sample_peer.sh)"
BATCHES=1 CHECK=0 timeout 150 tools/sample_peer.sh build-gpu/stg "$out/l/decode" 2>&1 | tail -1
for b in 1 64; do
    for s in .old/build-ab/stg build-gpu/stg; do
        echo "$s batch $b: $(timeout 40 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/decode/prompt.bin" -n 512 --batch $b --temperature 0 2>&1 |
            grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"
    done
done
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude='*.bin' .
