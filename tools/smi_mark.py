#!/usr/bin/env python3
"""Summarise an `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms N` log
between the marks of a marks file (lines `EPOCH_SECONDS LABEL start|end`, written by the run that is being watched):
for each labelled span, the samples' count and the SM clock (MHz), power (W) and temperature (C), median and minimum
(power: median and maximum). Sample lines that do not parse (nvidia-smi's "[N/A]" and the like) are skipped; a marks
line that does not parse is an error. The timestamps are read as local time, as nvidia-smi writes them and as
`date +%s` counts: run both on the same machine.

Usage: tools/smi_mark.py SMI_LOG MARKS
"""
import datetime
import statistics
import sys


def num(x):
    return float(x.strip().split()[0])


def load_samples(path):
    samples = []
    with open(path) as f:
        for line in f:
            v = line.split(",")
            if len(v) != 4:
                continue
            try:
                t = datetime.datetime.strptime(v[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((t, num(v[1]), num(v[2]), num(v[3])))
            except (ValueError, IndexError):
                continue
    return samples


def load_spans(path):
    spans, started = [], {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            v = line.split()
            if len(v) != 3 or v[2] not in ("start", "end"):
                sys.exit(f"{path}:{ln}: expected 'EPOCH_SECONDS LABEL start|end'")
            try:
                t = float(v[0])
            except ValueError:
                sys.exit(f"{path}:{ln}: '{v[0]}' is not a time in seconds")
            if v[2] == "start":
                started[v[1]] = t
            elif v[1] in started:
                spans.append((v[1], started.pop(v[1]), t))
            else:
                sys.exit(f"{path}:{ln}: '{v[1]}' ends without a start")
    return spans


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tools/smi_mark.py SMI_LOG MARKS")
    try:
        samples, spans = load_samples(sys.argv[1]), load_spans(sys.argv[2])
    except OSError as e:
        sys.exit(f"{e.filename}: {e.strerror}")
    if not spans:
        sys.exit(f"{sys.argv[2]}: no span (a start and its end)")
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
