#!/usr/bin/env python3
"""Per-device bytes of a model's training step under data parallelism and ZeRO 0-3, and the devices it
needs on 80 GB and 141 GB cards: a Markdown table from `stg memreport --world N --zero Z --format json`.
Usage: tools/mem8b.py [STG] [--model models/llama3/8B.yaml] [--ctx 4096] [--batch 1] [--precision bf16] [--opts "--grad-dtype bf16"]
(--opts: more stg options for every report). Planning only (no GPU needed); the plan is deterministic."""
import json, subprocess, sys

def opt(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

stg = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "./build/stg"
model, ctx, batch, prec = opt("--model", "models/llama3/8B.yaml"), opt("--ctx", "4096"), opt("--batch", "1"), opt("--precision", "bf16")
more = opt("--opts", "").split()
G = 2**30
CARDS = [("80 GB", 80), ("141 GB", 141)]
WORLDS = [1, 2, 4, 8, 16]

def report(*extra):
    cmd = [stg, "memreport", model, "--set", f"ctx={ctx}", "--set", f"batch={batch}", "--precision", prec, "--format", "json", *more, *extra]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

base = report()
p = base["plan"]
print(f"Model `{model}` ({base['params']:,} parameters) at ctx {ctx}, batch {batch} per device, {prec}"
      f"{' ' + ' '.join(more) if more else ''}; per-device GiB by world size N:")
print()
print("| ZeRO | what is sharded | " + " | ".join(f"N = {w}" for w in WORLDS) + " | devices needed, 80 GB | devices needed, 141 GB |")
print("|---|---|" + "---:|" * len(WORLDS) + "---:|---:|")
what = ["nothing", "AdamW state and master weights", "+ gradients", "+ parameters"]
for z in range(4):
    cells, need = [], {}
    for w in WORLDS:
        d = report("--world", str(w), "--zero", str(z), "--device-memory", "80")["data_parallel"]
        cells.append(f"{d['per_device_bytes'] / G:.2f}")
    for name, cap in CARDS:
        d = report("--world", "1", "--zero", str(z), "--device-memory", str(cap))["data_parallel"]
        n = d["devices_needed"][z]
        need[name] = str(n) if n is not None else "none"
    print(f"| {z} | {what[z]} | " + " | ".join(cells) + f" | {need['80 GB']} | {need['141 GB']} |")
print()
print(f"One device's plan: peak {p['peak_bytes'] / G:.2f} GiB = parameters {p['by_class']['param'] / G:.2f} + gradients "
      f"{p['by_class']['grad'] / G:.2f} + optimizer state {p['by_class']['optimizer'] / G:.2f} GiB + the rest (activations, "
      f"temporaries live at the peak).")
one = []
for extra, label in [([], "plain"), (["--optimizer-in-backward"], "--optimizer-in-backward"),
                     (["--set", "fused_head=off"], "fused_head=off"),
                     (["--optimizer-in-backward", "--set", "fused_head=off"], "--optimizer-in-backward, fused_head=off")]:
    r = report(*extra)["plan"]
    one.append(f"{label}: {r['peak_bytes'] / G:.2f} GiB")
print("Single device (N = 1, ZeRO 0), planned peak: " + "; ".join(one) + ".")
