#!/usr/bin/env bash
# 2026-11-29 (twenty-first session), call 6 (the session's last ~250 s of device time): the dk/dv consumers' chain
# made shorter. Call 2 showed the dk/dv kernel latency-bound (~333 instructions a consumer warp a tile at 9.1 cycles
# each). The producer warpgroup (idle 68% of its samples) now does three things for the consumers:
#   - it stores -lse log2 e (the multiply moved from the consumers) and D, each consumer thread's 16 contiguous and
#     swizzled (ws_stat_slot), so a thread reads them with 4 + 4 16-byte loads instead of 16 8-byte loads and 16 FMUL;
#     the values are loaded a tile ahead with plain loads instead of 4-byte cp.async;
#   - it computes each consumer warpgroup's two tests of the tile (nothing to do; masked) into a flags word, so the
#     consumers' loop top and softmax read one word instead of three loads, a division and six comparisons.
# Predicted: ~40 fewer instructions of ~333 a consumer warp a tile and two dependent load-compare-branch chains gone:
# the dk/dv kernel 5-10% faster, the backward at head dim 64, seq 16384 295 -> 305-315 TFLOP/s; head dim 128 +2-4%.
# The build before it (peer/old_ws_bwd.cu, carried) is built beside it in /tmp/old, and the two alternate.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29d-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
mkdir -p /tmp/old && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/old
cp peer/old_ws_bwd.cu /tmp/old/ops/attention/sm90a/attention_ws_bwd.cu
(cd /tmp/old && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 200 cmake --build build-gpu --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
perf_build stg test_gpu_mm_attn test_gpu_ops || { perf_pack; exit 1; }
wait
ok=1
attn_tests new || ok=0
say "tests done"
if [ $ok = 1 ]; then
    for r in 1 2; do for b in /tmp/old/build-gpu/stg build-gpu/stg; do
        echo "== $b round $r"
        timeout 30 "$b" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 16384 --iters 10 2>&1 | grep -E "^\| flash"
    done; done
    say "A/B done"
    [ "$(el)" -lt 120 ] && timeout 60 tools/sanitize_gpu.sh build-gpu "$out/l/san" 55 racecheck:test_gpu_mm_attn:'*attention*'
    say "racecheck done"
fi
perf_pack
