#!/usr/bin/env bash
# 2026-11-29, call 4: the warp-specialised attention backward's dk/dv stages published and released through named
# barriers instead of mbarriers (call 3: racecheck still flagged the statistics' plain stores against the consumers'
# reads with mbarriers, __syncwarp before the release or not). Tests (default and STG_ATT_WS_BWD=all), sanitizers
# for both, the attention rates beside cuDNN, the GPU suite last.
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29-call4.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1 &&
    timeout 300 cmake --build build-gpu > "$out/l/build.txt" 2>&1; echo "build: $?"; grep -E "error" "$out/l/build.txt" | head -5)
say "built"
for ws in 1 all 0; do for p in test_gpu_mm_attn test_gpu_ops; do
    (cd build-gpu && STG_ATT_WS_BWD=$ws STG_TEST_FILTER='*attention*' timeout 100 stdbuf -oL ./$p > "$out/l/${p}_$ws.txt" 2>&1; echo "$p attention, STG_ATT_WS_BWD=$ws: $? $(grep -E "PASSED|FAILED" "$out/l/${p}_$ws.txt")")
done; done
say "tests done"
for ws in 1 all; do
    STG_ATT_WS_BWD=$ws timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san$ws" 190 memcheck:test_gpu_mm_attn:'*attention*' memcheck:test_gpu_ops:'*attention_gqa*' \
        racecheck:test_gpu_mm_attn:'*attention*' racecheck:test_gpu_ops:'*attention_gqa*' synccheck:test_gpu_ops:'*attention_gqa*' > "$out/l/san$ws.txt" 2>&1 &
done
wait
for ws in 1 all; do echo "== sanitizers, STG_ATT_WS_BWD=$ws"; cat "$out/l/san$ws.txt"
    grep -hE "Race reported|access at" "$out"/l/san$ws/racecheck_*.txt | sed 's/(const __nv.*float)//' | sort | uniq -c | sort -rn | head -6; done
say "sanitizers done"
for ws in 0 1; do
    echo "== STG_ATT_WS_BWD=$ws"
    STG_ATT_WS_BWD=$ws timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
done
say "attention A/B done"
PYTHONUNBUFFERED=1 timeout 100 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep CUDNN
say "torch_attn done"
tar -czf "$out/logs.tgz" -C "$out" l
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
