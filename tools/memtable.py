#!/usr/bin/env python3
"""Planned memory of every CS336 size, both attentions, both precisions: a Markdown table from
`stg memreport --format json`. Usage: tools/memtable.py [STG] [--ctx 512] [--batch 4]"""
import json, subprocess, sys

stg = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "./build/stg"
ctx = sys.argv[sys.argv.index("--ctx") + 1] if "--ctx" in sys.argv else "512"
batch = sys.argv[sys.argv.index("--batch") + 1] if "--batch" in sys.argv else "4"
peer_fp32_naive = {"small": 4.2, "medium": 11.5, "large": 23.3, "xl": 43.0, "2.7B": 59.0}  # NUMBERS.md, ctx 512
G = 2**30
print(f"| size | precision | attention | planned peak GiB | lower bound GiB | formula GiB | peak/lower | peak/formula | param | grad | optimizer | activation+temporary at peak | PyTorch eager fp32 (naive) |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in ["small", "medium", "large", "xl", "2.7B"]:
    for prec in ["fp32", "bf16"]:
        for att in ["naive", "flash"]:
            cmd = [stg, "memreport", f"models/cs336/{size}.yaml", "--set", f"ctx={ctx}", "--set", f"batch={batch}",
                   "--attention", att, "--precision", prec, "--format", "json"]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            p, f = r["plan"], r["formula"]
            live = p.get("live_at_peak", {})
            act = (live.get("activation", 0) + live.get("temporary", 0)) / G
            peer = f"{peer_fp32_naive[size]:.1f}" if (prec, att, ctx, batch) == ("fp32", "naive", "512", "4") else ""
            print(f"| {size} | {prec} | {att} | {p['peak_bytes']/G:.2f} | {p['lower_bound_bytes']/G:.2f} | {f['total_bytes']/G:.2f} | "
                  f"{p['peak_bytes']/p['lower_bound_bytes']:.4f} | {p['peak_bytes']/f['total_bytes']:.3f} | "
                  f"{p['by_class']['param']/G:.2f} | {p['by_class']['grad']/G:.2f} | {p['by_class']['optimizer']/G:.2f} | {act:.2f} | {peer} |")
