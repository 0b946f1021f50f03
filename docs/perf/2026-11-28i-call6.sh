#!/usr/bin/env bash
# Found afterwards: its torch_lm.py peer ran without --flash, so with written-out attention (torch_lm.py calls SDPA only with
# --flash); kept as it ran. For the strongest peer add --flash (tools/speed_run.sh does).
# Sixteenth session (2026-11-28i), call 6: issue 28's 2.7B rows beside the peer (torch_lm.py, whole-model torch.compile with
# cuDNN attention, default mode: the faster one at 2.7B in earlier tables): ctx 1024 batch 4 and ctx 4096 batch 1, stg
# by default and with --grad-dtype bf16 --gemm-tune on (call 5: 147.2 ms, 60.4% MFU at ctx 1024).
# Usage (GPU machine, repository root, carrying .deps and peer/): docs/perf/2026-11-28i-call6.sh OUT
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
for shape in "1024 4" "4096 1"; do
    set -- $shape
    for m in "fp32 off" "bf16 on"; do
        read -r gd tune <<< "$m"
        timeout 120 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=$1 --set batch=$2 --precision bf16 --grad-dtype $gd --gemm-tune $tune \
            --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "2.7B ctx$1 b$2 grads $gd tune $tune"
    done
done
say "stg done"
for shape in "1024 4" "4096 1"; do
    set -- $shape
    PYTHONUNBUFFERED=1 timeout 170 python3 peer/torch_lm.py --sdpa cudnn --sizes 2.7B --ctx $1 --batch $2 --modes bf16c --warm 3 --iters 10 \
        --out "$out/l/peer_$1.json" 2>&1 | tail -1
    say "peer ctx $1 done"
done
tar -czf "$out/logs.tgz" -C "$out" l
