#!/usr/bin/env bash
# 2026-11-29, thirty-first session, call 5 (run under `timeout 300`): call 4's tree with the persistence rule of
# tm_persist_grid: persistent blocks only at two waves of items or more (small ctx 512's 192 items over 132 blocks: a block
# an item, as [none]; medium ctx 1024's 512 items: persistent). The attention tests by default and at 3 blocks, then the
# step A/B. Predicted: small 512 [default] equal to [none] (the same grid); medium 1024 in backward [default] ~0.2-0.5%
# under [none] (call 4).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
attn_tests default || echo "default: attention tests failed (see above)"
attn_tests p3 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 || echo "p3: failed"
say "tests done"
NONE="STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "small 512 [default] r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    # shellcheck disable=SC2086 # a word list
    ( export $NONE; stg_step "small 512 [none] r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}" )
    stg_step "medium 1024 ib [default] r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
    # shellcheck disable=SC2086
    ( export $NONE; stg_step "medium 1024 ib [none] r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward )
done
say "steps done"
perf_pack
