#!/usr/bin/env bash
# For the session after the twenty-first (2026-11-29): one call of about 8 minutes (run it under `timeout 560`) on the
# tree as the twenty-first left it, whose last change (the dk/dv producer storing the consumers' per-tile statistics
# and tests: backward 295 -> 320 TFLOP/s at head dim 64, seq 16384, call 6) was measured against the build before it
# but not beside cuDNN, and whose full GPU suite ran in two parts (call 6: the attention tests and racecheck; call 7:
# all but test_gpu_head and the non-attention tests of test_gpu_mm_attn and test_gpu_ops).
#   1. the whole GPU suite;
#   2. the attention table beside cuDNN (head dims 64, 80, 128; seq 4096, 16384) and the grouped-query row;
#   3. the two backward kernels' split again (ncu): the dk/dv kernel was 16.8 of 24.2 ms at 35.6% tensor-pipe use;
#      predicted now ~15 of ~22.4 ms (the backward's 8%, all in the dk/dv kernel);
#   4. the step rows where attention is the largest cost, beside the strongest peer: 2.7B ctx 4096 batch 1 (head dim
#      80; its attention backward, 2.5 x 2 S^2 d_model x 32 layers = 6.9 TFLOP at ~255 TFLOP/s, is ~27 ms of 175.8;
#      predicted ~5% of it back: ~174.4 ms default), small ctx 512 (reduce-overhead peer; attention is small there:
#      unchanged), and Llama 3.2-1B ctx 4096 (head dim 64, grouped-query; ~10 ms of attention backward of 64.4;
#      predicted ~63.6 ms).
# Then docs/perf/2026-11-29c-next-rows.sh a|b|c for the rows not re-measured since the tenth to twelfth sessions.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29d-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
for r in 1 2; do
    echo "== round $r"
    attn_rates
    attn_d128
done
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "attention table done"
timeout 90 ncu -k regex:"att_ws_(dkdv|dq)_kernel" -c 2 --section SpeedOfLight build-gpu/stg attn-bench --device cuda \
    --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1 > "$out/l/ncu.txt" 2>&1
echo "ncu: $?"; grep -E "^  [a-z_ ]*att_ws_|Duration|Compute \(SM\) Throughput" "$out/l/ncu.txt" | sed 's/  */ /g' | cut -c1-60
say "ncu done"
stg_step "llama 1B ctx4096 b1" models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20
step_row small 512 "cg" 330
step_row 2.7B 4096 "c" 360 1
say "done"
perf_pack
