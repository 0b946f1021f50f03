#!/usr/bin/env bash
# 2026-11-30, thirty-fifth session, call 6 (~4.5 minutes; run under `timeout 340`). The dk/dv consumers pipelined in the
# form ptxas keeps asynchronous (docs/perf/2026-11-30r-pipe2.patch, WS_DKDV_PIPE; the thirty-fourth session's pipe
# patch ran 1.8x slower in call 1 under C7514, see tools/probes/wgmma_rules.cu): turn t issues dPᵀ(t), the dK, dV
# products of the last active tile and Sᵀ(t + 1), runs tile t's softmax on Sᵀ(t) (done a turn earlier) while they run,
# and ends waiting for all three, so nothing is in flight across the back-edge; dPᵀ and Sᵀ are issued whether or not
# their tile has work (no product in a branch of its own). ptxas here: no C7514 / C7515, no spills; the C7520 notes of
# the cp.async instantiations are the tree's. Variant pipe2 = the patch built with -DWS_DKDV_PIPE=1 -DWS_DKDV_TQ_PR=24
# -DWS_DKDV_TQ_RG=240 (head dims 64 and 80 pipelined; 128 and the dq kernel as the tree).
# Predicted: the attention tests pass at every grid; the backward at head dims 64 and 80 5-20% faster at seq 4096 and
# 16384 (the softmax no longer waits for Sᵀ behind the other warpgroup's turn; the turn's end now waits for its own
# products instead), 128 and the forward unchanged; the 2.7B ctx-4096 step (head dim 80) -1 to -4 ms.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30r-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30r-pipe2.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant pipe2 "$P" "-DWS_DKDV_PIPE=1 -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240" stg test_gpu_mm_attn test_gpu_ops
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
variants_ab pipe2
say "tests done"
attn_ab 1 "${B[@]}"
say "rates done"
if [[ " ${B[*]} " == *" pipe2:"* ]]; then
    IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
    for b in "tree:build-gpu/stg" "pipe2:/tmp/pipe2/build-gpu/stg"; do
        STG_BIN=${b#*:} stg_step "2.7B 4096 b1 [options ib, ${b%%:*}]" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
    done
fi
perf_pack
