#!/usr/bin/env bash
# On the GPU machine: the user-facing commands on CUDA (train, memreport --device cuda, the fit check).
# Usage: tools/gpu_smoke.sh STG
set -u
stg=$1
echo "== README main job (the GPU is the default device)"
$stg train models/tiny.yaml --steps 300 --lr 1e-2 --min-lr 1e-3 --warmup 20 --val-every 100 | tail -4
echo "== the same in bf16, eager launch"
$stg train models/tiny.yaml --steps 300 --lr 1e-2 --min-lr 1e-3 --warmup 20 --val-every 100 --precision bf16 --exec eager | tail -2
echo "== small, bf16, 30 steps of real training at ctx 512 with a checkpoint and a resume"
$stg train models/cs336/small.yaml --set ctx=512 --precision bf16 --steps 20 --lr 3e-4 --warmup 5 --ckpt /tmp/ck-small | tail -2
$stg train models/cs336/small.yaml --set ctx=512 --precision bf16 --steps 30 --lr 3e-4 --warmup 5 --ckpt /tmp/ck-small --resume | tail -2
echo "== memreport --device cuda"
$stg memreport models/cs336/small.yaml --set ctx=512 --attention naive --device cuda | sed -n 9,16p
echo "== a step that does not fit"
$stg bench models/cs336/2.7B.yaml --set ctx=4096 --precision fp32; echo "rc=$?"
