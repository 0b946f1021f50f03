#!/usr/bin/env bash
# 2026-11-29 (twenty-first session), call 2: where the dk/dv kernel's time goes. Call 1's Nsight Compute split of the
# two-launch backward (head dim 64, seq 16384, batch 4, 16 heads): att_ws_dkdv_kernel 16.8 ms at 35.6% SM throughput
# for 4 of the 7 tile products, att_ws_dq_kernel 7.4 ms at 60.5% for 3: per product the dk/dv kernel runs at 262
# TFLOP/s (at the profiler's clocks) against the dq kernel's 446. If it ran at the dq kernel's rate the backward would
# be ~17.3 instead of 24.2 ms (about cuDNN's 419 TFLOP/s). This call records both kernels' warp states and the
# stall samples per SASS instruction, to see what the consumers wait on.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-29d-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
args=(attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1)
for kn in dkdv dq; do
    timeout 150 ncu -k regex:"att_ws_${kn}_kernel" -c 1 --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section SourceCounters --section Occupancy --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis -o "$out/l/$kn" build-gpu/stg "${args[@]}" > "$out/l/ncu_$kn.log" 2>&1
    echo "ncu $kn: $?"
    ncu --import "$out/l/$kn.ncu-rep" --page details > "$out/$kn.details.txt" 2>&1
    ncu --import "$out/l/$kn.ncu-rep" --page source --csv --print-source sass > "$out/$kn.sass.csv" 2>&1
    echo "source page $kn: $? $(wc -l < "$out/$kn.sass.csv") lines"
    grep -E "Stall|Warp Cycles|Issued|Eligible|No Eligible|Active Warps|Duration|Throughput" "$out/$kn.details.txt" | sed 's/  */ /g' | head -40
    say "$kn done"
done
rm -f "$out"/l/*.ncu-rep
perf_pack
