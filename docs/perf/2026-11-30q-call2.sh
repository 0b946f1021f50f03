#!/usr/bin/env bash
# 2026-11-30, thirty-fourth session, call 2 (~9 minutes; run under `timeout 590`). The tree: the TMA dk/dv producer
# (landed after call 1) with docs/perf/2026-11-29p-ssa-stmatrix.patch applied (head dim 128's Pᵀ and dSᵀ by stmatrix; in
# call 1 its attention tests and racecheck passed, backward D128 S16384 26.09 / 25.93 against the TMA tree's 26.31 /
# 26.43 ms). First the thirty-third session's ex2 script unchanged (docs/perf/2026-11-29p-next-ex2.sh: half of the
# softmax's exponentials on the FMA pipe, backward and forward variants, each against this tree; its header gives the
# prediction: the backward 3-8% faster if the softmax phases are MUFU-bound, ~0 if latency-bound; the forward 0-4%),
# then this tree's full build, memcheck of the attention bf16 tests, and the GPU suite (the stmatrix change's first run
# of it). Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30q-call2.sh OUT
set -u
bash docs/perf/2026-11-29p-next-ex2.sh "${1:?usage: $0 OUT}/ex2"
source tools/perf_lib.sh "$1"
perf_build || { perf_pack; exit 1; }
tools/sanitize_gpu.sh build-gpu "$out/l/san" 120 memcheck:test_gpu_mm_attn:'*attention_bf16*'
gpu_suite 400
perf_pack
