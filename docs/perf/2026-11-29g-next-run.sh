#!/usr/bin/env bash
# For the session after the twenty-fourth (2026-11-29): one call of about 8 minutes (run it under `timeout 580`).
# Before it, here: `git show HEAD:ops/matmul/cuda.cu > peer/old_matmul.cu && git apply docs/perf/2026-11-29g-decode-rows.patch`
# (the patch: compiled here with nvcc, registers read with ptxas -v, never run; peer/ is ignored and carried).
# 1. The landed norm fold's restriction to one row (`m > mm_nrm_rows()` in mm_nrm_reader, STG_NORM_FOLD_ROWS) and the
#    test expectations that follow from it were not run on a GPU (docs/perf/LOG.md, twenty-fourth session): ctest
#    covers them (test_gpu_mm_attn's test_matmul_norm_fold).
# 2. The patch's tensor-core few-rows kernels: products of 2 to 8 rows on mma.sync m16n8k16 (A the rows of x, B eight
#    rows of W; mm_tc_kernel / mm_tc_glu_kernel), the CUDA-core kernels kept for 1 row and under STG_NO_GEMV_TC=1; the
#    few-rows and swiglu tests run both ways. Predicted (2.7B, H200): 2 / 4 / 8 sequences 2.95 / 4.21 / 7.19 -> ~2.45 /
#    ~2.55 / ~2.8 ms a step (the weights' bytes bound them at 1.8 / 1.9 / 2.1; the cache attention and the kernel
#    boundaries add about what batch 1 shows, ~0.6 ms); batch 1 unchanged.
# 3. The patch's norm prologue: a pass loads a vector of every row before using any (one L2 round trip a pass, not a
#    row). Suspected cause of the fold's 2-row loss (call 4: 2.951 -> 3.357 ms folded): at 2 rows w1 / w3 fold (2560
#    blocks, 6.5 waves), at 4 and 8 rows they do not (the cost rule), and each block waited 4 round trips before its
#    loop, not 2. Predicted: folded at 2 rows (CUDA-core kernels, STG_NORM_FOLD_ROWS=8) at or below the fold-off time
#    with the patch, 3.36 with HEAD's file (/tmp/old); batch 1 the same with both (the same loads at 1 row).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29g-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
build_old peer/old_matmul.cu:ops/matmul/cuda.cu
perf_build || { perf_pack; exit 1; }
wait
(cd build-gpu && timeout 200 ctest -L gpu -V > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
grep -E "^[0-9]+: +(few rows|w1/w3|rmsnorm).*(tensor cores|norm folded|rel err [0-9.e-]+$)" "$out/ctest.txt" | awk '{$1=""; print}' | cut -c1-160 | head -40
grep -E "ERROR|FAILED" "$out/ctest.txt" | head -5
say "suite done"
tools/sanitize_gpu.sh build-gpu "$out/l" 150 memcheck:test_gpu_mm_attn:'*few_rows*' racecheck:test_gpu_mm_attn:'*glu*' 2>&1 | tail -4
say "sanitizers done"
dec_prompt
dec_ab "env STG_NO_GEMV_TC=1 build-gpu/stg" build-gpu/stg -- 1 2 4 8
dec_ab "env STG_NO_GEMV_TC=1 build-gpu/stg" "env STG_NO_GEMV_TC=1 STG_NORM_FOLD_ROWS=8 build-gpu/stg" \
    "env STG_NO_GEMV_TC=1 STG_NORM_FOLD_ROWS=8 /tmp/old/build-gpu/stg" -- 2
dec_ab /tmp/old/build-gpu/stg build-gpu/stg -- 1
say "A/B done"
rm -f "$out"/l/*.bin
perf_pack
