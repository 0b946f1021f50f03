#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 7: two of issue 28's step rows beside the strongest peer with the attention
# backward's dq launch on its own stream (call 6: small ctx 512 5.31 -> 5.19 ms, the backward at seq 4096 -3 to -6%).
# Predicted: small ctx 512 ~5.19 / ~5.08 ms (default / --grad-dtype bf16 --gemm-tune on) against the reduce-overhead
# peer's ~7.4 (0.70 / 0.69); xl ctx 4096 batch 1 126.7 -> ~125 ms (0.86 against last session's 145.2 peer).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29i-call7.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row small 512 cg 200
step_row xl 4096 cg 300 1
perf_pack
