#!/usr/bin/env bash
# Issue 8's acceptance runs on an 80 GB GPU: steps that PyTorch cannot hold, fitted with --memory-budget auto.
# Usage: tools/budget_gpu.sh STG
stg=$1
run() { echo "== $*"; $stg bench "$@" --warmup 1 --iters 3 --json 2>&1 | cut -c1-900; }
run models/cs336/xl.yaml --attention naive --precision fp32 --set ctx=1024 --memory-budget auto
run models/cs336/2.7B.yaml --attention naive --precision fp32 --set ctx=1024 --memory-budget auto
run models/cs336/2.7B.yaml --attention flash --precision fp32 --set ctx=2048 --memory-budget auto
run models/cs336/2.7B.yaml --attention flash --precision bf16 --set ctx=4096 --memory-budget auto
echo "== a budget that needs no recomputation: the same schedule and time"
$stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --iters 10 --json | cut -c1-400
$stg bench models/cs336/small.yaml --set ctx=512 --precision bf16 --iters 10 --json --memory-budget auto | cut -c1-400
