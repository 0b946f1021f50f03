#!/usr/bin/env bash
# Twenty-fifth session (2026-11-29), call 5: issue 28's step rows never measured beside the strongest peer on an H200
# (docs/PERF.md): xl ctx 1024 batch 4, 2.7B ctx 512 batch 4, xl ctx 4096 batch 1; stg default and with --grad-dtype bf16
# --gemm-tune on, the peer `torch_lm.py --flash --sdpa cudnn` with reduce-overhead only (the faster mode in every
# row the twentieth and twenty-first sessions ran in both: medium, large, 2.7B 1024), each row in this one call.
# No stg change since those sessions touches a training step (the few-rows kernels are decode-only).
# Predicted from the neighbouring rows: xl 1024 ~0.78 / 0.75, 2.7B 512 ~0.80 / 0.77, xl 4096 ~0.80 / 0.77.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row xl 1024 "cg" 60
step_row 2.7B 512 "cg" 240
step_row xl 4096 "cg" 380 1
say "done"
perf_pack
