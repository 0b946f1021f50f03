#!/usr/bin/env bash
# Thirty-third session (2026-11-29), call 2 (~7 min). Call 1 ran the thirty-second session's timeline probe
# (2026-11-29o-next-trace.sh): at head dim 64 (seq 4096 and 16384 alike) the dk/dv kernel's tile pair takes 2,941 cycles,
# of which consumer warpgroup 0 waits ~1,330 at the loop top for the producer's publication of the tile; the producer
# publishes tile t - 1 only after the release of tile t's stage (t - 3), which the consumers make in the middle of tile
# t - 2... i.e. just as they need tile t - 1: its issue, copies' wait and arrival (~856 cycles) sit on the chain every
# tile, and both consumer warpgroups then leave their waits together (14 cycles apart), so warpgroup 1's products queue
# behind warpgroup 0's (its issue phase 1,426 cycles against 527). Head dim 128 likewise (5,063 a tile pair, ~1,900
# waiting). This tree: the producer publishes tile t - 1 as soon as its copies land, before it waits for tile t's stage
# (one tile's copies in flight, issued a tile before they are needed). Predicted: the dk/dv period at head dim 64 ~2,941 ->
# ~1,700-1,900 cycles; the backward at B4 H16 S16384 D64 ~18.1 -> ~12.5-14 ms, S4096 ~1.26 -> ~0.9-1.0; D128 S16384 ~31.3
# -> ~24-27 ms; the forward unchanged. Old tree: peer/rev = git archive HEAD ops/attention (d71cd5d). Traced build of the
# new tree: peer/trace (the 2026-11-29o-dkdv-trace.patch applied to the new file, its producer's p2 after the publication).
# Also: the attention tests (default, a block an item in groups of 3, 3 persistent blocks in groups of 4), memcheck and
# racecheck of the bf16 attention tests, cuDNN beside both (torch_attn.py), the GPU suite.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29p-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
[ -f peer/rev/ops/attention/sm90a/tma.cuh ] || { echo "no peer/rev"; exit 2; }
build_rev peer/rev
rm -rf /tmp/tr && mkdir -p /tmp/tr && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/tr
cp peer/trace/ops/attention/sm90a/attention_ws_bwd.cu /tmp/tr/ops/attention/sm90a/attention_ws_bwd.cu
(cd /tmp/tr && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_FLAGS=-DWS_TRACE > "$out/l/cmake_tr.txt" 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build_tr.txt" 2>&1; echo "trace build: $?") &
perf_build || { perf_pack; exit 1; }
wait
say "builds done"
attn_tests default || echo "default: attention tests failed (see above)"
attn_tests hgroup3 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 || echo "hgroup3: failed"
attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 || echo "p3g4: failed"
say "tests done"
B=("new:build-gpu/stg" "old:/tmp/old/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | grep -E "cudnn|flash|^\|" | head -30
say "peer done"
for sh in "64 16384" "128 16384"; do
    set -- $sh
    f="$out/l/trace_d$1_s$2.txt"
    STG_WS_TRACE_OUT="$f" timeout 60 /tmp/tr/build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 \
        --dims $1 --seqs $2 --iters 3 > "$out/l/trace_d$1_s$2.out" 2>&1
    echo "== head dim $1, seq $2 (new tree, traced): $(tail -1 "$out/l/trace_d$1_s$2.out")"
    python3 tools/attn_trace.py "$f" --from 8 --to 56
done
say "traces done"
STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
tools/sanitize_gpu.sh build-gpu "$out/l/san2" 150 racecheck:test_gpu_mm_attn:'*attention_bf16*'
say "sanitizers done"
(cd build-gpu && timeout 240 ctest -L gpu --timeout 200 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "ctest done"
perf_pack
