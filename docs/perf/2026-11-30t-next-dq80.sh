#!/usr/bin/env bash
# For the session after the thirty-seventh (written 2026-11-30; about 7-8 minutes, run it under `timeout 570`): head dim
# 80's dq kernel in 3 consumer warpgroups at 160 registers with Q and dO in swizzled tiles (WS_DQ80_W3=1: the tail panel
# in the tiles' 32-byte swizzle, read by the S and dP products as the K tiles' tail is), the shape that made head dim
# 64's backward 4.6-5.5% faster in the thirty-seventh session's call 4 (21cc637). Compiled there (ptxas: no spills, no
# serialization notes); never run on a GPU. This call: the variant built whole in /tmp/d80, its attention tests at the
# four grids, memcheck and racecheck of the bf16 attention tests and memcheck of the GQA tests, the rates of every head
# dim beside the tree's (two rounds) and cuDNN's (the first table of the tree with 21cc637 beside cuDNN), the 2.7B steps
# (head dim 80) at ctx 4096 b1 and ctx 1024 b4 A/B, and the variant's GPU suite.
# Predicted: head dim 80's backward 3-6% faster at seq 4096 and 16384, 64 and 128 unchanged; 2.7B ctx 4096 -0.3 to
# -1.0 ms (the dq launch overlaps the dk/dv launch on its own stream, so a step gains less than the kernel).
# If it passes and is faster: set WS_DQ80_W3 to 1 in ops/attention/sm90a/attention_ws_bwd.cu, commit, record the rows.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-next-dq80.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant d80 - "-DWS_DQ80_W3=1"
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
serial_report "$out/l/build_d80.txt" d80
if variant_tests d80; then
    tools/sanitize_gpu.sh /tmp/d80/build-gpu "$out/l/san_d80" 100 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
    say "tests done"
    attn_ab 2 tree:build-gpu/stg d80:/tmp/d80/build-gpu/stg
    attn_peer
    steps_ab 2.7B 4096 1 2 tree:build-gpu/stg d80:/tmp/d80/build-gpu/stg
    steps_ab 2.7B 1024 4 2 tree:build-gpu/stg d80:/tmp/d80/build-gpu/stg
    say "steps done"
    (cd /tmp/d80 && gpu_suite 420)
fi
perf_pack
