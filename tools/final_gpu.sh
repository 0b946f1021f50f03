#!/usr/bin/env bash
# The whole gpu-labelled suite on the GPU machine, then compute-sanitizer memcheck of every GPU test
# program, the programs side by side (memcheck checks accesses, not timing). NCCL's own
# cudaFuncGetAttributes probes are API errors, not memory errors: not reported.
# Usage: tools/final_gpu.sh BUILD_DIR [OUT_DIR]
set -u
B=${1:-build-gpu}; O=${2:-/tmp}
export NCCL_NVLS_ENABLE=0
(cd $B && ctest -L gpu --output-on-failure 2>&1 | tail -9)
T=$(cd $B && ls test_gpu_* | tr '\n' ' ')
for t in $T; do
  ( timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/$t > $O/memcheck_$t.txt 2>&1
    echo $? > $O/memcheck_$t.rc ) &
done
wait
for t in $T; do
  echo "memcheck $t: exit $(cat $O/memcheck_$t.rc) ($(grep -h 'ERROR SUMMARY' $O/memcheck_$t.txt)) $(grep -hE '^\[  (PASSED|FAILED|SKIPPED)' $O/memcheck_$t.txt | tr '\n' ' ')"
done

tools/race_gpu.sh "$B" "$O"
