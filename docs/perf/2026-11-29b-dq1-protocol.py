# A model of att_ws_dkdv_kernel's single pass (DQ1, turns passed a tile late) without documents: each consumer
# warpgroup, and each block's producer, as a program of waits (stage published to this warpgroup, its ring turn,
# the row tile's turn counter) and signals; run until every program ends or none can move (a hang). Written after
# call 2 of 2026-11-29b hung: there a stage was published to both warpgroups by one barrier, which this model
# (a stage flag per warpgroup) did not have, and which made warpgroup 0 wait for warpgroup 1.
import itertools, sys
NWG, BKB, BQ, NST = 2, 128, 64, 3
PERWG = False  # True: a sum and counters per warpgroup (docs/perf/2026-11-29b-dq1-per-wg.patch)
ASYNC = False  # True: tile t's dQ added during the next tile, after the ring pass (docs/perf/2026-11-29c-dq1-async.patch)
def gen_consumer(x, w, S, st, blk):
    k0 = x*BKB; RS = k0; RN = S; nt = (RN-RS+BQ-1)//BQ
    kw0 = k0 + 64*w
    pend = None  # (r, turn, bulk)
    def flush():
        nonlocal pend
        if pend is None: return
        r, turn, bulk = pend
        if not bulk:
            while st['cnt'][r] != turn: yield ('cnt', r, turn)
        assert st['cnt'][r] == turn
        st['cnt'][r] = turn + 1
        pend = None
    def dq_turn(q0, add):
        nonlocal pend
        yield from flush()
        r = (q0//64, w if PERWG else 0); turn = x if PERWG else NWG*x + w
        pend = (r, turn, add)
        if add:
            while st['cnt'][r] != turn: yield ('cnt', r, turn)
    prev = -1
    for t in range(nt+1):
        if t < nt:
            while blk['pub'] <= t: yield ('pub', t)
        # ring wait
        if w == 0:
            while t > 0 and blk['pass'][NWG-1] < t: yield ('ring', t)
        else:
            while blk['pass'][w-1] < t+1: yield ('ring', t)
        q0 = RS + (nt-1-t)*BQ
        q0p = RS + (nt-1-prev)*BQ
        if t == nt or min(q0+BQ, RN)-1 < kw0 or kw0 >= S:
            blk['pass'][w] = t+1
            if prev >= 0:
                blk['rel'][w] = prev+1
                if ASYNC: yield from dq_turn(q0p, True)  # released, then the last tile's dQ out and its turn
                prev = -1
            if t < nt: blk['rel'][w] = t+1
            if t < nt: yield from dq_turn(q0, False)
            continue
        blk['pass'][w] = t+1
        if ASYNC and prev >= 0: yield from dq_turn(q0p, True)  # warp 0 takes the turn before it releases prev
        if prev >= 0: blk['rel'][w] = prev+1
        prev = t
        if not ASYNC: yield from dq_turn(q0, True)
    yield from flush()
def gen_producer(x, S, blk):
    nt = (S - x*BKB + BQ-1)//BQ
    for t in range(nt):
        if t >= NST:
            while min(blk['rel']) < t-NST+1: yield ('rel', t)
        if t > 0: blk['pub'] = t
    blk['pub'] = nt
    yield from ()
def run(S):
    nk = (S+BKB-1)//BKB
    st = {'cnt': {(r, w): 0 for r in range((S+63)//64) for w in range(NWG)}}
    agents = []
    for x in range(nk):
        blk = {'pub': 0, 'pass': [0]*NWG, 'rel': [0]*NWG}
        agents.append(gen_producer(x, S, blk))
        for w in range(NWG): agents.append(gen_consumer(x, w, S, st, blk))
    live = list(agents); waits = {}
    while live:
        prog = False
        for a in list(live):
            try:
                wt = next(a)
                if waits.get(id(a)) != wt: prog = True
                waits[id(a)] = wt
            except StopIteration:
                live.remove(a); prog = True
        if not prog:
            return ('DEADLOCK', [waits[id(a)] for a in live], st['cnt'])
    return 'ok'
for PERWG, ASYNC in ((False, False), (True, False), (True, True)):
    for S in [64, 100, 128, 129, 200, 256, 333, 1024]:
        print('per warpgroup' if PERWG else 'one sum', 'async' if ASYNC else '', S, run(S))
