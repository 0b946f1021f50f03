#!/usr/bin/env bash
# 2026-11-29 (twenty-second session), call 2: attention over the cache with a per-warp cp.async ring (each lane
# copies its own chunks NS - 1 trips ahead of the trip it scores) against the kernel before it (peer/old_decode.cu,
# built beside it). Call 1's Nsight Compute: the old kernel at batch 64 (2.7B, 762 positions) 152.5 us at 3.31 TB/s,
# 55% of stall samples on the loads' first use, 16 warps a multiprocessor.
# Predicted: that kernel ~3.8 TB/s (~133 us); the batch-64 decode step 7.15 -> ~6.6 ms (untuned), batch 1 within 1%.
# Then the batch-64 acceptance row beside the peer (tools/sample_peer.sh, stg with --gemm-tune on as in the record).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29e-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/old_decode.cu:ops/decode/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
f="$out/l/test_gpu_sample.txt"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$f" 2>&1); echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$f" | tr '\n' ' ')"
echo "attention_cached cases: $(grep -c "^attention_cached" "$f"), largest rel err $(grep "^attention_cached" "$f" | awk '{print $NF}' | sort -g | tail -1)"
grep -E "FAILED|differs|error" "$f" | head -5
tools/sanitize_gpu.sh build-gpu "$out/l" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*' 2>&1 | tail -4
say "tests done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec=(sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 --json)
keys() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('batch','decode_tokens_per_s','steady_ms_per_step','bound_tokens_per_s')})" "$1" 2>&1 | cut -c1-300; }
for r in 1 2; do
    for s in /tmp/old/build-gpu/stg build-gpu/stg; do
        for b in 64 1; do
            timeout 90 $s "${dec[@]}" --batch $b > "$out/l/d.json" 2> "$out/l/d.err"; echo "$s b$b rc=$? $(keys "$out/l/d.json")"
        done
    done
done
timeout 90 build-gpu/stg sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 new $(keys "$out/l/d.json")"
timeout 90 /tmp/old/build-gpu/stg sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 old $(keys "$out/l/d.json")"
say "A/B done"
timeout 150 ncu -k regex:attention_cached -s 8000 -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section MemoryWorkloadAnalysis build-gpu/stg "${dec[@]}" --batch 64 > "$out/l/ncu_dec.txt" 2>&1
echo "ncu: $?"; grep -E "Duration|DRAM Through|Memory Through|Warp Cycles Per Issued|Eligible Warps|Active Warps Per Sch|Registers Per|Achieved Occ|Block Limit (Reg|Sha)" "$out/l/ncu_dec.txt" | sed 's/  */ /g'
say "ncu done"
BATCHES=64 CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 240 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"' | cut -c1-600 | tail -8
say "done"
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
