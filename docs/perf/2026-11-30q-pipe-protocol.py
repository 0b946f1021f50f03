#!/usr/bin/env python3
"""A model of the pipelined attention-backward consumers (docs/perf/2026-11-30q-pipe.patch: WS_DKDV_PIPE, the dk/dv
kernel, NST 3, any tiles skipped; WS_DQ_PIPE, the dq kernel, NST 4, a warpgroup's tiles past its diagonal skipped and
released as soon as they are full) against their producer, run under random interleavings: no deadlock, every product
group waited for before its registers are read, every stage released once per warpgroup and tile, and no stage refilled
while a product that reads it is pending.

Actors: the producer (a row tile u into stage u % NST once both warpgroups released tile u - NST; then published),
NWG consumer warpgroups (the code's order of stage waits, ring turns, commit groups, waits and releases), and the
tensor pipe (completes the oldest pending group of any warpgroup, in each warpgroup's issue order). Flags (a
warpgroup has nothing to do in a tile) are random. Several work items run back to back (T, the ring restarted).
    python3 docs/perf/2026-11-30q-pipe-protocol.py [TRIALS]
"""
import random, sys

NWG = 2
NST = {"dkdv": 3, "dq": 4}


class Deadlock(Exception):
    pass


def run(items, skip, rng, kind="dkdv"):
    """items: ntiles of each work item; skip[i][w][t]: warpgroup w has nothing to do in item i's tile t. kind dq: a
    warpgroup's skipped tiles are released when their stage is full (before its turn), as the dq kernel does."""
    nst = NST[kind]
    total = sum(items)
    tile_of = []  # the block's running tile count -> (item, t)
    for i, n in enumerate(items):
        tile_of += [(i, t) for t in range(n)]
    stage = [None] * nst          # the running tile count each stage holds
    published = [False] * total
    released = [[False] * total for _ in range(NWG)]
    ring = [0] * NWG              # ring tokens (named barriers 1 .. NWG)
    pend = [[] for _ in range(NWG)]  # pending groups: (kind, running tile or None)
    done = [set() for _ in range(NWG)]
    log = []

    def producer():
        for u in range(total):
            if u >= nst:
                yield lambda u=u: all(released[w][u - nst] for w in range(NWG))
            for w in range(NWG):
                for (k, x) in pend[w]:
                    assert x is None or x != u - nst or k == "e", f"stage of tile {u - nst} refilled under a pending {k}"
            stage[u % nst] = u
            published[u] = True

    def group(w, kind, u):
        if kind != "e":
            assert stage[u % nst] == u and published[u], f"{kind} of tile {u} issued on a stage holding {stage[u % nst]}"
        pend[w].append((kind, u))

    def wait(w, n):  # wg_wait<n>
        yield lambda: len(pend[w]) <= n

    def rel(w, u):
        assert not released[w][u], f"tile {u} released twice by warpgroup {w}"
        assert all(x != u for (k, x) in pend[w] if k != "e"), f"tile {u} released with a product pending"
        released[w][u] = True

    def consumer(w):
        T = 0
        for i, n in enumerate(items):
            turns = n + 2
            if w == NWG - 1:
                ring[0] += 1  # start()
            def ring_wait():
                yield lambda: ring[w] > 0
                ring[w] -= 1
            def ring_pass(turn):
                if not (w == NWG - 1 and turn == turns - 1):
                    ring[(w + 1) % NWG] += 1
            def act(t):
                return t < n and not skip[i][w][t]
            def stage_wait(t):
                yield lambda: published[T + t]
                if kind == "dq" and not act(t):
                    rel(w, T + t)
            prev = -1
            if n > 0:
                yield from stage_wait(0)
            yield from ring_wait()
            group(w, "S" if act(0) else "e", T)
            ring_pass(0)
            for t in range(n):
                if t + 1 < n:
                    yield from stage_wait(t + 1)
                yield from ring_wait()
                group(w, "dP" if act(t) else "e", T + t)
                group(w, "B" if prev >= 0 else "e", T + prev if prev >= 0 else None)
                group(w, "S" if act(t + 1) else "e", T + t + 1)
                ring_pass(t + 1)
                if act(t):
                    yield from wait(w, 3)
                    assert ("S", T + t) in done[w], f"softmax of tile {T + t} before its S"
                    yield from wait(w, 1)
                    assert ("dP", T + t) in done[w], f"dS of tile {T + t} before its dP"
                else:
                    yield from wait(w, 1)
                if prev >= 0:
                    assert ("B", T + prev) in done[w], "pa, sa4 overwritten before their products"
                    rel(w, T + prev)
                if act(t):
                    prev = t
                else:
                    if kind == "dkdv":
                        rel(w, T + t)
                    prev = -1
            yield from ring_wait()
            group(w, "B" if prev >= 0 else "e", T + prev if prev >= 0 else None)
            ring_pass(n + 1)
            yield from wait(w, 0)
            if prev >= 0:
                rel(w, T + prev)
            T += n

    def tensor():
        while True:
            yield lambda: any(pend[w] for w in range(NWG)) or all(a is None for a in acts[:-1])
            ws = [w for w in range(NWG) if pend[w]]
            if not ws:
                return
            w = rng.choice(ws)
            done[w].add(pend[w].pop(0))

    acts = [producer()] + [consumer(w) for w in range(NWG)] + [tensor()]
    conds = [None] * len(acts)
    while True:
        ready = []
        for a in range(len(acts)):
            if acts[a] is None:
                continue
            if conds[a] is None or conds[a]():
                ready.append(a)
        if not ready:
            if all(acts[a] is None for a in range(len(acts))):
                break
            raise Deadlock(f"items {items}: no actor can go on (published {sum(published)}/{total})")
        a = rng.choice(ready)
        try:
            conds[a] = next(acts[a])
        except StopIteration:
            acts[a] = None
            conds[a] = None
    for w in range(NWG):
        assert all(released[w]), f"warpgroup {w} left tiles unreleased"
        assert not pend[w]
    assert ring == [0] * NWG, f"ring arrivals unbalanced: {ring}"


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rng = random.Random(1)
    for k in range(trials):
        items = [rng.randint(0, 7) for _ in range(rng.randint(1, 3))]
        p = rng.choice([0.0, 0.2, 0.5, 0.9])
        skip = [[[rng.random() < p for _ in range(n)] for _ in range(NWG)] for n in items]
        run(items, skip, rng, "dkdv")
        # dq: one block's key tiles (one item), warpgroup w active in the first wtiles of them
        n = rng.randint(0, 9)
        skip = [[[t >= wt for t in range(n)] for wt in (rng.randint(0, n) for _ in range(NWG))]]
        run([n], skip, rng, "dq")
    print(f"{trials} random interleavings of each kernel: no deadlock, every check held (NWG {NWG}, NST {NST})")


if __name__ == "__main__":
    main()
