#!/usr/bin/env bash
# For the session after the thirty-seventh (written 2026-11-30; about 8-9 minutes, run it under `timeout 570`): three
# switches that are in the tree, off, compiled there (ptxas: no spills, no serialization notes) and never run on a GPU,
# each an independent kernel, so one build "w3" with all of them measures each in its own column:
#   WS_DQ80_W3=1: head dim 80's dq kernel in 3 consumer warpgroups at 160 registers, Q and dO in swizzled tiles read by
#     the S and dP products (SS; the 16-dim tail panel in the tiles' 32-byte swizzle, as the K tiles' is), the shape
#     that made head dim 64's backward 4.6-5.5% faster in the thirty-seventh session's call 4 (21cc637);
#   WS_DQ128_W3=1: head dim 128's the same, with dS (the A operand of dQ += dS K) through a 64 x 64 shared-memory tile
#     a warpgroup (stmatrix, as the dk/dv kernel's Pᵀ and dSᵀ at head dim 128) instead of 16 registers, 3 stages;
#   WS_FWD80_PSS=1 with WS_FWD80_QSS=1: head dim 80's forward with 128-key tiles in its 3 warpgroups, Q in shared
#     memory and P, the A operand of O += P V, through a shared-memory tile a warpgroup (stmatrix; SS products), 3
#     stages: 128-key tiles gained 13% at head dims 64 and 128, and at head dim 80 they need these 32 + 20 registers.
# This call: w3 built whole in /tmp/w3, its attention tests at the four grids, memcheck and racecheck of the bf16
# attention tests and memcheck of the GQA tests, the rates of every head dim beside the tree's (two rounds) and cuDNN's
# (the first table of the tree with 21cc637 beside cuDNN), the 2.7B steps (head dim 80) at ctx 4096 b1 and ctx 1024 b4
# A/B, and w3's GPU suite if the clock allows.
# Predicted: the backward 3-6% faster at head dim 80 and 3-8% at 128 (seq 4096 and 16384), head dim 80's forward 0-10%
# faster (the P tile's stores and SS reads cost some of what the larger tile gains), 64 unchanged; 2.7B ctx 4096 -0.5 to
# -1.5 ms (the dq launch overlaps the dk/dv launch on its own stream, so a step gains less than the kernel).
# For each switch whose head dim passes and is faster: set it to 1 in ops/attention/sm90a/ (WS_FWD80_PSS with
# WS_FWD80_QSS), commit, record the rows; a switch left off returns its kernel to the tested default. If w3's tests
# fail, the failing test names the head dim: rerun with that switch left out.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-next-w3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant_build w3 - "-DWS_DQ80_W3=1 -DWS_DQ128_W3=1 -DWS_FWD80_PSS=1 -DWS_FWD80_QSS=1" || { perf_pack; exit 1; }
if variant_checks w3; then
    attn_ab 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    attn_peer
    steps_ab 2.7B 4096 1 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    steps_ab 2.7B 1024 4 2 tree:build-gpu/stg w3:/tmp/w3/build-gpu/stg
    say "steps done"
    (cd /tmp/w3 && gpu_suite 400)
fi
perf_pack
