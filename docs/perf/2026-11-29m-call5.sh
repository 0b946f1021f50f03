#!/usr/bin/env bash
# Thirtieth session, call 5 (2026-11-29). Call 4 found the memset nodes: cuBLASLt captures a 4-byte zeroing (value 0)
# before some algorithms (39 in small ctx 512's tuned step, 14 with its heuristic's), each with ~7.8 us of idle device
# before it and ~5 us after (call 3's timeline): the copy engine's hand-offs. The change: the backend rewrites every
# memset node of a captured step into a kernel node doing its work (cuda_graph_memsets_to_kernels; STG_KEEP_MEMSETS=1
# keeps them, for this A/B), with a GPU test (test_graph_memsets). Also in this tree: att_bwd_dot_kernel with eight
# threads a row (call 3: medium 1024 in backward 24.06 -> 23.74 ms).
# Predicted: ~10 us a memset on the critical path: small 512 5.02 -> ~4.7 ms (39 of them, most in the forward chain),
# medium 1024 in backward 23.6-23.7 -> ~23.0 (73).
# Then, if time allows, the rows beside the reduce-overhead peer: medium 1024 and small 512.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 260 ctest -L gpu --timeout 250 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 memcheck:test_gpu_ops:'*graph_memsets*' memcheck:test_gpu_mm_attn:'*attention_odd*'
say "tests done"
STG_GRAPH_DUMP="$out/l/g" timeout 120 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --grad-dtype bf16 \
    --gemm-tune on --warmup 1 --iters 2 > "$out/l/g.out" 2>&1; echo "dump: $? $(grep -c ' ms:' "$out"/l/g.0.txt) memsets, $(grep -c memset_node_kernel "$out"/l/g.0.txt) memset kernels"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
OPT=("${IB[@]:0:6}" "${IB[@]:7}")
for r in 1 2; do
    stg_step "small 512 kernels r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    STG_KEEP_MEMSETS=1 stg_step "small 512 memsets r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    stg_step "medium 1024 ib kernels r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    STG_KEEP_MEMSETS=1 stg_step "medium 1024 ib memsets r$r" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
done
say "A/B done"
if [ "$(el)" -lt 330 ]; then
    stg_step "medium 1024 ib kernels (before the peer)" models/cs336/medium.yaml --set ctx=1024 "${IB[@]}"
    peer_step medium 1024 4 cg
    say "medium peer done"
fi
if [ "$(el)" -lt 470 ]; then
    stg_step "small 512 kernels (before the peer)" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    peer_step small 512 4 cg
    say "small peer done"
fi
perf_pack
