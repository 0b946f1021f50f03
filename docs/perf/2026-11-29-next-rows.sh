#!/usr/bin/env bash
# For the session after the eighteenth (2026-11-29), a second call of about 8 minutes: issue 28's step rows that were not
# measured on the H200 against the strongest peer (torch_lm.py --flash --sdpa cudnn): the 2.7B at ctx 4096, batch 1
# (default compile: reduce-overhead gains nothing at that size and its CUDA graph holds the memory twice), then
# medium and large at ctx 1024, batch 4 (default compile and reduce-overhead for medium, default for large), each stg
# run default and with --grad-dtype bf16 --gemm-tune on. Rows are skipped when time runs short; the peer's JSON lines
# are printed whole. Usage (GPU machine, repository root, carrying .deps and peer): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "[$(el) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
say "built"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu','grad_dtype')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
row() { # size ctx batch peer-modes budget-seconds-left-needed
    if [ "$(el)" -gt "$5" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    for o in "" "--grad-dtype bf16 --gemm-tune on"; do
        # shellcheck disable=SC2086 # o is a word list
        timeout 120 build-gpu/stg bench "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" --precision bf16 $o --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
        med "$out/l/b.json" "$1 ctx$2 b$3 [${o:-default}]"
    done
    for m in $4; do
        if [ "$m" = cg ]; then extra="--compile-mode reduce-overhead"; else extra=""; fi
        # shellcheck disable=SC2086 # extra is a word list
        PYTHONUNBUFFERED=1 timeout 170 python3 peer/torch_lm.py --flash --sdpa cudnn --sizes "$1" --ctx "$2" --batch "$3" --modes bf16c $extra \
            --warm 3 --iters 10 --out "$out/l/peer_$1_$2_$m.json" 2>&1 | grep -E '^\{' | tail -1
    done
    say "$1 ctx $2 done"
}
row 2.7B 4096 1 "c" 100
row medium 1024 4 "c cg" 300
row large 1024 4 "c" 420
say "done"
tar -czf "$out/logs.tgz" -C "$out" l
