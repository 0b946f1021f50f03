#!/usr/bin/env bash
# 2026-11-29 (twentieth session), call 4 (about 9 minutes): issue 28's rows at ctx 512 and 1024 (batch 4) for medium,
# large and xl, each stg size beside the strongest peer (torch_lm.py --flash --sdpa cudnn, default compile and
# reduce-overhead) in this one call; stg default and with --grad-dtype bf16 --gemm-tune on. A row starts only when
# the call's clock is below its gate. Predicted (from earlier sessions' ratios, 0.76-0.86): none at or below 0.75.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29c-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row medium 512 "c cg" 60
step_row large 512 "c cg" 190
step_row large 1024 "c cg" 310
step_row xl 512 "c cg" 400
say "done"
perf_pack
