#!/usr/bin/env bash
# 2026-11-28 (ninth session), device call 3: the decode attention (more positions in flight, smaller
# chunks), the one-pass cross-entropy, 16-byte split/concat and the few-rows kernel's 8 vectors in
# flight for one-row warps, checked and timed against the tree before them (.old: 272c05b's files).
# On the GPU machine from the repository root, carrying .deps, .peers (llm.c's source) and .old:
#   docs/perf/2026-11-28b-run3.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cd .peers/llm.c && sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' llmc/cuda_utils.cuh &&
  make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 > "$out/l/llmc_build.txt" 2>&1) &
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/l/cmake_old.txt" 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1) &
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1) || { tail -30 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd build-gpu && timeout 260 ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
pids=($!)
for t in test_gpu_sample test_gpu_ops; do
    (STG_GPU_TEST_SMALL=1 timeout 260 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/$t > "$out/l/memcheck_$t.txt" 2>&1
     echo "exit $?" >> "$out/l/memcheck_$t.txt") &
    pids+=($!)
done
(STG_TEST_FILTER='*attention_cached*' timeout 260 compute-sanitizer --tool racecheck --error-exitcode 9 build-gpu/test_gpu_sample \
    > "$out/l/racecheck_sample.txt" 2>&1; echo "exit $?" >> "$out/l/racecheck_sample.txt") &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
say "checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"
for f in "$out"/l/memcheck_*.txt "$out"/l/racecheck_*.txt; do
    echo "$(basename "$f" .txt): $(tail -1 "$f") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
done
echo "== decode, new tree and its peer (tools/sample_peer.sh)"
CHECK=0 timeout 200 tools/sample_peer.sh build-gpu/stg "$out/l/decode" 2>&1 | tail -4
for b in 1 64; do
    for s in .old/build-ab/stg build-gpu/stg; do
        echo "$s batch $b: $(timeout 60 $s sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/decode/prompt.bin" -n 512 --batch $b --temperature 0 2>&1 |
            grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"
    done
done
build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/decode/prompt.bin" -n 64 \
    --temperature 0 --json --profile 2>&1 >/dev/null | head -24
say "decode timed"
echo "== GPT-2 124M, batch 4, ctx 1024, vocab 50304, plain head: new, old, new, old; then llm.c"
for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
    echo "$s: $($s bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=50304 --set fused_head=off --precision bf16 \
        --warmup 5 --iters 30 | grep -E '^  time')"
done
timeout 120 tools/peer_llmc.sh .peers/llm.c "$out/l/llmc" 4 1024 30 | tail -2
build-gpu/stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=50304 --set fused_head=off --precision bf16 --warmup 3 \
    --iters 5 --profile > "$out/l/gpt2_profile.txt" 2>&1; grep -A16 "by op name" "$out/l/gpt2_profile.txt"
say "gpt2 timed"
echo "== CS336 small ctx 512 and Llama 3.2-1B ctx 4096 batch 1: new, old"
timeout 120 tools/bench_ab.sh build-gpu/stg,.old/build-ab/stg '' '' small:512
for s in build-gpu/stg .old/build-ab/stg; do
    echo "$s llama 1B: $($s bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 3 \
        --iters 10 | grep -E '^  time')"
done
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude='*.bin' .
