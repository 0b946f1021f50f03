#!/usr/bin/env python3
"""Where a run of kernels spends its time, by kernel: Nsight Compute's durations and DRAM bytes, summed.

Input: the CSV that `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum ...` prints
(one row a metric a kernel; tools/perf_lib.sh's `ncu_step` takes one decode step's kernels). Kernels are grouped by
their name up to the first '(' or '<' (template arguments folded) unless --full. For each group: launches, total and
mean microseconds, share of the total, DRAM GB and the rate they make over the group's time; then the whole run.
Kernels run one at a time under ncu (no overlap, no programmatic launch), so the total is an upper bound on the
step's device time, and each group's rate is what that kernel reaches alone.

Usage: tools/ncu_kernels.py NCU.csv [--full] [--top N]
"""
import argparse
import collections
import csv
import sys

TIME = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
BYTES = {"byte": 1.0, "B": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def number(s):
    return float(s.replace(",", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--full", action="store_true", help="group by the whole kernel name")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    try:
        with open(a.csv, newline="") as f:
            lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages (==PROF==) are not CSV
    except OSError as e:
        sys.exit(f"{a.csv}: {e.strerror}")
    rows = list(csv.reader(lines))
    if not rows or "Kernel Name" not in rows[0] or "Metric Name" not in rows[0]:
        sys.exit(f"{a.csv}: not the CSV of `ncu --csv --metrics ...` (no 'Kernel Name' and 'Metric Name' columns)")
    col = {name: i for i, name in enumerate(rows[0])}
    per = collections.OrderedDict()  # ID -> [name, us, bytes]
    for r in rows[1:]:
        if len(r) < len(col):
            continue
        k = per.setdefault(r[col["ID"]], [r[col["Kernel Name"]], 0.0, 0.0])
        metric, unit, value = r[col["Metric Name"]], r[col["Metric Unit"]], r[col["Metric Value"]]
        try:
            if metric == "gpu__time_duration.sum":
                k[1] += number(value) * TIME[unit]
            elif metric.startswith("dram__bytes_"):
                k[2] += number(value) * BYTES[unit]
        except (ValueError, KeyError):
            sys.exit(f"{a.csv}: metric {metric}: cannot read {value!r} {unit!r}")
    if not per:
        sys.exit(f"{a.csv}: no kernels")
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, us, by in per.values():
        key = name if a.full else name.split("(")[0].split("<")[0]
        key = key[5:] if key.startswith("void ") else key
        g = groups[key]
        g[0] += 1
        g[1] += us
        g[2] += by
    total_us = sum(g[1] for g in groups.values())
    total_by = sum(g[2] for g in groups.values())
    print(f"{len(per)} kernels, {total_us:.1f} us, {total_by / 1e9:.3f} GB of DRAM traffic "
          f"({total_by / 1e6 / total_us if total_us else 0:.2f} TB/s over the whole)")
    print(f"{'kernel':<44} {'n':>5} {'us':>10} {'us each':>9} {'share':>6} {'GB':>8} {'TB/s':>6}")
    for key, (n, us, by) in sorted(groups.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{key[:44]:<44} {n:>5} {us:>10.1f} {us / n:>9.2f} {100 * us / total_us:>5.1f}% {by / 1e9:>8.3f} "
              f"{by / 1e6 / us if us else 0:>6.2f}")


if __name__ == "__main__":
    main()
