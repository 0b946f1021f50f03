#!/usr/bin/env python3
"""Tests of tools/bench_suite.py's merge and report (no GPU, no stg, no PyTorch needed): runs written as the suite
writes them (`--parts stg,peer --sizes ... --out DIR`, one directory a machine lease) are merged with `--parts
merge,report --merge-from`, and the merged records, their meta data and the page are checked: every record keeps its
lease, the times add up, the answers are taken once, each lease's commands and sizes are on the page, the ratios come
from the records, a cell run in two leases pairs the rows of the one with both, a cell whose stg and peer rows share no
lease is named, and the refusals (a missing
directory, one named twice, --out among the inputs, settings that differ, merge beside stg or peer, an unknown part)
exit non-zero without writing anything. Exits 0 when every check passes, 1 with the failed checks listed."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITE = os.path.join(ROOT, "tools", "bench_suite.py")
fails = []
SETTINGS = {"warmup": 5, "iters": 10, "fp32_warmup": 2, "fp32_iters": 8, "warmup_iters": 12, "warmup_ctx": 512,
            "peer_step_only": "bf16"}


def check(cond, what):
    if not cond:
        fails.append(what)


def suite(*args):
    r = subprocess.run([sys.executable, SUITE, *args], capture_output=True, text=True, cwd=ROOT)
    return r.returncode, r.stdout, r.stderr


def put(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def stg_rows(size, ctx, step_ms):
    out = []
    for prec, scale in (("bf16", 1.0), ("fp32", 4.0)):
        for what, frac in (("forward", 0.25), ("forward-backward", 0.75), ("step", 1.0)):
            out.append(dict(size=size, ctx=ctx, precision=prec, what=what, mean_ms=step_ms * scale * frac, std_ms=0.01,
                            median_ms=step_ms * scale * frac, device="NVIDIA H200", rc=0, cmd=f"stg bench {size}"))
    return out


def peer_rows(size, ctx, step_ms):
    out = [dict(kind="setup", size=size, device="NVIDIA H200", torch="2.11.0+cu130")]
    for mode, scale in (("fp32", 8.0), ("bf16", 3.0), ("bf16c", 1.5), ("bf16cg", 1.25)):
        whats = ["step"] if mode == "bf16" else ["forward", "forward-backward", "step"]
        for what in whats:
            frac = {"forward": 0.25, "forward-backward": 0.75, "step": 1.0}[what]
            r = dict(kind="bench", size=size, ctx=ctx, mode=mode, what=what, mean_ms=step_ms * scale * frac, std_ms=0.02,
                     device="NVIDIA H200", torch="2.11.0+cu130", times_ms=[step_ms * scale * frac] * 3)
            if mode != "fp32":
                r["sdpa"] = "cudnn"
            out.append(r)
    out.append(dict(kind="command", size=size, ctx=ctx, cmd=f"bench_peer {size}", rc=0, wall_s=60.0))
    return out


def run_dir(root, name, stg_sizes, peer_sizes, date, settings=SETTINGS, answers=True, source="abc1234"):
    """A directory as `--parts stg,peer --sizes ... --out DIR` leaves it (the records the report reads)."""
    d = os.path.join(root, name)
    os.makedirs(d)
    put(os.path.join(d, "stg.jsonl"), [r for s, ms in stg_sizes for r in stg_rows(s, 512, ms)])
    put(os.path.join(d, "peer.jsonl"), [r for s, ms in peer_sizes for r in peer_rows(s, 512, ms)])
    for n in ("stg_exec.jsonl", "stg_warmup.jsonl", "memory.jsonl", "peer_warmup.jsonl"):
        put(os.path.join(d, n), [])
    put(os.path.join(d, "answers.jsonl"), [dict(kind="note", note=f"answers of {name}")] if answers else [])
    argv = [SUITE, "--parts", "stg,peer", "--sizes", ",".join(s for s, _ in stg_sizes), "--out", d]
    json.dump(dict(date=date, host=f"host-{name}", argv=argv, source=source, settings=settings, stg_s=30.0,
                   stg_cells_s=20.0, stg_exec_s=4.0, stg_warmup_s=4.0, stg_memory_s=2.0, nvidia_smi="NVIDIA H200"),
              open(os.path.join(d, "meta_stg.json"), "w"))
    json.dump(dict(date=date, host=f"host-{name}", argv=argv, settings=settings, peer_s=120.0),
              open(os.path.join(d, "meta_peer.json"), "w"))
    return d


def read(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def snapshot(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


with tempfile.TemporaryDirectory() as t:
    a = run_dir(t, "runA", [("small", 3.0)], [("small", 5.0)], "2026-12-01 06:00")
    b = run_dir(t, "runB", [("medium", 10.0)], [("medium", 14.0)], "2026-12-01 06:20", answers=True)
    with open(os.path.join(b, "mem-2.7B-fp32-ctx512-train.svg"), "w") as f:
        f.write("<svg/>")
    out, doc = os.path.join(t, "merged"), os.path.join(t, "page.md")
    rc, so, se = suite("--parts", "merge,report", "--merge-from", f"{a},{b}", "--out", out, "--doc", doc)
    check(rc == 0, f"merge,report of two runs: rc {rc}: {se[-400:]}")
    if rc == 0:
        stg = read(os.path.join(out, "stg.jsonl"))
        check(len(stg) == 12, f"merged stg.jsonl has both runs' 12 rows, not {len(stg)}")
        check({(r["size"], r["lease"], r["lease_dir"]) for r in stg} == {("small", 1, "runA"), ("medium", 2, "runB")},
              "every stg row keeps its lease and directory")
        check(all(r["lease_date"] == ("2026-12-01 06:00" if r["lease"] == 1 else "2026-12-01 06:20") for r in stg),
              "every stg row keeps its lease's date")
        ans = read(os.path.join(out, "answers.jsonl"))
        check([r.get("note") for r in ans] == ["answers of runA"], f"answers taken from the first run only: {ans}")
        check(os.path.exists(os.path.join(out, "mem-2.7B-fp32-ctx512-train.svg")), "the plan's SVG copied")
        ms = json.load(open(os.path.join(out, "meta_stg.json")))
        mp = json.load(open(os.path.join(out, "meta_peer.json")))
        check(ms["stg_s"] == 60.0 and ms["stg_cells_s"] == 40.0, f"stg times added up: {ms.get('stg_s')}")
        check(mp["peer_s"] == 240.0, f"peer times added up: {mp.get('peer_s')}")
        check([l["stg_sizes"] for l in ms["leases"]] == [["small"], ["medium"]], "each lease's stg sizes")
        check([l["peer_sizes"] for l in ms["leases"]] == [["small"], ["medium"]], "each lease's peer sizes")
        check(ms["split_cells"] == [], "no cell split across leases")
        page = open(doc).read()
        check("2026-12-01 06:00 to 2026-12-01 06:20" in page, "the page's dates span the leases")
        check("lease 1 (2026-12-01 06:00, host-runA; stg: small; peer: small)" in page, "lease 1 named on the page")
        check("lease 2 (2026-12-01 06:20, host-runB; stg: medium; peer: medium)" in page, "lease 2 named on the page")
        check("one GPU machine lease" not in page, "a merged page does not claim one lease")
        check("different leases" not in page, "no split named when there is none")
        # small: stg step 3.0 against the faster peer, bf16cg 6.25: 0.48; medium 10 against 17.5: 0.57
        rows = [l for l in page.splitlines() if l.startswith("| small | 512 |") or l.startswith("| medium | 512 |")]
        check(any(l.startswith("| small | 512 |") and l.rstrip().endswith("| 0.48 |") for l in rows),
              f"small's ratio from its records (3.0 / 6.25 = 0.48): {rows[:2]}")
        check(any(l.startswith("| medium | 512 |") and l.rstrip().endswith("| 0.57 |") for l in rows),
              f"medium's ratio from its records (10 / 17.5 = 0.57): {rows[2:4]}")
        check("The suite ran in **5.0 minutes**" in page, "the page's wall time is the runs' sum (2 x 30 s of stg, 2 x 120 s of peer)")
        check(sum(page.count(f"--out {x}`") for x in (a, b)) == 2, "each lease's one command listed once")

    # a size whose stg rows come from one lease and peer rows from another: named, on stderr and on the page
    c = run_dir(t, "runC", [("large", 20.0)], [], "2026-12-02 06:00")
    d = run_dir(t, "runD", [], [("large", 30.0)], "2026-12-02 06:30")
    out2, doc2 = os.path.join(t, "merged2"), os.path.join(t, "page2.md")
    rc, so, se = suite("--parts", "merge,report", "--merge-from", f"{c},{d}", "--out", out2, "--doc", doc2)
    check(rc == 0, f"merge of a split size: rc {rc}: {se[-300:]}")
    if rc == 0:
        check("large ctx 512: stg rows from lease(s) [1], peer rows from [2]" in se, f"the split named on stderr: {se[-300:]}")
        check(json.load(open(os.path.join(out2, "meta_stg.json")))["split_cells"] == ["large ctx 512"], "split_cells in the meta")
        check("large ctx 512: stg's and the peer's rows come from different leases" in open(doc2).read(), "the split named on the page")
        check("stg built from abc1234;" in open(doc2).read(), "one tree named once")

    # a cell run again in a later lease (the first run stopped before its peer): the ratio pairs the later lease's rows
    g = run_dir(t, "runG", [("small", 3.0)], [], "2026-12-05 06:00")
    h = run_dir(t, "runH", [("small", 4.0)], [("small", 5.0)], "2026-12-05 06:30")
    out4, doc4 = os.path.join(t, "merged4"), os.path.join(t, "page4.md")
    rc, so, se = suite("--parts", "merge,report", "--merge-from", f"{g},{h}", "--out", out4, "--doc", doc4)
    check(rc == 0, f"merge of a cell run twice: rc {rc}: {se[-300:]}")
    if rc == 0:
        rows = [l for l in open(doc4).read().splitlines() if l.startswith("| small | 512 |")]
        check(bool(rows) and rows[0].rstrip().endswith("| 0.64 |"), f"the ratio pairs lease 2's stg (4.0 / 6.25 = 0.64): {rows[:1]}")
        check(json.load(open(os.path.join(out4, "meta_stg.json")))["split_cells"] == [] and "different leases" not in se,
              "a cell with both rows in one lease is not named")
        check(len(read(os.path.join(out4, "stg.jsonl"))) == 12, "both leases' stg rows kept")

    # a cell with both rows in two leases: the latest lease's pair (4.0 / 10.0), not the first's (3.0 / 6.25)
    i_ = run_dir(t, "runI", [("small", 3.0)], [("small", 5.0)], "2026-12-06 06:00")
    j_ = run_dir(t, "runJ", [("small", 4.0)], [("small", 8.0)], "2026-12-06 06:30")
    out5, doc5 = os.path.join(t, "merged5"), os.path.join(t, "page5.md")
    rc, so, se = suite("--parts", "merge,report", "--merge-from", f"{i_},{j_}", "--out", out5, "--doc", doc5)
    rows = [l for l in open(doc5).read().splitlines() if l.startswith("| small | 512 |")] if rc == 0 else []
    check(bool(rows) and rows[0].rstrip().endswith("| 0.40 |"), f"a cell in two leases takes the latest lease's pair: rc {rc}, {rows[:1]}")

    # runs of stg built from different trees: each lease's named
    f = run_dir(t, "runF", [("xl", 40.0)], [("xl", 50.0)], "2026-12-04 06:00", source="def5678")
    out3, doc3 = os.path.join(t, "merged3"), os.path.join(t, "page3.md")
    rc, so, se = suite("--parts", "merge,report", "--merge-from", f"{a},{f}", "--out", out3, "--doc", doc3)
    check(rc == 0 and "stg built from abc1234 (lease 1), def5678 (lease 2);" in open(doc3).read()
          and "built from abc1234, def5678" in se, f"two trees named per lease: rc {rc}, {se[-200:]}")

    # refusals: exit non-zero, nothing written
    before = {x: snapshot(x) for x in (a, b)}
    for args, what in (
        (["--merge-from", f"{a},{os.path.join(t, 'nope')}", "--out", os.path.join(t, "m3")], "a missing directory"),
        (["--merge-from", f"{a},{a}/", "--out", os.path.join(t, "m4")], "a directory named twice"),
        (["--merge-from", f"{a},{b}", "--out", b], "--out among the inputs"),
        (["--merge-from", "", "--out", os.path.join(t, "m5")], "no --merge-from"),
        (["--merge-from", f"{a},{t}", "--out", os.path.join(t, "m6")], "a directory without records"),
    ):
        rc, so, se = suite("--parts", "merge", *args)
        check(rc != 0 and "bench_suite:" in se, f"{what}: refused with a message (rc {rc}, {se[-200:]})")
    check(not any(os.path.exists(os.path.join(t, m)) for m in ("m3", "m4", "m5", "m6")), "a refused merge writes no directory")
    check({x: snapshot(x) for x in (a, b)} == before, "a refused merge leaves its inputs as they were")
    # a broken record or meta file: named with its line, nothing written
    k = run_dir(t, "runK", [("xl", 40.0)], [("xl", 50.0)], "2026-12-07 06:00")
    with open(os.path.join(k, "peer.jsonl"), "a") as fh:
        fh.write('{"kind": "bench", "size"\n')
    nlines = sum(1 for _ in open(os.path.join(k, "peer.jsonl")))
    rc, so, se = suite("--parts", "merge", "--merge-from", f"{a},{k}", "--out", os.path.join(t, "m10"))
    check(rc != 0 and f"runK/peer.jsonl:{nlines}:" in se and "Traceback" not in se and not os.path.exists(os.path.join(t, "m10")),
          f"a broken record named by file:line: rc {rc}, {se[-200:]}")
    l_ = run_dir(t, "runL", [("xl", 40.0)], [("xl", 50.0)], "2026-12-07 06:30")
    with open(os.path.join(l_, "meta_stg.json"), "w") as fh:
        fh.write("{bad")
    rc, so, se = suite("--parts", "merge", "--merge-from", f"{a},{l_}", "--out", os.path.join(t, "m11"))
    check(rc != 0 and "runL/meta_stg.json:1:2:" in se and "Traceback" not in se and not os.path.exists(os.path.join(t, "m11")),
          f"a broken meta file named: rc {rc}, {se[-200:]}")
    e = run_dir(t, "runE", [("xl", 40.0)], [("xl", 50.0)], "2026-12-03 06:00", settings=dict(SETTINGS, iters=20))
    rc, so, se = suite("--parts", "merge", "--merge-from", f"{a},{e}", "--out", os.path.join(t, "m7"))
    check(rc != 0 and "settings differ" in se and not os.path.exists(os.path.join(t, "m7")), f"runs whose settings differ refused: {se[-200:]}")
    rc, so, se = suite("--parts", "stg,merge", "--merge-from", a, "--out", os.path.join(t, "m8"))
    check(rc != 0 and "not with stg or peer" in se, f"merge beside stg refused: {se[-200:]}")
    rc, so, se = suite("--parts", "reprot", "--out", os.path.join(t, "m9"))
    check(rc != 0 and "unknown part 'reprot'" in se and not os.path.exists(os.path.join(t, "m9")), f"an unknown part refused: {se[-200:]}")

if fails:
    print("FAILED:\n  " + "\n  ".join(fails))
    sys.exit(1)
print("test_bench_suite: all checks passed")
