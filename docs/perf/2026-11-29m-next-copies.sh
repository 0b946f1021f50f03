#!/usr/bin/env bash
# For the session after the thirtieth (written 2026-11-29, not run: that session's device time was spent; about 7
# minutes, run it under `timeout 570`). First: git apply docs/perf/2026-11-29m-copy-nodes.patch (compiled here, never run).
# The patch generalises 064336f's rewrite to memcpy nodes: cuda_graph_copies_to_kernels(graph, kinds, ...) turns every
# memset node and every memcpy node of one run of bytes between addresses a kernel reaches (the device's memory, managed
# memory, pinned host memory) into a kernel node (copy_kernel, the upload's kernel renamed); STG_KEEP_MEMSETS=1 and
# STG_KEEP_MEMCPYS=1 keep either (A/B). The test becomes test_graph_copy_nodes (adds a graph of four copies: device to
# device at unaligned addresses, device to pinned host, pinned host to device, device to pageable host, which must stay
# a copy).
# Why: call 3's timeline (medium ctx 1024) ends each replay with three memcpy nodes (the loss, the gradient norm and the
# schedule's state, 4-8 bytes each, down to pinned results) starting 7 us after the last kernel and ending 14.5 us after
# it. Predicted: ~-10 us a step (small 512 4.84 -> ~4.83 ms; medium 1024 equal within noise); the batch-1 decode step
# equal (its tokens come down after the replay, in rt_exec_read, not in a node of its graph).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-next-copies.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && STG_TEST_FILTER='*graph_copy*' timeout 60 ./test_gpu_ops > "$out/l/copies.txt" 2>&1
 echo "test_gpu_ops graph_copy_nodes: $? $(grep -E "PASSED|FAILED|ERROR" "$out/l/copies.txt" | head -3 | tr '\n' ' ')")
tools/sanitize_gpu.sh build-gpu "$out/l/san" 120 memcheck:test_gpu_ops:'*graph_copy*' memcheck:test_gpu_ops:'*upload*'
(cd build-gpu && timeout 250 ctest -L gpu --timeout 240 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
STG_GRAPH_DUMP="$out/l/g" timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --grad-dtype bf16 \
    --gemm-tune on --warmup 1 --iters 2 > "$out/l/g.out" 2>&1
echo "dump: $? node kinds (0 kernel, 1 memcpy, 2 memset): $(awk 'NR > 1 {print $2}' "$out"/l/g.0.txt | sort | uniq -c | tr '\n' ' ')"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "small 512 copies as kernels r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    STG_KEEP_MEMCPYS=1 stg_step "small 512 memcpy nodes kept r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    stg_step "medium 1024 ib copies as kernels r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
    STG_KEEP_MEMCPYS=1 stg_step "medium 1024 ib memcpy nodes kept r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
done
dec_prompt
dec_ab build-gpu/stg "env STG_KEEP_MEMCPYS=1 build-gpu/stg" -- 1
say "A/B done"
peer_step small 512 4 cg
perf_pack
