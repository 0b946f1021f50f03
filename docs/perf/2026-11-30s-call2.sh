#!/usr/bin/env bash
# Thirty-sixth session, call 2 (2026-11-30): the landed tree (a1e0fef: the dk/dv kernel's RS Sᵀ / dPᵀ at head dim 64)
# through the GPU suite, and four forward variants of ops/attention/sm90a/attention_ws.cu, compile-time switches, each
# built whole in /tmp/NAME (ptxas: no spills and no serialization notes in any of them, checked here first):
#   s128:  -DWS_FWD_S128=1: with 128-key tiles (head dim 64) each k-step of S = Q Kᵀ is one m64n128 product, not two
#          m64n64 (the A fragments read once). Predicted: head dim 64's forward 0-3% faster, the others unchanged.
#   skip1: -DWS_FWD_SKIP1=1: O rescaled only when some row of the warp has a new maximum (bitwise the same output).
#          At head dim 128 the rescale is 64 FMULs a thread a tile against ~110 for the softmax's own arithmetic; past the
#          first tiles of a row the maximum rarely moves. Predicted: forwards 0-4% faster (most at 128).
#   qss2:  -DWS_FWD_S128=1 -DWS_FWD128_QSS=1 -DWS_FWD128_BK=128 -DWS_FWD128_NST=2: head dim 128 with 128-key tiles and Q
#          in shared memory (the S product SS, FlashAttention-3's form there), 2 stages. Predicted: head dim 128's forward
#          3-10% faster at seq 16384 (half the tiles' fixed costs: barriers, waits, the O rescale per key).
#   qss3:  the same with 3 stages (225 KB of shared memory).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30s-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
T=(stg test_gpu_mm_attn test_gpu_ops)
variant s128 - "-DWS_FWD_S128=1" "${T[@]}"
variant skip1 - "-DWS_FWD_SKIP1=1" "${T[@]}"
variant qss2 - "-DWS_FWD_S128=1 -DWS_FWD128_QSS=1 -DWS_FWD128_BK=128 -DWS_FWD128_NST=2" "${T[@]}"
variant qss3 - "-DWS_FWD_S128=1 -DWS_FWD128_QSS=1 -DWS_FWD128_BK=128 -DWS_FWD128_NST=3" "${T[@]}"
perf_build || { wait; perf_pack; exit 1; }
wait
say "builds done"
gpu_suite 250
variants_ab s128 skip1 qss2 qss3
for v in qss2 skip1; do
    [[ " ${B[*]} " == *" $v:"* ]] && tools/sanitize_gpu.sh /tmp/$v/build-gpu "$out/l/san_$v" 100 \
        memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*'
done
say "tests done"
attn_ab 1 "${B[@]}"
say "round 1 done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN"
say "cuDNN done"
[ "$(el)" -lt 470 ] && attn_ab 1 "${B[@]}" | sed 's/ r1\]/ r2]/'
say "round 2 done"
perf_pack
