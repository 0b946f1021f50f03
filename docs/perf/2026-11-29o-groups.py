#!/usr/bin/env python3
# Persistent attention blocks' fixed shares of a head-batch-grouped item order, in a model (2026-11-29, thirty-second
# session; the reading behind tm_item_plan's comment in ops/attention/sm90a/tma_map.h). Items as the kernels order
# them (tm_item_split): nl levels (level 0 the longest: nl tiles, level l nl - l) of HB head-batches, in groups of hg
# head-batches, each group level by level, the groups one after another. Each item costs its tiles plus one tile's
# worth of start and end. "rr": persistent block x takes items x, x + G, ... (the landed walk); "dyn": each item, in
# order, on the block that frees first (a block an item: the hardware's placement). Printed: the longest block over the
# average (1.000: even). G = 132 (the H200's multiprocessors, one block each at these kernels' shared memory). Only a
# model: nothing here of the L2, which is what groups are for (docs/perf/2026-11-29o-h200-call1.txt: 9.1 GB against
# 0.9 GB read from DRAM at seq 16384 head dim 64).
# Measured beside it (docs/perf/2026-11-29o-h200-call3.txt, B4 H16 head dim 64 seq 4096 forward, persistent): groups of
# 4 0.526 ms, 8 0.443, 16 0.407, one group (64) 0.383; a block an item in groups of 1-2 0.386-0.388.
# Usage: python3 docs/perf/2026-11-29o-groups.py
import heapq


def order(nl, HB, hg):
    out = []
    for w in range(nl * HB):
        g0 = w // (hg * nl) * hg
        gs = min(hg, HB - g0)
        r = w - g0 * nl
        out.append(nl - r // gs)  # the item's tiles
    return out


def rr(c, G, ov=1):
    load = [0.0] * G
    for w, x in enumerate(c):
        load[w % G] += x + ov
    return max(load) / (sum(load) / G)


def dyn(c, G, ov=1):
    h = [0.0] * G
    for x in c:
        heapq.heappush(h, heapq.heappop(h) + x + ov)
    return max(h) / (sum(x + ov for x in c) / G)


def main():
    G = 132
    for nl, HB, what in [(8, 64, "seq 1024 (forward: 128-row tiles)"), (32, 64, "seq 4096"), (128, 64, "seq 16384")]:
        print(f"B4 H16 {what}: {nl} levels x {HB} head-batches, {nl * HB / G:.1f} waves")
        for hg in (64, 32, 25, 16, 12, 8, 6, 4, 2, 1):
            c = order(nl, HB, hg)
            print(f"  groups of {hg:2d}: persistent (rr) {rr(c, G):.3f}, a block an item {dyn(c, G):.3f}")


if __name__ == "__main__":
    main()
