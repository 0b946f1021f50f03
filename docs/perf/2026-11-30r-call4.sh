#!/usr/bin/env bash
# 2026-11-30, thirty-fifth session, call 4 (~4 minutes; run under `timeout 400`). Where the 2.7B step's time goes now,
# for the GEMM-side levers of issue 28 item 3 (the attention kernels are ~17% of it): kernel timelines (CUPTI,
# tools/probes/timeline.c, read by tools/timeline.py) of the 2.7B step at ctx 4096 batch 1 and ctx 1024 batch 4, bf16
# with options and --optimizer-in-backward (the rows of docs/PERF.md), tree 176b269 (head dim 128's m64n128 products;
# the 2.7B's head dim 80 does not use them). Predicted: the device busy >= 99% (the twenty-eighth session's ctx-1024
# timeline: 99.5%), the GEMMs ~60-65% of the kernel time, attention ~17% at 4096.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-30r-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 6)
tl_lib && {
    tl 27b_4096 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
    python3 tools/timeline.py "$out/l/tl_27b_4096.tsv.gz" --top 45 > "$out/l/tl_27b_4096_top.txt" 2>&1
    tl 27b_1024 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 "${IB[@]}"
    python3 tools/timeline.py "$out/l/tl_27b_1024.tsv.gz" --top 45 > "$out/l/tl_27b_1024_top.txt" 2>&1
}
perf_pack
