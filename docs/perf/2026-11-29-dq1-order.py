# Checks the single-pass dQ ordering of docs/perf/2026-11-29-dq1.patch on random packed documents: for every row
# tile, the key blocks that take a turn (iterate the tile, x >= x0) are exactly x0 .. xmax, so the turns are
# 0 .. NWG n - 1 with none missing (a missing turn would hang), and every block that iterates the tile but
# takes no turn contributes only masked (zero) dS.
import random
NWG, BKB, BQ, PROBE, NT = 2, 128, 64, 16, 384
def doc_end_block(docs, S, kmax):
    if docs is None: return S - 1
    base = kmax + 1
    while base < S:
        for i in range(NT):
            p = base + i * PROBE
            if p < S and docs[p] > kmax: return p - 1
        base += NT * PROBE
    return S - 1
def check(S, G, docs):
    nk = (S + BKB - 1) // BKB
    iters = {}
    for x in range(nk):
        k0 = x * BKB
        RS = k0 * G
        RN = (doc_end_block(docs, S, min(k0 + BKB, S) - 1) + 1) * G
        nt = (RN - RS + BQ - 1) // BQ
        for t in range(nt):
            r = (RS + t * BQ) // 64
            iters.setdefault(r, []).append(x)
    for r, xs in iters.items():
        p = (r * 64) // G
        x0 = (docs[p] if docs else 0) // BKB
        owners = [x for x in xs if x >= x0]
        assert owners == list(range(x0, max(xs) + 1)), (S, G, r, x0, xs)
        for x in xs:
            if x >= x0: continue
            lastkey = min(x * BKB + BKB, S) - 1
            for R in range(r * 64, min(r * 64 + 64, S * G)):
                assert lastkey < docs[R // G], (S, G, r, x, R)
    return len(iters)
random.seed(1)
n = 0
for trial in range(400):
    S = random.choice([1, 17, 77, 128, 200, 333, 1024, 1500, 4096])
    G = random.choice([1, 2, 3, 4, 8])
    if trial % 3 == 0: docs = None
    else:
        docs, start, mean = [], 0, random.choice([5, 30, 100, 700])
        while len(docs) < S:
            L = random.randint(1, 2 * mean)
            docs += [start] * L
            start += L
        docs = docs[:S]
    n += check(S, G, docs)
print("ok:", n, "row tiles checked")
