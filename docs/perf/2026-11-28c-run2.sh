#!/usr/bin/env bash
# 2026-11-28 (tenth session), device call 2 (carry .deps): docs/perf/2026-11-28c-run2.sh OUT
# 1. tools/race_gpu.sh's default set to the end (issue 29 item 9): racecheck and synccheck over stg's
#    kernels, all runs side by side (RACE_PAR=1), 330 s each at most.
# 2. Where GPT-2's defaults (vocab 50257, fused head) spend the 4.7 ms they take beyond vocab 50304 with
#    the plain head: stg bench --profile of the four (vocab, head) pairs, after the sanitizer runs.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" "$out/l/race"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake.txt" 2>&1 &&
 cmake --build build-gpu > "$out/l/build.txt" 2>&1) || { tail -30 "$out/l/build.txt"; exit 1; }
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
RACE_PAR=1 RACE_TIMEOUT=330 tools/race_gpu.sh build-gpu "$out/l/race" > "$out/l/race.txt" 2>&1
echo "race_gpu.sh exit $?" >> "$out/l/race.txt"
cat "$out/l/race.txt"
say "sanitizers done"
for v in "50257 on" "50304 on" "50257 off" "50304 off"; do
    set -- $v
    echo "== stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=$1 --set fused_head=$2 --precision bf16 --warmup 3 --iters 10 --profile"
    timeout 60 build-gpu/stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=$1 --set fused_head=$2 \
        --precision bf16 --warmup 3 --iters 10 --profile > "$out/l/prof_$1_$2.txt" 2>&1
    grep -E "^  time|^  profile" "$out/l/prof_$1_$2.txt"; grep -A60 "^  profile" "$out/l/prof_$1_$2.txt" | grep -iE "head|lce|cross|matmul|linear" | head -12
done
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" .
