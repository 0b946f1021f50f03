#!/usr/bin/env bash
# For a later session (written 2026-11-30, thirty-seventh session; about 4-5 minutes, run it under `timeout 400`): issue
# 26's decode rows beside the peer on the current tree, last measured together in the twenty-ninth session's call 5
# (batch 1 452.5 against 350.4 tokens/s = 1.291x, 78.2% of the bound; batch 64 1.218x). Since then, measured without the
# peer: the split-k few-rows kernel's loop and pick (c288b8b), the step 2.207 -> 2.183 ms. The attention kernels changed
# since touch training and prefill only (attention_cached is the decode step's attention). tools/sample_peer.sh: the
# 2.7B, bf16, a 512-token prompt and 512 new tokens, greedy, stg tuned, the torch peer with a static cache and
# reduce-overhead, in this call.
# Predicted: batch 1 ~458 tokens/s against a peer of ~350 (~1.31x, ~79% of the bound); batch 64 ~1.22x. Both short
# of the 1.5x / 85% at batch 1 (1.5x is ~91% of the bound).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30t-next-dec.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
BATCHES="1 64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 300 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 |
    grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -8
say done
perf_pack
