#!/usr/bin/env bash
# For the session after the twenty-fourth (2026-11-29): one call of about 6 minutes (run it under `timeout 500`).
# 1. The landed fold's restriction to one row (`m > mm_nrm_rows()` in mm_nrm_reader, STG_NORM_FOLD_ROWS) and the test
#    expectations that follow from it were not run on a GPU (docs/perf/LOG.md, twenty-fourth session): the norm-fold
#    tests and ctest first.
# 2. The 2-row loss: call 4 measured the fold at 2 rows 13.7% slower a step (2.951 -> 3.357 ms), at 4 and 8 rows 2-3%
#    faster. Here the same A/B (STG_NORM_FOLD_ROWS=8 folds at every row count), then ncu over about 1.3 steps at 2 rows
#    each way: which kernels grow. Predicted: the growth sits in the w1 / w3 product (2560 blocks at k split in two, 3 a
#    multiprocessor, each waiting on its prologue's L2 round trip and block reduction before its loop).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29g-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
f="$out/l/nf.txt"
(cd build-gpu && STG_TEST_FILTER='*norm_fold*' timeout 90 ./test_gpu_mm_attn > "$f" 2>&1); echo "norm fold tests: $?"
grep -E "norm folded|ERROR|FAILED|PASSED" "$f" | cut -c1-170 | head -20
(cd build-gpu && timeout 170 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "tests done"
dec_prompt
dec_ab build-gpu/stg "env STG_NORM_FOLD_ROWS=8 build-gpu/stg" -- 2 4 8
dec_ab "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg -- 1
say "A/B done"
ncu_step build-gpu/stg 2 2300 300
mv "$out/l/ncu_step_b2.txt" "$out/l/ncu_step_b2_off.txt"; mv "$out/l/ncu_step_b2.csv" "$out/l/ncu_step_b2_off.csv"
ncu_step "env STG_NORM_FOLD_ROWS=8 build-gpu/stg" 2 2300 300
say "ncu done"
rm -f "$out"/l/*.bin
perf_pack
