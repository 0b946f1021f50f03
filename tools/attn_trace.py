#!/usr/bin/env python3
"""Read the dk/dv attention kernel's timeline probe: where each consumer warp's cycles go, tile by tile.

Input: the text file a -DWS_TRACE build of ops/attention/sm90a/attention_ws_bwd.cu writes when STG_WS_TRACE_OUT names
it (docs/perf/2026-11-29i-dkdv-trace.patch): a header line, then one line per (tile, warp): `tile warp p0 .. p7`,
clock64 values of one block's warps (one multiprocessor's counter), 0 where a point was not reached. Consumer warps 0 ..
4 NWG - 1: p0 loop top, p1 after the ring's wait, p2 after the ring's pass (products issued), p3 Sᵀ done, p4 softmax
done, p5 dPᵀ done, p6 the previous tile's products done, p7 end of the tile. Producer (warp 4 NWG): p0 before the wait
for the stage's release, p1 after it, p2 after publishing the tile before. The dq kernel's trace (FILE.dq) has the same
consumer points, with S, dP and the last tile's dQ product in place of Sᵀ, dPᵀ and dV dK, and no producer points.

Prints, for tiles --from .. --to (steady state, not the first or last few), the mean cycles of each phase of the first
warp of each consumer warpgroup, the period (p0 of tile t + 1 - p0 of tile t), the spread of the ring's release over a
warpgroup's warps, and how the warpgroups' phases interleave (the lag from warpgroup 0's issue to warpgroup 1's); with
--tiles, the per-tile rows of those two warps.

Usage: tools/attn_trace.py TRACE [--from 8] [--to 56] [--nwg 2] [--tiles]
"""
import argparse
import statistics
import sys

PHASES = [("stage + ring wait", 0, 1), ("issue (Sᵀ, dPᵀ, dV dK)", 1, 2), ("wait for Sᵀ", 2, 3), ("softmax", 3, 4),
          ("wait for dPᵀ", 4, 5), ("dS, wait for the last products", 5, 6), ("packs, release", 6, 7)]


def load(path):
    rows = {}
    try:
        with open(path) as f:
            for ln, line in enumerate(f, 1):
                if line.startswith("#") or not line.strip():
                    continue
                v = line.split()
                if len(v) != 10:
                    sys.exit(f"{path}:{ln}: expected 'tile warp p0 .. p7', got {len(v)} fields")
                try:
                    t, w, *p = (int(x) for x in v)
                except ValueError:
                    sys.exit(f"{path}:{ln}: not integers")
                rows[(t, w)] = p
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")
    if not rows:
        sys.exit(f"{path}: no trace lines")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--from", dest="lo", type=int, default=8)
    ap.add_argument("--to", dest="hi", type=int, default=56)
    ap.add_argument("--nwg", type=int, default=2)
    ap.add_argument("--tiles", action="store_true")
    a = ap.parse_args()
    rows = load(a.trace)
    wgs = [4 * g for g in range(a.nwg)]
    tiles = [t for t in range(a.lo, a.hi) if all(all(rows.get((t, w), [0])) and all(rows.get((t + 1, w), [0])) for w in wgs)]
    if not tiles:
        sys.exit(f"{a.trace}: no tile in {a.lo} .. {a.hi} with every point of warps {wgs} (and the next tile's)")
    print(f"{len(tiles)} tiles ({tiles[0]} .. {tiles[-1]}), mean cycles a tile, first warp of each consumer warpgroup")
    print(f"{'phase':34s}" + "".join(f"{'wg ' + str(g):>10s}" for g in range(a.nwg)))
    for name, i, j in PHASES:
        print(f"{name:34s}" + "".join(f"{statistics.mean(rows[(t, w)][j] - rows[(t, w)][i] for t in tiles):10.0f}" for w in wgs))
    print(f"{'period (loop top to loop top)':34s}" +
          "".join(f"{statistics.mean(rows[(t + 1, w)][0] - rows[(t, w)][0] for t in tiles):10.0f}" for w in wgs))
    busy = [statistics.mean(rows[(t + 1, w)][0] - rows[(t, w)][0] - (rows[(t, w)][1] - rows[(t, w)][0]) for t in tiles) for w in wgs]
    print(f"{'period less the waits at the top':34s}" + "".join(f"{b:10.0f}" for b in busy))
    # the ring's release over a warpgroup's warps (all four must arrive before any passes the barrier)
    for g in range(a.nwg):
        ws = [4 * g + k for k in range(4)]
        sp = [max(rows[(t, w)][1] for w in ws) - min(rows[(t, w)][1] for w in ws) for t in tiles if all((t, w) in rows for w in ws)]
        ar = [max(rows[(t, w)][0] for w in ws) - min(rows[(t, w)][0] for w in ws) for t in tiles if all((t, w) in rows for w in ws)]
        if sp:
            print(f"wg {g}: its warps reach the loop top {statistics.mean(ar):.0f} cycles apart (mean), leave the ring's wait "
                  f"{statistics.mean(sp):.0f} apart")
    if a.nwg >= 2:
        lag = [rows[(t, 4)][1] - rows[(t, 0)][1] for t in tiles]
        print(f"wg 1 leaves its ring wait {statistics.mean(lag):.0f} cycles after wg 0 (tile t, mean; "
              f"min {min(lag)}, max {max(lag)})")
        ov = [max(0, min(rows[(t, 0)][6], rows[(t, 4)][6]) - max(rows[(t, 0)][2], rows[(t, 4)][2])) for t in tiles]
        print(f"the two warpgroups' post-issue parts (p2 .. p6) of tile t overlap {statistics.mean(ov):.0f} cycles (mean)")
    pw = 4 * a.nwg
    pub = [rows[(t + 1, pw)][2] for t in tiles if (t + 1, pw) in rows and rows[(t + 1, pw)][2]]
    if pub:
        early = [rows[(t, 0)][0] - rows[(t + 1, pw)][2] for t in tiles if (t + 1, pw) in rows and rows[(t + 1, pw)][2]]
        print(f"producer: tile t published {statistics.mean(early):.0f} cycles before wg 0 reaches its loop top (mean; "
              f"negative: the consumers wait); its wait for a released stage {statistics.mean(rows[(t, pw)][1] - rows[(t, pw)][0] for t in tiles if (t, pw) in rows):.0f}")
    if a.tiles:
        print("tile  " + "  ".join(f"w{w}:" + " ".join(f"p{k}-p{k - 1}" for k in range(1, 8)) for w in wgs))
        for t in tiles:
            print(f"{t:4d}  " + "  ".join(" ".join(f"{rows[(t, w)][k] - rows[(t, w)][k - 1]:6d}" for k in range(1, 8)) for w in wgs))


if __name__ == "__main__":
    main()
