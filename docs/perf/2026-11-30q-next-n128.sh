#!/usr/bin/env bash
# For the session after the thirty-fourth (written 2026-11-30, compiled here, never run: that session's device time was
# spent; about 8-9 minutes, run it under `timeout 570`). m64n128 products at head dim 128
# (docs/perf/2026-11-30q-n128.patch: wg_mma_ss_n128 and wg_mma_n128 in wgmma.cuh and three build switches, 0 by default):
#   WS_DKDV_N128  the dk/dv kernel's dV += Pᵀ dO and dK += dSᵀ Q (both operands in shared memory) as one m64n128 a
#                 k-step each instead of two m64n64 that read the same Pᵀ (dSᵀ) 2 KB twice;
#   WS_DQ_N128    the dq kernel's dQ += dS K (dS in registers) as one m64n128 instead of two m64n64;
#   WS_FWD_N128   the forward's O += P V (P in registers) likewise.
# Binaries: tree (build-gpu, unpatched), n128 (-DWS_DKDV_N128=1), all (the three switches). Compiled here: no spills, the
# same C7519 / C7520 notes as the tree; head dims 64 and 80 compile to the same code (the switches need two panels).
# Why: at head dim 128 every product of the dk/dv kernel reads both operands from shared memory (Sᵀ = K Qᵀ and dPᵀ = V
# dOᵀ, and the dV, dK products with Pᵀ, dSᵀ in shared tiles since the registers ran out). An SS m64n64k16 reads 4 KB in
# its 32 tensor cycles, the multiprocessor's whole 128 B a cycle, so a 64 x 64 tile and warpgroup moves ~128 KB for its
# products + ~16 KB of its share of the tensor copies + 16 KB of Pᵀ / dSᵀ stores: ~1,250 cycles against 1,024 of tensor
# work (the twelfth session's budget, docs/perf/LOG.md). One m64n128 reads Pᵀ once: 6 KB for 64 tensor cycles, the
# tile's traffic ~144 KB (~1,125 cycles). The RS products (dq, forward) move the same bytes either way; there the
# switch halves the instructions (and their descriptor work) only.
# Predicted: n128, head dim 128's backward 0-5% faster at seq 4096 and 16384 (the tile pair, ~3,400 cycles, sits well
# above both bounds, so how much of it is shared-memory contention is what this measures); all, a further 0-2% on the
# backward and 0-2% on head dim 128's forward; 64 and 80 unchanged; every product's sums in the same order (the same
# bits as the tree). A miss to look at first: a wrong second panel (the descriptor's LBO, the panel stride, which
# wg_desc_mnmaj already sets and which N = 64 never used) fails every head-dim-128 attention test.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/. The tree stays
# unpatched (the A/B's other side); the script makes the variant trees itself.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30q-next-n128.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30q-n128.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant n128 "$P" -DWS_DKDV_N128=1 stg test_gpu_mm_attn test_gpu_ops
variant all "$P" "-DWS_DKDV_N128=1 -DWS_DQ_N128=1 -DWS_FWD_N128=1"
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
variants_ab n128 all
[[ " ${B[*]} " == *" all:"* ]] && tools/sanitize_gpu.sh /tmp/all/build-gpu "$out/l/san_all" 120 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*'
say "tests done"
attn_ab 2 "${B[@]}"
for b in "${B[@]}"; do
    timeout 40 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 16384 --iters 20 \
        --order phases 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} phases] /"
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
[[ " ${B[*]} " == *" all:"* ]] && (cd /tmp/all && gpu_suite 380)
perf_pack
