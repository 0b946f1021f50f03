#!/usr/bin/env bash
# 2026-11-30, thirty-eighth session, call 4 (~7-8 min, under `timeout 570`): the GPU suite on the tree whose default
# kernels call 1 landed (head dim 80: WS_FWD80_PSS with WS_FWD80_QSS, WS_DQ80_W3; w3's suite in call 1 also had
# WS_DQ128_W3 on, which stays off), then issue 26's decode rows beside the peer (docs/perf/2026-11-30t-next-dec.sh's
# run: tools/sample_peer.sh, 2.7B bf16, 512-token prompt, 512 new tokens, greedy, stg tuned, the torch peer with a
# static cache and reduce-overhead). Predicted: the suite 20/20; batch 1 ~458 tokens/s against ~350 (~1.31x, ~79% of
# the bound), batch 64 ~1.22x.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30u-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
gpu_suite 200
BATCHES="1 64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 300 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 |
    grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -8
say done
perf_pack
