#!/usr/bin/env bash
# For the session after 2026-11-28: the two changes that session wrote but could not run on a GPU (its
# device time was spent), checked and timed in one device call. They were .patch files then; the
# ninth session ran this script on them (docs/perf/2026-11-28b-h200-patches-run.txt) and they landed,
# so the tree has them. On the GPU machine from the repository root, with .deps and peer/torch_attn.py (a copy of
# ../shared/peers/torch_attn.py) carried:
#   docs/perf/2026-11-28-patches-run.sh OUT
# 1. builds side by side: build-gpu (everything), build-nogemv (stg with -DSTG_NO_GEMV: cuBLASLt for
#    every product) and build-nb128 (stg with -DSTG_NO_WGMMA_BWD128: the mma.sync backward at head dim 128)
# 2. nothing timed, side by side: ctest -L gpu (test_gpu_mm_attn's test_matmul_few_rows and the
#    determinism case are the few-rows kernel's; test_gpu_ops's GQA and packed-document cases at head
#    dim 128 are the wgmma backward's); memcheck of test_gpu_mm_attn, test_gpu_ops and test_gpu_sample at
#    small shapes; racecheck of test_gpu_mm_attn's attention tests alone (STG_TEST_FILTER, tests/gpu.h)
# 3. alone: stg attn-bench at head dim 128 (both backward builds) and the PyTorch attention peer;
#    tools/sample_peer.sh (decode, 2.7B, 512 + 512, batch 1 and 64, beside tools/ref/torch_decode.py)
#    with build-gpu, and the same stg runs with build-nogemv
# DEADLINE (seconds, default 560) bounds the stages; the summary on stdout, logs in OUT/logs.tgz.
set -u
out=${1:?usage: $0 OUT}
mkdir -p "$out/l"
t0=$(date +%s)
dl=${DEADLINE:-560}
left() { echo $((dl - ($(date +%s) - t0))); }
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
grep -q mm_gv_kernel ops/matmul/cuda.cu && grep -q WG128_NWG ops/attention/sm90a/attention_wgmma_bwd.cu ||
    { echo "apply docs/perf/2026-11-28-attn128.patch and docs/perf/2026-11-28-gemv.patch first"; exit 2; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1) &
p1=$!
for v in nogemv:-DSTG_NO_GEMV nb128:-DSTG_NO_WGMMA_BWD128; do
    (cmake -S . -B build-${v%%:*} $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=${v#*:} > "$out/l/cmake_${v%%:*}.txt" 2>&1 &&
        cmake --build build-${v%%:*} --target stg > "$out/l/build_${v%%:*}.txt" 2>&1) &
done
wait $p1 || { say "build failed"; tail -30 "$out/l/build.txt"; tar -czf "$out/logs.tgz" -C "$out/l" .; exit 1; }
wait
say "built"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

t2=$(( $(left) - 200 )) # the timing stage needs about 200 s
(cd build-gpu && timeout "$t2" ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
pids=($!)
for t in test_gpu_mm_attn test_gpu_ops test_gpu_sample; do
    (STG_GPU_TEST_SMALL=1 timeout "$t2" compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/$t > "$out/l/memcheck_$t.txt" 2>&1
     echo "exit $?" >> "$out/l/memcheck_$t.txt") &
    pids+=($!)
done
(STG_TEST_FILTER='*attention*' STG_GPU_TEST_SMALL=1 timeout "$t2" compute-sanitizer --tool racecheck --error-exitcode 9 \
    --kernel-name-exclude 'regex=nvjet|cublas|cutlass|xmma|gemm|gemv|splitKreduce|nccl' build-gpu/test_gpu_mm_attn \
    > "$out/l/racecheck_attention.txt" 2>&1; echo "exit $?" >> "$out/l/racecheck_attention.txt") &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
say "checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"
for f in "$out"/l/memcheck_*.txt "$out"/l/racecheck_*.txt; do
    echo "$(basename "$f" .txt): $(tail -1 "$f") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
done

for b in build-gpu build-nb128; do
    for a in "--batch 4 --heads 16 --dims 128 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 128 --seqs 4096"; do
        # shellcheck disable=SC2086 # a is a word list
        timeout 60 $b/stg attn-bench $a --iters 20 2>&1 | grep -E "flash" | sed "s|^|$b: |"
    done
done | tee "$out/l/attn.txt"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 \
    2>&1 | tee "$out/l/peer_attn.txt" | grep -v EFFICIENT
say "attention timed"
CHECK=0 timeout "$(( $(left) - 60 ))" tools/sample_peer.sh build-gpu/stg "$out/l/decode" 2>&1 | tail -8
for b in 1 64; do
    timeout 60 build-nogemv/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/decode/prompt.bin" -n 512 --batch $b --temperature 0 2>&1 |
        grep -oE '"(decode_tokens_per_s|steady_tokens_per_s|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ' | sed "s|^|nogemv batch $b: |"
    echo
done
say "decode timed"
tar -czf "$out/logs.tgz" -C "$out/l" .
