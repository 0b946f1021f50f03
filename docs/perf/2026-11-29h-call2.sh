#!/usr/bin/env bash
# Twenty-fifth session (2026-11-29), call 2: the tensor-core few-rows kernels (the twenty-fourth session's patch,
# applied) with x loaded a trip ahead beside W, not inside the products' loop; the norm fold fixed at one row (the
# variable STG_NORM_FOLD_ROWS gone, the folded kernels instantiated for one row only, HEAD's prologue back).
# Call 1 (the patch as prepared): tensor cores 2 / 4 / 8 rows 3.03 / 3.23 / 3.60 ms a step against the CUDA-core
# kernels' 2.95 / 4.21 / 7.19; the weights' bytes bound them at ~1.8 / 1.9 / 2.1.
# Predicted: x in flight with W removes a serial L2 round trip a chunk (wo: 10 chunks a warp at KS 8): 2 / 4 / 8 rows
# ~2.6 / 2.8 / 3.2 ms; MM_TC_U 8 (peer/tc8_matmul.cu, /tmp/old) a further 3-8% (one or two trips a warp, not three);
# 1 row unchanged against HEAD (/tmp/head: peer/old_matmul.cu).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/tc8_matmul.cu:ops/matmul/cuda.cu
side /tmp/head stg peer/old_matmul.cu:ops/matmul/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
(cd build-gpu && timeout 200 ctest -L gpu -V > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
grep -E "^[0-9]+: +(rmsnorm).*(norm folded)" "$out/ctest.txt" | awk '{$1=""; print}' | cut -c1-160 | head -20
grep -E "ERROR|FAILED" "$out/ctest.txt" | head -5
say "suite done"
tools/sanitize_gpu.sh build-gpu "$out/l" 150 memcheck:test_gpu_mm_attn:'*few_rows*' racecheck:test_gpu_mm_attn:'*few_rows*' \
    racecheck:test_gpu_mm_attn:'*glu*' memcheck:test_gpu_mm_attn:'*norm_fold*' 2>&1 | tail -4
say "sanitizers done"
dec_prompt
dec_ab "env STG_NO_GEMV_TC=1 build-gpu/stg" build-gpu/stg /tmp/old/build-gpu/stg -- 2 3 4 8
dec_ab /tmp/head/build-gpu/stg build-gpu/stg -- 1
say "A/B done"
[ "$(el)" -lt 480 ] && ncu_step build-gpu/stg 4 8000 300
[ "$(el)" -lt 520 ] && ncu_step /tmp/old/build-gpu/stg 4 8000 300
rm -f "$out"/l/*.bin
perf_pack
