#!/usr/bin/env bash
# Twenty-seventh session, call 4: the landed form (2c90914: the updates in backward on their own stream, 2 blocks a
# multiprocessor, each updated gradient held until the updates after it read a 16th of the gradients' bytes).
# 1. The GPU suite (ctest -L gpu) beside compute-sanitizer memcheck and racecheck of test_gpu_optim (tests do not
#    time, so they may share the device).
# 2. Rows of issue 28 beside the strongest peer (`torch_lm.py --flash --sdpa cudnn`, reduce-overhead), stg with
#    `--grad-dtype bf16 --gemm-tune on` ordinary and with `--optimizer-in-backward`, two rounds alternating.
#    Predicted (call 3's hold "about a layer" as the 16th): large 1024 ~50.1 -> ~48.8 ms, against last session's
#    66.7 peer ~0.73; 2.7B 512 86.4 -> ~84.0 (peer 113.9 in the twenty-fifth session: ~0.74); 2.7B 1024 146.4 ->
#    ~141.5 (peer 189.3 in the twenty-first: ~0.75, 62.8% MFU).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29j-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?") &
SAN_PAR=1 tools/sanitize_gpu.sh build-gpu "$out/l/san" 280 memcheck:test_gpu_optim racecheck:test_gpu_optim
wait
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
rowib() { # SIZE CTX BATCH GATE
    local r
    if [ "$(el)" -gt "$4" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    for r in 1 2; do
        stg_step "$1 ctx$2 b$3 [options] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10
        stg_step "$1 ctx$2 b$3 [options, --optimizer-in-backward] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" \
            --precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10
    done
    peer_step "$1" "$2" "$3" cg
    say "$1 ctx $2 done"
}
rowib large 1024 4 300
rowib 2.7B 512 4 400
rowib 2.7B 1024 4 450
perf_pack
