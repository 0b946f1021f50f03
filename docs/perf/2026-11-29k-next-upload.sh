#!/usr/bin/env bash
# For the session after the twenty-eighth (written 2026-11-29, not run; about 6 minutes, run it under `timeout 500`).
# First: git show HEAD:runtime/cuda/backend_cuda.c > peer/base_backend_cuda.c (the file before the patch, for the
# A/B), then git apply docs/perf/2026-11-29k-upload-kernel.patch (compiled here with the build's nvcc and gcc
# commands; never run).
# The question: call 1 of the twenty-eighth session had small's replay start its first kernel 38 us after its first
# node, the two input uploads (8 KB each, memcpy nodes from pinned staging) 8.5 us apart and the embedding 26 us after
# the second. The patch uploads pinned memory with a kernel that reads it over the bus (ops/cuda/cuda.cu,
# cuda_upload): kernel nodes beside the others. Predicted: if the copy engine's nodes and their hand-offs are the
# delay, small ctx 512 -25 to -35 us a step (5.08 -> ~5.05 ms; issue 28's row 0.603 -> ~0.60 against its 8.39 ms
# peer); the 2.7B rows unchanged within noise. If not, equal: then the delay is the graph's launch (the graph dump
# of the small step, call (2) of 2026-11-29k-next-cluster.sh, shows its root).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29k-next-upload.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_backend_cuda.c:runtime/cuda/backend_cuda.c
perf_build || { wait; perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?") &
tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_ops:'*upload*'
wait
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
O=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 20)
for r in 1 2; do
    for b in build-gpu/stg /tmp/old/build-gpu/stg; do
        STG_BIN=$b stg_step "small 512 [$b] r$r" models/cs336/small.yaml --set ctx=512 "${O[@]}"
        STG_BIN=$b stg_step "small 1024 [$b] r$r" models/cs336/small.yaml --set ctx=1024 "${O[@]}"
        STG_BIN=$b stg_step "2.7B 1024 in-bwd [$b] r$r" models/cs336/2.7B.yaml --set ctx=1024 "${O[@]}" --optimizer-in-backward
    done
done
tl_lib && {
    tl small_new build-gpu/stg bench models/cs336/small.yaml --set ctx=512 "${O[@]}"
    python3 tools/timeline.py "$out/l/tl_small_new.tsv.gz" --list 0:0.06 | tail -8
}
peer_step small 512 4 cg
perf_pack
