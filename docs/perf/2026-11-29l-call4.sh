#!/usr/bin/env bash
# Twenty-ninth session, call 4 (about 5 minutes; run it under `timeout 520`).
# Call 3's Nsight Compute of attention_cached alone at batch 1 (12.4 us, 0.43 instructions issued a scheduler a cycle,
# DRAM 9%): its time is a chain of phases, the rows themselves ~12% of the stall samples; after the wait come the
# position's round trip, then the rows' and the queries', the rotation in double (exp, sincos), a barrier, the merges,
# every thread's fence, the count, the last block's fence and its loads. The change: before the wait the kernel reads
# the position, makes the rotation at it (a table in shared memory) and loads its first rows into registers (or starts
# their copies into the ring), none of which a kernel of the same step writes (the comment in ops/decode/cuda.cu says
# why); after the wait only the queries and the new row. The split's partials released and acquired by thread 0 alone.
# Predicted: the batch-1 step 2.25 -> ~2.20 ms (1-1.5 us a layer: one round trip and the rotation off the chain),
# batch 64 within 1%; the kernel alone under ncu 12.4 -> ~10 us.
# Usage (GPU machine, repository root, carrying .deps and peer; peer/base_decode.cu = HEAD's ops/decode/cuda.cu):
#   bash docs/perf/2026-11-29l-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/base_decode.cu:ops/decode/cuda.cu
perf_build || { wait; perf_pack; exit 1; }
(cd build-gpu && timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1
 echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample.txt" | tr '\n' ' ')")
tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
wait
say "tests done"
dec_prompt
dec_ab build-gpu/stg /tmp/old/build-gpu/stg -- 1 64
say "decode done"
dec[11]=24
timeout 120 ncu --metrics gpu__time_duration.sum -k regex:attention_cached -s 200 -c 8 build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/ncu_att.txt" 2>&1
echo "ncu new: $?"; grep -E "gpu__time_duration" "$out/l/ncu_att.txt" | awk '{print $NF}' | tr '\n' ' '; echo
timeout 120 ncu --metrics gpu__time_duration.sum -k regex:attention_cached -s 200 -c 8 /tmp/old/build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/ncu_att_old.txt" 2>&1
echo "ncu old: $?"; grep -E "gpu__time_duration" "$out/l/ncu_att_old.txt" | awk '{print $NF}' | tr '\n' ' '; echo
tl_lib && { dec[11]=64; tl new_b1 build-gpu/stg "${dec[@]}" --batch 1; python3 tools/timeline.py "$out/l/tl_new_b1.tsv.gz" --period '^mm_gv_glu' | tail -3; }
perf_pack
