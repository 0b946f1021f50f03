#!/usr/bin/env bash
# Twenty-fifth session (2026-11-29), call 4: the RMSNorm folded into the tensor-core few-rows products (2 to 8 rows):
# x g and the squares of x taken in their loop (mm_tc_norm), the squares gathered with the sums, each row's sums
# scaled by its 1 / rms; no prologue. One binary, A/B by STG_NO_NORM_FOLD=1, alternating.
# Call 2 (ncu, 4 rows): 85 norm kernels in 300 at 2.68 us each, ~6% of the kernels' time.
# Predicted (2.7B, H200): 2 / 3 / 4 / 8 rows 2.61 / 2.71 / 2.79 / 3.15 -> ~2.48 / 2.58 / 2.65 / 3.02 ms a step (64 norm
# kernels of ~2.2 us off the chain, the loop's added loads of g and FMAs hidden under W's bytes); 1 row unchanged
# (the CUDA-core kernels' fold, as before).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
f="$out/l/nf.txt"
(cd build-gpu && STG_TEST_FILTER='*norm_fold*' timeout 90 ./test_gpu_mm_attn > "$f" 2>&1); echo "norm fold tests: $?"
grep -E "norm folded|ERROR|FAILED|PASSED" "$f" | cut -c1-170 | head -40
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
tools/sanitize_gpu.sh build-gpu "$out/l" 150 memcheck:test_gpu_mm_attn:'*norm_fold*' racecheck:test_gpu_mm_attn:'*norm_fold*' 2>&1 | tail -4
say "sanitizers done"
dec_prompt
dec_ab "env STG_NO_NORM_FOLD=1 build-gpu/stg" build-gpu/stg -- 1 2 3 4 8
say "A/B done"
rm -f "$out"/l/*.bin
perf_pack
