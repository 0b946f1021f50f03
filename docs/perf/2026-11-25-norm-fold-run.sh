#!/usr/bin/env bash
# The norm-fold study's device script (run from /work/main's root on the GPU machine, with .h/perf =
# branch perf and .h/perf-base = its base commit carried): build both, check, A/B.
# Usage: bash .h/perf/docs/perf/2026-11-25-norm-fold-run.sh STAGE
#   1: the fold's A/B and test (.h/perf at f6bbce0, the fold, since reverted); 3: profile, streams and ncu of
#   AdamW on the base; 4: attention at small's shape beside ../shared/peers/torch_attn.py (copied into
#   .h/perf/peers/) and the ctx 1024 profile. Stage 2 (build everything) was not used.
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
if [ "$1" = 1 ]; then build .hb/perf .h/perf stg test_gpu_train & elif [ "$1" = 2 ]; then build .hb/perf .h/perf all & fi
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
if [ "$1" = 3 ]; then # diagnosis on the base build: the step's profile, and ncu of AdamW at small and at 2.7B
  cd ../perf-base
  ./../../.hb/perf-base/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --profile > $O/profile-small512.txt 2>&1
  grep -E "^  (time|critical|streams|adamw|global_norm)" $O/profile-small512.txt
  el profiled
  for n in 1 2 3; do echo "streams $n"; ../../.hb/perf-base/stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --streams $n --warmup 10 --iters 30 | grep -E '^  time'; done
  el streams
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
  for m in small:512 2.7B:1024; do
    IFS=: read -r mod ctx <<< "$m"
    timeout 150 $NCU -k regex:adamw_kernel --launch-skip 1 --launch-count 1 $S ../../.hb/perf-base/stg bench models/cs336/$mod.yaml \
      --set ctx=$ctx --precision bf16 --exec eager --warmup 1 --iters 1 > $O/ncu-adamw-$mod.txt 2>&1
    echo "ncu $m rc $?"; grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Reg|No Eligible|Issued Warp|Warp Cycles Per Issued" $O/ncu-adamw-$mod.txt
    el "ncu $m"
  done
fi
if [ "$1" = 4 ]; then # attention at small's shape beside the peer (cuDNN, FlashAttention-2), and the ctx 1024 profile
  cd ../perf-base
  ../../.hb/perf-base/stg attn-bench --batch 4 --heads 12 --dims 64 --seqs 512,1024 --precision bf16 > $O/attn-stg.txt 2>&1
  echo "attn-bench rc $?"; tail -12 $O/attn-stg.txt
  el attn
  timeout 120 python3 ../perf/peers/torch_attn.py --batch 4 --heads 12 --dims 64 --seqs 512,1024 --iters 50 > $O/attn-peer.txt 2>&1
  echo "peer rc $?"; cat $O/attn-peer.txt | tail -8
  el peer
  ../../.hb/perf-base/stg bench models/cs336/small.yaml --set ctx=1024 --precision bf16 --profile > $O/profile-small1024.txt 2>&1
  grep -E "^  (time|critical|streams|adamw|global_norm)|attention" $O/profile-small1024.txt | head -12
  el done
fi
