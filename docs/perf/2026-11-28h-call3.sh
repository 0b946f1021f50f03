#!/usr/bin/env bash
# Found in the sixteenth session: its torch_lm.py peer ran without --flash, so with written-out attention (torch_lm.py calls
# SDPA only with --flash); kept as it ran. For the strongest peer add --flash (tools/speed_run.sh does).
# Fifteenth session (2026-11-28h), call 3: the gradient norm as a chain of per-gradient links placed
# as soon as each gradient is final (global_norm early, lane any, partials in its own table) in the
# working tree; .old = HEAD before it. Builds both; the whole GPU suite; memcheck and racecheck of
# the optimizer and stream tests; then A/B, old and new alternating, 2 rounds: Llama 3.2-1B (ctx
# 4096, batch 1, plain head, --gemm-tune off and on), small (ctx 512, batch 4) and 2.7B (ctx 1024,
# batch 4); the Llama peer (reduce-overhead, cuDNN) and the small peer (reduce-overhead, cuDNN) in
# the same call; the new Llama step's profile. Usage (GPU machine, carrying .deps, .old, peer):
# docs/perf/2026-11-28h-call3.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# shellcheck disable=SC2086 # cfg is a word list
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -iE "warning|error" "$out/l/build.txt" | head -5)
wait
say "built"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Not Run|Timeout" "$out/l/ctest.txt" | tail -6)
say "suite done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_optim memcheck:test_gpu_train memcheck:test_gpu_accum \
    racecheck:test_gpu_ops:'*norm*'
say "sanitizers done"
med() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$1" "$2" 2>/dev/null || echo "$2 failed: $(tail -2 "$out/l/b.err")"; }
for r in 1 2; do for t in off on; do for b in .old/build-ab build-gpu; do
    timeout 90 $b/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune $t \
        --warmup 5 --iters 20 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "llama 1B tune $t $b round $r"
done; done; done
say "llama A/B done"
for r in 1 2; do for b in .old/build-ab build-gpu; do
    timeout 60 $b/stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 10 --iters 40 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "small ctx512 b4 $b round $r"
    timeout 120 $b/stg bench models/cs336/2.7B.yaml --set ctx=1024 --set batch=4 --precision bf16 --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
    med "$out/l/b.json" "2.7B ctx1024 b4 $b round $r"
done; done
say "small/2.7B A/B done"
timeout 120 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 \
    --warmup 3 --iters 5 --profile > "$out/l/l1b-profile.txt" 2>&1
say "profile done: $?"
grep -E "global_norm|critical|streams" "$out/l/l1b-profile.txt" | head -8
PYTHONUNBUFFERED=1 timeout 150 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
    --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
say "llama peer done"
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_lm.py --sdpa cudnn --sizes small --ctx 512 --batch 4 --modes bf16c --compile-mode reduce-overhead \
    --warm 10 --iters 40 --out "$out/l/small_peer.json" 2>&1 | tail -2
say "small peer done"
tar -czf "$out/logs.tgz" -C "$out" l
