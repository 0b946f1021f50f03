#!/usr/bin/env bash
# For the session after the twenty-seventh (written 2026-11-29, not run; about 4 minutes, run it under `timeout 400`):
# the first kernel timelines of captured steps (tools/probes/timeline.c: CUPTI injected into stg; tools/timeline.py
# reads them), where the twenty-seventh session could only infer: (1) small ctx 512 and 2.7B ctx 1024, ordinary and
# with the optimizer in backward: how far the updates' stream runs past the backward's end (the tail), how busy each
# stream and the device are; (2) the 2.7B batch-1 decode step: the device's idle gaps between its ~229 kernels.
# Predicted: small's replay near 100% busy with the ordinary AdamW ~0.95 ms at its end; in backward the updates' tail
# under 0.3 ms at 2.7B (the last layer's and the embedding's updates) and the device busy >= 97%; the decode step's
# gaps 1-3 us each, some 0.2-0.4 ms a token in all (the LOG's reading of the products' starts and tails).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29j-timeline-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
cu=$(dirname "$(dirname "$(command -v nvcc)")")
lib=$(ls "$cu"/lib64/libcupti.so "$cu"/extras/CUPTI/lib64/libcupti.so 2>/dev/null | head -1)
inc=$(ls -d "$cu"/include/cupti.h "$cu"/extras/CUPTI/include/cupti.h 2>/dev/null | head -1)
echo "CUPTI: $lib $inc"
gcc -O2 -Wall -std=c11 -shared -fPIC tools/probes/timeline.c -I"$(dirname "$inc")" -L"$(dirname "$lib")" -lcupti \
    -o "$out/libtimeline.so" || { echo "timeline library: build failed"; perf_pack; exit 1; }
tl() { # NAME ARGS...: stg ARGS with the timeline injected, then its reading
    local name=$1; shift
    LD_LIBRARY_PATH="$(dirname "$lib"):${LD_LIBRARY_PATH:-}" STG_TIMELINE_OUT="$out/l/tl_$name.tsv" \
        CUDA_INJECTION64_PATH="$out/libtimeline.so" timeout 150 build-gpu/stg "$@" > "$out/l/tl_$name.out" 2>&1
    echo "[$name] stg: $? $(grep -E "^  time|timeline:" "$out/l/tl_$name.out" | tr '\n' ' ')"
    python3 tools/timeline.py "$out/l/tl_$name.tsv" > "$out/l/tl_$name.txt" 2>&1; echo "[$name] timeline.py: $?"
    head -30 "$out/l/tl_$name.txt"
    gzip -9 "$out/l/tl_$name.tsv"
}
O=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 5)
tl small_ord bench models/cs336/small.yaml --set ctx=512 "${O[@]}"
tl small_ib bench models/cs336/small.yaml --set ctx=512 "${O[@]}" --optimizer-in-backward
tl 27_ord bench models/cs336/2.7B.yaml --set ctx=1024 "${O[@]}"
tl 27_ib bench models/cs336/2.7B.yaml --set ctx=1024 "${O[@]}" --optimizer-in-backward
dec_prompt
[ "${dec[10]}" = -n ] && dec[11]=64 # 64 new tokens, not 512: a smaller file, the same step
tl dec_b1 "${dec[@]}" --batch 1
perf_pack
