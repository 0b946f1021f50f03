#!/usr/bin/env bash
# 2026-11-29 (twenty-first session), call 3: the consumer warpgroups' ring in the backward kernels, on and off.
# (Run on the first form of docs/perf/2026-11-29d-ring-modes.patch: STG_ATT_BWD_RING was then a mask, 1 the dk/dv
# kernel's ring on, 2 the dq kernel's; 3 = both, the default = mode "11" of the patch's final form, 2 = "01", 0 = "00",
# 1 = "10".)
# Call 2 (Nsight Compute, head dim 64, seq 16384, docs/perf/2026-11-29d-h200-call2.txt): the dk/dv kernel's tensor
# pipe is busy 35.6% of the time (the dq kernel's 60.5%); its consumer warps spend 44% of their stall samples at the
# ring's barrier (BAR.SYNC 1 + wg, waiting for the other warpgroup to issue its products), 26% issuing, 20% in the
# softmax; the stage barriers (the producer) cost nothing. The ring makes the two warpgroups' issues strictly
# alternate, so a warpgroup whose tile is done waits until the other has finished its softmax and issued.
# Predicted: with the dk/dv kernel's ring off (STG_ATT_BWD_RING=2) its consumers stop waiting for each other and the
# backward at head dim 64, seq 16384 goes from ~295 to 330-400 TFLOP/s; the dq kernel's ring (mask bit 2) matters
# less (its pipe is at 60%).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29d-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
ok0=1
attn_tests ring0 STG_ATT_BWD_RING=0 || ok0=0
attn_tests ring2 STG_ATT_BWD_RING=2 || ok0=0
attn_tests default
say "tests done"
[ $ok0 = 1 ] || { perf_pack; exit 1; }
d128() { env "$@" timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"; }
for r in 1 2; do for m in 3 2 0 1; do
    echo "== STG_ATT_BWD_RING=$m round $r"
    attn_rates STG_ATT_BWD_RING=$m
    [ $m = 3 ] || [ $m = 0 ] && d128 STG_ATT_BWD_RING=$m
done; done
say "rates done"
PYTHONUNBUFFERED=1 timeout 60 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
for m in 3 0; do
    STG_ATT_BWD_RING=$m stg_step "small ctx512 b4 RING=$m" models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40
    STG_ATT_BWD_RING=$m stg_step "llama 1B ctx4096 b1 RING=$m" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
done
say "steps done"
STG_ATT_BWD_RING=0 timeout 100 ncu -k regex:"att_ws_(dkdv|dq)_kernel" -c 2 --section SpeedOfLight build-gpu/stg attn-bench --device cuda \
    --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1 > "$out/l/ncu.txt" 2>&1
echo "ncu: $?"; grep -E "^  [a-z_ ]*att_ws_|Duration|Compute \(SM\) Throughput" "$out/l/ncu.txt" | sed 's/  */ /g' | cut -c1-60
say "ncu done"
perf_pack
