#!/usr/bin/env bash
# Thirtieth session, call 2 (2026-11-29): where the short-sequence attention's time goes. At ctx 512-1024 stg's attention
# is faster than cuDNN's but far below its own long-sequence rate (medium B4 H16 D64 S1024: fwd 0.054 ms = ~160
# TFLOP/s, bwd 0.143 = ~150, against ~450 / ~320 at S16384), and it is ~20% of the small and medium steps (medium
# 1024: 24 layers x 0.197 ms = 4.7 of 24.1 ms). Predicted: each launch is a few waves of one-block-a-multiprocessor
# blocks of 1-8 tiles, so the multiprocessors' active share is high but the tensor pipe's low (<25%) inside blocks: the
# per-block start (barriers, Q's load, the first tiles' copies) and end (the stores) are the loss, not the tail.
# Also: the medium ctx 1024 training step's timeline (with options, in backward), the attention kernels' share of it.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29m-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
for a in "--heads 16 --dims 64 --seqs 512,1024,2048,4096" "--heads 32 --dims 80 --seqs 512,1024,4096"; do
    # shellcheck disable=SC2086
    timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 $a --iters 30 2>&1 | grep -E "^\| flash"
done
say "rates done"
M="gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg,launch__grid_size,launch__waves_per_multiprocessor"
M="$M,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"
M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed"
ncu --query-metrics 2>/dev/null | grep -i -E "gmma" | head -8
for s in 1024 4096; do
    timeout 120 ncu --csv --metrics "$M" -k regex:'att_ws' -c 4 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 \
        --heads 16 --dims 64 --seqs $s --iters 1 > "$out/l/ncu_att_$s.csv" 2> "$out/l/ncu_att_$s.err"
    echo "ncu S=$s: $?"; tail -3 "$out/l/ncu_att_$s.err"
    python3 - "$out/l/ncu_att_$s.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki, ni, mi, vi = h.index("ID"), h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
d = collections.OrderedDict()
for r in rows[1:]:
    d.setdefault((r[ki], r[ni].split("(")[0].split("<")[0]), {})[r[mi]] = r[vi]
for (k, n), m in d.items():
    print(k, n, "; ".join(f"{a.replace('.avg.pct_of_peak_sustained_active', ' %').replace('.pct_of_peak_sustained_elapsed', ' %el')}={b}" for a, b in m.items()))
PY
done
say "ncu done"
tl_lib && tl med1024 build-gpu/stg bench models/cs336/medium.yaml --set ctx=1024 --precision bf16 --grad-dtype bf16 --gemm-tune on \
    --optimizer-in-backward --warmup 3 --iters 10 && python3 tools/timeline.py "$out/l/tl_med1024.tsv.gz" --top 25 | tail -32
perf_pack
