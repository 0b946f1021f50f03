#!/usr/bin/env bash
# Thirty-third session (2026-11-29), call 3 (~8 min). Call 2: the dk/dv producer publishing a tile before it waits for
# the next stage (HEAD, one producer lane) took the backward at B4 H16 S16384 D64 17.98 -> 15.22 ms; the probe then
# showed the consumers still waiting ~130 (head dim 64) and ~410 (128) cycles a tile for the publication, and the
# producer's period bound by one tile's copies landing before the next is issued. This tree: the producer's warpgroup
# in two lanes of 64 threads taking alternate tiles (two tiles' copies in flight; each lane publishes before it waits
# for a stage; WS_DKDV_PL=2; the copies' loop unrolled one trip at a time in the producer so it stays in its 56
# registers: 0 spills at head dims 64 and 128, 12 bytes at 80). Predicted: head dim 128's backward at S16384
# 27.0 -> ~24.5-25.5 ms (its consumers' ~410-520 cycles of 3,783 a tile), head dim 64 15.2 -> ~14.5-15.0; the forward
# unchanged. Also: call 2 measured the forward at S16384 4-5% slower in the new tree than in d71cd5d's, interleaved with
# the (faster) backward in attn-bench, though the forward's code is the same: nvidia-smi's SM clock, power and
# temperature are logged through each binary's run (tools/smi_mark.py) to see whether the card's power limit lowers
# the clock under the denser backward. Binaries: new (this tree), head (peer/rev = git archive HEAD ops/attention, the
# one-lane producer), base (peer/base = git archive d71cd5d ops/attention, before this session). Then cuDNN beside
# them (torch_attn.py), the traced build of the new tree (peer/trace), the attention tests in three grids, memcheck and
# racecheck of the bf16 attention tests (the new barrier counts), the GPU suite if the clock allows.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29p-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
for d in rev base trace; do [ -d peer/$d/ops/attention ] || { echo "no peer/$d"; exit 2; }; done
build_rev peer/rev
p=(); for f in $(cd peer/base && find . -type f | sed 's|^\./||'); do cmp -s "peer/base/$f" "$f" || p+=("peer/base/$f:$f"); done
echo "base: files that differ: ${#p[@]}"
side /tmp/base stg "${p[@]}"
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
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > "$out/l/smi.csv" 2>&1 &
smi=$!
B=("new:build-gpu/stg" "head:/tmp/old/build-gpu/stg" "base:/tmp/base/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        echo "$(date +%s.%N) ${b%%:*}_r$r start" >> "$out/l/marks.txt"
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
        echo "$(date +%s.%N) ${b%%:*}_r$r end" >> "$out/l/marks.txt"
    done
done
say "rates done"
echo "$(date +%s.%N) cudnn start" >> "$out/l/marks.txt"
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
echo "$(date +%s.%N) cudnn end" >> "$out/l/marks.txt"
kill $smi 2>/dev/null
python3 tools/smi_mark.py "$out/l/smi.csv" "$out/l/marks.txt"
say "peer done"
for sh in "64 16384" "128 16384"; do
    set -- $sh
    f="$out/l/trace_d$1_s$2.txt"
    STG_WS_TRACE_OUT="$f" timeout 60 /tmp/tr/build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 \
        --dims $1 --seqs $2 --iters 3 > "$out/l/trace_d$1_s$2.out" 2>&1
    echo "== head dim $1, seq $2 (new tree, traced): $(tail -1 "$out/l/trace_d$1_s$2.out")"
    python3 tools/attn_trace.py "$f" --from 8 --to 56 | grep -v "apart"
done
say "traces done"
STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*' \
    racecheck:test_gpu_ops:'*attention_gqa*'
tools/sanitize_gpu.sh build-gpu "$out/l/san2" 150 racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_mm_attn:'*attention_bf16*'
say "sanitizers done"
if [ "$(el)" -lt 390 ]; then
    (cd build-gpu && timeout 200 ctest -L gpu --timeout 200 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
    say "ctest done"
else
    echo "ctest skipped (clock)"
fi
perf_pack
