#!/usr/bin/env bash
# 2026-11-29, thirty-first session, call 1 (run under `timeout 590`): the tree a607310 with the four prepared patches applied
# (2026-11-29m-copy-nodes, -att-persist, -dkdv-persist, -dq-persist; compiled, never run before).
# Tests first (the copy-node test, the attention tests persistent / 3 blocks / a block an item, sanitizers), then the
# attention rates with each persistence switch. Predicted (the thirtieth session's reading): B4 H16 D64 S1024 forward
# 0.052 -> ~0.038 ms, backward 0.121 -> ~0.10; S512 forward 0.026 -> ~0.019; S4096 -3 to -5%; S16384 within 2%.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-call1.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && STG_TEST_FILTER='*graph_copy*' timeout 60 ./test_gpu_ops > "$out/l/copies.txt" 2>&1
 echo "test_gpu_ops graph_copy_nodes: $? $(grep -E "PASSED|FAILED|ERROR" "$out/l/copies.txt" | head -3 | tr '\n' ' ')")
attn_tests persistent || echo "persistent: attention tests failed (see above)"
attn_tests p3 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_DQ_PERSIST=3 || echo "p3: failed"
say "attention tests done"
V=("all:" "fwd:STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0" "none:STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0")
for v in "${V[@]}"; do
    # shellcheck disable=SC2086 # the variables are a word list
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 \
        --seqs 512,1024,4096,16384 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
    # shellcheck disable=SC2086
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 \
        --seqs 1024 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
    # shellcheck disable=SC2086
    env ${v#*:} timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 \
        --seqs 4096 --iters 30 2>&1 | grep -E "^\| flash" | sed "s/^/[${v%%:*}] /"
done
say "rates done"
STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_DQ_PERSIST=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
tools/sanitize_gpu.sh build-gpu "$out/l/san2" 60 memcheck:test_gpu_ops:'*graph_copy*'
say "sanitizers done"
attn_tests p0 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0 || echo "p0: failed"
(cd build-gpu && timeout 200 ctest -L gpu --timeout 190 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "ctest done"
perf_pack
