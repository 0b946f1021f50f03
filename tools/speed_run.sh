#!/usr/bin/env bash
# Issue 5's comparison in one machine lease: stg bf16 graph-replayed steps (batch 4, ctx 512 and 1024)
# and the PyTorch peer's whole-model torch.compile (bf16 autocast, SDPA, fused AdamW; compiled once
# per shape) for the given sizes, then the table (tools/speed_table.py). Run it once per group of
# sizes, each call holding both sides of its rows, when one call cannot hold them all.
# Usage: tools/speed_run.sh STG OUTDIR SIZE[,SIZE...]   (peer/torch_lm.py copied from ../shared/peers)
# STG_OPTS, when set, is added to every stg bench command (e.g. STG_OPTS='--gemm-tune on').
set -u
if [ $# -ne 3 ]; then echo "usage: tools/speed_run.sh STG OUTDIR SIZE[,SIZE...]" >&2; exit 2; fi
stg=$1; out=$2; sizes=$3
[ -x "$stg" ] || { echo "tools/speed_run.sh: '$stg' is not an executable stg" >&2; exit 2; }
for s in ${sizes//,/ }; do
  [ -f "models/cs336/$s.yaml" ] || { echo "tools/speed_run.sh: size '$s': no models/cs336/$s.yaml (small, medium, large, xl, 2.7B)" >&2; exit 2; }
done
[ -f peer/torch_lm.py ] || { echo "tools/speed_run.sh: peer/torch_lm.py missing (copy ../shared/peers/torch_lm.py there)" >&2; exit 2; }
mkdir -p "$out" || exit 2
date -u +"start %F %T UTC ($sizes) stg options: ${STG_OPTS:-none}" >> "$out/log.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$out/log.txt" 2>&1
for s in ${sizes//,/ }; do
  for c in 512 1024; do
    "$stg" bench models/cs336/$s.yaml --set ctx=$c --precision bf16 --warmup 3 --iters 10 --json ${STG_OPTS:-} >> "$out/stg.jsonl" 2>> "$out/log.txt" ||
      echo "{\"error\": \"failed\", \"model\": \"cs336-$s\", \"ctx\": $c}" >> "$out/stg.jsonl"
  done
done
date -u +"stg done %F %T UTC" >> "$out/log.txt"
PYTHONUNBUFFERED=1 python3 peer/torch_lm.py --flash --sizes "$sizes" --ctx 512,1024 --modes bf16c --warm 3 --iters 8 \
  --out "$out/peer-${sizes//,/-}.json" >> "$out/log.txt" 2>&1 || echo "peer failed" >> "$out/log.txt"
date -u +"peer done %F %T UTC" >> "$out/log.txt"
python3 tools/speed_table.py "$out"
