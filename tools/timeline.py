#!/usr/bin/env python3
"""Reads a kernel timeline written by tools/probes/timeline.c (CUPTI, injected into any CUDA program) and says
where one graph replay's time went: its span, how busy the device and each stream were, the device's idle gaps
(and which kernels they sat between), the kernels that took the most time, and the tail: how long the kernels
matching --tail (by default the optimizer's updates) ran on after every other kernel had ended.

    python3 tools/timeline.py T.tsv[.gz] [--graph G] [--replay K] [--tail REGEX] [--top N] [--gaps N]
                              [--list FROM:TO] [--period REGEX]

A replay is every record of one graph launch (graph id and the launch's correlation id). By default the graph with
the most records a replay is read, and of its replays the one with the median span (the others' spans are
summarised). --replay K takes the K-th replay in time order instead (0 the first, -1 the last). --list FROM:TO
prints every record of the replay that starts between FROM and TO ms after the replay's start (its start, end and
length, stream, grid, block, registers, name): how one layer's kernels follow each other. --period REGEX: the
intervals between the starts of consecutive records whose names match (a layer's time, by its attention kernel).
A file ending in .gz is read through gzip. Exits 2 with FILE:LINE on a malformed file, or when the file holds no
graph replay."""
import argparse
import gzip
import re
import statistics
import sys

FIELDS = ["kind", "start", "end", "stream", "graph", "node", "correlation", "grid", "block", "registers", "bytes", "name"]
INTS = FIELDS[1:11]


class Bad(Exception):
    pass


def read(path):
    recs, dropped = [], None
    try:
        f = (gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.endswith(".gz")
             else open(path, encoding="utf-8", errors="replace"))
    except OSError as e:
        raise Bad(f"{path}: {e.strerror}")
    with f:
        try:
            header = f.readline().rstrip("\n").split("\t")
        except (OSError, EOFError) as e:  # not gzip data, or cut short
            raise Bad(f"{path}: {e}")
        if header != FIELDS:
            raise Bad(f"{path}:1: not a timeline (the header should be: {' '.join(FIELDS)})")
        try:
            lines = list(f)
        except (OSError, EOFError) as e:
            raise Bad(f"{path}: {e}")
        for ln, line in enumerate(lines, start=2):
            line = line.rstrip("\n")
            if line.startswith("# dropped "):
                try:
                    dropped = int(line[len("# dropped "):])
                except ValueError:
                    raise Bad(f"{path}:{ln}: a dropped count that is not a number")
                continue
            if not line:
                continue
            v = line.split("\t")
            if len(v) != len(FIELDS):
                raise Bad(f"{path}:{ln}: {len(v)} fields, {len(FIELDS)} expected")
            r = {"kind": v[0], "name": v[11]}
            for k, x in zip(INTS, v[1:11]):
                try:
                    r[k] = int(x)
                except ValueError:
                    raise Bad(f"{path}:{ln}: {k} '{x}' is not an integer")
            if r["kind"] not in ("kernel", "memcpy", "memset"):
                raise Bad(f"{path}:{ln}: unknown kind '{r['kind']}'")
            if r["end"] < r["start"]:
                raise Bad(f"{path}:{ln}: ends ({r['end']}) before it starts ({r['start']})")
            recs.append(r)
    return recs, dropped


def base_name(n):
    """The function's name from an Itanium-mangled one (namespaces joined by ::, template arguments left out)."""
    if not n.startswith("_Z"):
        return n
    s, i, parts = n, 2, []
    nested = i < len(s) and s[i] == "N"
    if nested:
        i += 1
    while i < len(s):
        m = re.match(r"\d+", s[i:])
        if not m:
            break
        ln = int(m.group(0))
        i += len(m.group(0))
        parts.append(s[i:i + ln])
        i += ln
        if not nested:
            break
        while i < len(s) and s[i] == "I":  # template arguments of this part: skip to its balanced E
            depth, i = 1, i + 1
            while i < len(s) and depth:
                depth += {"I": 1, "E": -1}.get(s[i], 0)
                i += 1
        if i < len(s) and s[i] == "E":
            break
    parts = [x for x in parts if not x.startswith("_GLOBAL__N")]  # anonymous namespaces
    return "::".join(parts) if parts else n


def union(iv):
    """Total length of the union of [start, end) intervals."""
    tot, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def idle_gaps(recs):
    """The device's idle intervals inside the replay (no record running on any stream): (length, start, end,
    the record that ended last before it, the record that starts it)."""
    out, reach, last = [], None, None
    for r in sorted(recs, key=lambda r: (r["start"], r["end"])):
        if reach is not None and r["start"] > reach:
            out.append((r["start"] - reach, reach, r["start"], last, r))
        if reach is None or r["end"] > reach:
            reach, last = r["end"], r
    return out


def ms(ns):
    return ns / 1e6


def report(recs, dropped, a, out):
    replays = {}
    for r in recs:
        if r["graph"]:
            replays.setdefault((r["graph"], r["correlation"]), []).append(r)
    if not replays:
        raise Bad(f"{a.file}: no graph replay in {len(recs)} records (was the program run with graphs?)")
    by_graph = {}
    for (g, c), rs in replays.items():
        by_graph.setdefault(g, []).append(rs)
    if a.graph is not None and a.graph not in by_graph:
        raise Bad(f"{a.file}: no graph {a.graph} (graphs: {' '.join(str(g) for g in sorted(by_graph))})")
    g = a.graph if a.graph is not None else max(by_graph, key=lambda g: (max(len(rs) for rs in by_graph[g]), g))
    reps = sorted(by_graph[g], key=lambda rs: min(r["start"] for r in rs))
    spans = [max(r["end"] for r in rs) - min(r["start"] for r in rs) for rs in reps]
    if a.replay is not None:
        if not -len(reps) <= a.replay < len(reps):
            raise Bad(f"{a.file}: graph {g} has {len(reps)} replays; --replay {a.replay} is not one")
        k = a.replay % len(reps)
    else:
        med = statistics.median_low(spans)
        k = spans.index(med)
    rs = reps[k]
    t0, t1 = min(r["start"] for r in rs), max(r["end"] for r in rs)
    span = t1 - t0
    busy = union([(r["start"], r["end"]) for r in rs])
    work = sum(r["end"] - r["start"] for r in rs)
    pr = lambda *x: print(*x, file=out)
    pr(f"graph {g}: {len(reps)} replays, spans {ms(min(spans)):.3f} / {ms(statistics.median_low(spans)):.3f} / "
       f"{ms(max(spans)):.3f} ms (min / median / max); {len(by_graph) - 1} other graphs; "
       f"{sum(1 for r in recs if not r['graph'])} records outside graphs; dropped {dropped if dropped is not None else 'unknown'}")
    pr(f"replay {k}: span {ms(span):.3f} ms, {len(rs)} records, device busy {ms(busy):.3f} ms ({100 * busy / span:.1f}%), "
       f"idle {ms(span - busy):.3f} ms; the records' own time {ms(work):.3f} ms (on average {work / busy if busy else 0:.2f} at once)")
    pr("  stream  records   busy ms   first ms    last ms   idle inside ms")
    for s in sorted({r["stream"] for r in rs}):
        sr = [r for r in rs if r["stream"] == s]
        b = union([(r["start"], r["end"]) for r in sr])
        f0, f1 = min(r["start"] for r in sr) - t0, max(r["end"] for r in sr) - t0
        pr(f"  {s:6d} {len(sr):8d} {ms(b):9.3f} {ms(f0):10.3f} {ms(f1):10.3f} {ms(f1 - f0 - b):16.3f}")
    if a.tail:
        rx = re.compile(a.tail)
        tail = [r for r in rs if rx.search(r["name"])]
        rest = [r for r in rs if not rx.search(r["name"])]
        if tail and rest:
            rest_end = max(r["end"] for r in rest)
            after = union([(max(r["start"], rest_end), r["end"]) for r in tail if r["end"] > rest_end])
            pr(f"tail /{a.tail}/: {len(tail)} records, {ms(sum(r['end'] - r['start'] for r in tail)):.3f} ms of their own; "
               f"the others end at {ms(rest_end - t0):.3f} ms, these at {ms(max(r['end'] for r in tail) - t0):.3f} "
               f"({ms(t1 - rest_end):.3f} ms after; {ms(after):.3f} ms of it running)")
        else:
            pr(f"tail /{a.tail}/: {len(tail)} of {len(rs)} records match; nothing to compare")
    totals = {}
    for r in rs:
        t = totals.setdefault(base_name(r["name"]), [0, 0])
        t[0] += r["end"] - r["start"]
        t[1] += 1
    pr(f"the {min(a.top, len(totals))} names with the most time (records' own time; share of the records' total):")
    for n, (t, c) in sorted(totals.items(), key=lambda x: -x[1][0])[:a.top]:
        pr(f"  {ms(t):9.3f} ms {100 * t / work if work else 0:5.1f}% {c:6d} x {n}")
    gaps = sorted(idle_gaps(rs), key=lambda x: -x[0])
    pr(f"device idle: {len(gaps)} gaps, {ms(sum(x[0] for x in gaps)):.3f} ms; the {min(a.gaps, len(gaps))} longest:")
    for ln, s, e, before, nxt in gaps[:a.gaps]:
        pr(f"  {ln / 1e3:9.1f} us at {ms(s - t0):9.3f} ms: after {base_name(before['name'])} (stream {before['stream']}), "
           f"before {base_name(nxt['name'])} (stream {nxt['stream']})")
    if a.period:
        rx = re.compile(a.period)
        st = sorted(r["start"] for r in rs if rx.search(r["name"]))
        iv = [b - x for x, b in zip(st, st[1:])]
        if iv:
            pr(f"period /{a.period}/: {len(st)} records, {len(iv)} intervals between their starts: mean {statistics.mean(iv) / 1e3:.2f} us, "
               f"median {statistics.median(iv) / 1e3:.2f}, min {min(iv) / 1e3:.2f}, max {max(iv) / 1e3:.2f}")
        else:
            pr(f"period /{a.period}/: {len(st)} records match; no interval")
    if a.list:
        lo, hi = a.list
        pr(f"records starting {lo:g} to {hi:g} ms after the replay's start (us from it: start, end, length):")
        for r in sorted(rs, key=lambda r: (r["start"], r["end"])):
            if lo <= ms(r["start"] - t0) <= hi:
                pr(f"  {(r['start'] - t0) / 1e3:10.2f} {(r['end'] - t0) / 1e3:10.2f} {(r['end'] - r['start']) / 1e3:8.2f}  stream {r['stream']} "
                   f"grid {r['grid']} block {r['block']} registers {r['registers']} {r['kind']} {base_name(r['name'])}")


def window(v):
    """FROM:TO, two numbers of ms with FROM <= TO (argparse turns the ValueError into exit 2)."""
    lo, sep, hi = v.partition(":")
    lo, hi = float(lo), float(hi)  # ValueError on anything else
    if not sep or lo > hi or lo != lo or hi != hi:
        raise ValueError(v)
    return lo, hi


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--graph", type=int)
    p.add_argument("--replay", type=int)
    p.add_argument("--tail", default="adamw|partials_final|slot_norm|lr_schedule")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--gaps", type=int, default=8)
    p.add_argument("--list", type=window, metavar="FROM:TO")
    p.add_argument("--period", metavar="REGEX")
    a = p.parse_args(argv)
    if a.period is not None:
        try:
            re.compile(a.period)
        except re.error as e:
            print(f"timeline: --period: {e}", file=sys.stderr)
            return 2
    if a.top < 0 or a.gaps < 0:
        print("timeline: --top and --gaps take counts >= 0", file=sys.stderr)
        return 2
    try:
        recs, dropped = read(a.file)
        report(recs, dropped, a, sys.stdout)
    except Bad as e:
        print(f"timeline: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
