#!/usr/bin/env bash
# Twenty-eighth session, call 7 (2026-11-29): issue 28's medium ctx-1024 row (0.786 in the nineteenth session, not run
# since) with --grad-dtype bf16 --gemm-tune on, ordinary and with --optimizer-in-backward, beside the reduce-overhead
# peer, in the ~290 s of device time left. Predicted (medium 512: -2.3% in backward, and 0.745-0.749 with options
# alone): ~0.75-0.76 with options, ~0.74 in backward.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29k-call7.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row_ib medium 1024 4 120
perf_pack
