#!/usr/bin/env bash
# For the session after 2026-11-28 (eleventh): the attention backward's shapes at Llama 3.2-1B's
# grouped-query attention (32 query heads on 8 kv heads, head dim 64, ctx 4096, batch 1), where it runs
# at 242 TFLOP/s against the forward's 477 and takes 18 of the step's 73 ms (perf/LOG.md, eleventh
# session). One stg build per variant (tools/attn_tiles.sh, compile definitions of
# ops/attention/sm90a/attention_wgmma_bwd.cu), about 4 minutes on the GPU machine, carrying .deps:
#   docs/perf/2026-11-28d-next-tiles.sh OUT
# The variants: today's shape (one launch of one-warpgroup blocks, 4 stages, 2 blocks a
# multiprocessor); two launches; dk/dv blocks of two warpgroups sharing the Q and dO stages (half the
# loads a key); 3 and 5 stages. A variant that wins at this shape must also be timed at the CS336
# shapes (the script's default shapes) before it becomes the default.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out"
source .deps/env.sh || exit 2
ATT_SHAPES='--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096;--batch 4 --heads 16 --dims 64 --seqs 4096' \
    tools/attn_tiles.sh "$out" base: unfused:-DWG_BWD_FUSED=0 \
    kv2:"-DWG_BWD_FUSED=0 -DWG_DKDV_NWG=2 -DWG_DKDV_MINB=1" \
    st3:-DWG_DKDV_NST=3\ -DWG_DQ_NST=3 st5:"-DWG_DKDV_NST=5 -DWG_DQ_NST=5 -DWG_DKDV_MINB=1 -DWG_DQ_MINB=1" 2>&1 | tee "$out/tiles.txt"
