#!/usr/bin/env python3
"""Summarise an `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms N` log
between the marks of a marks file (lines `EPOCH_SECONDS LABEL start|end`, written by the run that is being watched):
for each labelled span, the samples' count and the SM clock (MHz), power (W) and temperature (C), median and minimum.

Usage: tools/smi_mark.py SMI_LOG MARKS
"""
import datetime
import statistics
import sys


def num(x):
    return float(x.strip().split()[0])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    samples = []
    with open(sys.argv[1]) as f:
        for ln, line in enumerate(f, 1):
            v = line.split(",")
            if len(v) != 4:
                continue
            try:
                t = datetime.datetime.strptime(v[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((t, num(v[1]), num(v[2]), num(v[3])))
            except ValueError:
                continue  # "[N/A]" and the like
    spans, open_ = [], {}
    with open(sys.argv[2]) as f:
        for line in f:
            v = line.split()
            if len(v) != 3:
                continue
            t, label, what = float(v[0]), v[1], v[2]
            if what == "start":
                open_[label] = t
            elif label in open_:
                spans.append((label, open_.pop(label), t))
    print("| span | samples | SM MHz median / min | W median / max | C median |")
    print("|---|---:|---:|---:|---:|")
    for label, a, b in spans:
        s = [x for x in samples if a <= x[0] <= b]
        if not s:
            print(f"| {label} | 0 | - | - | - |")
            continue
        clk, pw, tc = [x[1] for x in s], [x[2] for x in s], [x[3] for x in s]
        print(f"| {label} | {len(s)} | {statistics.median(clk):.0f} / {min(clk):.0f} | {statistics.median(pw):.0f} / {max(pw):.0f} | "
              f"{statistics.median(tc):.0f} |")


if __name__ == "__main__":
    main()
