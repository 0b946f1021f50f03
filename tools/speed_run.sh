#!/usr/bin/env bash
# stg beside the strongest PyTorch peer in one machine lease (issue 28's PERF.md table): stg bf16
# graph-replayed steps at batch 4, ctx 512 and 1024, for the given sizes (and 2.7B and xl at batch 1,
# ctx 4096), and peer/torch_lm.py's whole-model torch.compile with cuDNN attention (--sdpa cudnn),
# once with the default mode and once with reduce-overhead (CUDA graphs); tools/speed_table.py then
# prints the table with the faster peer per row. Run it once per group of sizes, each call holding
# both sides of its rows, when one call cannot hold them all.
# Usage: tools/speed_run.sh STG OUTDIR SIZE[,SIZE...]   (peer/torch_lm.py copied from ../shared/peers)
# STG_OPTS, when set, is added to every stg bench command (e.g. STG_OPTS='--gemm-tune on');
# LONG=0 leaves out the ctx 4096 rows; PEER_MODES (default "default reduce-overhead") the compile modes.
# Rerun into the same OUTDIR, it skips the rows that are whole there (the stg row in stg.jsonl and a
# result from every peer mode) and measures the others again, stg and peer (a row's two sides are always
# from one call): a group cut short by a call's time limit goes on in the next call.
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
rows=() # size:ctx:batch
for s in ${sizes//,/ }; do
  rows+=("$s:512:4" "$s:1024:4")
  case $s in 2.7B|xl) [ "${LONG:-1}" = 1 ] && rows+=("$s:4096:1") ;; esac
done
stg_key() { echo "\"model\": \"cs336-$1\".*\"batch\": $3, \"ctx\": $2,"; }
whole() { # size ctx batch: the stg row and every peer mode's result are in $out
  [ -f "$out/stg.jsonl" ] && grep -q "$(stg_key "$1" "$2" "$3").*\"median_ms\"" "$out/stg.jsonl" || return 1
  for m in ${PEER_MODES:-default reduce-overhead}; do grep -qs '"step_ms_median"' "$out/peer-$1-$2-$3-$m.json" || return 1; done
}
todo=()
for r in "${rows[@]}"; do
  IFS=: read -r s c b <<< "$r"
  whole "$s" "$c" "$b" && continue
  todo+=("$r")
  if [ -f "$out/stg.jsonl" ]; then # this row's earlier sides go: both are measured in this call
    grep -v "$(stg_key "$s" "$c" "$b")" "$out/stg.jsonl" > "$out/stg.jsonl.tmp"; mv "$out/stg.jsonl.tmp" "$out/stg.jsonl"
  fi
  rm -f "$out"/peer-"$s"-"$c"-"$b"-*.json
done
rows=("${todo[@]}")
for r in "${rows[@]}"; do
  IFS=: read -r s c b <<< "$r"
  "$stg" bench models/cs336/$s.yaml --set ctx=$c --set batch=$b --precision bf16 --warmup 3 --iters 10 --json ${STG_OPTS:-} >> "$out/stg.jsonl" 2>> "$out/log.txt" ||
    echo "{\"model\": \"cs336-$s\", \"batch\": $b, \"ctx\": $c, \"error\": \"failed\"}" >> "$out/stg.jsonl"
done
date -u +"stg done %F %T UTC" >> "$out/log.txt"
for r in "${rows[@]}"; do
  IFS=: read -r s c b <<< "$r"
  for m in ${PEER_MODES:-default reduce-overhead}; do
    cm=(); [ "$m" = default ] || cm=(--compile-mode "$m")
    PYTHONUNBUFFERED=1 python3 peer/torch_lm.py --flash --sdpa cudnn "${cm[@]}" --sizes "$s" --ctx "$c" --batch "$b" --modes bf16c \
      --warm 3 --iters 8 --out "$out/peer-$s-$c-$b-$m.json" >> "$out/log.txt" 2>&1 || echo "peer $s $c $b $m failed" >> "$out/log.txt"
  done
done
date -u +"peer done %F %T UTC" >> "$out/log.txt"
python3 tools/speed_table.py "$out"
