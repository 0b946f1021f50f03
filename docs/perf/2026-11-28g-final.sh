#!/usr/bin/env bash
# Fourteenth session (2026-11-28g), call 7: the tree as landed. The few-rows products' shared loop folded into one
# helper (mm_gv_sum; the PTX differs by a few instructions a kernel, more at 4 rows of x) timed against the tree
# before it (.old = 67db9dc) on the decode steps that use it (2.7B and Llama 3.2-1B at batch 1, alternating, 2 rounds);
# the whole GPU suite; memcheck of the few-rows and glu tests.
# Usage (GPU machine, repository root, carrying .deps, .old): docs/perf/2026-11-28g-final.sh OUT
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
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 400 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?")
wait
say "built"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for r in 1 2; do for b in .old/build-ab build-gpu; do for m in cs336/2.7B llama3/1B; do
    echo "$b $m b1 round $r: $(timeout 90 $b/stg sample models/$m.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
done; done; done
say "A/B done"
(cd build-gpu && timeout 300 ctest -L gpu > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Not Run" "$out/l/ctest.txt" | tail -4)
say "suite done"
timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_mm_attn:'test_matmul_*'
say "sanitizer done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
