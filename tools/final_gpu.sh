#!/usr/bin/env bash
# The whole gpu-labelled suite on the GPU machine, then compute-sanitizer memcheck of the suite
# (NCCL's own cudaFuncGetAttributes probes are API errors, not memory errors: not reported).
# Usage: tools/final_gpu.sh BUILD_DIR [OUT_DIR]
set -u
B=${1:-build-gpu}; O=${2:-/tmp}
export NCCL_NVLS_ENABLE=0
(cd $B && ctest -L gpu --output-on-failure 2>&1 | tail -9)
for t in test_gpu_mm_attn test_gpu_ops test_gpu_train test_gpu_optim test_gpu_dist; do
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B/$t > $O/memcheck_$t.txt 2>&1
  echo "memcheck $t: exit $? ($(grep -h 'ERROR SUMMARY' $O/memcheck_$t.txt))"
done
