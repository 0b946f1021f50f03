#!/usr/bin/env bash
# For the session after the twenty-second (2026-11-29): one call of about 6 minutes (run it under `timeout 560`).
# Before it, here: `git apply docs/perf/2026-11-29e-l2-prefetch.patch` after saving the landed kernel as
# `cp ops/decode/cuda.cu peer/old_decode.cu; cp ops/matmul/cuda.cu peer/old_matmul.cu` (peer/ is ignored and carried).
# What the patch does: with the ring (long chunks: batch 64), each warp also asks L2 for its rows DEC_AHEAD = 8 trips
# ahead of the one it copies (prefetch.global.L2, one 128-byte line a lane; head-major rows are contiguous). Why: the
# twenty-second session's batch-64 kernel reads the cache at 3.55 TB/s under ncu (144.9 us at 763 positions) where a
# plain streaming loop over the same layout reads 4.2-4.4 TB/s (docs/perf/2026-11-29e-kvbw.cu): the ring holds 48 KB a
# block (4 blocks a multiprocessor), about 120 KB in flight a multiprocessor against the probe's 256 KB; L2 requests
# need no shared memory or registers. The same patch has the few-rows products (decoding's products up to batch 8)
# ask L2 for each warp's second trip of W before griddepcontrol.wait, beside the first trip they already load into
# registers there (STG_NO_GEMV_PF=1 turns that part off, for the A/B in one binary).
# Predicted: that kernel ~125 us (~4.1 TB/s), the batch-64 step (untuned) 6.89 -> ~6.3-6.5 ms; batch 1 (no ring there)
# 2.51 -> ~2.42-2.49 ms from the products' part (about 1 us of DRAM latency hidden at the start of the first wave of
# each of 128 products a token, where programmatic launch lets them start early). The landed kernel built beside it
# (peer/old_decode.cu: the landed products too, since the patch's matmul part is switched by the variable), alternating.
# The patch also adds two test_gpu_sample cases that the landed ring kernel has not run: chunks of ~137 positions with
# groups of 8 (the ring refilled for a second pass of query heads), bf16 and fp32; a failure there is the landed kernel's
# too (check with the old build's test binary: /tmp/old has none, so rebuild test_gpu_sample without the patch).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29e-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/old_decode.cu:ops/decode/cuda.cu peer/old_matmul.cu:ops/matmul/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
f="$out/l/test_gpu_sample.txt"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$f" 2>&1); echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$f" | tr '\n' ' ')"
echo "attention_cached cases: $(grep -c "^attention_cached" "$f"), largest rel err $(grep "^attention_cached" "$f" | awk '{print $NF}' | sort -g | tail -1)"
tools/sanitize_gpu.sh build-gpu "$out/l" 100 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*' 2>&1 | tail -4
say "tests done"
dec_prompt
dec_ab /tmp/old/build-gpu/stg build-gpu/stg "env STG_NO_GEMV_PF=1 build-gpu/stg" -- 64 1
say "A/B done"
for s in /tmp/old/build-gpu/stg build-gpu/stg; do
    timeout 100 ncu -k regex:attention_cached -s 8000 -c 1 --section SpeedOfLight $s "${dec[@]}" --batch 64 > "$out/l/ncu_dec.txt" 2>&1
    echo "ncu $s b64: $? $(grep -E "Duration|DRAM Through|L2 Cache Through" "$out/l/ncu_dec.txt" | sed 's/  */ /g' | tr '\n' ' ')"
done
say "ncu done"
BATCHES="64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 150 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -3
say "peer done"
(cd build-gpu && timeout 150 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "done"
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
