#!/usr/bin/env bash
# For the session after the thirty-sixth (written 2026-11-30; about 8 minutes, run it under `timeout 570`): land head dim
# 64's forward with Q in shared memory and 3 consumer warpgroups at 160 registers (docs/perf/2026-11-30s-q3-land.patch:
# WS_FWD64_QSS on by default, FlashAttention-3's 192 x 128 tile). Call 5 of the thirty-sixth session measured it 12-13%
# faster (seq 16384 5.028-5.052 -> 4.436-4.443 ms, 4096 0.386-0.388 -> 0.335-0.339) and its attention tests passed at the
# default grid and at 3 persistent blocks in groups of 4; that session's device time ran out before the GPU suite and the
# sanitizers, so it is not in the tree. This call: the patched tree built whole in /tmp/q3, its GPU suite, its attention
# tests at the four grids, memcheck and racecheck of the bf16 attention tests and memcheck of the GQA tests; the rates
# beside the tree's and cuDNN's; the small ctx-512 and xl ctx-1024 steps (head dim 64: the forward's attention is in
# them) A/B, and the reduce-overhead peer of small at ctx 512 (issue 28's 0.6 row).
# Predicted: the suite passes; head dim 64's forward 10-13% faster, the others unchanged; xl ctx 1024 -0.3 to -0.8 ms
# (its forward attention is ~6 ms of 96.7); small ctx 512 -0.02 to -0.06 ms.
# If it passes: `patch -p1 < docs/perf/2026-11-30s-q3-land.patch`, commit, record the rows in PERF.md.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30s-next-q3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30s-q3-land.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant q3 "$P" ""
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
serial_report "$out/l/build_q3.txt" q3
(cd /tmp/q3 && gpu_suite 300)
variant_tests q3 && tools/sanitize_gpu.sh /tmp/q3/build-gpu "$out/l/san_q3" 120 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
attn_ab 1 tree:build-gpu/stg q3:/tmp/q3/build-gpu/stg
attn_peer
steps_ab xl 1024 4 2 tree:build-gpu/stg q3:/tmp/q3/build-gpu/stg
steps_ab small 512 4 2 tree:build-gpu/stg q3:/tmp/q3/build-gpu/stg
say "steps done"
peer_rows 560 small:512:4
perf_pack
