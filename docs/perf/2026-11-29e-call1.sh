#!/usr/bin/env bash
# 2026-11-29 (twenty-second session), call 1, on the tree the twenty-first left (904a9ba):
#   1. the whole GPU suite (the last kernel change's suite ran in two parts);
#   2. the attention table beside cuDNN, one round (the dk/dv producer change measured 295 -> 320 TFLOP/s at head
#      dim 64, seq 16384 without cuDNN in its call; predicted now 320 / ~420 = ~0.76 of cuDNN there);
#   3. issue 26's batch-64 decode (2.7B, 512 + 512 tokens, bf16): the step in graph replay, the eager profile op by op,
#      and Nsight Compute on attention over the cache at the average length (the 250th step: 762 positions) with
#      stall samples per SASS instruction. Batch 64 is 1.177x the peer (7.02 ms a step) where 1.2x is asked; the KV
#      reads are 16.1 of the step's 22.9 GB, so the cache kernel is the step's largest term.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29e-call1.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
attn_rates
attn_d128
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "attention table done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
dec=(sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 --json)
keys() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('batch','decode_tokens_per_s','steady_ms_per_step','bound_tokens_per_s','copy_bandwidth_bytes_per_s')})" "$1" 2>&1 | cut -c1-400; }
for b in 64 1 64 1; do
    timeout 90 build-gpu/stg "${dec[@]}" --batch $b > "$out/l/dec$b.json" 2> "$out/l/dec$b.err"; echo "decode b$b rc=$? $(keys "$out/l/dec$b.json")"
done
timeout 90 build-gpu/stg "${dec[@]}" --batch 64 --profile > "$out/l/dec64-profile.txt" 2>&1; echo "profile b64: $?"
grep -v '"ids"' "$out/l/dec64-profile.txt" | head -30 | cut -c1-160
say "decode done"
timeout 200 ncu -k regex:attention_cached -s 8000 -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section SourceCounters --section Occupancy --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
    -o "$out/l/dec" build-gpu/stg "${dec[@]}" --batch 64 > "$out/l/ncu_dec.log" 2>&1
echo "ncu: $?"
ncu --import "$out/l/dec.ncu-rep" --page details > "$out/dec.details.txt" 2>&1
ncu --import "$out/l/dec.ncu-rep" --page source --csv --print-source sass > "$out/dec.sass.csv" 2>&1
grep -E "Duration|DRAM Through|Memory Through|Stall|Warp Cycles|Issued Warp|Eligible|Active Warps|Registers|Achieved Occ|Block Limit" "$out/dec.details.txt" | sed 's/  */ /g' | head -40
rm -f "$out"/l/*.ncu-rep "$out"/l/*.bin
say "done"
perf_pack
