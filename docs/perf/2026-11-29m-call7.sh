#!/usr/bin/env bash
# Thirtieth session, call 7 (2026-11-29; the session's last ~300 s of device time, so no peer): the 2.7B ctx 1024 step with
# options and in backward (the headline MFU row), and whether the memset rewrite touches the batch-1 decode step
# (STG_KEEP_MEMSETS=1 against the rewrite). Predicted: 2.7B in backward 141.3 -> ~139.5 ms (~63.5% MFU); decode equal
# (its step captures no cuBLASLt call at batch 1).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29m-call7.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
stg_step "2.7B 1024 options in backward" models/cs336/2.7B.yaml --set ctx=1024 "${IB[@]}"
STG_KEEP_MEMSETS=1 stg_step "2.7B 1024 options in backward, memsets kept" models/cs336/2.7B.yaml --set ctx=1024 "${IB[@]}"
dec_prompt
dec_ab build-gpu/stg "env STG_KEEP_MEMSETS=1 build-gpu/stg" -- 1
perf_pack
