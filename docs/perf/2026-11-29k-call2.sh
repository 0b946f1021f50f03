#!/usr/bin/env bash
# Twenty-eighth session, call 2 (2026-11-29): issue 26's batch-1 decode after call 1's first timeline
# (docs/perf/2026-11-29k-h200-call1.txt). That timeline had the 2.7B step at 2.336 ms a token, 72.9 us a layer, of
# which the span from the end of the q/k/v product to the end of the wo product took 18.6 us for ~21 MB (KV ~7.9 MB,
# wo 13.1 MB: ~5.3 us at copy rate): a 1.6 us gap before attention_cached (launched without programmatic dependent
# launch), 11 us in it (a chain of dependent round trips: the rows, then the combine's m, l and outputs), and wo's
# weights not loaded early (its blocks wait for attention's 512 blocks, which fill every register file).
# The tree: attention_cached launched with PDL, an L2 bulk prefetch of its rows before its wait, the combine in one
# round trip for up to 16 splits (ops/decode/cuda.cu). Variants: STG_X_DEC_PER_SM=3 / 2 (an experiment switch: the
# split sized for fewer blocks a multiprocessor, leaving registers for wo's early loads), and u10 (the one-row
# few-rows kernels load 10 vectors a lane a trip, not 8: wo's and the lm head's whole rows before the wait).
# Predicted: the tree 2.345 -> ~2.22 ms a token at batch 1 (-4 us a layer); per_sm 2 or 3 a further -1 to -3 us a
# layer or slower (fewer blocks for the cache); u10 ~-1 us a layer; batch 64 unchanged (6.89 ms: the ring path, no
# prefetch; only the launch and the combine change). Tests: test_gpu_sample (new cases: 17 splits) and memcheck and
# racecheck of the attention_cached tests.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29k-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_decode.cu:ops/decode/cuda.cu
side /tmp/u10 stg peer/u10_matmul.cu:ops/matmul/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
(cd build-gpu && timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1; echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample.txt" | tr '\n' ' ')")
tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
wait
say "tests done"
dec_prompt
dec_ab /tmp/old/build-gpu/stg build-gpu/stg "env STG_X_DEC_PER_SM=3 build-gpu/stg" "env STG_X_DEC_PER_SM=2 build-gpu/stg" /tmp/u10/build-gpu/stg -- 1
say "b1 done"
dec_ab /tmp/old/build-gpu/stg build-gpu/stg -- 64
say "b64 done"
tl_lib && {
    dec[11]=64
    tl new_b1 build-gpu/stg "${dec[@]}" --batch 1
    tl nopdl_b1 "env STG_NO_PDL=1 build-gpu/stg" "${dec[@]}" --batch 1
    tl u10_b1 /tmp/u10/build-gpu/stg "${dec[@]}" --batch 1
}
say "done"
perf_pack
