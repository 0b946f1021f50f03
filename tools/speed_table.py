#!/usr/bin/env python3
"""The table of tools/speed_run.sh's output folder: stg bf16 graph steps (stg.jsonl) beside the
strongest peer (peer-*.json: whole-model torch.compile with cuDNN attention, default and
reduce-overhead modes; the faster per row), per size, ctx and batch: both medians, their ratio,
stg's TFLOP/s and MFU (989 TFLOP/s dense bf16; FLOPs as ../shared/peers/NUMBERS.md counts them).
Usage: tools/speed_table.py DIR"""
import glob, json, os, sys

if len(sys.argv) != 2:
    sys.exit("usage: tools/speed_table.py DIR")
d = sys.argv[1]
try:
    stg = [json.loads(l) for l in open(os.path.join(d, "stg.jsonl")) if l.strip()]
except (OSError, ValueError) as e:
    sys.exit(f"tools/speed_table.py: {os.path.join(d, 'stg.jsonl')}: {e}")
peer = []
for f in sorted(glob.glob(os.path.join(d, "peer-*.json"))):
    try:
        peer += json.load(open(f))["runs"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"tools/speed_table.py: {f}: {e}")

def find_stg(size, ctx, batch):
    rs = [r for r in stg if r.get("model") == f"cs336-{size}" and r.get("ctx") == ctx and r.get("batch", 4) == batch and "error" not in r]
    return rs[-1] if rs else None

def find_peer(size, ctx, batch):
    """The faster of the peer's compile modes for this row. Only fused-attention runs count: torch_lm.py calls
    scaled_dot_product_attention only with --flash (its record's "flash"); without it attention is written out."""
    rs = [r for r in peer if r["size"] == size and r["ctx"] == ctx and r.get("batch", 4) == batch and r["mode"] == "bf16c"
          and "error" not in r and r.get("flash") is True]
    return min(rs, key=lambda r: r["step_ms_median"]) if rs else None

print("| size | ctx | batch | stg bf16 graph ms | strongest peer ms (mode) | stg / peer | stg TFLOP/s (MFU) | planned / measured GiB | peer peak GiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in ["small", "medium", "large", "xl", "2.7B"]:
    for c, b in ((512, 4), (1024, 4), (4096, 1)):
        a, p = find_stg(s, c, b), find_peer(s, c, b)
        if not a and not p:
            continue
        am = f"{a['median_ms']:.2f} ± {a['std_ms']:.2f}" if a else "—"
        pm = f"{p['step_ms_median']:.2f} ({p.get('compile_mode') or 'default'})" if p else "—"
        ratio = f"**{a['median_ms'] / p['step_ms_median']:.2f}**" if a and p else "—"
        tf = f"{a['tflops']:.0f} ({100 * a['mfu']:.1f}%)" if a else "—"
        mem = f"{a['planned_bytes'] / 2**30:.2f} / {a['measured_bytes'] / 2**30:.2f}" if a else "—"
        pk = f"{p['peak_alloc_GiB']:.1f}" if p else "—"
        print(f"| {s} | {c} | {b} | {am} | {pm} | {ratio} | {tf} | {mem} | {pk} |")
