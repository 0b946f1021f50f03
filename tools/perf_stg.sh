#!/usr/bin/env bash
# stg's side of docs/perf/LOG.md: every CS336 size at batch 4, ctx 512, fp32 and bf16, graph replay and
# eager launch (flash attention), bf16 graph at ctx 1024, small at ctx 128 and 2.7B fp32 with written-out attention.
# Usage: tools/perf_stg.sh STG OUT.jsonl [sizes]
set -u
stg=$1; out=$2; sizes=${3:-"small medium large xl 2.7B"}
: > "$out"
for s in $sizes; do
  for p in fp32 bf16; do
    for x in graph eager; do
      $stg bench models/cs336/$s.yaml --set ctx=512 --precision $p --exec $x --warmup 3 --iters 10 --json >> "$out" \
        || echo "{\"model\": \"cs336-$s\", \"precision\": \"$p\", \"exec\": \"$x\", \"error\": \"failed\"}" >> "$out"
    done
  done
done
for s in $sizes; do
  $stg bench models/cs336/$s.yaml --set ctx=1024 --precision bf16 --exec graph --warmup 3 --iters 10 --json >> "$out" \
    || echo "{\"model\": \"cs336-$s\", \"ctx\": 1024, \"error\": \"failed\"}" >> "$out"
done
for x in graph eager; do
  $stg bench models/cs336/small.yaml --set ctx=128 --precision bf16 --exec $x --warmup 5 --iters 20 --json >> "$out"
done
$stg bench models/cs336/2.7B.yaml --set ctx=512 --precision fp32 --attention naive --warmup 2 --iters 5 --json >> "$out" \
  || echo '{"model": "cs336-2.7B", "attention": "naive", "error": "failed"}' >> "$out"
cat "$out"
