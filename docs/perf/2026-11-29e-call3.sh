#!/usr/bin/env bash
# 2026-11-29 (twenty-second session), call 3: the KV cache head-major, (B, Hkv, C, Dh), with call 2's ring kernel.
# Call 2: the ring alone left the batch-64 kernel at 3.33 TB/s (152 us at 762 positions), as before it. The probe
# beside it (peer/kvbw.cu, one plain streaming kernel, 2048 blocks, L = 763): position-major 3.70-3.83 TB/s,
# head-major 4.17-4.38. Predicted: the kernel ~115-130 us (3.9-4.3 TB/s), the batch-64 step 7.2 -> ~6.3-6.6 ms
# (untuned), batch 1 -1 to -2%. The tree before (HEAD: position-major, the old kernel) built beside it from
# peer/old_tree. Then the acceptance rows beside the peer (tools/sample_peer.sh, --gemm-tune on) and the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29e-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
old=()
for f in $(cd peer/old_tree && find . -type f | sed 's|^\./||'); do old+=("peer/old_tree/$f:$f"); done
build_old "${old[@]}"
perf_build || { perf_pack; exit 1; }
wait
f="$out/l/test_gpu_sample.txt"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$f" 2>&1); echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$f" | tr '\n' ' ')"
echo "attention_cached cases: $(grep -c "^attention_cached" "$f"), largest rel err $(grep "^attention_cached" "$f" | awk '{print $NF}' | sort -g | tail -1)"
grep -E "FAILED|differs|error" "$f" | head -5
(cd build-gpu && timeout 60 ./test_sample > "$out/l/test_sample.txt" 2>&1; echo "test_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_sample.txt" | tr '\n' ' ')")
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
for s in /tmp/old/build-gpu/stg build-gpu/stg; do
    timeout 90 $s sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 \
        --json --batch 1 > "$out/l/d.json" 2>&1; echo "llama 1B b1 $s $(keys "$out/l/d.json")"
done
say "A/B done"
timeout 100 ncu -k regex:attention_cached -s 8000 -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section MemoryWorkloadAnalysis build-gpu/stg "${dec[@]}" --batch 64 > "$out/l/ncu_dec.txt" 2>&1
echo "ncu: $?"; grep -E "Duration|DRAM Through|Memory Through|Warp Cycles Per Issued|Eligible Warps|Active Warps Per Sch|Achieved Occ|Block Limit (Reg|Sha)" "$out/l/ncu_dec.txt" | sed 's/  */ /g'
say "ncu done"
BATCHES="64 1" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 220 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -6
say "peer done"
(cd build-gpu && timeout 150 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
if [ "$(el)" -lt 470 ]; then
    tools/sanitize_gpu.sh build-gpu "$out/l" 80 memcheck:test_gpu_sample:'*' racecheck:test_gpu_sample:'*attention_cached*' 2>&1 | tail -4
fi
say "done"
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
