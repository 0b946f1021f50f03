#!/usr/bin/env bash
# Seventeenth session (2026-11-28j), call 1: the sixteenth session's prepared cp.async decode patch
# (docs/perf/2026-11-28i-decode-cpa.patch, applied in this tree) A/B against -DDEC_CPA=0, its tests and sanitizers;
# issue 28's small row against the strongest peer (torch_lm.py --flash --sdpa cudnn, reduce-overhead); the batch-64
# decode beside its peer (tuned). Usage (GPU machine, repository root, carrying .deps and peer): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q DEC_CPA ops/decode/cuda.cu || say "warning: the cp.async patch is not applied"
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-old $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DDEC_CPA=0 > /dev/null 2>&1 && timeout 300 cmake --build build-old --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
(cd build-gpu && timeout 120 ./test_gpu_sample > "$out/l/sample.txt" 2>&1; echo "test_gpu_sample: $?"; grep -E "PASSED|FAILED" "$out/l/sample.txt")
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
say "sample tests and sanitizers done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
for r in 1 2; do for b in build-old build-gpu; do for bt in 64 1; do
    echo "$b 2.7B b$bt tuned round $r: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch $bt --temperature 0 --gemm-tune on 2>&1 | tps)"
done; done; done
for b in build-old build-gpu; do
    echo "$b llama 1B b1: $(timeout 60 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | tps)"
done
say "decode A/B done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu','grad_dtype')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
opts_on="--grad-dtype bf16 --gemm-tune on"
for r in 1 2; do for o in "" "--grad-dtype bf16" "$opts_on"; do
    # shellcheck disable=SC2086 # o is a word list
    timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 $o --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 [${o:-default}] round $r"
done; done
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes small --ctx 512 --batch 4 --modes bf16c --compile-mode reduce-overhead \
    --warm 10 --iters 40 --out "$out/l/peer_small.json" 2>&1 | tail -2
say "small peer done"
STG_ARGS="--precision bf16 --init fill --gemm-tune on" BATCHES=64 CHECK=0 timeout 200 tools/sample_peer.sh build-gpu/stg "$out/l/dec" 2>&1 | grep -vE '^\{"model"' | tail -8
say "decode peer done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
