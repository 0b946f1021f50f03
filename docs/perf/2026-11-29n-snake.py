#!/usr/bin/env python3
# The static share of persistent attention blocks against the hardware's own placement, in a model (2026-11-29,
# thirty-first session): each work item costs its key (forward) or row (dk/dv) tiles plus one tile's worth of start
# and end; "dyn" places each item, in the launch's longest-first order, on the block that frees first (a grid of a
# block an item); "rr" is block x taking items x, G + x, 2 G + x, ... (c7f77d3); "snake" goes back and forth
# (x, 2 G - 1 - x, 2 G + x, ...: tm_item_of). Printed: each schedule's longest block over the average block (1.000:
# perfectly even). G = 132 resident blocks (the H200's multiprocessors, a block each). Only a model: it knows
# nothing of other streams' blocks sharing the multiprocessors in a step.
# Usage: python3 docs/perf/2026-11-29n-snake.py
import heapq


def items_fwd(S, heads, B, BQ=128, BK=128):
    nq = (S + BQ - 1) // BQ
    out = []
    for w in range(nq * heads * B):
        tile = nq - 1 - w // (heads * B)
        out.append((min((tile + 1) * BQ, S) - 1) // BK + 1)
    return out


def items_dkdv(S, heads, B, BKB=128, BQ=64):
    nk = (S + BKB - 1) // BKB
    return [(S - (w // (heads * B)) * BKB + BQ - 1) // BQ for w in range(nk * heads * B)]


def dyn(c, G, ov):
    h = [0.0] * G
    for x in c:
        heapq.heappush(h, heapq.heappop(h) + x + ov)
    return max(h)


def static(c, G, ov, snake):
    load = [0.0] * G
    for k in range((len(c) + G - 1) // G):
        for x in range(G):
            w = k * G + ((G - 1 - x) if (snake and k & 1) else x)
            if w < len(c):
                load[x] += c[w] + ov
    return max(load)


G, OV = 132, 1.0
for name, f, S, h, B in [("fwd small S512", items_fwd, 512, 12, 4), ("fwd medium S1024", items_fwd, 1024, 16, 4),
                         ("fwd xl S1024", items_fwd, 1024, 25, 4), ("fwd B4 H16 S4096", items_fwd, 4096, 16, 4),
                         ("fwd 2.7B S4096 B1", items_fwd, 4096, 32, 1), ("dkdv medium S1024", items_dkdv, 1024, 16, 4),
                         ("dkdv xl S1024", items_dkdv, 1024, 25, 4), ("dkdv B4 H16 S4096", items_dkdv, 4096, 16, 4),
                         ("dkdv 2.7B S4096 B1", items_dkdv, 4096, 32, 1)]:
    c = f(S, h, B)
    avg = sum(x + OV for x in c) / G
    print(f"{name:20s} items {len(c):5d} waves {len(c) / G:5.2f}  dyn {dyn(c, G, OV) / avg:5.3f}  "
          f"rr {static(c, G, OV, False) / avg:5.3f}  snake {static(c, G, OV, True) / avg:5.3f}")
