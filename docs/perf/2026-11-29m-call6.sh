#!/usr/bin/env bash
# Thirtieth session, call 6 (2026-11-29): the tree with the memset rewrite (its kernel now storing 16 bytes at a time
# on contiguous runs, the test grown to five memsets), checked: the GPU suite, memcheck of the new test, and a mutant
# (the head and tail bytes' pattern shifted by one) that must fail it. Then issue 28's rows beside the reduce-overhead
# peer: small 512 (options, and in backward), xl 1024 and 2.7B 1024 (options, and in backward; step_row_ib).
# Predicted: small 512 ~4.82 ms against the peer's 7.6-8.4 (0.58-0.63); xl 1024 in backward 99.3 -> ~97.5 (0.76 against
# 127.8); 2.7B 1024 in backward 141.3 -> ~139.5 (0.73 against 190.6): the memsets (~10 us each) and the D kernel (~20 us a
# layer) off the critical path.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
side /tmp/mut test_gpu_ops peer/mut_cuda.cu:ops/cuda/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
wait
(cd build-gpu && timeout 250 ctest -L gpu --timeout 240 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
(cd /tmp/mut/build-gpu && STG_TEST_FILTER='*graph_memsets*' timeout 60 ./test_gpu_ops > "$out/l/mut.txt" 2>&1
 echo "mutant test_gpu_ops graph_memsets (must fail): $? $(grep -E "FAILED|PASSED|byte" "$out/l/mut.txt" | head -2 | tr '\n' ' ')")
tools/sanitize_gpu.sh build-gpu "$out/l/san" 120 memcheck:test_gpu_ops:'*graph_memsets*'
say "tests done"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
OPT=("${IB[@]:0:6}" "${IB[@]:7}")
for r in 1 2; do
    stg_step "small 512 options r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    stg_step "small 512 options in backward r$r" models/cs336/small.yaml --set ctx=512 "${IB[@]}"
done
peer_step small 512 4 cg
say "small done"
step_row_ib xl 1024 4 300
step_row_ib 2.7B 1024 4 425
perf_pack
