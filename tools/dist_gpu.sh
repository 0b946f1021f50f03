#!/usr/bin/env bash
# Data parallelism on the GPU machine: the gpu tests (test_gpu_dist included), the all-reduce sweep
# at the world size of the machine's GPUs (stg launch), and the cost of the communication ops in a
# step (one rank vs the plain step). Usage: tools/dist_gpu.sh BUILD_DIR
set -u
B=${1:-build-gpu}; S=$B/stg
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
(cd $B && ctest -L gpu --output-on-failure 2>&1 | tail -12)
for w in $(seq 1 $n); do $S launch -n $w -- $S comm-bench --iters 10; done
for m in small xl; do
  $S bench models/cs336/$m.yaml --set ctx=512 --precision bf16 --warmup 3 --iters 10 | grep -E "time|memory"
  $S launch -n 1 -- $S bench models/cs336/$m.yaml --set ctx=512 --precision bf16 --warmup 3 --iters 10 | grep -E "time|memory"
done
$S launch -n 1 -- $S train models/tiny.yaml --steps 100 --lr 1e-2 --min-lr 1e-3 --warmup 20 | tail -2
