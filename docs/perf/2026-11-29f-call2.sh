#!/usr/bin/env bash
# 2026-11-29 (twenty-third session), call 2: attention over the cache at batch 1.
# The fourteenth session's profile had it at 16-17 us a layer (0.55 of the 2.7B's 2.5 ms decode step) for 5-8 MB of
# cache (2 us at the copy rate), and call 4 of the twenty-second under ncu at 17.4-18.1 us with DRAM at 9% of peak.
# Read in the code: the last block of a pair combined the 16 splits with one dependent L2 load a split (a loop over
# the splits with a test of each weight: 16 round trips, three times over head dim 80 at 32 lanes). Now:
#  - the combine: weights a warp a head, then every thread an output element with eight splits' loads in flight;
#  - a programmatic launch: the position and the first trips' rows of the cache (all of batch 1's) are loaded before
#    griddepcontrol.wait, under the end of the qkv product.
# Predicted: the batch-1 kernel under ncu 18 -> 7-9 us; the batch-1 step 2.49 -> 2.25-2.35 ms; Llama 3.2-1B batch 1
# (32 splits, groups of 4) 1.03 -> ~0.95 ms; batch 64 (one split a pair, no combine) unchanged or a little faster.
# The tree before (peer/old_decode.cu) built beside it, alternating.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29f-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/old_decode.cu:ops/decode/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
f="$out/l/test_gpu_sample.txt"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$f" 2>&1); echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$f" | tr '\n' ' ')"
echo "attention_cached cases: $(grep -c "^attention_cached" "$f"), largest rel err $(grep "^attention_cached" "$f" | awk '{print $NF}' | sort -g | tail -1)"
grep -E "FAILED|differs|error" "$f" | head -5
tools/sanitize_gpu.sh build-gpu "$out/l" 100 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*' 2>&1 | tail -4
say "tests done"
dec_prompt
dec_ab /tmp/old/build-gpu/stg build-gpu/stg -- 1 64
for s in /tmp/old/build-gpu/stg build-gpu/stg; do
    timeout 90 $s sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 \
        --temperature 0 --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 $s $(dec_keys "$out/l/d.json")"
done
say "A/B done"
for s in /tmp/old/build-gpu/stg build-gpu/stg; do
    timeout 100 ncu -k regex:attention_cached -s 8000 -c 1 --section SpeedOfLight $s "${dec[@]}" --batch 1 > "$out/l/ncu_dec.txt" 2>&1
    echo "ncu $s b1: $? $(grep -E "Duration|DRAM Through" "$out/l/ncu_dec.txt" | sed 's/  */ /g' | tr '\n' ' ')"
done
say "ncu done"
(cd build-gpu && timeout 150 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
if [ "$(el)" -lt 380 ]; then
    BATCHES="1" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 120 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -3
    say "peer done"
fi
[ "$(el)" -lt 470 ] && ncu_step build-gpu/stg 1 8000 300
say "done"
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
