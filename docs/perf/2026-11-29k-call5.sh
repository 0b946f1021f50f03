#!/usr/bin/env bash
# Twenty-eighth session, call 5 (2026-11-29): the lanes fix (runtime/exec.c: an op that enqueues nothing, a view of
# its input's bytes or a folded norm, follows its latest dependency's stream). Call 4 found the executor putting the
# views of k and v on idle streams 1 and 2 (each waiting on an event after the q/k/v product, recording one for
# attention_cached on stream 0); the capture carried each stream's earlier products along, so every layer's attention
# node depended on every earlier q/k/v product. One stream for the decode step (an experiment switch) measured
# 2.310 -> 2.240 ms at batch 1 and 6.776 -> 6.729 at batch 64.
# Here: (1) the GPU suite; (2) decode, batches 1 and 64: the tree, the tree with HEAD's lanes (old), the tree with
# HEAD's attention_cached (oldatt: no PDL, no prefetch, the old combine); (3) training steps, the tree against HEAD's
# lanes: small ctx 512 and 2.7B ctx 1024 (`--grad-dtype bf16 --gemm-tune on`, and with --optimizer-in-backward);
# (4) the decode timeline of the tree.
# Predicted: suite 14/14; decode b1 ~2.24 ms (old ~2.31), oldatt ~2.245; b64 ~6.73 (old 6.78); training within
# +-0.3% (views carry no work; fewer events), unless the views' streams were what spread the backward's chains.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29k-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_exec.c:runtime/exec.c
side /tmp/oldatt stg peer/base_decode.cu:ops/decode/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
wait
say "tests done"
dec_prompt
dec_ab build-gpu/stg /tmp/old/build-gpu/stg /tmp/oldatt/build-gpu/stg -- 1 64
say "decode done"
O=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    for b in build-gpu/stg /tmp/old/build-gpu/stg; do
        STG_BIN=$b stg_step "small 512 [$b] r$r" models/cs336/small.yaml --set ctx=512 "${O[@]}"
        STG_BIN=$b stg_step "small 512 in-bwd [$b] r$r" models/cs336/small.yaml --set ctx=512 "${O[@]}" --optimizer-in-backward
        STG_BIN=$b stg_step "2.7B 1024 in-bwd [$b] r$r" models/cs336/2.7B.yaml --set ctx=1024 "${O[@]}" --optimizer-in-backward
    done
done
say "training done"
tl_lib && { dec[11]=64; tl new_b1 build-gpu/stg "${dec[@]}" --batch 1; }
say done
perf_pack
