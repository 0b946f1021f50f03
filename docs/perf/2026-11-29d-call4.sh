#!/usr/bin/env bash
# 2026-11-29 (twenty-first session), call 4: two ring turns a tile in the backward kernels (STG_ATT_BWD_RING=XY, X
# (Run on docs/perf/2026-11-29d-ring-modes.patch, not landed.)
# the dk/dv kernel's mode, Y the dq kernel's: 1 one turn a tile, the old default; 2 two turns; 0 no ring).
# Call 3 turned the ring off: slower (dk/dv 289 -> 278 TFLOP/s at head dim 64, seq 16384; the kernel 16.8 -> 18.6 ms
# under ncu), so the ring's waits were not idle time to win back. The model behind this call: with one turn a tile,
# the tensor cores run warpgroup 0's Sᵀ, dPᵀ and previous dK/dV products, then warpgroup 1's, so warpgroup 1's Sᵀ is
# done only after all of warpgroup 0's products, and its softmax (the longest part of a consumer's own work, ~20%
# of its samples, with the -lse/D loads another ~10%) starts late; warpgroup 0 then waits in the ring for 1's next
# issue. With two turns, the order is S0 dP0 S1 dP1 | dKdV0 dKdV1: both softmaxes start after a quarter / half of the
# tile's products and run under the dK/dV products.
# Predicted: dk/dv mode 2 at head dim 64, seq 16384: 289 -> 310-340 TFLOP/s; the dq kernel's mode 2 +0-5% (its S
# is RS, its pipe already at 60%).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29d-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
ok=1
attn_tests r22 STG_ATT_BWD_RING=22 || ok=0
attn_tests r00 STG_ATT_BWD_RING=00 || ok=0
attn_tests default
say "tests done"
[ $ok = 1 ] || { perf_pack; exit 1; }
d128() { env "$@" timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"; }
for r in 1 2; do for m in 11 21 12 22; do
    echo "== STG_ATT_BWD_RING=$m round $r"
    attn_rates STG_ATT_BWD_RING=$m
    [ $m = 11 ] || [ $m = 22 ] && d128 STG_ATT_BWD_RING=$m
done; done
say "rates done"
PYTHONUNBUFFERED=1 timeout 60 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
for m in 11 22; do
    STG_ATT_BWD_RING=$m stg_step "small ctx512 b4 RING=$m" models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40
    STG_ATT_BWD_RING=$m stg_step "llama 1B ctx4096 b1 RING=$m" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
done
say "steps done"
STG_ATT_BWD_RING=22 timeout 100 ncu -k regex:"att_ws_(dkdv|dq)_kernel" -c 2 --section SpeedOfLight build-gpu/stg attn-bench --device cuda \
    --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1 > "$out/l/ncu.txt" 2>&1
echo "ncu: $?"; grep -E "^  [a-z_ ]*att_ws_|Duration|Compute \(SM\) Throughput" "$out/l/ncu.txt" | sed 's/  */ /g' | cut -c1-60
say "ncu done"
perf_pack
