#!/usr/bin/env python3
"""docs/perf/LOG.md tables from `tools/perf_stg.sh` output (JSON lines) and the peer's torch_lm.py --out file.
Usage: tools/perf_table.py STG.jsonl PEER.json [NUMBERS_FP32_NAIVE_2.7B_MS]"""
import json, sys

stg = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = json.load(open(sys.argv[2]))
G = 2**30

def find_stg(size, prec, ex, ctx=512, att="flash"):
    for r in stg:
        if r.get("model") == f"cs336-{size}" and r.get("precision") == prec and r.get("exec") == ex and r.get("ctx") == ctx and r.get("attention") == att:
            return r

def find_peer(size, mode):
    for r in peer["runs"]:
        if r["size"] == size and r["mode"] == mode and r["ctx"] == 512 and "error" not in r:
            return r

def ms(r, key="median_ms"):
    return f"{r[key]:.1f}" if r else "—"

print("| size | stg bf16 graph | stg bf16 eager | peer bf16 eager (SDPA) | peer bf16 torch.compile | stg / compile | stg fp32 graph | stg fp32 eager | peer fp32 eager (SDPA) | stg bf16 TFLOP/s (MFU) | planned / measured GiB (bf16) | peer compile peak GiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in ["small", "medium", "large", "xl", "2.7B"]:
    bg, be, fg, fe = find_stg(s, "bf16", "graph"), find_stg(s, "bf16", "eager"), find_stg(s, "fp32", "graph"), find_stg(s, "fp32", "eager")
    pb, pc, pf = find_peer(s, "bf16"), find_peer(s, "bf16c"), find_peer(s, "fp32")
    ratio = f"{bg['median_ms'] / pc['step_ms_median']:.2f}" if bg and pc else "—"
    print(f"| {s} | {ms(bg)} | {ms(be)} | {ms(pb, 'step_ms_median')} | {ms(pc, 'step_ms_median')} | {ratio} | {ms(fg)} | {ms(fe)} | "
          f"{ms(pf, 'step_ms_median')} | {bg['tflops']:.0f} ({100*bg['mfu']:.0f}%) | {bg['planned_bytes']/G:.2f} / {bg['measured_bytes']/G:.2f} | "
          f"{pc['peak_alloc_GiB']:.1f} |" if bg and pc else f"| {s} | … |")
