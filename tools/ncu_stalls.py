#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction stall samples of one kernel.

Input: the CSV that `ncu --import REPORT --page source --csv --print-source sass` prints for a report taken with
`--section SourceCounters` (docs/perf/2026-11-29d-call2.sh makes one). Prints the share of each stall reason over
all samples, the instructions with the most samples (index, SASS, their two largest reasons), and, for each
`--range A:B` given (instruction indices, B exclusive), that range's samples and its largest reasons, so that a
loop's parts (issue, softmax, barrier waits) can be weighed against each other.

Usage: tools/ncu_stalls.py SOURCE.csv [--top N] [--range A:B ...]
"""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--range", action="append", default=[], help="A:B, instruction indices")
    a = ap.parse_args()
    try:
        with open(a.csv, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        sys.exit(f"{a.csv}: {e.strerror}")
    # row 0 names the kernel, row 1 holds the column names
    if len(rows) < 3 or "Source" not in rows[1] or "Warp Stall Sampling (All Samples)" not in rows[1]:
        sys.exit(f"{a.csv}: not an ncu source-page CSV with stall samples (--section SourceCounters)")
    hdr, data = rows[1], [r for r in rows[2:] if len(r) == len(rows[1])]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, col):
        v = r[ix[col]].replace(",", "")
        return int(v) if v.isdigit() else 0

    def count(lo, hi):
        c = collections.Counter()
        for r in data[lo:hi]:
            for s in reasons:
                c[s] += num(r, s)
        return c

    tot = count(0, len(data))
    total = sum(tot.values())
    if total == 0:
        sys.exit(f"{a.csv}: no stall samples")
    print(rows[0][1][:120] if len(rows[0]) > 1 else "")
    print(f"samples {total}, instructions {len(data)}")
    for s, v in tot.most_common(10):
        print(f"  {s[6:]:20s} {v:9d} {100 * v / total:5.1f}%")
    best = sorted(range(len(data)), key=lambda n: -num(data[n], "Warp Stall Sampling (All Samples)"))[: a.top]
    for n in best:
        r = data[n]
        v = num(r, "Warp Stall Sampling (All Samples)")
        two = sorted(((num(r, s), s[6:]) for s in reasons), reverse=True)[:2]
        print(f"{v:8d} {100 * v / total:5.1f}%  #{n:5d}  {r[ix['Source']].strip()[:64]:64s} {two}")
    for rg in a.range:
        try:
            lo, hi = (int(x) for x in rg.split(":"))
        except ValueError:
            sys.exit(f"--range {rg}: expected A:B")
        c = count(max(lo, 0), min(hi, len(data)))
        t = sum(c.values())
        top = [(s[6:], round(100 * v / t)) for s, v in c.most_common(4)] if t else []
        print(f"[{lo}, {hi}): {t} samples, {100 * t / total:.1f}%  {top}")


if __name__ == "__main__":
    main()
