#!/usr/bin/env bash
# Thirtieth session, call 8 (2026-11-29), run as one command line while the machine was still warm from call 7 (its build
# reused): the 2.7B ctx 1024 row beside the reduce-overhead peer, with the session's last ~290 s of device time.
# Usage (GPU machine, repository root, carrying .deps and peer, build-gpu built): bash docs/perf/2026-11-29m-call8.sh OUT
source tools/perf_lib.sh "${1:?usage: $0 OUT}" > /dev/null
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
stg_step "2.7B 1024 options in backward (before the peer)" models/cs336/2.7B.yaml --set ctx=1024 "${IB[@]}"
peer_step 2.7B 1024 4 cg
stg_step "2.7B 1024 options (after the peer)" models/cs336/2.7B.yaml --set ctx=1024 "${IB[@]:0:6}" "${IB[@]:7}"
perf_pack
