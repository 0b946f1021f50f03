#!/usr/bin/env bash
# Per-kernel GPU time of a few steps (Nsight Systems), for docs/perf/LOG.md's breakdown.
# Usage: tools/profile.sh STG OUTDIR MODEL [stg bench options...]
set -u
stg=$1; out=$2; model=$3; shift 3
mkdir -p "$out"
name=$(basename "$model" .yaml)
if command -v nsys >/dev/null; then
  nsys profile -t cuda,nvtx --cuda-graph-trace=node -o "$out/$name" --force-overwrite true \
    "$stg" bench "$model" --warmup 1 --iters 3 "$@" > "$out/$name.bench.txt" 2>&1
  nsys stats -r cuda_gpu_kern_sum -f csv -o "$out/$name" "$out/$name.nsys-rep" > /dev/null 2>&1
  python3 - "$out/${name}_cuda_gpu_kern_sum.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tot = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"total kernel time {tot/1e6:.2f} ms over the profiled iterations")
for r in rows[:18]:
    print(f"{float(r['Total Time (ns)'])/tot*100:5.1f}%  {float(r['Total Time (ns)'])/1e6:8.2f} ms  {int(r['Instances']):6d}x  {r['Name'][:110]}")
PY
else
  echo "nsys not found"
fi
