#!/usr/bin/env bash
# For the session after the nineteenth (2026-11-29): issue 28's "every other size at ctx 512 and 1024" rows on the
# H200, each stg size beside the strongest peer (torch_lm.py --flash --sdpa cudnn; default compile "c" and
# reduce-overhead "cg" where it has been the faster or is untried) in one call, stg run default and with
# --grad-dtype bf16 --gemm-tune on. Three calls of about 9 minutes: SET a (small 1024, medium 512, large 512), SET b
# (large 1024, xl 512, xl 1024) and SET c (xl at ctx 4096 batch 1, 2.7B 512, small 512: PERF.md's table). Medium at 1024 and 2.7B at 1024 and 4096 were
# measured in the nineteenth session (2026-11-29b-h200-call5.txt, 2026-11-28j-h200-call4.txt). A row starts only
# when the call's clock is below its gate, so the call ends inside the device's 10 minutes.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29b-next-rows.sh a|b|c OUT
set -u
set_=${1:?usage: $0 a|b|c OUT}
source tools/perf_lib.sh "${2:?usage: $0 a|b|c OUT}"
perf_build stg || { perf_pack; exit 1; }
case $set_ in
a) step_row small 1024 "c cg" 60; step_row medium 512 "c cg" 230; step_row large 512 "c cg" 390 ;;
b) step_row large 1024 "c" 60; step_row xl 512 "c cg" 200; step_row xl 1024 "c" 380 ;;
c) step_row xl 4096 "c" 60 1; step_row 2.7B 512 "c" 250; step_row small 512 "cg" 400 ;;
*) echo "usage: $0 a|b|c OUT"; exit 2 ;;
esac
say "done"
perf_pack
