#!/usr/bin/env bash
# For the session after the thirty-seventh (written 2026-11-30; about 8 minutes, run it under `timeout 570`): the dq
# kernel in 3 consumer warpgroups at 160 registers at head dims 80 and 128, the shape that made head dim 64's backward
# 4.6-5.5% faster in the thirty-seventh session's call 4 (21cc637). Both switches are in the tree, off, compiled there
# (ptxas: no spills, no serialization notes) and never run on a GPU:
#   WS_DQ80_W3=1: Q and dO in swizzled tiles read by the S and dP products (SS), the 16-dim tail panel in the tiles'
#     32-byte swizzle as the K tiles' is;
#   WS_DQ128_W3=1: also dS, the A operand of dQ += dS K, through a 64 x 64 shared-memory tile a warpgroup (stmatrix, as
#     the dk/dv kernel's Pᵀ and dSᵀ at head dim 128) instead of 16 registers, and 3 stages (218 KB).
# The two are independent code paths, so one build "w3" with both measures each at its own head dim. This call: w3 built
# whole in /tmp/w3, its attention tests at the four grids, memcheck and racecheck of the bf16 attention tests and memcheck
# of the GQA tests, the rates of every head dim beside the tree's (two rounds) and cuDNN's (the first table of the tree
# with 21cc637 beside cuDNN), the 2.7B steps (head dim 80) at ctx 4096 b1 and ctx 1024 b4 A/B, and w3's GPU suite.
# Predicted: the backward 3-6% faster at head dim 80 and 3-8% at 128 (seq 4096 and 16384), 64 unchanged; 2.7B ctx 4096
# -0.3 to -1.0 ms (the dq launch overlaps the dk/dv launch on its own stream, so a step gains less than the kernel).
# For each head dim that passes and is faster: set its switch to 1 in ops/attention/sm90a/attention_ws_bwd.cu, commit,
# record the rows (a switch left off returns that head dim to the tested default).
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-next-w3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant_build w3 - "-DWS_DQ80_W3=1 -DWS_DQ128_W3=1" || { perf_pack; exit 1; }
if variant_checks w3; then
    attn_ab 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    attn_peer
    steps_ab 2.7B 4096 1 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    steps_ab 2.7B 1024 4 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    say "steps done"
    (cd /tmp/w3 && gpu_suite 420)
fi
perf_pack
