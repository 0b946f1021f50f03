#!/usr/bin/env python3
"""The CS336 systems study, reproduced with stg: one command runs every measurement on the GPU at hand
and writes docs/benchmarks.md with SVG plots and the raw JSON lines under docs/bench/.

    python3 tools/bench_suite.py --stg build-gpu/stg            # everything: stg, PyTorch peer, report
    python3 tools/bench_suite.py --stg build-gpu/stg --parts stg    # only stg's measurements
    python3 tools/bench_suite.py --parts peer                       # only the PyTorch peer
    python3 tools/bench_suite.py --stg build/stg --parts report     # the report from docs/bench/*.jsonl
    python3 tools/bench_suite.py --parts merge,report --merge-from A,B  # the records of several calls, then the report

Parts:
  stg     stg bench for every size x ctx x precision (one process per cell measures forward,
          forward-backward and step: `--what forward,forward-backward,step`); the warm-up study
          (`--warmup 0 --iters 12`, every iteration's time kept); the 2.7B memory study
          (stg memreport --device cuda, --format svg); answers by memreport (models/cs336/ffn.yaml).
  peer    tools/bench_peer.py (the model of ../shared/peers/torch_lm.py, copied to peer/torch_lm.py),
          one process per (size, ctx): eager fp32, eager bf16, and the strongest peer in bf16 (whole-model
          torch.compile with cuDNN attention, without and with CUDA graphs: the faster is reported).
          Where PyTorch is missing the suite says so and carries on.
  report  docs/benchmarks.md and the plots, from the JSON lines (runs anywhere; needs no GPU).
  merge   the records of several runs into --out, one run a machine lease: each ran `--parts stg,peer --sizes ...
          --out DIR` (stg's and the peer's rows of a size in one lease, as every ratio needs) where one lease cannot
          hold the whole suite; every record keeps its lease (its DIR's name and date), the times add up, a cell run
          in several leases takes its stg and peer rows from the latest lease with both, and a cell whose rows share no
          lease is named (runs anywhere; needs no GPU).
Every record keeps the command that produced it ("cmd").
"""
import argparse, datetime, json, math, os, platform, re, shlex, shutil, statistics, subprocess, sys, time

sys.dont_write_bytecode = True  # no __pycache__ in tools/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svgplot  # noqa: E402

SIZES = ["small", "medium", "large", "xl", "2.7B"]
CTXS = [128, 256, 512, 1024]
WHATS = ["forward", "forward-backward", "step"]
MEM_CTXS = [128, 256, 512]
D_MODEL = {"small": 768, "medium": 1024, "large": 1280, "xl": 1600, "2.7B": 2560}
XXL = ["--set", "d_model=16384", "--set", "d_ff=53248", "--set", "n_layers=126"]
GiB = 2 ** 30
SETTINGS = ("warmup", "iters", "fp32_warmup", "fp32_iters", "warmup_iters", "warmup_ctx", "peer_step_only")  # kept in meta_*.json


def sh(cmd):
    return " ".join(shlex.quote(str(c)) for c in cmd)


CMD_TIMEOUT = [300.0]  # seconds one command may take (--cmd-timeout); a stuck one must not eat the suite's time


def run(cmd, env=None, timeout=None):
    """rc, stdout, stderr, wall seconds; a command still running after the timeout is killed (rc 124,
    its output so far kept, the reason in stderr) and the suite carries on."""
    t0 = time.time()
    e = dict(os.environ, **(env or {}))
    limit = timeout if timeout is not None else CMD_TIMEOUT[0]
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=e, timeout=limit)
    except subprocess.TimeoutExpired as x:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        print(f"  timed out after {limit:.0f} s: {sh(cmd)}", flush=True)
        return 124, text(x.stdout), text(x.stderr) + f"\nbench_suite: killed after {limit:.0f} s", time.time() - t0
    return p.returncode, p.stdout, p.stderr, time.time() - t0


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip()]


class Writer:
    def __init__(self, path):
        self.f = open(path, "w")

    def put(self, r):
        self.f.write(json.dumps(r) + "\n")
        self.f.flush()


def cmd_text(cmd, env=None):
    """The command as a person would type it from the repository root."""
    pre = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    return (pre + " " if pre else "") + sh(cmd)


# ---------------------------------------------------------------- stg part

def stg_bench_cells(a, W):
    for size in a.sizes:
        for prec in ("bf16", "fp32"):
            warm, iters = (a.fp32_warmup, a.fp32_iters) if prec == "fp32" else (a.warmup, a.iters)
            for ctx in a.ctx:
                cmd = [a.stg, "bench", f"models/cs336/{size}.yaml", "--set", f"ctx={ctx}", "--precision", prec,
                       "--what", ",".join(WHATS), "--warmup", warm, "--iters", iters, "--json"]
                rc, out, err, wall = run(cmd)
                recs = json_lines(out)
                base = dict(size=size, ctx=ctx, precision=prec, cmd=cmd_text(cmd), wall_s=round(wall, 2), rc=rc)
                if recs and recs[0].get("fits") is False:
                    r = dict(recs[0], **base)
                    r["refusal"] = [l for l in err.splitlines() if l.startswith("stg:")]
                    for key, pat in (("largest_batch", r"largest batch that fits is (\d+)"),
                                     ("largest_ctx", r"largest ctx that fits at this batch is (\d+)")):
                        m = re.search(pat, err)
                        if m:
                            r[key] = int(m.group(1))
                    W.put(r)
                elif rc == 0 and recs:
                    for x in recs:
                        W.put(dict(x, **base))
                else:
                    W.put(dict(base, error="failed", stderr=err[-2000:]))
                print(f"  stg {size} {prec} ctx {ctx}: rc {rc}, {wall:.1f} s", flush=True)


OOM_DEMO = ("2.7B", "fp32", 2048)  # beyond the table: a cell that cannot fit an 80 GB device


def stg_oom_demo(a, W):
    size, prec, ctx = OOM_DEMO
    if size not in a.sizes:
        return
    cmd = [a.stg, "bench", f"models/cs336/{size}.yaml", "--set", f"ctx={ctx}", "--precision", prec, "--what", "step",
           "--warmup", 0, "--iters", 1, "--json"]
    rc, out, err, wall = run(cmd)
    recs = json_lines(out)
    r = dict(recs[0] if recs else {}, size=size, ctx=ctx, precision=prec, cmd=cmd_text(cmd), wall_s=round(wall, 2), rc=rc, demo=True)
    r["refusal"] = [l for l in err.splitlines() if l.startswith("stg:")]
    for key, pat in (("largest_batch", r"largest batch that fits is (\d+)"), ("largest_ctx", r"largest ctx that fits at this batch is (\d+)")):
        m = re.search(pat, err)
        if m:
            r[key] = int(m.group(1))
    W.put(r)
    print(f"  stg {size} {prec} ctx {ctx} (does it fit?): rc {rc}, {wall:.1f} s", flush=True)


WARMUP_CONFIGS = [  # (size, precision, exec, extra environment)
    ("small", "bf16", "graph", {}), ("small", "bf16", "eager", {}),
    ("small", "bf16", "graph", {"CUDA_MODULE_LOADING": "EAGER"}), ("small", "bf16", "eager", {"CUDA_MODULE_LOADING": "EAGER"}),
    ("small", "fp32", "graph", {}), ("small", "fp32", "eager", {}),
    ("2.7B", "bf16", "graph", {}), ("2.7B", "bf16", "eager", {}),
]


def stg_warmup(a, W):
    for size, prec, ex, env in WARMUP_CONFIGS:
        if size not in a.sizes:
            continue
        cmd = [a.stg, "bench", f"models/cs336/{size}.yaml", "--set", f"ctx={a.warmup_ctx}", "--precision", prec, "--exec", ex,
               "--what", "step", "--warmup", 0, "--iters", a.warmup_iters, "--json"]
        rc, out, err, wall = run(cmd, env)
        recs = json_lines(out)
        base = dict(size=size, ctx=a.warmup_ctx, precision=prec, exec_mode=ex, env=env, cmd=cmd_text(cmd, env), wall_s=round(wall, 2), rc=rc)
        W.put(dict(recs[0], **base) if rc == 0 and recs else dict(base, error="failed", stderr=err[-2000:]))
        print(f"  warm-up {size} {prec} {ex} {env}: rc {rc}, {wall:.1f} s", flush=True)


EXEC_CTX = 512        # graph replay against eager launch, every size (CUDA backend issue's table)
RATIO_CELL = ("small", "bf16", 128, 10, 30)  # graph vs eager where launches matter most: warm-up, iterations
NAIVE_CELL = ("2.7B", "fp32", 512)  # written-out attention: the step's device bytes against PyTorch eager's


def stg_exec_cells(a, W):
    """Eager launch (op by op on one stream) beside the graph cells of stg.jsonl, the graph/eager pair
    where launches matter most, and the written-out attention's memory."""
    cells = []
    for size in a.sizes:
        for prec in ("bf16", "fp32"):
            warm, iters = (a.fp32_warmup, a.fp32_iters) if prec == "fp32" else (a.warmup, a.iters)
            cells.append(("eager", size, prec, EXEC_CTX, warm, iters, []))
    size, prec, ctx, warm, iters = RATIO_CELL
    if size in a.sizes:
        for ex in ("graph", "eager"):
            cells.append((ex, size, prec, ctx, warm, iters, ["--ratio"]))
    size, prec, ctx = NAIVE_CELL
    if size in a.sizes:
        cells.append(("graph", size, prec, ctx, 1, 2, ["--attention", "naive"]))
    for ex, size, prec, ctx, warm, iters, extra in cells:
        role = "ratio" if "--ratio" in extra else "naive" if "naive" in extra else "eager"
        extra = [x for x in extra if x != "--ratio"]
        cmd = [a.stg, "bench", f"models/cs336/{size}.yaml", "--set", f"ctx={ctx}", "--precision", prec, "--exec", ex, *extra,
               "--what", "step", "--warmup", warm, "--iters", iters, "--json"]
        rc, out, err, wall = run(cmd)
        recs = json_lines(out)
        base = dict(size=size, ctx=ctx, precision=prec, exec_mode=ex, role=role, cmd=cmd_text(cmd), wall_s=round(wall, 2), rc=rc)
        W.put(dict(recs[0], **base) if rc == 0 and recs else dict(base, error="failed", stderr=err[-2000:]))
        print(f"  stg {role} {size} {prec} ctx {ctx} {ex}: rc {rc}, {wall:.1f} s", flush=True)


def stg_memory(a, W, outdir):
    if "2.7B" not in a.sizes:
        return
    for prec in ("fp32", "bf16"):
        for ctx in MEM_CTXS:
            for mode in ("forward", "train"):
                cmd = [a.stg, "memreport", "models/cs336/2.7B.yaml", "--set", f"ctx={ctx}", "--precision", prec, "--mode", mode,
                       "--device", "cuda", "--format", "json"]
                rc, out, err, wall = run(cmd)
                base = dict(size="2.7B", ctx=ctx, precision=prec, mode=mode, cmd=cmd_text(cmd), rc=rc, wall_s=round(wall, 2))
                try:
                    W.put(dict(base, report=json.loads(out)))
                except json.JSONDecodeError:
                    W.put(dict(base, error="failed", stderr=err[-2000:]))
                if prec == "fp32":  # the memory-over-time picture (the plan; no device needed)
                    svg = os.path.join(outdir, f"mem-2.7B-fp32-ctx{ctx}-{mode}.svg")
                    cmd = [a.stg, "memreport", "models/cs336/2.7B.yaml", "--set", f"ctx={ctx}", "--precision", prec, "--mode", mode,
                           "--format", "svg", "-o", svg]
                    rc2, _, err2, _ = run(cmd)
                    W.put(dict(base, kind="svg", svg=os.path.basename(svg), cmd=cmd_text(cmd), rc=rc2, stderr=err2[-500:]))
                print(f"  memreport 2.7B {prec} ctx {ctx} {mode}: rc {rc}", flush=True)


def memreport_world_supported(stg):
    rc, out, err, _ = run([stg, "memreport"])
    return "--world" in out + err


def stg_answers(a, W):
    """CS336's XXL feed-forward question, one memreport each (no device needed)."""
    cmds = []
    for batch, ctx in ((1, 1024), (2, 1024)):
        cmds.append(("xxl", batch, ctx, None, None,
                     [a.stg, "memreport", "models/cs336/ffn.yaml", "--precision", "bf16", *XXL, "--set", f"batch={batch}",
                      "--set", f"ctx={ctx}", "--format", "json"]))
    if memreport_world_supported(a.stg):
        for n in (8, 16, 32, 64):
            for z in (0, 1, 3):
                cmds.append(("xxl-dp", 1, 1024, n, z,
                             [a.stg, "memreport", "models/cs336/ffn.yaml", "--precision", "bf16", *XXL, "--set", "batch=1",
                              "--set", "ctx=1024", "--world", n, "--zero", z, "--format", "md"]))
    else:
        W.put(dict(kind="note", note="stg memreport has no --world/--zero in this build"))
    for name, batch, ctx, n, z, cmd in cmds:
        rc, out, err, wall = run(cmd)
        print(f"  memreport {name} batch {batch} ctx {ctx}" + (f" world {n} zero {z}" if n else "") + f": rc {rc}, {wall:.1f} s", flush=True)
        base = dict(kind=name, batch=batch, ctx=ctx, world=n, zero=z, cmd=cmd_text(cmd), rc=rc)
        if n is not None:  # --world/--zero add a section to the text and md formats only: keep the report as text
            W.put(dict(base, text=out, stderr=err[-2000:]) if rc == 0 else dict(base, error="failed", stderr=err[-2000:]))
            continue
        try:
            W.put(dict(base, report=json.loads(out)))
        except json.JSONDecodeError:
            W.put(dict(base, error="failed", stderr=err[-2000:]))


def part_stg(a, outdir, meta):
    if not os.path.exists(a.stg):
        sys.exit(f"bench_suite: {a.stg} does not exist (build stg first, or pass --stg)")
    t0 = time.time()
    print("stg: model sizes x ctx x precision", flush=True)
    w = Writer(os.path.join(outdir, "stg.jsonl"))
    stg_bench_cells(a, w)
    stg_oom_demo(a, w)
    meta["stg_cells_s"] = round(time.time() - t0, 1)
    t1 = time.time()
    print("stg: eager launch", flush=True)
    stg_exec_cells(a, Writer(os.path.join(outdir, "stg_exec.jsonl")))
    meta["stg_exec_s"] = round(time.time() - t1, 1)
    t1 = time.time()
    print("stg: warm-up", flush=True)
    stg_warmup(a, Writer(os.path.join(outdir, "stg_warmup.jsonl")))
    meta["stg_warmup_s"] = round(time.time() - t1, 1)
    t1 = time.time()
    print("stg: memory", flush=True)
    stg_memory(a, Writer(os.path.join(outdir, "memory.jsonl")), outdir)
    stg_answers(a, Writer(os.path.join(outdir, "answers.jsonl")))
    meta["stg_memory_s"] = round(time.time() - t1, 1)
    meta["stg_s"] = round(time.time() - t0, 1)


# ---------------------------------------------------------------- peer part

def part_peer(a, outdir, meta):
    t0 = time.time()
    path = os.path.join(outdir, "peer.jsonl")
    wpath = os.path.join(outdir, "peer_warmup.jsonl")
    if not a.append:  # --append: a later command adds sizes to the same records (the 10-minute limit per command)
        for p in (path, wpath):
            open(p, "w").close()
    rc, out, err, _ = run([a.python, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"])
    if rc != 0 or not out.strip().endswith("True"):
        why = "PyTorch is not installed" if rc != 0 else "PyTorch sees no CUDA device"
        print(f"peer: {why}; the report will say so and carry on", flush=True)
        Writer(path).put(dict(kind="unavailable", error=why, detail=(err or out)[-500:]))
        meta["peer_s"] = round(time.time() - t0, 1)
        return
    if not os.path.exists(a.peer):
        sys.exit(f"bench_suite: {a.peer} is missing (cp ../shared/peers/torch_lm.py peer/)")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_peer.py")
    rel = os.path.relpath(tool)
    env = {"PYTHONUNBUFFERED": "1"}
    if "small" in a.sizes:  # warm-up: a fresh process, every iteration kept
        cmd = [a.python, rel, "--peer", a.peer, "--size", "small", "--ctx", a.warmup_ctx, "--modes", "bf16,bf16c,bf16cg,fp32", "--what", "step",
               "--warmup", 0, "--iters", a.warmup_iters, "--out", wpath]
        rc, out, err, wall = run(cmd, env)
        with open(wpath, "a") as f:
            f.write(json.dumps(dict(kind="command", cmd=cmd_text(cmd), rc=rc, wall_s=round(wall, 2), stderr=err[-1500:])) + "\n")
        print(f"  peer warm-up: rc {rc}, {wall:.1f} s", flush=True)
    for size in a.sizes:  # one process per (size, ctx): the whole-model compilations of one ctx (30-120 s each) fit a command's time
        for i, c in enumerate(a.ctx):
            cmd = [a.python, rel, "--peer", a.peer, "--size", size, "--ctx", c, "--modes", "fp32,bf16,bf16c,bf16cg",
                   "--what", ",".join(WHATS), "--step-only", a.peer_step_only, "--warmup", a.warmup, "--iters", a.iters,
                   "--fp32-warmup", a.fp32_warmup, "--fp32-iters", a.fp32_iters, "--out", path]
            if size == "2.7B" and i == 0:
                cmd += ["--mem-ctx", ",".join(map(str, [x for x in MEM_CTXS if x in a.ctx] or MEM_CTXS))]
            rc, out, err, wall = run(cmd, env)
            with open(path, "a") as f:
                f.write(json.dumps(dict(kind="command", size=size, ctx=c, cmd=cmd_text(cmd), rc=rc, wall_s=round(wall, 2),
                                        stderr=err[-1500:])) + "\n")
            print(f"  peer {size} ctx {c}: rc {rc}, {wall:.1f} s", flush=True)
    size, prec, ctx = OOM_DEMO
    if size in a.sizes:
        cmd = [a.python, rel, "--peer", a.peer, "--size", size, "--ctx", ctx, "--modes", prec, "--what", "step", "--warmup", 0,
               "--iters", 1, "--demo", "--out", path]
        rc, out, err, wall = run(cmd, env)
        with open(path, "a") as f:
            f.write(json.dumps(dict(kind="command", size=size, cmd=cmd_text(cmd), rc=rc, wall_s=round(wall, 2), stderr=err[-1500:])) + "\n")
        print(f"  peer {size} {prec} ctx {ctx} (does it fit?): rc {rc}, {wall:.1f} s", flush=True)
    meta["peer_s"] = round(time.time() - t0, 1)


# ---------------------------------------------------------------- merge

RECORDS = ("stg.jsonl", "stg_exec.jsonl", "stg_warmup.jsonl", "memory.jsonl", "answers.jsonl", "peer.jsonl", "peer_warmup.jsonl")
STG_TIMES = ("stg_s", "stg_cells_s", "stg_exec_s", "stg_warmup_s", "stg_memory_s")


def unique(xs):
    """xs without repeats, in order (a `--parts stg,peer` run is one command in both metas)."""
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def part_merge(a, outdir):
    """The records of the runs in a.merge_from (one directory a machine lease) into outdir: each run's records in
    turn, tagged with their lease; answers.jsonl (memreport, no device) from the first run that has it; the plans'
    SVG files copied; meta_stg.json and meta_peer.json with the times added up and every command kept. Refuses
    (exit 2, nothing written) a missing directory, one named twice, outdir among them, or runs whose settings differ."""
    srcs = [d for d in a.merge_from.split(",") if d]
    if not srcs:
        sys.exit("bench_suite: --parts merge needs --merge-from DIR[,DIR...] (the --out of each run)")
    real = [os.path.realpath(d) for d in srcs]
    for d, r in zip(srcs, real):
        if not os.path.isdir(d):
            sys.exit(f"bench_suite: --merge-from: {d} is not a directory")
        if not any(os.path.exists(os.path.join(d, n)) for n in RECORDS):
            sys.exit(f"bench_suite: --merge-from: {d} holds none of the suite's records ({', '.join(RECORDS)})")
    if len(set(real)) != len(real):
        sys.exit("bench_suite: --merge-from names a directory twice")
    if os.path.realpath(outdir) in real:
        sys.exit(f"bench_suite: --out {outdir} is one of --merge-from: the merge would overwrite its own input")
    metas = []
    for d in srcs:
        m = {}
        for n in ("meta_stg.json", "meta_peer.json"):
            p = os.path.join(d, n)
            if os.path.exists(p):
                try:
                    with open(p) as f:
                        m[n] = json.load(f)
                except json.JSONDecodeError as e:
                    sys.exit(f"bench_suite: --merge-from: {p}:{e.lineno}:{e.colno}: not JSON ({e.msg})")
                except OSError as e:
                    sys.exit(f"bench_suite: --merge-from: {p}: {e.strerror}")
        metas.append(m)
    settings = [m[n].get("settings") for m in metas for n in ("meta_stg.json",) if n in m]
    if any(x != settings[0] for x in settings[1:]):
        sys.exit("bench_suite: --merge-from: the runs' settings differ (" + "; ".join(json.dumps(x, sort_keys=True) for x in settings)
                 + "): their rows would not be one table")
    recs = {}
    for n in RECORDS:
        recs[n] = []
        for i, d in enumerate(srcs):
            p = os.path.join(d, n)
            if n == "answers.jsonl" and recs[n]:
                break  # memreport's answers need no device: the first run's
            rows = []
            if os.path.exists(p):
                try:
                    with open(p) as f:
                        for ln, line in enumerate(f, 1):
                            if not line.strip():
                                continue
                            try:
                                rows.append(json.loads(line.rstrip("\n")))
                            except json.JSONDecodeError as e:
                                sys.exit(f"bench_suite: --merge-from: {p}:{ln}:{e.colno}: not a JSON record ({e.msg})")
                except OSError as e:
                    sys.exit(f"bench_suite: --merge-from: {p}: {e.strerror}")
            date = metas[i].get("meta_stg.json", metas[i].get("meta_peer.json", {})).get("date")
            recs[n] += [dict(r, lease=i + 1, lease_dir=os.path.basename(os.path.normpath(d)), lease_date=date) for r in rows]
    # every cell's (size, ctx) stg and peer rows from one lease: where a cell ran in several leases (a run stopped by
    # its limit and the rest run again), the rows of the latest lease that has both come first, so the report (which
    # takes a cell's first row) pairs them; a cell whose stg and peer rows share no lease is named
    def timed(r):
        return r.get("kind", "bench") == "bench" and "mean_ms" in r and "size" in r and "ctx" in r
    cells = {}
    for n in ("stg.jsonl", "peer.jsonl"):
        for r in recs[n]:
            if timed(r):
                cells.setdefault((r["size"], r["ctx"]), ({}, {}))[n == "peer.jsonl"].setdefault(r["lease"], True)
    pick, split = {}, []
    for (size, ctx), (st, pe) in sorted(cells.items(), key=lambda kv: (SIZES.index(kv[0][0]) if kv[0][0] in SIZES else 99, kv[0][1])):
        both = set(st) & set(pe)
        if both:
            pick[(size, ctx)] = max(both)
        elif st and pe:
            split.append(f"{size} ctx {ctx}")
            print(f"bench_suite: merge: {size} ctx {ctx}: stg rows from lease(s) {sorted(st)}, peer rows from {sorted(pe)}: "
                  "its ratios are across leases", file=sys.stderr)
    for n in ("stg.jsonl", "peer.jsonl"):  # the picked lease's rows of a cell first (a stable sort)
        recs[n].sort(key=lambda r: 0 if not timed(r) or pick.get((r["size"], r["ctx"])) in (None, r["lease"]) else 1)
    os.makedirs(outdir, exist_ok=True)
    for n in RECORDS:
        W = Writer(os.path.join(outdir, n))
        for r in recs[n]:
            W.put(r)
    for d in srcs:
        for f in sorted(os.listdir(d)):
            if f.startswith("mem-") and f.endswith(".svg"):
                shutil.copyfile(os.path.join(d, f), os.path.join(outdir, f))
    lease_list = []
    for i, (d, m) in enumerate(zip(srcs, metas)):
        ms_, mp_ = m.get("meta_stg.json", {}), m.get("meta_peer.json", {})
        lease_list.append(dict(lease=i + 1, dir=os.path.basename(os.path.normpath(d)), date=ms_.get("date", mp_.get("date")),
                               host=ms_.get("host", mp_.get("host")), nvidia_smi=ms_.get("nvidia_smi"), source=ms_.get("source"),
                               stg_sizes=sorted({r["size"] for r in recs["stg.jsonl"] if r["lease"] == i + 1 and "size" in r}, key=SIZES.index),
                               peer_sizes=sorted({r["size"] for r in recs["peer.jsonl"] if r["lease"] == i + 1 and r.get("kind") == "bench"},
                                                 key=SIZES.index),
                               commands=unique([x for x in [ms_.get("argv")] + mp_.get("commands", [mp_.get("argv")]) if x])))
    sm = [m["meta_stg.json"] for m in metas if "meta_stg.json" in m]
    pm = [m["meta_peer.json"] for m in metas if "meta_peer.json" in m]
    if sm:
        out = dict(sm[0], leases=lease_list, split_cells=split, argv=None,
                   commands=[x for l in lease_list for x in l["commands"]])
        sources = unique([l["source"] for l in lease_list if l.get("source")])
        if len(sources) > 1:  # stg built from different trees: each lease's named
            print(f"bench_suite: merge: the runs' stg was built from {', '.join(sources)}", file=sys.stderr)
            out["source"] = ", ".join(f"{l['source']} (lease {l['lease']})" for l in lease_list if l.get("source"))
        for k in STG_TIMES:
            out[k] = round(sum(m.get(k, 0) for m in sm), 1)
        json.dump(out, open(os.path.join(outdir, "meta_stg.json"), "w"), indent=1)
    if pm:
        out = dict(pm[0], leases=lease_list, argv=None, commands=[])
        out["peer_s"] = round(sum(m.get("peer_s", 0) for m in pm), 1)
        json.dump(out, open(os.path.join(outdir, "meta_peer.json"), "w"), indent=1)
    print(f"merged {len(srcs)} runs into {outdir}" + (f" ({', '.join(split)}: stg and peer from different leases)" if split else ""))


# ---------------------------------------------------------------- report

def ms(r, key="mean_ms", sd=True):
    if not r or key not in r:
        return "—"
    v = r[key]
    d = 2 if v < 10 else 1
    if sd and "std_ms" in r:
        return f"{v:.{d}f} ± {r['std_ms']:.{d}f}"
    return f"{v:.{d}f}"


def gib(b, d=2):
    return "—" if b is None or b < 0 else f"{b / GiB:.{d}f}"


class Data:
    def __init__(self, outdir):
        self.stg = read_jsonl(os.path.join(outdir, "stg.jsonl"))
        self.warm = read_jsonl(os.path.join(outdir, "stg_warmup.jsonl"))
        self.exe = read_jsonl(os.path.join(outdir, "stg_exec.jsonl"))
        self.mem = read_jsonl(os.path.join(outdir, "memory.jsonl"))
        self.ans = read_jsonl(os.path.join(outdir, "answers.jsonl"))
        self.peer = read_jsonl(os.path.join(outdir, "peer.jsonl"))
        self.pwarm = read_jsonl(os.path.join(outdir, "peer_warmup.jsonl"))
        self.meta = {}
        for n in ("meta_stg.json", "meta_peer.json"):
            p = os.path.join(outdir, n)
            if os.path.exists(p):
                self.meta[n] = json.load(open(p))

    def s(self, size, ctx, prec, what="step"):
        for r in self.stg:
            if r.get("size") == size and r.get("ctx") == ctx and r.get("precision") == prec:
                if r.get("fits") is False or "error" in r:
                    return r
                if r.get("what") == what:
                    return r
        return None

    def e(self, size, ctx, prec, role, exec_mode):
        for r in self.exe:
            if (r.get("size"), r.get("ctx"), r.get("precision"), r.get("role"), r.get("exec_mode")) == (size, ctx, prec, role, exec_mode):
                return r
        return None

    def p(self, size, ctx, mode, what="step"):
        for r in self.peer:
            if r.get("kind") == "bench" and r.get("size") == size and r.get("ctx") == ctx and r.get("mode") == mode and r.get("what") == what:
                return r
        return None

    def pb(self, size, ctx, what="step"):
        """The strongest peer's record: the faster of whole-model torch.compile (bf16c) and the same with
        CUDA graphs (bf16cg); either alone when only one ran, an OOM or failure when neither has a time."""
        # records without "sdpa" are the per-block dynamic compilation this suite ran before 2026-11-28: not this peer
        rs = [r for r in (self.p(size, ctx, "bf16c", what), self.p(size, ctx, "bf16cg", what)) if r and "sdpa" in r]
        timed = [r for r in rs if "mean_ms" in r]
        if timed:
            return min(timed, key=lambda r: r["mean_ms"])
        return rs[0] if rs else None

    def peer_unavailable(self):
        for r in self.peer:
            if r.get("kind") == "unavailable":
                return r["error"]
        return None if any(r.get("kind") == "bench" for r in self.peer) else "the peer was not run"


def cell(r, key="mean_ms", sd=True):
    """A table cell for a stg or peer record: the time, or why there is none."""
    if r is None:
        return "—"
    if r.get("fits") is False:
        lim = f"; ctx ≤ {r['largest_ctx']} fits" if "largest_ctx" in r else ""
        return f"plan {r['planned_bytes'] / GiB:.1f} GiB > {r['free_bytes'] / GiB:.1f} free{lim}"
    if r.get("error") == "OOM":
        return "OOM"
    if "error" in r:
        return "failed"
    return ms(r, key, sd) + (" ᵍ" if r.get("mode") == "bf16cg" else "")


def ratio(a_, b_):
    if not a_ or not b_ or "mean_ms" not in a_ or "mean_ms" not in b_:
        return "—"
    return f"{a_['mean_ms'] / b_['mean_ms']:.2f}"


def first_device(D):
    for r in D.stg + D.warm:
        if r.get("device"):
            return r["device"]
    return "unknown"


def peer_device(D):
    for r in D.peer:
        if r.get("device"):
            return r["device"], r.get("torch", "?")
    return None, None


def plots(D, outdir, sizes, ctxs, dev):
    made = []
    for size in sizes:
        series = []
        for label, get, color, dash in (
                ("stg bf16", lambda c: D.s(size, c, "bf16"), "#4e79a7", False),
                ("stg fp32", lambda c: D.s(size, c, "fp32"), "#4e79a7", True),
                ("strongest peer bf16", lambda c: D.pb(size, c), "#e15759", False),
                ("PyTorch eager bf16", lambda c: D.p(size, c, "bf16"), "#f28e2b", False),
                ("PyTorch eager fp32", lambda c: D.p(size, c, "fp32"), "#f28e2b", True)):
            pts = [(c, get(c)["mean_ms"] if get(c) and "mean_ms" in get(c) else None) for c in ctxs]
            if any(y is not None for _, y in pts):
                series.append(dict(label=label, points=pts, color=color, dash=dash))
        if not series:
            continue
        name = f"time-{size}.svg"
        with open(os.path.join(outdir, name), "w") as f:
            f.write(svgplot.line_chart(f"cs336-{size}: training step time vs context length (batch 4, {dev})", "context length (tokens)",
                                       "step time (ms), log scale", series, xticks=ctxs, logx=True, logy=True))
        made.append(name)
    for prec, pmode in (("bf16", "bf16c"), ("fp32", "fp32")):
        series = []
        for i, size in enumerate(sizes):
            col = svgplot.PALETTE[i % len(svgplot.PALETTE)]
            pts = []
            for c in ctxs:
                r = D.s(size, c, prec)
                pts.append((c, r["planned_bytes"] / GiB if r and "planned_bytes" in r else None))
            if any(y is not None for _, y in pts):
                series.append(dict(label=f"{size} stg plan", points=pts, color=col))
            pts = []
            for c in ctxs:
                r = D.pb(size, c) if pmode == "bf16c" else D.p(size, c, pmode)
                pts.append((c, r["peak_alloc_bytes"] / GiB if r and "peak_alloc_bytes" in r else None))
            if any(y is not None for _, y in pts):
                series.append(dict(label=f"{size} {'peer' if pmode == 'bf16c' else 'PyTorch'}", points=pts, color=col, dash=True))
        if series:
            name = f"memory-vs-ctx-{prec}.svg"
            peer_name = "strongest peer bf16" if pmode == "bf16c" else "PyTorch eager fp32"
            with open(os.path.join(outdir, name), "w") as f:
                f.write(svgplot.line_chart(f"Training step peak memory vs ctx, {prec} (solid: stg plan; dashed: {peer_name})",
                                           "context length (tokens)", "peak device memory (GiB)", series, xticks=ctxs, logx=True))
            made.append(name)
    return made


def warm_stats(times, w, n=10):
    t = times[w:w + n]
    if len(t) < 2:
        return None
    return statistics.fmean(t), statistics.stdev(t)


def fmt_sd(ms_sd):
    if not ms_sd:
        return "—"
    m, s = ms_sd
    return f"{m:.2f} ± {s:.2f}" if m < 10 else f"{m:.1f} ± {s:.1f}"


def fmt_ms(v):
    return "—" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.1f}")


def report(a, outdir, doc):
    D = Data(outdir)
    run_settings = dict(D.meta.get("meta_stg.json", D.meta.get("meta_peer.json", {})).get("settings", {}))
    run_settings.pop("peer_step_only", None)  # the peer's own setting: from meta_peer.json, else from this command line
    run_settings.update({k: v for k, v in D.meta.get("meta_peer.json", {}).get("settings", {}).items() if k == "peer_step_only"})
    for k in SETTINGS:  # the report describes the settings of the run that made the records
        if k in run_settings:
            setattr(a, k, run_settings[k])
    sizes = [s for s in SIZES if any(r.get("size") == s for r in D.stg + D.peer)] or SIZES
    ctxs = sorted({r["ctx"] for r in D.stg if "ctx" in r and not r.get("demo")}) or CTXS
    dev = first_device(D)
    pdev, ptorch = peer_device(D)
    ms_meta = D.meta.get("meta_stg.json", {})
    mp_meta = D.meta.get("meta_peer.json", {})
    date = ms_meta.get("date", "unknown date")
    leases = ms_meta.get("leases") or mp_meta.get("leases") or []
    if leases:  # merged runs: the first lease's date to the last's
        ds = [l["date"] for l in leases if l.get("date")]
        date = f"{min(ds)} to {max(ds)}" if ds and min(ds) != max(ds) else (ds[0] if ds else date)
    made = plots(D, outdir, sizes, ctxs, dev)
    rel = os.path.relpath(outdir, os.path.dirname(os.path.abspath(doc)))
    L = []
    P = L.append
    unavailable = D.peer_unavailable()
    P("# Benchmarks: the CS336 systems study, reproduced with stg\n")
    same = "in the same machine lease" if not leases else \
        f"each size's stg and peer rows in one machine lease ({len(leases)} leases in all, below)"
    P(f"Device: **{dev}**. Date: {date} (UTC). stg built from {ms_meta.get('source', 'the working tree')}; "
      + (f"PyTorch {ptorch} on {pdev} for the peer, {same}." if pdev else f"PyTorch peer: {unavailable}.") + "\n")
    wall_stg, wall_peer = ms_meta.get("stg_s"), mp_meta.get("peer_s")
    if wall_peer is None:  # no meta_peer.json (the peer command was stopped): the commands that finished
        wall_peer = sum(r.get("wall_s", 0) for r in D.peer + D.pwarm if r.get("kind") == "command") or None
    if wall_stg is not None:
        tot = (wall_stg or 0) + (wall_peer or 0)
        missing_peer = [x for x in SIZES if any(r.get("size") == x for r in D.stg)
                        and not any(r.get("kind") == "bench" and r.get("size") == x for r in D.peer)]
        P(f"The suite ran in **{tot / 60:.1f} minutes** of wall time"
          + (f" (without the peer's {', '.join(missing_peer)}, which did not run)" if missing_peer and D.peer else "")
          + f": stg {wall_stg / 60:.1f} min "
          f"(cells {ms_meta.get('stg_cells_s', 0) / 60:.1f}, eager cells {ms_meta.get('stg_exec_s', 0):.0f} s, warm-up {ms_meta.get('stg_warmup_s', 0):.0f} s, memory and answers "
          f"{ms_meta.get('stg_memory_s', 0):.0f} s), PyTorch peer {(wall_peer or 0) / 60:.1f} min.\n")
    P("Reproduce everything (on the GPU machine, from the repository root, after `source .deps/env.sh` and a Release build "
      "into `build-gpu`; `cp ../shared/peers/torch_lm.py peer/` for the peer):\n")
    P("```sh\npython3 tools/bench_suite.py --stg build-gpu/stg\n```\n")
    ran = [ms_meta.get("argv")] + mp_meta.get("commands", [mp_meta.get("argv")])
    def without_label(argv):  # --source is a label for this page, not part of the measurement
        out, skip = [], False
        for x in argv:
            if skip:
                skip = False
            elif x == "--source":
                skip = True
            else:
                out.append(x)
        return out
    ran = [sh(["python3"] + without_label(x)) for x in ran if x]
    if leases:
        P("This page's run, as the commands that made it, lease by lease (each a GPU machine of its own; then `--parts "
          "merge,report --merge-from` their records, here):\n")
        for l in leases:
            P(f"- lease {l['lease']} ({l.get('date')}, {l.get('host')}; stg: {', '.join(l['stg_sizes']) or 'none'}; peer: "
              f"{', '.join(l['peer_sizes']) or 'none'}): " + "; ".join(f"`{sh(['python3'] + without_label(x))}`" for x in l["commands"]))
        split = ms_meta.get("split_cells") or []
        P("" if not split else f"\n**{', '.join(split)}: stg's and the peer's rows come from different leases**, so their ratios compare "
          "two machines.")
        P("")
    elif ran:
        P("This page's run, as the commands that made it (one GPU machine lease, in this order): " + "; ".join(f"`{x}`" for x in ran) + ".\n")
    P("It runs in two halves where one command may take at most 10 minutes (`--parts stg`, then `--parts peer`; where one "
      "machine lease cannot hold the whole suite, in runs of a few sizes each, `--parts stg,peer --sizes ... --out DIR`, whose "
      "records `--parts merge,report --merge-from DIR,...` puts together), and "
      "`--parts report` rewrites this page from the raw records in [bench/](bench/) (`stg.jsonl`, `stg_exec.jsonl`, `stg_warmup.jsonl`, "
      "`memory.jsonl`, `answers.jsonl`, `peer.jsonl`, `peer_warmup.jsonl`); every record holds the exact command (`cmd`) "
      "that produced it.\n")
    P("**How it measures.** Batch 4, random tokens, vocab 10000, the CS336 models of `models/cs336/`, flash attention "
      "(stg's fused attention; `scaled_dot_product_attention` in the peer). stg: `stg bench`, a CUDA event pair around every "
      "iteration (batch upload, the captured graph's replay, results download), one process per (size, precision, ctx) "
      "measuring forward (with the loss), forward+backward and the full step (+ gradient clipping and AdamW) in turn. "
      "Parameters are a device-side constant fill (timing does not depend on values). Peer: `tools/bench_peer.py`, the model "
      "class of `../shared/peers/torch_lm.py`, a CUDA event pair around every iteration; one process per size; "
      "eager fp32 (TF32 off), eager bf16 autocast, and the strongest peer in bf16 (see below). Times are mean ± sample standard "
      f"deviation over the timed iterations: bf16 {a.iters} after {a.warmup} warm-up steps; fp32 {a.fp32_iters} after "
      f"{a.fp32_warmup} (fp32 steps are 5–10× slower; the warm-up table below shows both systems steady from the third "
      "step on, and the suite must finish in 15 minutes).\n")
    P("**The strongest peer.** What a user who knows PyTorch well runs (`../shared/peers/NUMBERS.md`): the whole model "
      "`torch.compile`d with static shapes and cuDNN's fused attention (`--sdpa cudnn`), once as it is (mode `bf16c`) and "
      "once with CUDA graphs (`mode=\"reduce-overhead\"`, mode `bf16cg`); every peer column and ratio on this page is the "
      "faster of the two for that cell, and a time marked ᵍ is the CUDA-graph one. Compiling the whole model costs 30–120 s "
      "per (size, ctx, mode), so the peer runs one process per (size, ctx); compilation happens in the first compiled "
      "iterations (`times_ms` in `peer.jsonl`), inside the warm-up steps. (Until 2026-11-28 this page compared against "
      "per-block `dynamic=True` compilation, which is launch-bound and flattered stg by up to 10×.)\n")
    if unavailable:
        P(f"**Peer:** {unavailable}; the PyTorch columns are empty.\n")
    missing = [x for x in sizes if not any(r.get("kind") == "bench" and r.get("size") == x for r in D.peer)]
    if missing and not unavailable:
        P(f"**Not measured in this run:** the PyTorch peer's cells for {', '.join(missing)} (their columns are empty in "
          "sections 1 and 3).\n")
    if a.note:
        P(a.note + "\n")

    # 1. sizes x ctx
    P("## 1. Model sizes × context length\n")
    P("stg cells: `stg bench models/cs336/{size}.yaml --set ctx={ctx} --precision bf16 --what forward,forward-backward,step "
      f"--warmup {a.warmup} --iters {a.iters} --json` (fp32: `--precision fp32 --warmup {a.fp32_warmup} --iters {a.fp32_iters}`). "
      "Peer cells: `python3 tools/bench_peer.py --peer peer/torch_lm.py --size {size} --ctx "
      "{ctx} --modes fp32,bf16,bf16c,bf16cg --what forward,forward-backward,step --step-only "
      f"{a.peer_step_only} "
      f"--warmup {a.warmup} --iters {a.iters} --fp32-warmup {a.fp32_warmup} --fp32-iters {a.fp32_iters} --out F.jsonl`. "
      "Milliseconds, mean ± sd. A stg cell that does not fit says so before allocating anything: the plan's bytes "
      "against the device's free bytes, and the largest ctx that would fit (`stg bench` refuses with that message; "
      "the record keeps it). A peer cell that runs out of memory is marked OOM.\n")
    P("### bf16 (stg: bf16 weights and activations, fp32 master weights, gradients and AdamW state; peer: autocast)\n")
    P("| size | ctx | stg forward | stg fwd+bwd | stg step | peer forward | peer fwd+bwd | peer step | eager bf16 step | stg / peer (step) |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        for c in ctxs:
            sf, sb, ss = (D.s(size, c, "bf16", w) for w in WHATS)
            pf, pb, ps = (D.pb(size, c, w) for w in WHATS)
            if sf and sf.get("fits") is False:
                P(f"| {size} | {c} | {cell(sf)} | | | {cell(pf)} | {cell(pb)} | {cell(ps)} | {cell(D.p(size, c, 'bf16'))} | — |")
            else:
                P(f"| {size} | {c} | {cell(sf)} | {cell(sb)} | {cell(ss)} | {cell(pf)} | {cell(pb)} | {cell(ps)} | "
                  f"{cell(D.p(size, c, 'bf16'))} | {ratio(ss, ps)} |")
    P("")
    P("### fp32 (no TF32 anywhere)\n")
    P("| size | ctx | stg forward | stg fwd+bwd | stg step | PyTorch forward | PyTorch fwd+bwd | PyTorch step | stg / PyTorch (step) |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        for c in ctxs:
            sf, sb, ss = (D.s(size, c, "fp32", w) for w in WHATS)
            pf, pb, ps = (D.p(size, c, "fp32", w) for w in WHATS)
            if sf and sf.get("fits") is False:
                P(f"| {size} | {c} | {cell(sf)} | | | {cell(pf)} | {cell(pb)} | {cell(ps)} | — |")
            else:
                P(f"| {size} | {c} | {cell(sf)} | {cell(sb)} | {cell(ss)} | {cell(pf)} | {cell(pb)} | {cell(ps)} | {ratio(ss, ps)} |")
    P("")
    demo_s = next((r for r in D.stg if r.get("demo")), None)
    demo_p = next((r for r in D.peer if r.get("demo") and r.get("kind") == "bench"), None)
    if demo_s or demo_p:
        size, prec, ctx = OOM_DEMO
        P(f"**A cell that does not fit**, beyond the table: {size} {prec} at ctx {ctx}, batch 4.")
        if demo_s:
            said = "; ".join(l.replace("stg: ", "") for l in demo_s.get("refusal", []))
            P(f"`{demo_s['cmd']}` refused in {demo_s['wall_s']:.1f} s, before allocating anything: “{said}”"
              + (f" (exit status {demo_s['rc']})." if demo_s.get("fits") is False else f" — it did not refuse (exit status {demo_s['rc']})."))
        if demo_p:
            pc = next((r.get("cmd") for r in D.peer if r.get("kind") == "command" and "--demo" in r.get("cmd", "")), "")
            P(f"The peer at the same shape (`{pc}`): " + ("out of memory (caught)." if demo_p.get("error") == "OOM" else
              f"ran: {cell(demo_p)} ms, peak {gib(demo_p.get('peak_alloc_bytes'))} GiB."))
        P("")
    comp = [(r["size"], r) for r in D.peer if r.get("kind") == "bench" and r.get("mode") == "bf16c" and r.get("what") == "forward"
            and r.get("ctx") == min(ctxs) and "times_ms" in r]
    if comp:
        P("torch.compile's price, paid in the first compiled iteration of each size at ctx "
          f"{min(ctxs)} (the forward; the backward and every other ctx and mode compile again): "
          + ", ".join(f"{s} {r['times_ms'][0] / 1000:.1f} s" for s, r in comp)
          + " (dynamo graphs made in that process: " + ", ".join(
              f"{s} {max((x.get('dynamo_unique_graphs', 0) for x in D.peer if x.get('size') == s and x.get('ctx') == min(ctxs) and x.get('mode') in ('bf16c', 'bf16cg')), default=0)}"
              for s, _ in comp) + ")"
          + ". stg plans, allocates and captures in " + ", ".join(
              f"{s} {D.s(s, min(ctxs), 'bf16')['setup_ms'] / 1000:.2f} s" for s, _ in comp
              if D.s(s, min(ctxs), 'bf16') and 'setup_ms' in D.s(s, min(ctxs), 'bf16'))
          + " (`setup_ms`: process start to the first step) plus its first two steps (section 2)."
          + (" small's compilation was mostly served from inductor's on-disk cache, filled by the warm-up process just before "
             "(section 2 has the cold number)." if any(s == "small" for s, _ in comp) and any(r.get("kind") == "bench" for r in D.pwarm) else "")
          + "\n")
    tp = [m for m in made if m.startswith("time-")]
    if tp:
        P("Step time against ctx, per size (log–log; solid bf16, dashed fp32; blue stg, red the strongest peer, orange PyTorch eager):\n")
        P(" ".join(f"[{m[5:-4]}]({rel}/{m})" for m in tp) + "\n")
        P(f"![step time vs ctx, 2.7B]({rel}/{tp[-1]})\n")
    # model FLOPs utilisation, bf16 step
    P("Achieved model TFLOP/s of the bf16 step (6·params·tokens + 12·layers·batch·ctx²·d_model, the peers' convention; "
      "`tflops` in the records, from the median step):\n")
    P("| size | " + " | ".join(f"ctx {c} stg" for c in ctxs) + " | " + " | ".join(f"ctx {c} peer" for c in ctxs) + " |")
    P("|---|" + "---:|" * (2 * len(ctxs)))
    for size in sizes:
        row = []
        for c in ctxs:
            r = D.s(size, c, "bf16")
            row.append(f"{r['tflops']:.0f}" if r and "tflops" in r else "—")
        for c in ctxs:
            r = D.pb(size, c)
            row.append(f"{r['tflops']:.0f}" if r and "tflops" in r else "—")
        P(f"| {size} | " + " | ".join(row) + " |")
    P("")

    # 2. warm-up
    P("## 2. Warm-up\n")
    P(f"Every iteration's time from a fresh process with no warm-up: `stg bench models/cs336/{{size}}.yaml --set ctx={a.warmup_ctx} "
      f"--precision {{p}} --exec {{graph|eager}} --what step --warmup 0 --iters {a.warmup_iters} --json` (`times_ms`, and "
      "`submit_ms`, the host time spent in each submit: capture, instantiation and launches). The columns *W warm-up* are "
      "the mean ± sd of the 10 steps after dropping the first W of that list — what `--warmup W --iters 10` measures. "
      f"Peer: `python3 tools/bench_peer.py --peer peer/torch_lm.py --size small --ctx {a.warmup_ctx} --modes bf16,bf16c,bf16cg,fp32 --what step "
      f"--warmup 0 --iters {a.warmup_iters} --out F.jsonl` (one fresh process, modes in that order).\n")
    P("| run | step 1 | step 2 | step 3 | steady (median of the rest) | 0 warm-up | 1 warm-up | 2 warm-up | host time in submit 1 / 2 / 3 |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    wrow = {}
    for r in D.warm:
        if "times_ms" not in r:
            P(f"| stg {r.get('size')} {r.get('precision')} {r.get('exec_mode')} | failed | | | | | | | |")
            continue
        t = r["times_ms"]
        envs = " ".join(f"{k}={v}" for k, v in r.get("env", {}).items())
        name = f"stg {r['size']} {r['precision']} {r['exec_mode']}" + (f" ({envs})" if envs else "")
        wrow[(r["size"], r["precision"], r["exec_mode"], bool(envs))] = r
        sm = r.get("submit_ms", [])
        P(f"| {name} | {fmt_ms(t[0])} | {fmt_ms(t[1])} | {fmt_ms(t[2])} | {fmt_ms(statistics.median(t[3:]))} | "
          + " | ".join(fmt_sd(warm_stats(t, w)) for w in range(3)) + f" | {' / '.join(fmt_ms(x) for x in sm[:3])} |")
    pw = [r for r in D.pwarm if r.get("kind") == "bench"]
    for r in pw:
        if "times_ms" not in r:
            P(f"| PyTorch small {r.get('mode')} | {r.get('error', 'failed')} | | | | | | | |")
            continue
        t = r["times_ms"]
        nm = {"bf16": "eager bf16 (first in the process)", "bf16c": "torch.compile bf16, cuDNN attention",
              "bf16cg": "torch.compile reduce-overhead bf16, cuDNN attention", "fp32": "eager fp32"}.get(r["mode"], r["mode"])
        P(f"| PyTorch small {nm} | {fmt_ms(t[0])} | {fmt_ms(t[1])} | {fmt_ms(t[2])} | {fmt_ms(statistics.median(t[3:]))} | "
          + " | ".join(fmt_sd(warm_stats(t, w)) for w in range(3)) + " | |")
    P("")
    P(warmup_paragraph(D, wrow, pw))
    P("")

    # 3. mixed precision
    P("## 3. Mixed precision\n")
    P("Full training step, ms (mean; the same records as section 1). Speed-up = fp32 time / bf16 time.\n")
    P("| size | ctx | stg fp32 | stg bf16 | stg speed-up | PyTorch fp32 | PyTorch bf16 eager | bf16 eager speed-up | strongest peer bf16 | its speed-up over fp32 eager |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        for c in ctxs:
            f32, b16 = D.s(size, c, "fp32"), D.s(size, c, "bf16")
            pf, pb, pc = D.p(size, c, "fp32"), D.p(size, c, "bf16"), D.pb(size, c)
            P(f"| {size} | {c} | {cell(f32, sd=False)} | {cell(b16, sd=False)} | {ratio(f32, b16)} | {cell(pf, sd=False)} | "
              f"{cell(pb, sd=False)} | {ratio(pf, pb)} | {cell(pc, sd=False)} | {ratio(pf, pc)} |")
    P("")

    # 4. memory
    P("## 4. Memory: 2.7B at ctx 128, 256 and 512\n")
    P("stg: `stg memreport models/cs336/2.7B.yaml --set ctx={ctx} --precision {p} --mode forward|train --device cuda "
      "--format json` — *planned* is the plan's peak (persistent + arena), *measured* the device bytes the process holds once "
      "the plan is allocated (cudaMemGetInfo before and after; stg allocates nothing during a step). *after runs* is "
      "`bytes_after_runs` of the section-1 `stg bench` cell: the same difference taken after its 45 forward, fwd+bwd and "
      "step runs, so it adds the captured graphs and lazily loaded kernels. Forward = inference (no saved activations, no "
      "gradients, no optimizer state). PyTorch: `torch.cuda.max_memory_allocated()` — forward under `torch.no_grad()` before "
      "any gradient or AdamW state exists (`--mem-ctx`), and the step cells of section 1. GiB.\n")
    P("| precision | ctx | stg forward planned | stg forward measured | PyTorch forward peak | stg step planned | stg step measured | stg step after runs | PyTorch step peak (eager) | PyTorch step peak (strongest peer) |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for prec in ("fp32", "bf16"):
        for c in MEM_CTXS:
            fw = next((m for m in D.mem if m.get("precision") == prec and m.get("ctx") == c and m.get("mode") == "forward" and "report" in m), None)
            tr = next((m for m in D.mem if m.get("precision") == prec and m.get("ctx") == c and m.get("mode") == "train" and "report" in m), None)
            pfw = next((r for r in D.peer if r.get("kind") == "forward_memory" and r.get("ctx") == c and r.get("mode") == prec), None)
            b = D.s("2.7B", c, prec)
            pe = D.p("2.7B", c, prec)
            pc = D.pb("2.7B", c) if prec == "bf16" else None
            def pk(r):
                return gib(r["peak_alloc_bytes"]) if r and "peak_alloc_bytes" in r else ("OOM" if r and r.get("error") == "OOM" else "—")
            P(f"| {prec} | {c} | {gib(fw['report']['plan']['peak_bytes']) if fw else '—'} | {gib(fw['report'].get('measured_bytes')) if fw else '—'} | "
              f"{pk(pfw)} | {gib(tr['report']['plan']['peak_bytes']) if tr else '—'} | {gib(tr['report'].get('measured_bytes')) if tr else '—'} | "
              f"{gib(b.get('bytes_after_runs')) if b and 'bytes_after_runs' in b else '—'} | {pk(pe)} | {pk(pc) if prec == 'bf16' else ''} |")
    P("")
    svgs = [m for m in D.mem if m.get("kind") == "svg" and m.get("rc") == 0]
    if svgs:
        P("Memory over the step (the plan's live bytes by class over the schedule; "
          "`stg memreport models/cs336/2.7B.yaml --set ctx={ctx} --precision fp32 --mode forward|train --format svg -o F.svg`):\n")
        for c in MEM_CTXS:
            links = [f"[{m['mode']}]({rel}/{m['svg']})" for m in svgs if m["ctx"] == c]
            if links:
                P(f"- ctx {c}: " + ", ".join(links))
        tr512 = next((m for m in svgs if m["ctx"] == 512 and m["mode"] == "train"), None)
        if tr512:
            P(f"\n![2.7B fp32 ctx 512 training step, live bytes over the schedule]({rel}/{tr512['svg']})\n")
    mv = [m for m in made if m.startswith("memory-vs-ctx")]
    if mv:
        P("Training-step peak against ctx, every size: " + ", ".join(f"[{m[14:-4]}]({rel}/{m})" for m in mv) + " (solid: stg's plan; "
          "dashed: the PyTorch peer's measured peak).\n")
    P(memory_comment(D))
    P(residual_paragraph(D))
    P("")

    # 5. answers
    P("## 5. Answers by memreport\n")
    P(answers_section(D, a))
    P("")
    # 6. graph vs eager, the plan's fit
    if D.exe:
        P("## 6. Graph replay against eager launch, and the plan against the device\n")
        P(exec_section(D, a))
        P("")
    P("## Notes\n")
    P("- Absolute times move between machines and runs; compare columns of one run. Earlier numbers: [perf/LOG.md](perf/LOG.md).")
    P("- The peer is the strongest one (above): whole-model torch.compile with cuDNN attention, with CUDA graphs where that is "
      "faster; [PERF.md](PERF.md) keeps the current table against it.")
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc, "w") as f:
        f.write("\n".join(L).rstrip() + "\n")
    print(f"wrote {doc} and {len(made)} plots in {outdir}")


def exec_section(D, a):
    """stg's two executor modes beside the peer at ctx EXEC_CTX (every size, fp32 and bf16), the
    graph/eager ratio where launches matter most, and measured against planned device bytes."""
    L = []
    P = L.append
    c = EXEC_CTX
    P(f"stg eager cells: `stg bench models/cs336/{{size}}.yaml --set ctx={c} --precision bf16|fp32 --exec eager --what step "
      f"--warmup {a.warmup}|{a.fp32_warmup} --iters {a.iters}|{a.fp32_iters} --json` ([bench/stg_exec.jsonl](bench/stg_exec.jsonl)); "
      "graph cells and the peer's from section 1 (same run). Eager launch issues the step op by op on one stream; graph "
      "replay launches the captured step (three compute streams inside it). Step time in ms, mean ± sd; planned and "
      "measured device bytes of the bf16 graph cell (measured: cudaMemGetInfo before the first allocation and after the "
      "cuBLASLt workspaces and the kernels' scratch exist).\n")
    P("| size | stg bf16 graph | stg bf16 eager | peer bf16 eager (SDPA) | strongest peer | stg fp32 graph | stg fp32 eager | "
      "peer fp32 eager (SDPA) | planned / measured GiB (bf16) | measured − planned |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for size in SIZES:
        gb, eb = D.s(size, c, "bf16"), D.e(size, c, "bf16", "eager", "eager")
        gf, ef = D.s(size, c, "fp32"), D.e(size, c, "fp32", "eager", "eager")
        if not (gb or eb or gf or ef):
            continue
        mem, diff = "—", "—"
        if gb and gb.get("planned_bytes") and gb.get("measured_bytes"):
            pl, me = gb["planned_bytes"], gb["measured_bytes"]
            mem = f"{gib(pl)} / {gib(me)}"
            diff = f"{(me - pl) / pl * 100:+.2f}%"
            worst = max(worst, abs(me - pl) / pl)
        P(f"| {size} | {cell(gb)} | {cell(eb)} | {cell(D.p(size, c, 'bf16'))} | {cell(D.pb(size, c))} | {cell(gf)} | "
          f"{cell(ef)} | {cell(D.p(size, c, 'fp32'))} | {mem} | {diff} |")
    P("")
    slower = []
    for size in SIZES:
        for prec, mode in (("bf16", "bf16"), ("fp32", "fp32")):
            s_, p_ = D.s(size, c, prec), D.p(size, c, mode)
            if s_ and p_ and "mean_ms" in s_ and "mean_ms" in p_ and s_["mean_ms"] > p_["mean_ms"]:
                slower.append(f"{size} {prec}")
    if any(D.p(x, c, "bf16") for x in SIZES):
        P("stg's graph step against PyTorch eager of the same precision: "
          + ("no slower at every size, bf16 and fp32." if not slower else "slower at " + ", ".join(slower) + ".")
          + f" Largest gap between measured and planned device bytes: {worst * 100:.2f}%.\n")
    size, prec, ctx, warm, iters = RATIO_CELL
    g, e = D.e(size, ctx, prec, "ratio", "graph"), D.e(size, ctx, prec, "ratio", "eager")
    if g and e and "mean_ms" in g and "mean_ms" in e:
        P(f"**Graph replay against eager launch where launches matter most** ({size}, {prec}, ctx {ctx}, batch 4; "
          f"warm-up {warm}, {iters} iterations; `{g['cmd']}` and the same with `--exec eager`): graph "
          f"{g['mean_ms']:.3f} ± {g['std_ms']:.3f} ms (median {g['median_ms']:.3f}), eager {e['mean_ms']:.3f} ± {e['std_ms']:.3f} ms "
          f"(median {e['median_ms']:.3f}): replay is **{e['mean_ms'] / g['mean_ms']:.2f}×** faster "
          f"({e['median_ms'] / g['median_ms']:.2f}× by medians). Eager launch issues about 870 ops from the host "
          "(cuBLASLt calls included; host time per iteration is `submit_ms` in the records) onto one stream, and the "
          "device runs them barely ahead of the host, so this ratio moves with the host's speed from machine to machine.\n")
    size, prec, ctx = NAIVE_CELL
    n = D.e(size, ctx, prec, "naive", "graph")
    if n and n.get("measured_bytes"):
        P(f"**Written-out attention's memory** ({size}, {prec}, ctx {ctx}, batch 4, `{n['cmd']}`): the step holds "
          f"{gib(n['measured_bytes'])} GiB of device memory (planned {gib(n['planned_bytes'])}), against the 59.0 GiB peak of "
          f"PyTorch eager fp32 with written-out attention for the same step (`../shared/peers/NUMBERS.md`); step "
          f"{n['mean_ms']:.0f} ms.\n")
    elif n:
        P(f"**Written-out attention's memory** ({size}, {prec}, ctx {ctx}): the cell failed (`{n['cmd']}`).\n")
    return "\n".join(L)


def warmup_paragraph(D, w, pw):
    g, e = w.get(("small", "bf16", "graph", False)), w.get(("small", "bf16", "eager", False))
    ge, ee = w.get(("small", "bf16", "graph", True)), w.get(("small", "bf16", "eager", True))
    if not (g and e and "submit_ms" in g and "submit_ms" in e):
        return "(The warm-up runs are missing; no paragraph.)"
    gs, es = g["submit_ms"], e["submit_ms"]
    gt, et = g["times_ms"], e["times_ms"]
    g_st, e_st = statistics.median(gs[2:]), statistics.median(es[2:])
    parts = [f"**What the first step pays for** (small, bf16, ctx {g['ctx']}). With graph replay the first step took {gt[0]:.1f} ms "
             f"against {statistics.median(gt[3:]):.2f} ms in steady state, {gs[0]:.1f} ms of it host time inside the first submit; "
             f"launched op by op (eager) the first step took {et[0]:.1f} ms ({es[0]:.1f} ms in submit, against {e_st:.2f} ms per later "
             "step). The runs above take it apart:"]
    if ge and ee and "submit_ms" in ge and "submit_ms" in ee:
        parts.append(f"(1) *module loading*: with `CUDA_MODULE_LOADING=EAGER` every kernel module is loaded when the context is made "
                     f"(backend start {ee['backend_ms']:.0f} ms instead of {e['backend_ms']:.0f} ms) and the first submit falls from "
                     f"{gs[0]:.1f} to {ge['submit_ms'][0]:.1f} ms with graph replay and from {es[0]:.1f} to {ee['submit_ms'][0]:.1f} ms eager: "
                     f"CUDA's default lazy loading costs ≈{gs[0] - ge['submit_ms'][0]:.1f} ms when the first launches happen inside a "
                     f"stream capture and ≈{es[0] - ee['submit_ms'][0]:.1f} ms outside one. (2) *first use* of everything else: with the "
                     f"modules already loaded, the first eager submit still takes {ee['submit_ms'][0]:.1f} ms against "
                     f"{statistics.median(ee['submit_ms'][2:]):.2f} ms later, ≈{ee['submit_ms'][0] - statistics.median(ee['submit_ms'][2:]):.1f} ms "
                     "of one-time work, chiefly cuBLASLt's heuristic query for each new matmul shape (stg keeps the chosen algorithm "
                     "per shape, so it is asked once).")
    parts.append(f"(3) *graph capture and instantiation*: stg double-buffers its inputs and keeps one captured graph per buffer, so "
                 f"the second step captures and instantiates the second graph: {gs[1]:.1f} ms of host time in submit 2, step time "
                 f"{gt[1]:.1f} ms. From the third step on a submit is one graph launch ({g_st:.3f} ms of host time; eager launching "
                 f"costs {e_st:.2f} ms of host time per step, which is why eager's steady step is "
                 f"{statistics.median(et[3:]):.2f} ms against replay's {statistics.median(gt[3:]):.2f}).")
    sd2, sd0 = warm_stats(gt, 2), warm_stats(gt, 0)
    if sd2 and sd0:
        parts.append(f"Hence 0 warm-up steps give {sd0[0]:.2f} ± {sd0[1]:.2f} ms and 2 give {sd2[0]:.2f} ± {sd2[1]:.2f} ms. "
                     "The steady state has almost no variance because a step is one graph launch: no per-op host work, no "
                     "allocator (every byte was placed by the plan before the first step), no Python, the same kernels with the same "
                     "algorithms in the same order every time; what is left is the GPU's own jitter.")
    big = w.get(("2.7B", "bf16", "graph", False))
    if big:
        t, sm = big["times_ms"], big["submit_ms"]
        parts.append(f"For 2.7B (bf16) the first step took {t[0]:.1f} ms against {statistics.median(t[3:]):.1f} ms steady "
                     f"({sm[0]:.1f} ms in submit 1, {sm[1]:.1f} ms to capture and instantiate the second graph): the one-time costs "
                     "grow with the number of ops and shapes but matter less as the step grows.")
    pe = next((r for r in pw if r.get("mode") == "bf16" and "times_ms" in r), None)
    pc = next((r for r in pw if r.get("mode") == "bf16c" and "times_ms" in r), None)
    if pe:
        t = pe["times_ms"]
        sdp = warm_stats(t, 2)
        parts.append(f"PyTorch eager's first step ({t[0]:.1f} ms against {statistics.median(t[3:]):.1f} ms; the first in its process) "
                     "pays the same kinds of first-use costs on a larger scale (PyTorch's kernels, cuBLAS handles and workspaces, the "
                     "caching allocator's first cudaMallocs)"
                     + (f"; over 10 steady steps its sd is {sdp[1]:.2f} ms against stg's {sd2[1]:.2f} ms, every op being dispatched "
                        "from Python." if sdp and sd2 else "."))
    if pc:
        parts.append(f"torch.compile's first step includes compiling: {pc['times_ms'][0] / 1000:.1f} s.")
    pg = next((r for r in pw if r.get("mode") == "bf16cg" and "times_ms" in r), None)
    if pg:
        parts.append(f"With CUDA graphs (reduce-overhead) the first step, compiling and recording, took {pg['times_ms'][0] / 1000:.1f} s.")
    return " ".join(parts)


def memory_comment(D):
    """What the 2.7B plans say, from their own byte counts by class."""
    def rep(prec, mode, c=512):
        return next((m["report"] for m in D.mem if m.get("precision") == prec and m.get("ctx") == c and m.get("mode") == mode and "report" in m), None)
    f32, b16 = rep("fp32", "train"), rep("bf16", "train")
    lo32, lo16 = rep("fp32", "train", 128), rep("bf16", "train", 128)
    if not (f32 and b16):
        return ""
    bf, bb = f32["plan"]["by_class"], b16["plan"]["by_class"]
    out = [f"At ctx 512 the bf16 step plans {b16['plan']['peak_bytes'] / GiB:.2f} GiB against fp32's {f32['plan']['peak_bytes'] / GiB:.2f}: "
           f"activations and temporaries shrink from {(bf['activation'] + bf['temporary']) / GiB:.2f} to "
           f"{(bb['activation'] + bb['temporary']) / GiB:.2f} GiB (all tensors of those classes), but bf16 mode keeps a bf16 working copy of "
           f"the weights ({bb['param'] / GiB:.2f} GiB) beside the fp32 master weights, which sit with the AdamW moments in the "
           f"optimizer class ({bb['optimizer'] / GiB:.2f} GiB against fp32's {bf['optimizer'] / GiB:.2f})."]
    pf16 = next((r for r in D.peer if r.get("kind") == "forward_memory" and r.get("ctx") == 512 and r.get("mode") == "bf16"
                 and "peak_alloc_bytes" in r), None)
    fw16 = rep("bf16", "forward")
    if pf16 and fw16:
        out.append(f"For inference the bf16 plan holds {fw16['plan']['peak_bytes'] / GiB:.2f} GiB (bf16 weights, no master copy in "
                   f"forward mode), where PyTorch's autocast forward peaks at {pf16['peak_alloc_bytes'] / GiB:.2f} GiB: its fp32 "
                   f"parameters ({pf16['params_bytes'] / GiB:.2f} GiB allocated before the forward) plus the bf16 copies autocast "
                   "makes of them and the activations.")
    if lo32 and lo16:
        out.append(f"From ctx 128 to 512 the planned step peak grows only from {lo32['plan']['peak_bytes'] / GiB:.2f} to "
                   f"{f32['plan']['peak_bytes'] / GiB:.2f} GiB (fp32): at batch 4 the {(bf['param'] + bf['optimizer']) / GiB:.1f} GiB of "
                   f"weights and optimizer state dominate. The peak is where `{lo32['plan'].get('peak_tensor', '?')}` is made at ctx 128 "
                   f"({lo32['plan'].get('peak_phase', '?')} phase) and `{f32['plan'].get('peak_tensor', '?')}` at ctx 512 "
                   f"({f32['plan'].get('peak_phase', '?')} phase); the memory-over-time pictures show the whole step.")
    return " ".join(out) + "\n"


def residual_paragraph(D):
    rows = []
    for m in D.mem:
        if m.get("mode") != "forward" or "report" not in m:
            continue
        rep = m["report"]
        d = rep["dims"]
        el = 2 if m["precision"] == "bf16" else 4
        want = d["batch"] * d["ctx"] * d["d_model"] * el
        hit = next((b for b in rep["plan"].get("top_buffers", []) if re.fullmatch(r"blocks\.\d+\.x(~\d+)?", b["name"])), None)
        rows.append((m["precision"], m["ctx"], d, el, want, hit, m["cmd"]))
    if not rows:
        return "(The residual-stream check is missing: no forward memreport records.)"
    out = ["**One residual-stream activation.** batch · ctx · d_model · bytes per element, against the tensor of that "
           "shape in the plan (the residual stream after a block's attention, `blocks.{i}.x`, among the largest buffers live "
           "at the forward plan's peak; `top_buffers` in the forward memreport above):\n",
           "| precision | ctx | batch · ctx · d_model · bytes | = | the plan's tensor | shape | its bytes | equal |",
           "|---|---:|---|---:|---|---|---:|---|"]
    for prec, c, d, el, want, hit, cmd in rows:
        out.append(f"| {prec} | {c} | {d['batch']} · {c} · {d['d_model']} · {el} | {want:,} B ({want / 2**20:.1f} MiB) | "
                   f"{hit['name'] if hit else 'not among the largest at the peak'} | {hit['shape'] if hit else ''} | "
                   f"{format(hit['bytes'], ',') + ' B' if hit else ''} | {'yes' if hit and hit['bytes'] == want else 'NO'} |")
    return "\n".join(out)


def answers_section(D, a):
    xs = [r for r in D.ans if r.get("kind") == "xxl" and "report" in r]
    note = next((r for r in D.ans if r.get("kind") == "note"), None)
    if not xs:
        return "(No answers: the memreport runs are missing.)"
    o = ["CS336's XXL question: a stack of 126 feed-forward blocks, d_model 16384, d_ff 53248, two linears each "
         "(no attention, embedding or head; [models/cs336/ffn.yaml](../models/cs336/ffn.yaml), dims given on the command line), "
         "fp32 master weights, gradients and AdamW state, bf16 activations (`--precision bf16`; stg also keeps a bf16 working "
         "copy of the weights for the matmuls). One command each, no GPU needed:\n"]
    r1 = xs[0]["report"]
    P_ = r1["params"]
    bc = r1["plan"]["by_class"]
    o.append("```sh\n" + xs[0]["cmd"] + "\n```\n")
    o.append("| | bytes | GiB | H100s (80 GB = 80·10⁹ B) |")
    o.append("|---|---:|---:|---:|")
    state = bc["grad"] + bc["optimizer"]
    o.append(f"| parameters | {P_:,} | | |")
    o.append(f"| fp32 master weights + AdamW m, v (`optimizer` class) | {bc['optimizer']:,} | {bc['optimizer'] / GiB:.1f} | |")
    o.append(f"| fp32 gradients (`grad`) | {bc['grad']:,} | {bc['grad'] / GiB:.1f} | |")
    o.append(f"| **master weights + gradients + optimizer state (16 B/param)** | **{state:,}** | **{state / GiB:.1f}** | **{state / 80e9:.1f}** |")
    o.append(f"| bf16 working weights (`param`) | {bc['param']:,} | {bc['param'] / GiB:.1f} | |")
    o.append(f"| saved for backward at batch {xs[0]['batch']} × ctx {xs[0]['ctx']} (`activation`) | {bc['activation']:,} | {bc['activation'] / GiB:.2f} | |")
    o.append(f"| planned peak of the step | {r1['plan']['peak_bytes']:,} | {r1['plan']['peak_bytes'] / GiB:.1f} | {r1['plan']['peak_bytes'] / 80e9:.1f} |")
    o.append("")
    if len(xs) > 1:
        r2 = xs[1]["report"]
        t1, t2 = xs[0]["batch"] * xs[0]["ctx"], xs[1]["batch"] * xs[1]["ctx"]
        per_tok = (r2["plan"]["by_class"]["activation"] - bc["activation"]) / (t2 - t1)
        d = r1["dims"]
        formula = d["n_layers"] * (d["d_model"] + d["d_ff"]) * 2
        o.append(f"Activations saved for backward, per token: the same command at batch {xs[1]['batch']} "
                 f"(`--set batch={xs[1]['batch']}`) plans {r2['plan']['by_class']['activation']:,} B, so "
                 f"({r2['plan']['by_class']['activation']:,} − {bc['activation']:,}) / {t2 - t1} tokens = **{per_tok:,.0f} B per token** "
                 f"({per_tok / 2**20:.2f} MiB); by hand, each block saves its input (d_model) and its hidden (d_ff) in bf16: "
                 f"126 · (16384 + 53248) · 2 = {formula:,} B{' — the same' if abs(per_tok - formula) < 64 else ''} (the rest "
                 "of the plan's activation bytes is the loss's log-sum-exp, 4 B per token).\n")
    dp = [r for r in D.ans if r.get("kind") == "xxl-dp" and "text" in r]
    if dp:
        o.append("Per-device bytes with N data-parallel devices: `--world N --zero 0|1|3` adds a section to the text/md report "
                 "(batch 1 × ctx 1024 per device; the command is the one above with `--format md --world N --zero Z` in place of "
                 "`--format json`; the table quotes the section's *per device* line):\n")
        o.append("| N | ZeRO | per device (GiB) | per device (bytes) | what is sharded |")
        o.append("|---:|---:|---:|---:|---|")
        need = None
        for r in dp:
            m = re.search(r"per device: ([\d.]+) GiB \((\d+) bytes\)", r["text"])
            sh_ = re.search(r"sharded over \d+: ([^;\n]+)", r["text"])
            nd = re.search(r"devices needed for [^\n]*", r["text"])
            need = need or (nd.group(0) if nd else None)
            o.append(f"| {r['world']} | {r['zero']} | {m.group(1) if m else '?'} | {int(m.group(2)):,} | {sh_.group(1) if sh_ else 'nothing'} |"
                     if m else f"| {r['world']} | {r['zero']} | (no per-device line) | | |")
        o.append("")
        o.append("Example: `" + dp[0]["cmd"] + "`.")
        if need:
            o.append(f"\nThe report's own answer to \"how many devices\": {need.rstrip(';')}. "
                     "(memreport says that stages 2 and 3 are accounting only: stg runs stages 0 and 1.)")
    elif note:
        o.append("**Data parallel:** this build of `stg memreport` has no `--world N --zero 0|1|3` yet (it comes with the "
                 "data-parallel issue), so the per-device answers are not given here. By hand, for reference only: with "
                 "master weights, gradients and optimizer state sharded over N devices (ZeRO-3 / FSDP), each device holds "
                 f"{state:,} / N B of that state.")
    return "\n".join(o)


def main():
    ap = argparse.ArgumentParser(description="The CS336 systems study with stg: benchmarks, plots and docs/benchmarks.md.")
    ap.add_argument("--stg", default="build-gpu/stg")
    ap.add_argument("--cmd-timeout", type=float, default=300.0, help="seconds one command may take before it is killed")
    ap.add_argument("--out", default="docs/bench")
    ap.add_argument("--doc", default="docs/benchmarks.md")
    ap.add_argument("--parts", default="stg,peer,report")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--ctx", default=",".join(map(str, CTXS)))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--fp32-warmup", type=int, default=2)
    ap.add_argument("--fp32-iters", type=int, default=8)
    ap.add_argument("--warmup-iters", type=int, default=12)
    ap.add_argument("--warmup-ctx", type=int, default=512)
    ap.add_argument("--peer", default="peer/torch_lm.py")
    ap.add_argument("--python", default=sys.executable or "python3")
    ap.add_argument("--peer-step-only", default="bf16", help="peer modes timed for the full step only (bf16 eager by default)")
    ap.add_argument("--note", default="", help="report: a paragraph about this run, printed in the introduction")
    ap.add_argument("--append", action="store_true", help="peer: add to docs/bench/peer*.jsonl instead of starting them afresh")
    ap.add_argument("--source", default=None, help="what stg was built from (e.g. a commit), for the report")
    ap.add_argument("--merge-from", default="", help="merge: the --out directories of the runs to merge, comma-separated, in order")
    a = ap.parse_args()
    if not a.cmd_timeout > 0:
        sys.exit(f"bench_suite: --cmd-timeout must be a positive number of seconds, not {a.cmd_timeout}")
    CMD_TIMEOUT[0] = a.cmd_timeout
    a.sizes = [s for s in a.sizes.split(",") if s]
    a.ctx = [int(c) for c in a.ctx.split(",") if c]
    for s in a.sizes:
        if s not in SIZES:
            sys.exit(f"bench_suite: unknown size '{s}' (expected {', '.join(SIZES)})")
    parts = a.parts.split(",")
    unknown = [x for x in parts if x not in ("stg", "peer", "merge", "report")]
    if unknown:
        sys.exit(f"bench_suite: unknown part '{unknown[0]}' (expected stg, peer, merge, report)")
    if "merge" in parts:  # first: it checks its inputs before anything is written
        if "stg" in parts or "peer" in parts:
            sys.exit("bench_suite: --parts merge takes the records of earlier runs: not with stg or peer in one command")
        part_merge(a, a.out)
    os.makedirs(a.out, exist_ok=True)
    meta_common = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), host=platform.node(),
                       argv=sys.argv, source=a.source or "the working tree",
                       settings={k: getattr(a, k) for k in SETTINGS})
    if "stg" in parts:
        m = dict(meta_common)
        rc, out, _, _ = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else (1, "", "", 0)
        m["nvidia_smi"] = out.strip()
        part_stg(a, a.out, m)
        json.dump(m, open(os.path.join(a.out, "meta_stg.json"), "w"), indent=1)
    if "peer" in parts:
        m = dict(meta_common)
        mp = os.path.join(a.out, "meta_peer.json")
        part_peer(a, a.out, m)
        if a.append and os.path.exists(mp):  # one peer run in several commands: add the times up
            old = json.load(open(mp))
            m["peer_s"] = round(old.get("peer_s", 0) + m["peer_s"], 1)
            m["commands"] = old.get("commands", [old.get("argv")]) + [m["argv"]]
        json.dump(m, open(mp, "w"), indent=1)
    if "report" in parts:
        report(a, a.out, a.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
