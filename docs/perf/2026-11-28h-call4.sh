#!/usr/bin/env bash
# Fifteenth session (2026-11-28h), call 4, on the tree of call 1's landings (nsplit1, dq-mask; the
# norm chain undone): issue 26's rows beside the decode peer (tools/sample_peer.sh: the 2.7B at batch
# 1 and 64, a 512-token prompt, 512 new tokens), the 2.7B's prefill of a 4096-token prompt (its MFU),
# then Llama 3.2-1B (ctx 4096, batch 1, plain head) with and without --gemm-tune on beside its peer
# once more (call 2: tuned 0.754 of the peer, call 3: 0.749-0.750).
# Usage (GPU machine, carrying .deps): docs/perf/2026-11-28h-call4.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
CHECK=0 timeout 330 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | tail -4
say "decode peer done"
head -c 4096 /dev/urandom > "$out/l/p4k.txt" && build-gpu/stg tokens "$out/l/p4k.txt" -o "$out/l/p4k.bin" > /dev/null
for r in 1 2; do
    timeout 90 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=4160 --prompt-ids "$out/l/p4k.bin" \
        -n 8 --batch 1 --temperature 0 2>&1 | grep -oE '"(prompt_tokens|prefill_ms|prefill_tflops_per_s|prefill_mfu)": *[0-9.]+' | tr '\n' ' '; echo
done
say "prefill done"
for r in 1 2; do for t in off on; do
    timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune $t \
        --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('llama 1B gemm-tune', sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $t || tail -3 "$out/l/l1b.err"
done; done
say "llama done"
PYTHONUNBUFFERED=1 timeout 150 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
    --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "llama peer done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
