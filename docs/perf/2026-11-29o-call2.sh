#!/usr/bin/env bash
# Thirty-second session (2026-11-29), call 2 (~7 min). Call 1 ran the prepared back-and-forth order with head-batch
# groups (2026-11-29n-snake.patch): the order missed (attn-bench S1024 backward 0.127-0.128 against 0.122-0.123 ms,
# S4096 and S16384 -0.2 to -1.5%, steps even), and groups of head-batches cut S16384's DRAM reads from 9.1 GB to 0.9 GB
# (forward) and its time 3-4% (forward), 3-4% (backward), but slowed S4096's forward 18-34% in groups of 4 or 16.
# This tree: the landed order (block x: x, x + G, ...) kept; the head-batch groups on by rule (tm_head_group: every
# head-batch in one group unless all read more than 4 L2s, then as many as fit the L2: B4 H16 D64 S16384 groups of 12).
# Predicted: S1024, S4096 (and every step shape: their K and V fit the L2 several times over) unchanged to noise;
# D64 S16384 forward 4.99 -> ~4.80 ms, backward 18.85 -> ~18.2; D128 S16384 (8 MB a head: groups of 6) forward and
# backward 2-4% faster. The A/B: this tree (build-gpu) against HEAD's attention (peer/rev: git archive HEAD
# CMakeLists.txt ops/attention/sm90a | tar -xf - -C peer/rev, here), then cuDNN's rates beside them (torch_attn.py).
# Tests: the attention tests at the default grid and at 3 blocks in groups of 4 (the ctest variants), memcheck and
# racecheck at 5 blocks in groups of 4, then the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
[ -f peer/rev/ops/attention/sm90a/tma.cuh ] || { echo "no peer/rev (see above)"; exit 2; }
P=(); for f in CMakeLists.txt $(cd peer/rev && find ops -type f); do cmp -s "peer/rev/$f" "$f" || P+=("peer/rev/$f:$f"); done
echo "files that differ: ${#P[@]}"
build_old "${P[@]}"
perf_build || { perf_pack; exit 1; }
wait
attn_tests default || echo "default: attention tests failed (see above)"
attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 || echo "p3g4: failed"
STG_ATT_FWD_PERSIST=5 STG_ATT_DKDV_PERSIST=5 STG_ATT_HGROUP=4 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
B=("new:build-gpu/stg" "old:/tmp/old/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
        timeout 30 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 80 --seqs 4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | grep -E "CUDNN|FLASH"
say "peer done"
(cd build-gpu && timeout 220 ctest -L gpu --timeout 200 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "ctest done"
perf_pack
