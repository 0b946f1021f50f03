#!/usr/bin/env bash
# For the session after the thirty-fourth (written 2026-11-30, compiled here, never run: that session's device time was
# spent; about 9 minutes, run it under `timeout 570`). The dk/dv consumers pipelined across row tiles
# (docs/perf/2026-11-30q-pipe.patch, build switch WS_DKDV_PIPE, 0 by default): a warpgroup's ring turn for tile t issues
# dPᵀ(t), the dK, dV products of the tile before and Sᵀ(t + 1), so tile t's Sᵀ, issued a turn earlier, is done when
# its softmax starts (FlashAttention-3's order: the next tile's product before this tile's softmax). Sᵀ in two register
# sets by the tile's parity (the step unrolled by two), -lse and D read from shared memory where used.
# Also (WS_DQ_PIPE) the dq consumers the same way: turn t issues dP(t), dQ(t - 1) and S(t + 1).
# Binaries: tree (build-gpu), pipe (-DWS_DKDV_PIPE=1 -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240: the dk/dv kernel pipelined
# at head dims 64 and 80 with the TMA producer's 240 consumer registers; its cp.async instantiations: 64 pipelined at
# 224, 80 not, it spills there), pipeq (pipe and -DWS_DQ_PIPE=1: the dq kernel pipelined too, every head dim). Head dim
# 128's dk/dv kernel is not pipelined (no registers: its Pᵀ and dSᵀ already live in shared memory). Compiled here: no
# spills, no new C7520.
# The protocol (stage waits, ring turns, commit groups and their waits, releases) was checked by a model under random
# interleavings, both kernels: docs/perf/2026-11-30q-pipe-protocol.py (no deadlock, each group waited for before its registers are
# read, each stage released once, none refilled under a pending product; six mutants of the order each caught).
# Why: the thirty-third session's probe (docs/perf/2026-11-29p-h200-call2.txt) had each head-dim-64 warpgroup busy
# ~1,800-1,900 of a tile pair's ~2,086 cycles against 1,024 of tensor work a pair: each turn issued Sᵀ(t) behind the
# other warpgroup's whole turn (~512 tensor cycles), then waited for it before its softmax (~430-610 cycles), so the
# softmax never ran under this warpgroup's own products. Pipelined, Sᵀ(t) is done at the turn; the softmax and dS run
# while the tensor pipe works through both warpgroups' queued products; the wait left is for the previous tile's dK,
# dV products before Pᵀ, dSᵀ are packed.
# Predicted (B4 H16 causal, against the tree in the same call): pipe, the backward at head dims 64 and 80, seq 4096 and
# 16384, 10-25% faster (the dk/dv tile pair ~2,000 -> ~1,300-1,600 cycles; the dq launch unchanged beside it), 128 and
# the forward unchanged; pipeq, a further 3-10% at every head dim (the dq kernel's tile pair, 1,356 cycles against 768
# of tensor work in the thirty-third session's probe). 2.7B ctx 4096 (head dim 80): 154.6 -> ~149-152 ms. If nothing
# changes, the tensor pipe is not where the chain waited (look at the issue slots). A miss to look at first: any
# attention test failure (a wrong wait count reads a product's registers early; the model says the order is right,
# not that the code follows it), or a hang (the tests' 45 s limit).
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/. The tree stays
# unpatched (the A/B's other side); the script makes the variant trees itself.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30q-next-pipe.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30q-pipe.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant pipe "$P" "-DWS_DKDV_PIPE=1 -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240" stg test_gpu_mm_attn test_gpu_ops
variant pipeq "$P" "-DWS_DKDV_PIPE=1 -DWS_DQ_PIPE=1 -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240"
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
variants_ab pipe pipeq
if [[ " ${B[*]} " == *" pipeq:"* ]]; then
    (cd /tmp/pipeq && attn_tests pipeq_again) || echo "pipeq: the second run failed"
    tools/sanitize_gpu.sh /tmp/pipeq/build-gpu "$out/l/san_pipeq" 150 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
fi
say "tests done"
attn_ab 2 "${B[@]}"
for b in "${B[@]}"; do
    timeout 30 "${b#*:}" attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 \
        --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} gqa] /"
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
if [[ " ${B[*]} " == *" pipeq:"* ]]; then
    IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
    for r in 1 2; do
        for b in "tree:build-gpu/stg" "pipeq:/tmp/pipeq/build-gpu/stg"; do
            STG_BIN=${b#*:} stg_step "2.7B 4096 b1 [options ib, ${b%%:*}] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
        done
    done
    say "steps done"
    (cd /tmp/pipeq && gpu_suite 360)
fi
perf_pack
