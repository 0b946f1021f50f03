#!/usr/bin/env bash
# Found afterwards: its torch_lm.py peer ran without --flash, so with written-out attention (torch_lm.py calls SDPA only with
# --flash); kept as it ran. For the strongest peer add --flash (tools/speed_run.sh does).
# Sixteenth session (2026-11-28i), call 4: small (ctx 512, batch 4) with --grad-dtype bf16 was 0.608 of the peer in call 3
# (issue 28 asks 0.6): --gemm-tune off / on alternating, 2 rounds; the step's profile (critical path); the peer
# (torch.compile reduce-overhead, cuDNN attention) in the same call.
# Usage (GPU machine, repository root, carrying .deps and peer/): docs/perf/2026-11-28i-call4.sh OUT
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
for r in 1 2; do for gd in "fp32 off" "bf16 off" "bf16 on"; do
    set -- $gd
    timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --grad-dtype $1 --gemm-tune $2 \
        --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 grads $1 tune $2 round $r"
done; done
say "small done"
timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --grad-dtype bf16 --warmup 5 --iters 10 \
    --profile > "$out/l/small-bf16g-profile.txt" 2>&1
say "profile: $?"
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_lm.py --sdpa cudnn --sizes small --ctx 512 --batch 4 --modes bf16c --compile-mode reduce-overhead \
    --warm 10 --iters 40 --out "$out/l/small_peer.json" 2>&1 | tail -1
say "small peer done"
tar -czf "$out/logs.tgz" -C "$out" l
