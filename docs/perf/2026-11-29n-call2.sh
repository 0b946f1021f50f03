#!/usr/bin/env bash
# 2026-11-29, thirty-first session, call 2 (run under `timeout 590`): the tree of call 1 (a607310 with the four prepared
# patches). The step A/B of call 1's changes, each by its switch in one binary, three rounds alternating:
#   [all]  attention forward, dk/dv and dq persistent, the replay's memcpy nodes as kernels (the patched default);
#   [fwd]  only the forward persistent (STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0);
#   [none] no persistence (all three 0): the attention schedule of a607310 but for the order of the items;
#   [cpy]  [all] with the memcpy nodes kept (STG_KEEP_MEMCPYS=1).
# Then the batch-1 and batch-64 decode with and without the memcpy rewrite, and the reduce-overhead peer at small 512 and
# medium 1024. Predicted (call 1's attention rates: the backward -2 to -5% at S512-S4096, +2% at S16384; the forward within
# noise but S4096 -4%): small 512 [all] ~1% under [none] (not the -3% the thirtieth session predicted), medium 1024 under
# 1%; [cpy] ~10 us over [all]; the decode equal.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
V=("all:" "fwd:STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0" "none:STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_DQ_PERSIST=0"
   "cpy:STG_KEEP_MEMCPYS=1")
for r in 1 2 3; do
    for v in "${V[@]}"; do
        # shellcheck disable=SC2086 # the variables are a word list
        ( [ -n "${v#*:}" ] && export ${v#*:}; stg_step "small 512 [${v%%:*}] r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}" )
    done
done
for r in 1 2; do
    for v in "${V[@]}"; do
        # shellcheck disable=SC2086
        ( [ -n "${v#*:}" ] && export ${v#*:}; stg_step "medium 1024 ib [${v%%:*}] r$r" models/cs336/medium.yaml --set ctx=1024 \
            "${OPT[@]}" --optimizer-in-backward )
    done
done
say "steps done"
dec_prompt
dec_ab build-gpu/stg "env STG_KEEP_MEMCPYS=1 build-gpu/stg" -- 1 64
say "decode done"
stg_step "small 512 [all] (before the peer)" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
peer_step small 512 4 cg
stg_step "small 512 [all] (after the peer)" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
say "small peer done"
stg_step "medium 1024 ib [all] (before the peer)" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
peer_step medium 1024 4 cg
say "medium peer done"
perf_pack
