#!/usr/bin/env bash
# For the session after the twentieth (2026-11-29): the rows of issue 28's table that the twentieth did not
# re-measure, each stg size beside the strongest peer (torch_lm.py --flash --sdpa cudnn; "c" default compile, "cg"
# reduce-overhead) in one call, stg default and with --grad-dtype bf16 --gemm-tune on (tools/perf_lib.sh step_row).
# Three calls of about 8 minutes (run each under `timeout 560`; a row starts only while the clock is below its gate):
#   a: large 1024 (c, cg), xl 1024 (c)           b: 2.7B 512 (c), 2.7B 1024 (c)
#   c: xl 4096 batch 1 (c), 2.7B 4096 batch 1 (cg: never run at that size; an earlier session expected its graph
#      to hold the memory twice, which the H200's 141 GB may still hold)
# Times from the twentieth's calls 4-5: a medium row took 163 s with both peer modes, large 224 s, xl 512 with
# reduce-overhead only 162 s.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29c-next-rows.sh a|b|c OUT
set -u
set_=${1:?usage: $0 a|b|c OUT}
source tools/perf_lib.sh "${2:?usage: $0 a|b|c OUT}"
perf_build stg || { perf_pack; exit 1; }
case $set_ in
a) step_row large 1024 "c cg" 60; step_row xl 1024 "c" 320 ;;
b) step_row 2.7B 512 "c" 60; step_row 2.7B 1024 "c" 300 ;;
c) step_row xl 4096 "c" 60 1; step_row 2.7B 4096 "cg" 280 1 ;;
*) echo "usage: $0 a|b|c OUT"; exit 2 ;;
esac
say "done"
perf_pack
