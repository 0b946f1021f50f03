#!/usr/bin/env bash
# Seventeenth session (2026-11-28j), call 3: the warp-specialised attention forward's shapes (three builds: v0 the
# defaults, v1 and v2 below), racecheck of it alone (cuBLAS's own kernels excluded), the GPU suite on v0 (with the new
# test_gpu_ops_attention_ws0: the cp.async fallback). Usage (GPU machine, repository root, carrying .deps): THIS OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
v1="-DWS_FWD64_NWG=2 -DWS_FWD80_NWG=3 -DWS_FWD80_RG=160 -DWS_FWD128_NST=4"
v2="-DWS_FWD64_NWG=2 -DWS_FWD64_BK=128 -DWS_FWD64_RG=240 -DWS_FWD80_NST=4 -DWS_FWD128_BK=128 -DWS_FWD128_NST=2"
# shellcheck disable=SC2086 # cfg, v1, v2 are word lists
(cmake -S . -B build-v1 $cfg -DSTG_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$v1" > /dev/null 2>&1 && timeout 300 cmake --build build-v1 --target stg > "$out/l/b1.txt" 2>&1; echo "v1 build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-v2 $cfg -DSTG_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$v2" > /dev/null 2>&1 && timeout 300 cmake --build build-v2 --target stg > "$out/l/b2.txt" 2>&1; echo "v2 build: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "v0 build: $?")
wait
say "built"
SAN_ARGS="--kernel-name kns=att_ws_fwd" timeout 250 tools/sanitize_gpu.sh build-gpu "$out/l/san" 240 racecheck:test_gpu_mm_attn \
    racecheck:test_gpu_ops:'test_attention_gqa_small'
say "racecheck done"
for r in 1 2; do for b in build-gpu build-v1 build-v2; do
    echo "== $b round $r"
    timeout 60 $b/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    timeout 30 $b/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 --iters 20 2>&1 | grep -E "^\| flash"
    timeout 30 $b/stg attn-bench --device cuda --attention flash --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 20 2>&1 | grep -E "^\| flash"
done; done
say "sweep done"
(cd build-gpu && timeout 240 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
say "suite done"
tar -czf "$out/logs.tgz" -C "$out" l
