#!/usr/bin/env bash
# Fourteenth session (2026-11-28g), call 8: compute streams in a captured step. The critical-path model of the
# Llama 3.2-1B step at ctx 4096 (docs/perf/2026-11-28g-call4/llama1b-profile.txt) gives 63.92 ms with 3 streams and
# 60.95 with 4 (each op as long as it took alone: sharing the device is not modelled). Builds with -DCUDA_STREAMS=3
# (the default), 4 and 5, alternating 2 rounds on Llama 3.2-1B (ctx 4096, batch 1), then one round of small (ctx 512)
# and 2.7B (ctx 1024, batch 4); the Llama peer (tools/ref/llama3_peer.py, reduce-overhead) only when a build beats 65.5 ms.
# Predicted: 0.5-1.5 ms on Llama (the memory-bound kernels of the backward beside the weight-gradient products), less
# at the other sizes.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28g-streams.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for n in 3 4 5; do
    # shellcheck disable=SC2086 # cfg is a word list
    (cmake -S . -B "build-s$n" $cfg -DCMAKE_CUDA_FLAGS="-DCUDA_STREAMS=$n" > /dev/null 2>&1 &&
        timeout 300 cmake --build "build-s$n" --target stg > "$out/l/build_s$n.txt" 2>&1; echo "build s$n: $?") &
done
wait
say "built"
best=1000
bench() { # build, model, ctx, batch, label
    timeout 60 "$1/stg" bench "models/$2.yaml" --set ctx="$3" --set batch="$4" --precision bf16 --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d['median_ms'], d['min_ms'], d['mfu'])" "$out/l/b.json" "$5" || tail -2 "$out/l/b.err"
}
for r in 1 2; do for n in 3 4 5; do
    line=$(bench "build-s$n" llama3/1B 4096 1 "llama1B s$n round $r")
    echo "$line"
    m=$(echo "$line" | awk '{print $5}'); best=$(python3 -c "print(min($best, ${m:-1000}))")
done; done
say "llama done (best $best)"
for n in 3 4 5; do bench "build-s$n" cs336/small 512 4 "small ctx512 s$n"; done
for n in 3 4 5; do bench "build-s$n" cs336/2.7B 1024 4 "2.7B ctx1024 s$n"; done
say "others done"
if python3 -c "import sys; sys.exit(0 if $best < 65.5 else 1)"; then
    PYTHONUNBUFFERED=1 timeout 150 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
        --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
    say "peer done"
fi
tar -czf "$out/logs.tgz" -C "$out" l
