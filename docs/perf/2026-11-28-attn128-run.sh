#!/usr/bin/env bash
# Session 2026-11-28's second device call: the attention backward at head dim 128 moved from mma.sync to
# the wgmma kernels (ops/attention/sm90a/attention_wgmma_bwd.cu, WG128_*), checked and timed, and the
# sanitizer runs the first call left open. From the repository root on the GPU machine, with .deps and
# peer/torch_attn.py (a copy of ../shared/peers/torch_attn.py) carried:
#   docs/perf/2026-11-28-attn128-run.sh OUT
# 1. build-gpu (everything) and build-nb128 (stg with -DSTG_NO_WGMMA_BWD128: the mma.sync backward at
#    head dim 128, the tree before this change) side by side on all CPUs
# 2. side by side, nothing timed: ctest -L gpu; memcheck of test_gpu_mm_attn and test_gpu_ops at small
#    shapes (the new kernels); racecheck of test_gpu_mm_attn, test_gpu_ops and test_gpu_optim with the
#    wgmma kernels (att_wg_*) left out as well as cuBLAS's; memcheck of test_gpu_eval
# 3. alone on the GPU: stg attn-bench of both builds (B4 H16 D128 S4096 and 16384, GQA B1 H32/8 D128
#    S4096) and the PyTorch peer (FlashAttention-2, cuDNN) at B4 H16 D128
# DEADLINE (seconds, default 300) bounds the stages; logs in OUT/logs.tgz, the summary on stdout.
set -u
out=${1:?usage: $0 OUT}
mkdir -p "$out/l"
t0=$(date +%s)
dl=${DEADLINE:-300}
left() { echo $((dl - ($(date +%s) - t0))); }
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1) &
p1=$!
(cmake -S . -B build-nb128 $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DSTG_NO_WGMMA_BWD128 > "$out/l/cmake_nb.txt" 2>&1 &&
    cmake --build build-nb128 --target stg > "$out/l/build_nb.txt" 2>&1) &
p2=$!
wait $p2 || say "build-nb128 failed"
wait $p1 || { say "build failed"; tail -30 "$out/l/build.txt"; tar -czf "$out/logs.tgz" -C "$out/l" .; exit 1; }
say "built"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

excl="regex=nvjet|cublas|cutlass|xmma|gemm|gemv|splitKreduce|nccl|att_wg_"
t2=$(( $(left) - 80 )) # the timing stage needs about 80 s
(cd build-gpu && timeout "$t2" ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
pids=($!)
for t in test_gpu_mm_attn test_gpu_ops; do
    (STG_GPU_TEST_SMALL=1 timeout "$t2" compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/$t > "$out/l/memcheck_$t.txt" 2>&1
     echo "exit $?" >> "$out/l/memcheck_$t.txt") &
    pids+=($!)
done
for t in test_gpu_mm_attn test_gpu_ops test_gpu_optim; do
    (STG_GPU_TEST_SMALL=1 timeout "$t2" compute-sanitizer --tool racecheck --kernel-name-exclude "$excl" --error-exitcode 9 \
        --print-limit 100 build-gpu/$t > "$out/l/racecheck_$t.txt" 2>&1
     echo "exit $?" >> "$out/l/racecheck_$t.txt") &
    pids+=($!)
done
(STG_GPU_TEST_SMALL=1 timeout "$t2" compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/test_gpu_eval > "$out/l/memcheck_test_gpu_eval.txt" 2>&1
 echo "exit $?" >> "$out/l/memcheck_test_gpu_eval.txt") &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
say "checks done"
grep -E "tests passed|Failed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"
for f in "$out"/l/memcheck_*.txt "$out"/l/racecheck_*.txt; do
    echo "$(basename "$f" .txt): $(tail -1 "$f") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
done

for b in build-gpu build-nb128; do
    [ -x $b/stg ] || continue
    for a in "--batch 4 --heads 16 --dims 128 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 128 --seqs 4096"; do
        # shellcheck disable=SC2086 # a is a word list
        timeout 60 $b/stg attn-bench $a --iters 20 2>&1 | grep -E "flash|head" | sed "s|^|$b: |" | tee -a "$out/l/attn.txt"
    done
done
say "stg timed"
PYTHONUNBUFFERED=1 timeout "$(left)" python3 peer/torch_attn.py --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 \
    2>&1 | tee "$out/l/peer.txt" | grep -v EFFICIENT
say "peer timed"
tar -czf "$out/logs.tgz" -C "$out/l" .
