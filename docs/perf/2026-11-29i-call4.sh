#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 4: attention at the CS336 sizes' own shapes (batch 4, ctx 512 and 1024), where
# the steps of issue 28's rows run it, beside cuDNN. The 2026-11-25 small-step study had small's attention backward at
# 60 TFLOP/s on the critical path (0.76 ms of 5.96 on the H100): at seq 512 a dk/dv block has at most 8 row tiles, so
# fill, the wave tail and the second launch (dq) weigh more than at 16384. Prediction: stg's backward at seq 512 well
# below cuDNN's there (~0.5x), the forward near it; the cp.async kernels (STG_ATT_WS_BWD=0) no faster.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29i-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
shapes=("12 64" "16 64" "25 64" "32 80")
for r in 1 2; do
    for sh in "${shapes[@]}"; do
        set -- $sh
        for m in "" "STG_ATT_WS_BWD=0"; do
            echo "== heads $1 dim $2 [$m] round $r"
            env $m timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads $1 --dims $2 \
                --seqs 512,1024,4096 --iters 30 2>&1 | grep -E "^\| flash"
        done
    done
done
say "stg done"
for sh in "${shapes[@]}"; do
    set -- $sh
    PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads $1 --dims $2 --seqs 512,1024,4096 --iters 30 2>&1 | grep -E "CUDNN|FLASH"
done
say "peers done"
timeout 120 ncu --csv --metrics gpu__time_duration.sum -k regex:att -c 12 build-gpu/stg attn-bench --device cuda --attention flash \
    --batch 4 --heads 12 --dims 64 --seqs 512 --iters 2 > "$out/l/ncu_small.csv" 2>&1
echo "ncu: $?"; grep -E "gpu__time_duration" "$out/l/ncu_small.csv" | awk -F'","' '{print $5, $(NF)}' | cut -c1-150 | head -14
perf_pack
