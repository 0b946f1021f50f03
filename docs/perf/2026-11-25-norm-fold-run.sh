#!/usr/bin/env bash
# The norm-fold study's device script (run from /work/main's root on the GPU machine, with .h/perf =
# branch perf and .h/perf-base = its base commit carried): build both, check, A/B.
# Usage: bash .h/perf/docs/perf/2026-11-25-norm-fold-run.sh STAGE   (STAGE: 1 or 2)
set -u
source .deps/env.sh
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}; mkdir -p $O
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
date -u
build() { # dir src targets...
  local d=$1 s=$2; shift 2
  cmake -S $s -B $d -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $O/cfg-$(basename $d).log 2>&1 &&
    cmake --build $d --target "$@" > $O/build-$(basename $d).log 2>&1
  echo "build $d rc $?"; tail -2 $O/build-$(basename $d).log
}
build .hb/perf-base .h/perf-base stg &
if [ "$1" = 1 ]; then build .hb/perf .h/perf stg test_gpu_train & else build .hb/perf .h/perf all & fi
wait
el built
NEW=$PWD/.hb/perf/stg OLD=$PWD/.hb/perf-base/stg
cd .h/perf
if [ "$1" = 1 ]; then
  timeout 120 ../../.hb/perf/test_gpu_train > $O/test_gpu_train.txt 2>&1; echo "test_gpu_train rc $?"
  grep -E "norm fold|PASSED|FAILED|ERROR" $O/test_gpu_train.txt | head
  el tested
  for f in default 0 67108864; do
    if [ $f = default ]; then unset STG_NORM_FOLD_BYTES; else export STG_NORM_FOLD_BYTES=$f; fi
    echo "### STG_NORM_FOLD_BYTES=$f: new, old, new, old"
    tools/bench_ab.sh $NEW,$OLD '' '' small:512 2>&1 | tee -a $O/ab-small512-fold-$f.txt | grep time
  done
  unset STG_NORM_FOLD_BYTES
  el benched
  $NEW bench models/cs336/small.yaml --set ctx=512 --precision bf16 --profile > $O/profile-small512-new.txt 2>&1
  $OLD bench models/cs336/small.yaml --set ctx=512 --precision bf16 --profile > $O/profile-small512-old.txt 2>&1
  for w in new old; do echo "## $w"; grep -E "^  (time|critical|streams|adamw|global_norm)|x global_norm|x adamw|shorter without.*(global_norm|adamw)" $O/profile-small512-$w.txt; done
  el profiled
  timeout 150 tools/bench_ab.sh $NEW,$OLD '' '' 2.7B:1024 2>&1 | tee $O/ab-2.7B.txt | grep time
  el done
fi
