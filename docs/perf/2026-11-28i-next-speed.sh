#!/usr/bin/env bash
# For the session after the sixteenth (2026-11-28i): issue 28's small and 2.7B rows against the strongest peer, which this
# session's calls did not have (torch_lm.py ran without --flash: written-out attention). One call of about 8 minutes:
# builds stg; small at ctx 512 (batch 4) and the 2.7B at ctx 1024 (batch 4) and 4096 (batch 1), stg by default and with
# --grad-dtype bf16 --gemm-tune on (alternating, 2 rounds for small); the peer `peer/torch_lm.py --flash --sdpa cudnn`
# (reduce-overhead for small, default compile for the 2.7B, as the earlier tables found faster) in the same call.
# Expected from the twelfth session (small: peer 7.84 ms) and the H100 (2.7B: 207.4 and 227.3 ms): small ~0.65, the 2.7B
# ~0.7-0.75 with the options. Usage (GPU machine, repository root, carrying .deps and peer/): docs/perf/2026-11-28i-next-speed.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
[ -f peer/torch_lm.py ] || { echo "peer/torch_lm.py missing (cp ../shared/peers/torch_lm.py peer/)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu','grad_dtype')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
opts_on="--grad-dtype bf16 --gemm-tune on"
for r in 1 2; do for o in "" "$opts_on"; do
    # shellcheck disable=SC2086 # o is a word list
    timeout 60 build-gpu/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 $o --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 [${o:-default}] round $r"
done; done
for shape in "1024 4" "4096 1"; do
    set -- $shape
    for o in "" "$opts_on"; do
        # shellcheck disable=SC2086
        timeout 120 build-gpu/stg bench models/cs336/2.7B.yaml --set ctx=$1 --set batch=$2 --precision bf16 $o --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "2.7B ctx$1 b$2 [${o:-default}]"
    done
done
say "stg done"
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes small --ctx 512 --batch 4 --modes bf16c --compile-mode reduce-overhead \
    --warm 10 --iters 40 --out "$out/l/peer_small.json" 2>&1 | tail -1
say "small peer done"
for shape in "1024 4" "4096 1"; do
    set -- $shape
    PYTHONUNBUFFERED=1 timeout 170 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes 2.7B --ctx $1 --batch $2 --modes bf16c --warm 3 --iters 10 \
        --out "$out/l/peer_2.7B_$1.json" 2>&1 | tail -1
    say "2.7B peer ctx $1 done"
done
tar -czf "$out/logs.tgz" -C "$out" l
