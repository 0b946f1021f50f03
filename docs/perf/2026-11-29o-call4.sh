#!/usr/bin/env bash
# Thirty-second session (2026-11-29), call 4 (~6 min). Call 3 swept the head-batch groups and grids: where all heads'
# rows outgrow the L2, a block an item (the hardware's placement) in groups of 1-2 head-batches beat every persistent
# grouping (B4 H16 S16384 D64 4.81-4.84 / 18.12-18.26 ms against 5.00-5.04 / 18.62-18.79 under call 2's rule; D128 S4096
# forward 0.576-0.580 against 0.606-0.611, S16384 8.02-8.05 / 31.26 against 8.43 / 32.30-32.55), where the persistent
# blocks' fixed shares of a grouped order are unbalanced. This tree (tm_item_plan): over twice the L2, a block an item in
# groups of 2; else call 2's rule's form (one group, persistent at two waves). Predicted, against d1cb32a (call 2's
# rule; peer/rev: git archive d1cb32a CMakeLists.txt ops/attention/sm90a | tar -xf - -C peer/rev, here): D64 S16384
# 5.00 -> ~4.82 / 18.6 -> ~18.15; D128 S4096 forward 0.61 -> ~0.577, backward even; D128 S16384 8.43 -> ~8.04 / 32.4 ->
# ~31.3; D80 S16384 (5.2 MB a head) forward and backward 2-4% faster; D64 and D80 at S4096 (64 and 84 MB, under twice
# the L2) and every S1024 unchanged. Tests: the attention tests at the default grid, at 3 persistent blocks in groups of
# 4 and a block an item in groups of 3 (the new ctest variants), memcheck and racecheck in groups of 3, the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
[ -f peer/rev/ops/attention/sm90a/tma.cuh ] || { echo "no peer/rev (see above)"; exit 2; }
P=(); for f in CMakeLists.txt $(cd peer/rev && find ops -type f); do cmp -s "peer/rev/$f" "$f" || P+=("peer/rev/$f:$f"); done
echo "files that differ: ${#P[@]}"
build_old "${P[@]}"
perf_build || { perf_pack; exit 1; }
wait
attn_tests default || echo "default: attention tests failed (see above)"
attn_tests hgroup3 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 || echo "hgroup3: failed"
attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 || echo "p3g4: failed"
STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
B=("new:build-gpu/stg" "old:/tmp/old/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
(cd build-gpu && timeout 240 ctest -L gpu --timeout 200 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "ctest done"
perf_pack
