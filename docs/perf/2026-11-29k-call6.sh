#!/usr/bin/env bash
# Twenty-eighth session, call 6 (2026-11-29): the landed form for issue 26. Call 5 measured the lanes rule
# (an op that enqueues nothing follows its dependency's stream) 2.311 -> 2.240 ms a decode step but 140.8 -> 143.6
# ms a 2.7B ctx-1024 training step (the views on idle streams spread the backward's chains): not kept. Instead the
# sampler's executors run on one stream (runtime/sample.c), with the new attention_cached (PDL, L2 prefetch, the
# combine in one round trip). Here: the GPU suite (test_gpu_sample asserts one stream), then decode against HEAD
# (old: HEAD's sample.c and attention_cached) at batches 1 and 64, then the peer (tools/sample_peer.sh,
# reduce-overhead, static cache) at 1 and 64 with stg tuned (--gemm-tune on).
# Predicted: suite 14/14; b1 2.31 -> ~2.24 ms (~446 tokens/s, ~78% of the bound), b64 6.78 -> ~6.73; stg / peer at
# b1 ~446 / 354 = 1.26 (the peer's 354 from the twenty-fifth session), at b64 ~1.21.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29k-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_sample.c:runtime/sample.c peer/base_decode.cu:ops/decode/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
grep -h "captured decode steps" build-gpu/Testing/Temporary/LastTest.log 2>/dev/null | head -2
wait
say "tests done"
dec_prompt
dec_ab build-gpu/stg /tmp/old/build-gpu/stg -- 1 64
say "decode done"
BATCHES="1 64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 240 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 |
    grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -8
say done
perf_pack
