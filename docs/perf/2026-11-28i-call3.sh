#!/usr/bin/env bash
# Found afterwards: its torch_lm.py peer ran without --flash, so with written-out attention (torch_lm.py calls SDPA only with
# --flash); kept as it ran. For the strongest peer add --flash (tools/speed_run.sh does).
# Sixteenth session (2026-11-28i), call 3: --grad-dtype bf16 on the CS336 sizes of issue 28's rows: small (ctx 512, batch 4)
# and 2.7B (ctx 1024, batch 4), gradients fp32 / bf16 alternating, 2 rounds; the small peer (torch.compile
# reduce-overhead, cuDNN attention) in the same call. Predicted: small 85M of 128.6M parameters get bf16 gradients:
# ~0.34 GB less, ~0.09 ms; 2.7B 3.15G of 3.41G: ~12.6 GB less, ~3 ms (MFU +1.1 points).
# Usage (GPU machine, repository root, carrying .deps and peer/): docs/perf/2026-11-28i-call3.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for gd in fp32 bf16; do
    timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --grad-dtype $gd --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 grads $gd round $r"
done; done
say "small done"
for r in 1 2; do for gd in fp32 bf16; do
    timeout 120 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 --precision bf16 --grad-dtype $gd --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "2.7B ctx1024 b4 grads $gd round $r"
done; done
say "2.7B done"
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_lm.py --sdpa cudnn --sizes small --ctx 512 --batch 4 --modes bf16c --compile-mode reduce-overhead \
    --warm 10 --iters 40 --out "$out/l/small_peer.json" 2>&1 | tail -2
say "small peer done"
tar -czf "$out/logs.tgz" -C "$out" l
