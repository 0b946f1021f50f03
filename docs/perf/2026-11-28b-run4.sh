#!/usr/bin/env bash
# 2026-11-28 (ninth session), device call 4: attention_cached's combine read by every thread of the
# combining block (call 3's profile: still 17.5 us a call), checked and timed beside the decode peer and
# the tree before this session's decode changes (.old: 272c05b's files).
# On the GPU machine from the repository root, carrying .deps and .old:  docs/perf/2026-11-28b-run4.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/l/cmake_old.txt" 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1) &
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu --target stg test_gpu_sample test_gpu_families > "$out/l/build.txt" 2>&1) ||
    { tail -30 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(timeout 200 build-gpu/test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1; echo "exit $?" >> "$out/l/test_gpu_sample.txt") &
(timeout 200 build-gpu/test_gpu_families > "$out/l/test_gpu_families.txt" 2>&1; echo "exit $?" >> "$out/l/test_gpu_families.txt") &
(STG_GPU_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/test_gpu_sample > "$out/l/memcheck_sample.txt" 2>&1
 echo "exit $?" >> "$out/l/memcheck_sample.txt") &
(STG_TEST_FILTER='*attention_cached*' timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/test_gpu_sample \
    > "$out/l/racecheck_sample.txt" 2>&1; echo "exit $?" >> "$out/l/racecheck_sample.txt") &
wait
say "checks done"
for f in "$out"/l/test_gpu_*.txt "$out"/l/memcheck_*.txt "$out"/l/racecheck_*.txt; do
    echo "$(basename "$f" .txt): $(tail -1 "$f") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
done
echo "== decode, new tree and its peer (tools/sample_peer.sh)"
CHECK=0 timeout 220 tools/sample_peer.sh build-gpu/stg "$out/l/decode" 2>&1 | tail -2
for b in 1 64; do
    for s in .old/build-ab/stg build-gpu/stg .old/build-ab/stg build-gpu/stg; do
        echo "$s batch $b: $(timeout 60 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/decode/prompt.bin" -n 512 --batch $b --temperature 0 2>&1 |
            grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"
    done
done
build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/decode/prompt.bin" -n 64 \
    --temperature 0 --json --profile 2>&1 >/dev/null | head -12
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude='*.bin' .
