#!/usr/bin/env bash
# docs/perf/LOG.md's ctx-512 table in one machine lease: stg (graph and eager, fp32 and bf16, every size;
# small at ctx 128 graph and eager; 2.7B fp32 with written-out attention), then the PyTorch peer
# (tools/bench_peer.py: eager fp32, eager bf16 with SDPA, torch.compile bf16 per block) at ctx 512.
# Usage: tools/perf_run.sh STG OUTDIR    (peer/torch_lm.py copied from ../shared/peers)
set -u
stg=$1; out=$2; mkdir -p "$out"
S="$out/stg.jsonl"; : > "$S"
b() { "$stg" bench "$@" --json >> "$S" 2>> "$out/log.txt" || echo "{\"error\": \"failed\", \"cmd\": \"$*\"}" >> "$S"; }
date -u +"start %F %T UTC" >> "$out/log.txt"
for s in small medium large xl 2.7B; do
  for x in graph eager; do
    b models/cs336/$s.yaml --set ctx=512 --precision bf16 --exec $x --warmup 3 --iters 10
    b models/cs336/$s.yaml --set ctx=512 --precision fp32 --exec $x --warmup 2 --iters 3
  done
done
for x in graph eager; do b models/cs336/small.yaml --set ctx=128 --precision bf16 --exec $x --warmup 10 --iters 30; done
b models/cs336/2.7B.yaml --set ctx=512 --precision fp32 --attention naive --warmup 1 --iters 2
date -u +"stg done %F %T UTC" >> "$out/log.txt"
P="$out/peer.jsonl"; : > "$P"
for s in small medium large xl 2.7B; do
  python3 tools/bench_peer.py --peer peer/torch_lm.py --size $s --ctx 512 --modes fp32,bf16,bf16c --what step \
    --warmup 3 --iters 10 --fp32-warmup 2 --fp32-iters 3 --out "$P" >> "$out/log.txt" 2>&1 || echo "peer $s failed" >> "$out/log.txt"
done
date -u +"peer done %F %T UTC" >> "$out/log.txt"
