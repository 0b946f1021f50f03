#!/usr/bin/env python3
"""Tests of the in-kernel performance tools (no GPU needed): tools/ncu_stalls.py on synthetic Nsight Compute
source-page CSVs (the sums, shares and ranges it prints, and its refusals of bad input), tools/ncu_kernels.py on a
synthetic metrics CSV (its unit conversions, groups, totals and rates, and its refusals), and tools/cubin_count.py's
ELF reader on a hand-built ELF file (its section sizes as instruction counts) and its refusal of a non-ELF file, and
tools/attn_trace.py on a synthetic timeline (its phase means, periods, spreads, lag, overlap and refusals), and
tools/timeline.py on a synthetic CUPTI timeline (spans, unions, streams, the tail, names, gaps, gzip, --period, --list
and refusals), and tools/smi_mark.py on a synthetic nvidia-smi log and marks (each span's samples and statistics, and
its refusals), and tools/perf_lib.sh's serial_report, variants_ab, variant_build and variant_checks on synthetic build logs and stubs (the ptxas notes it lists,
the warning for a variant whose wgmmas are serialized where the tree's are not, and the binaries it keeps) and
steps_ab with stub binaries (its rows, their order, each binary's arguments, a failing run named), and gpu_suite with a
stub ctest (a pass, a failure, and tests not built: no run of the suite), and attn_peer with a stub peer.
Exits 0 when every check passes, 1 with the failed checks listed."""
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def run(args):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def ncu_csv(path, rows, reasons=("stall_barrier", "stall_wait")):
    hdr = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"] + list(reasons)
    with open(path, "w") as f:
        f.write('"Kernel Name","void k(int)",\n')
        f.write(",".join(f'"{h}"' for h in hdr) + "\n")
        for i, (src, per) in enumerate(rows):
            vals = [f"0x{i:04x}", src, str(sum(per)), "100"] + [str(v) for v in per]
            f.write(",".join(f'"{v}"' for v in vals) + "\n")


def test_ncu_stalls(tmp):
    p = os.path.join(tmp, "k.csv")
    # instruction 0: 30 barrier; 1: 10 wait; 2: 50 barrier + 10 wait; total 100 (barrier 80, wait 20)
    ncu_csv(p, [("BAR.SYNC R2, 0x100", (30, 0)), ("FMUL R1, R2, R3", (0, 10)), ("HGMMA.64x64x16", (50, 10))])
    rc, out, err = run([os.path.join(TOOLS, "ncu_stalls.py"), p, "--top", "2", "--range", "0:2", "--range", "2:3"])
    check(rc == 0, f"ncu_stalls: exit {rc} ({err.strip()})")
    check("samples 100, instructions 3" in out, "ncu_stalls: total samples and instructions")
    check(any(l.split()[:3] == ["barrier", "80", "80.0%"] for l in out.splitlines()), "ncu_stalls: barrier share 80%")
    check(any(l.split()[:3] == ["wait", "20", "20.0%"] for l in out.splitlines()), "ncu_stalls: wait share 20%")
    top = [l for l in out.splitlines() if "#" in l and "%" in l]
    check(len(top) == 2 and "HGMMA" in top[0] and "BAR.SYNC" in top[1], "ncu_stalls: top instructions in order")
    check("[0, 2): 40 samples, 40.0%" in out, "ncu_stalls: range 0:2 sums 40")
    check("[2, 3): 60 samples, 60.0%" in out, "ncu_stalls: range 2:3 sums 60")
    # bad input: missing file, not a source CSV, no samples, a bad range
    for args, what in (([os.path.join(tmp, "none.csv")], "missing file"),
                       ([os.path.join(ROOT, "README.md")], "not a CSV of stall samples"),
                       ([p, "--range", "x"], "bad range")):
        rc, out, err = run([os.path.join(TOOLS, "ncu_stalls.py"), *args])
        check(rc != 0 and err.strip() and "Traceback" not in err, f"ncu_stalls: {what}: exit {rc}, '{err.strip()[:80]}'")
    z = os.path.join(tmp, "z.csv")
    ncu_csv(z, [("NOP", (0, 0))])
    rc, out, err = run([os.path.join(TOOLS, "ncu_stalls.py"), z])
    check(rc != 0 and "no stall samples" in err, "ncu_stalls: a CSV without samples is refused")


def test_ncu_kernels(tmp):
    cols = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
            "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    def row(i, name, metric, unit, value):
        v = [str(i), "1", "stg", "h", name, "1", "7", "(128, 1, 1)", "(10, 1, 1)", "0", "9.0", "m", metric, unit, value]
        return ",".join(f'"{x}"' for x in v) + "\n"
    a, b = "void mm_gv_kernel<1, 4, 1, bf16>(mm_gv_args)", "void mm_gv_kernel<1, 1, 8, bf16>(mm_gv_args)"
    c = "attention_cached_kernel<bf16, 1, 3, 0>(dec_attn_args)"
    p = os.path.join(tmp, "k.csv")
    with open(p, "w") as f:
        f.write("==PROF== Connected to process 1\n" + ",".join(f'"{x}"' for x in cols) + "\n")
        # kernel 0: 10 us, 30 MB read + 10 MB written; kernel 1: 1,000 ns (thousands separator), 4 MB; kernel 2: 0.03 ms, 50 MB
        f.write(row(0, a, "gpu__time_duration.sum", "usecond", "10") + row(0, a, "dram__bytes_read.sum", "Mbyte", "30")
                + row(0, a, "dram__bytes_write.sum", "Kbyte", "10,000"))
        f.write(row(1, c, "gpu__time_duration.sum", "ns", "1,000") + row(1, c, "dram__bytes_read.sum", "byte", "4000000"))
        f.write(row(2, b, "gpu__time_duration.sum", "msecond", "0.03") + row(2, b, "dram__bytes_read.sum", "Gbyte", "0.05"))
    rc, out, err = run([os.path.join(TOOLS, "ncu_kernels.py"), p])
    check(rc == 0, f"ncu_kernels: exit {rc} ({err.strip()})")
    lines = out.splitlines()
    check(lines and lines[0].startswith("3 kernels, 41.0 us, 0.094 GB"), f"ncu_kernels: totals: {lines[:1]}")
    # mm_gv_kernel's two launches fold into one group: 40 us, 90 MB, 2.25 TB/s; attention 1 us, 4 MB, 4.00 TB/s
    g = {l.split()[0]: l.split() for l in lines[2:]}
    check(g.get("mm_gv_kernel", [])[1:3] == ["2", "40.0"] and g["mm_gv_kernel"][-2:] == ["0.090", "2.25"],
          f"ncu_kernels: the folded group {g.get('mm_gv_kernel')}")
    check(g.get("attention_cached_kernel", [])[1:3] == ["1", "1.0"] and g["attention_cached_kernel"][-1] == "4.00",
          f"ncu_kernels: attention {g.get('attention_cached_kernel')}")
    check(lines[2].split()[0] == "mm_gv_kernel", "ncu_kernels: groups by time, largest first")
    rc, out, err = run([os.path.join(TOOLS, "ncu_kernels.py"), p, "--full"])
    check(rc == 0 and sum(1 for l in out.splitlines() if l.startswith("mm_gv_kernel<")) == 2, "ncu_kernels: --full keeps templates apart")
    bad = os.path.join(tmp, "bad.csv")
    with open(bad, "w") as f:
        f.write(",".join(f'"{x}"' for x in cols) + "\n" + row(0, a, "gpu__time_duration.sum", "furlong", "3"))
    for args, what in (([os.path.join(tmp, "none.csv")], "missing file"), ([os.path.join(ROOT, "README.md")], "not a metrics CSV"),
                       ([bad], "an unknown unit")):
        rc, out, err = run([os.path.join(TOOLS, "ncu_kernels.py"), *args])
        check(rc != 0 and err.strip() and "Traceback" not in err, f"ncu_kernels: {what}: exit {rc}, '{err.strip()[:80]}'")


def elf_with(sections):
    """A minimal 64-bit little-endian ELF: a null section, the named sections (sizes only), .shstrtab."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in sections) + b".shstrtab\0"
    shoff = 64 + len(names)
    shdrs = [bytes(64)]
    off = 1
    for n, size in sections:
        shdrs.append(struct.pack("<IIQQQQIIQQ", off, 1, 0, 0, 0, size, 0, 0, 16, 0))
        off += len(n) + 1
    shdrs.append(struct.pack("<IIQQQQIIQQ", off, 3, 0, 0, 64, len(names), 0, 0, 1, 0))
    hdr = bytearray(64)
    hdr[:5] = b"\x7fELF\x02"
    hdr[5] = 1
    struct.pack_into("<Q", hdr, 0x28, shoff)
    struct.pack_into("<HHH", hdr, 0x3A, 64, len(shdrs), len(shdrs) - 1)
    return bytes(hdr) + names + b"".join(shdrs)


def test_cubin_count(tmp):
    sys.path.insert(0, TOOLS)
    import cubin_count
    p = os.path.join(tmp, "k.cubin")
    with open(p, "wb") as f:
        f.write(elf_with([(".text._Z4kernv", 16 * 1720), (".nv.info", 64), (".text._Z5otherv", 16 * 3)]))
    got = sorted(cubin_count.text_sections(p))
    check(got == [("_Z4kernv", 1720), ("_Z5otherv", 3)], f"cubin_count: sections {got}")
    try:
        cubin_count.text_sections(os.path.join(ROOT, "README.md"))
        check(False, "cubin_count: a non-ELF file is refused")
    except ValueError as e:
        check("not a 64-bit ELF" in str(e), "cubin_count: the refusal names the file")
    rc, out, err = run([os.path.join(TOOLS, "cubin_count.py"), "x.cu", "--build", os.path.join(tmp, "nobuild")])
    check(rc != 0 and err.strip() and "Traceback" not in err, f"cubin_count: a missing build directory: exit {rc}")


def trace_file(path, skew=0):
    # 64 tiles, period 1000; phases 100 50 200 300 10 40 80 (then the rest of the period); warpgroup 1 400 later;
    # warp k of a warpgroup `skew` k cycles after its first; the producer (warp 8) publishes tile t at t 1000 - 400
    with open(path, "w") as f:
        f.write("# synthetic\n")
        for t in range(64):
            for w in range(9):
                if w < 8:
                    p0 = 10000 + 1000 * t + (400 if w >= 4 else 0) + skew * (w % 4)
                    p, acc = [p0], p0
                    for d in (100, 50, 200, 300, 10, 40, 80):
                        acc += d
                        p.append(acc)
                else:
                    p0 = 10000 + 1000 * t - 500
                    p = [p0, p0 + 20, p0 + 100, 0, 0, 0, 0, 0]
                f.write(f"{t} {w} " + " ".join(str(x) for x in p) + "\n")


def test_attn_trace(tmp):
    p = os.path.join(tmp, "trace.txt")
    trace_file(p, skew=6)
    rc, out, err = run([os.path.join(TOOLS, "attn_trace.py"), p, "--from", "8", "--to", "40"])
    check(rc == 0, f"attn_trace: exit {rc} ({err.strip()})")
    check("32 tiles (8 .. 39)" in out, "attn_trace: the steady tiles counted")
    want = {"stage + ring wait": 100, "issue (Sᵀ, dPᵀ, dV dK)": 50, "wait for Sᵀ": 200, "softmax": 300,
            "wait for dPᵀ": 10, "dS, wait for the last products": 40, "packs, release": 80,
            "period (loop top to loop top)": 1000, "period less the waits at the top": 900}
    for name, v in want.items():
        line = [l for l in out.splitlines() if l.startswith(name)]
        check(len(line) == 1 and line[0][len(name):].split() == [str(v), str(v)], f"attn_trace: {name} = {v} for both: {line}")
    check("reach the loop top 18 cycles apart" in out and "leave the ring's wait 18 apart" in out, "attn_trace: warp spread 18")
    check("wg 1 leaves its ring wait 400 cycles after wg 0" in out, "attn_trace: lag 400")
    check("overlap 150 cycles" in out, "attn_trace: post-issue overlap (p2 .. p6: 550 long, wg 1 400 later: 150)")
    check("tile t published -600 cycles" in out, "attn_trace: producer publication against the loop top")
    rc, out, err = run([os.path.join(TOOLS, "attn_trace.py"), p, "--from", "8", "--to", "10", "--tiles"])
    check(rc == 0 and len([l for l in out.splitlines() if l[:4].strip() in ("8", "9")]) == 2, "attn_trace: --tiles rows")
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write("1 2 3\n")
    for args, what in (([os.path.join(tmp, "none.txt")], "missing file"), ([bad], "short line"),
                       ([p, "--from", "70", "--to", "80"], "no tile in range")):
        rc, out, err = run([os.path.join(TOOLS, "attn_trace.py"), *args])
        check(rc != 0 and err.strip() and "Traceback" not in err, f"attn_trace: {what}: exit {rc}, '{err.strip()[:80]}'")


TL_HEADER = "kind\tstart\tend\tstream\tgraph\tnode\tcorrelation\tgrid\tblock\tregisters\tbytes\tname\n"


def timeline_file(path):
    # graph 7 replayed twice (correlation 100, then 101 at +20 ms with a last record 1 ms later: span 7.1 ms); in the
    # first (times in us from its start): stream 13 gemm 0-1000, gemm 1000-3000, norm 3500-4000; stream 14 attention
    # 500-2500 and 1200-1500 (inside others: the union's test); stream 15 adamw 2000-3000, adamw 4000-5800, partials_final 5800-6100. Graph 8 once, a memcpy outside.
    first = [(13, 0, 1000, "_Z4gemmv"), (13, 1000, 3000, "_Z4gemmv"), (13, 3500, 4000, "_ZN12_GLOBAL__N_14normEv"),
             (14, 500, 2500, "_Z4attnILi64EEvv"), (14, 1200, 1500, "_Z4attnILi64EEvv"), (15, 2000, 3000, "_Z12adamw_kernelILi2EEvv"),
             (15, 4000, 5800, "_Z12adamw_kernelILi2EEvv"), (15, 5800, 6100, "_Z21partials_final_kernelPKdl")]
    with open(path, "w") as f:
        f.write(TL_HEADER)
        f.write("memcpy\t100\t900\t7\t0\t0\t5\t0\t0\t0\t4096\tmemcpy\n")
        for corr, t0, extra in ((100, 1_000_000, False), (101, 21_000_000, True)):
            rows = first + ([(13, 6600, 7100, "_Z4gemmv")] if extra else [])
            for i, (st, a, b, n) in enumerate(rows):
                f.write(f"kernel\t{t0 + 1000 * a}\t{t0 + 1000 * b}\t{st}\t7\t{i + 1}\t{corr}\t132\t256\t32\t0\t{n}\n")
        f.write(f"kernel\t50000000\t50001000\t13\t8\t1\t300\t1\t32\t16\t0\t_Z3onev\n")
        f.write("# dropped 0\n")


def test_timeline(tmp):
    tool = os.path.join(TOOLS, "timeline.py")
    p = os.path.join(tmp, "t.tsv")
    timeline_file(p)
    rc, out, err = run([tool, p])
    out0 = out
    check(rc == 0, f"timeline: exit {rc} ({err.strip()})")
    check("graph 7: 2 replays, spans 6.100 / 6.100 / 7.100 ms" in out, "timeline: the replays' spans")
    check("1 other graphs; 1 records outside graphs; dropped 0" in out, "timeline: other graphs, outside records, dropped")
    check("replay 0: span 6.100 ms, 8 records, device busy 5.600 ms (91.8%), idle 0.500 ms; the records' own time 8.900 ms"
          " (on average 1.59 at once)" in out, "timeline: span, union, idle, own time of the median replay")
    row15 = [l.split() for l in out.splitlines() if l.split()[:1] == ["15"]]
    check(row15 == [["15", "3", "3.100", "2.000", "6.100", "1.000"]], f"timeline: stream 15's row {row15}")
    check("the others end at 4.000 ms, these at 6.100 (2.100 ms after; 2.100 ms of it running)" in out, "timeline: the tail")
    tops = [l.split() for l in out.splitlines() if " x " in l]
    check(tops[:3] == [["3.000", "ms", "33.7%", "2", "x", "gemm"], ["2.800", "ms", "31.5%", "2", "x", "adamw_kernel"],
                       ["2.300", "ms", "25.8%", "2", "x", "attn"]],
          f"timeline: the top names {tops[:2]}")
    check("norm" in [t[-1] for t in tops], "timeline: an anonymous namespace's name read as its own")
    check("device idle: 1 gaps, 0.500 ms" in out and "500.0 us at     3.000 ms: after gemm (stream 13), before norm (stream 13)" in out,
          "timeline: the gap and its neighbours")
    rc, out, err = run([tool, p, "--replay", "-1"])
    check(rc == 0 and "replay 1: span 7.100 ms, 9 records" in out, "timeline: --replay -1")
    rc, out, err = run([tool, p, "--graph", "8"])
    check(rc == 0 and "graph 8: 1 replays" in out and "nothing to compare" in out, "timeline: --graph 8")
    # the same file through gzip; --period and --list on the median replay and the last
    import gzip
    pz = p + ".gz"
    with open(p, "rb") as f, gzip.open(pz, "wb") as g:
        g.write(f.read())
    rc, outz, err = run([tool, pz])
    check(rc == 0 and outz == out0, f"timeline: a .gz file read as the plain one (exit {rc}, {err.strip()[:80]})")
    rc, out, err = run([tool, p, "--period", "gemm", "--list", "0.4:1.3"])
    check(rc == 0 and "period /gemm/: 2 records, 1 intervals between their starts: mean 1000.00 us, median 1000.00, min 1000.00, "
          "max 1000.00" in out, f"timeline: --period on replay 0 ({err.strip()[:80]})")
    listed = [l.split() for l in out.splitlines() if l.startswith("  ") and " stream " in l and "kernel" in l]
    check([x[:3] + x[-1:] for x in listed] == [["500.00", "2500.00", "2000.00", "attn"], ["1000.00", "3000.00", "2000.00", "gemm"],
                                               ["1200.00", "1500.00", "300.00", "attn"]], f"timeline: --list 0.4:1.3 {listed}")
    check(len(listed) == 3 and listed[0][3:11] == ["stream", "14", "grid", "132", "block", "256", "registers", "32"],
          f"timeline: --list's columns {listed[:1]}")
    rc, out, err = run([tool, p, "--replay", "-1", "--period", "gemm"])
    check(rc == 0 and "period /gemm/: 3 records, 2 intervals between their starts: mean 3300.00 us, median 3300.00, min 1000.00, "
          "max 5600.00" in out, "timeline: --period on the last replay")
    rc, out, err = run([tool, p, "--period", "nothing"])
    check(rc == 0 and "period /nothing/: 0 records match; no interval" in out, "timeline: --period without a match")
    bad = {"header": "kind\tstart\n", "fields": TL_HEADER + "kernel\t1\t2\n",
           "number": TL_HEADER + "kernel\t1\tx\t0\t7\t1\t1\t1\t1\t1\t0\tk\n",
           "order": TL_HEADER + "kernel\t5\t2\t0\t7\t1\t1\t1\t1\t1\t0\tk\n",
           "no graph": TL_HEADER + "kernel\t1\t2\t0\t0\t0\t1\t1\t1\t1\t0\tk\n"}
    nz = os.path.join(tmp, "plain.tsv.gz")  # not gzip data
    with open(nz, "w") as f:
        f.write(TL_HEADER)
    rc, out, err = run([tool, nz])
    check(rc == 2 and "plain.tsv.gz" in err and "Traceback" not in err, f"timeline: not gzip data: exit {rc}, '{err.strip()[:100]}'")
    for what, text in bad.items():
        b = os.path.join(tmp, "bad.tsv")
        with open(b, "w") as f:
            f.write(text)
        rc, out, err = run([tool, b])
        where = {"header": "bad.tsv:1:", "fields": "bad.tsv:2:", "number": "bad.tsv:2:", "order": "bad.tsv:2:", "no graph": "no graph replay"}[what]
        check(rc == 2 and where in err and "Traceback" not in err, f"timeline: {what}: exit {rc}, '{err.strip()[:100]}'")
    for args, what in (([os.path.join(tmp, "none.tsv")], "missing file"), ([p, "--graph", "99"], "no such graph"),
                       ([p, "--replay", "5"], "no such replay"), ([p, "--top", "-1"], "negative count"),
                       ([p, "--list", "2:1"], "a window backwards"), ([p, "--list", "x"], "a window not of numbers"),
                       ([p, "--list", "nan:1"], "a window of nan"), ([p, "--period", "("], "a bad pattern")):
        rc, out, err = run([tool, *args])
        check(rc == 2 and err.strip() and "Traceback" not in err, f"timeline: {what}: exit {rc}, '{err.strip()[:100]}'")


def test_smi_mark(tmp):
    import datetime
    tool = os.path.join(TOOLS, "smi_mark.py")
    t0 = 1700000000.0
    smi, marks = os.path.join(tmp, "smi.csv"), os.path.join(tmp, "marks.txt")
    with open(smi, "w") as f:
        for i in range(20):  # every 0.2 s: clock 1980 - i MHz, power 500 + i W, temperature 50 + i // 10 C
            ts = datetime.datetime.fromtimestamp(t0 + 0.2 * i).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            f.write(f"{ts}, {1980 - i} MHz, {500 + i}.00 W, {50 + i // 10}\n")
        f.write("2023/11/14 22:13:20.000, [N/A], [N/A], [N/A]\n")
    with open(marks, "w") as f:  # a: samples 1 .. 9; b: samples 11 .. 17; c: none
        f.write(f"{t0 + 0.1} a start\n{t0 + 1.9} a end\n{t0 + 2.1} b start\n{t0 + 3.5} b end\n{t0 + 9} c start\n{t0 + 10} c end\n")
    rc, out, err = run([tool, smi, marks])
    check(rc == 0, f"smi_mark: exit {rc} ({err.strip()})")
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]] for l in out.splitlines() if l.startswith("| ") and "span" not in l}
    check(rows.get("a") == ["9", "1975 / 1971", "505 / 509", "50"], f"smi_mark: span a {rows.get('a')}")
    check(rows.get("b") == ["7", "1966 / 1963", "514 / 517", "51"], f"smi_mark: span b {rows.get('b')}")
    check(rows.get("c") == ["0", "-", "-", "-"], f"smi_mark: span c {rows.get('c')}")
    bad1, bad2, bad3 = (os.path.join(tmp, n) for n in ("m1.txt", "m2.txt", "m3.txt"))
    with open(bad1, "w") as f:
        f.write("12 a middle\n")
    with open(bad2, "w") as f:
        f.write("x a start\n")
    with open(bad3, "w") as f:
        f.write("12 a end\n")
    for args, what in (([smi], "one argument"), ([os.path.join(tmp, "none.csv"), marks], "missing log"),
                       ([smi, bad1], "a mark that is not start or end"), ([smi, bad2], "a time that is not a number"),
                       ([smi, bad3], "an end without a start")):
        rc, out, err = run([tool, *args])
        check(rc != 0 and err.strip() and "Traceback" not in err, f"smi_mark: {what}: exit {rc}, '{err.strip()[:80]}'")


def test_perf_lib(tmp):
    """serial_report and variants_ab of tools/perf_lib.sh, sourced in a scratch repository (a stub .deps/env.sh and
    nvidia-smi), on build logs with ptxas notes; variant_tests replaced by one that fails for the variant "bad"."""
    import shutil
    repo = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(repo, "tools"))
    os.makedirs(os.path.join(repo, ".deps"))
    os.makedirs(os.path.join(tmp, "bin"))
    shutil.copy(os.path.join(TOOLS, "perf_lib.sh"), os.path.join(repo, "tools", "perf_lib.sh"))
    open(os.path.join(repo, ".deps", "env.sh"), "w").close()
    smi = os.path.join(tmp, "bin", "nvidia-smi")
    with open(smi, "w") as f:
        f.write("#!/bin/sh\necho 'FAKE GPU'\n")
    os.chmod(smi, 0o755)
    out = os.path.join(tmp, "out")
    os.makedirs(os.path.join(out, "l"))

    def note(code, kernel, what="wgmma.mma_async instructions are serialized due to something"):
        return f"ptxas info    : ({code}) Potential Performance Loss: {what} in the function '_Z9{kernel}ILi64ELi2EEvPf'\n"

    logs = {
        "build.txt": note("C7520", "kern_abc") + "ptxas info    : (C7519) warpgroup.arrive is injected in around line 1\n",
        "build_same.txt": note("C7520", "kern_abc"),
        "build_ser.txt": note("C7520", "kern_abc") + note("C7514", "kern_xyz") + note("C7514", "kern_xyz"),
        "build_bad.txt": note("C7515", "kern_abc"),
    }
    for n, text in logs.items():
        with open(os.path.join(out, "l", n), "w") as f:
            f.write("[1/2] Building CUDA object x.o\n" + text)
    script = ('set -u; source tools/perf_lib.sh "$1" > /dev/null; '
              'variant_tests() { [ "$1" != bad ]; }; variants_ab same ser bad; echo "B=${B[*]}"')
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
    lines = r.stdout.splitlines()
    check(r.returncode == 0, f"perf_lib: exit {r.returncode} ({r.stderr.strip()[:200]})")
    check("[tree ptxas]       1 C7520 kern_abc<Li64ELi2EEvPf>" in lines, f"perf_lib: the tree's note: {lines[:3]}")
    check(not any("C7519" in l for l in lines), "perf_lib: C7519 (not a serialization) listed")
    check("[ser ptxas]       2 C7514 kern_xyz<Li64ELi2EEvPf>" in lines, "perf_lib: the variant's note counted twice")
    warn = [l for l in lines if "WARNING" in l]
    check(len(warn) == 2 and warn[0].startswith("ser: WARNING") and "C7514 kern_xyz" in warn[0] and "C7520" not in warn[0],
          f"perf_lib: the warnings {warn}")
    check(len(warn) == 2 and warn[1].startswith("bad: WARNING") and "C7515 kern_abc" in warn[1], f"perf_lib: bad's warning {warn}")
    check("bad: attention tests failed; its rates not run" in lines, "perf_lib: the failing variant not named")
    check("B=tree:build-gpu/stg same:/tmp/same/build-gpu/stg ser:/tmp/ser/build-gpu/stg" in lines,
          f"perf_lib: the binaries kept: {[l for l in lines if l.startswith('B=')]}")
    # steps_ab: each round, each binary in turn, its own stg (STG_BIN) with the row's options; a failing run named
    for name, rc, ms in (("fa", 0, 1.5), ("fb", 0, 2.5), ("fc", 3, 0)):
        fake = os.path.join(tmp, "bin", name)
        with open(fake, "w") as f:
            f.write(f"#!/bin/sh\necho \"{name} $*\" >> {os.path.join(tmp, 'args.txt')}\n"
                    f"echo '{{\"median_ms\": {ms}, \"min_ms\": {ms}, \"mfu\": 0.5}}'\nexit {rc}\n")
        os.chmod(fake, 0o755)
    b = os.path.join(tmp, "bin")
    script = f'set -u; source tools/perf_lib.sh "$1" > /dev/null; steps_ab xl 1024 4 2 a:{b}/fa b:{b}/fb c:{b}/fc'
    r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
    rows = [l for l in r.stdout.splitlines() if l.strip()]
    check(r.returncode == 0 and len(rows) == 6, f"perf_lib steps_ab: exit {r.returncode}, rows {rows}")
    check(len(rows) == 6 and rows[0].startswith("xl 1024 b4 [options ib, a] r1 ") and "1.5" in rows[0]
          and rows[1].startswith("xl 1024 b4 [options ib, b] r1 ") and "2.5" in rows[1] and rows[5].startswith("xl 1024 b4 [options ib, c] r2"),
          f"perf_lib steps_ab: the rows {rows}")
    check(len(rows) == 6 and "failed" in rows[2], f"perf_lib steps_ab: the failing binary's row {rows[2:3]}")
    af = os.path.join(tmp, "args.txt")
    args = open(af).read().splitlines() if os.path.exists(af) else []
    want = ("bench models/cs336/xl.yaml --set ctx=1024 --set batch=4 --precision bf16 --grad-dtype bf16 --gemm-tune on "
            "--optimizer-in-backward --warmup 3 --iters 10 --json")
    check([a.split(" ", 1)[0] for a in args] == ["fa", "fb", "fc"] * 2 and all(a.split(" ", 1)[1] == want for a in args),
          f"perf_lib steps_ab: the runs {args[:2]}")
    # gpu_suite: ctest's summary; a suite with tests "Not Run" (a partial build) is named as no run and returns 1
    os.makedirs(os.path.join(repo, "build-gpu"), exist_ok=True)
    for case, text, code, want_rc, want_not in (
            ("pass", "100% tests passed, 0 tests failed out of 2\n", 0, 0, False),
            ("notrun", " 1/2 Test #14: test_gpu_accum ....***Not Run   0.00 sec\n50% tests passed, 1 tests failed out of 2\n", 8, 1, True),
            ("fail", " 1/2 Test #14: test_gpu_accum ....***Failed   0.10 sec\n50% tests passed, 1 tests failed out of 2\n", 8, 1, False)):
        with open(os.path.join(tmp, "bin", "ctest"), "w") as f:
            f.write(f"#!/bin/sh\nprintf '%b' '{text}'\nexit {code}\n")
        os.chmod(os.path.join(tmp, "bin", "ctest"), 0o755)
        script = 'set -u; source tools/perf_lib.sh "$1" > /dev/null; gpu_suite 9999; echo "rc=$?"'
        r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
        lines = r.stdout.splitlines()
        check(f"rc={want_rc}" in lines, f"perf_lib gpu_suite {case}: {lines}")
        check(any("NOT a run of the GPU suite" in l for l in lines) == want_not, f"perf_lib gpu_suite {case}: the not-run line {lines}")
        check(f"ctest -L gpu: {code}" in lines, f"perf_lib gpu_suite {case}: ctest's status {lines}")
        check(any("tests passed" in l for l in lines), f"perf_lib gpu_suite {case}: the summary line {lines}")
    # attn_peer: the peer's arguments, its cuDNN rows printed (not the others), and a failing peer named
    os.makedirs(os.path.join(repo, "peer"), exist_ok=True)
    for case, code in (("ok", 0), ("bad", 4)):
        with open(os.path.join(repo, "peer", "torch_attn.py"), "w") as f:
            f.write("import sys\nprint('ARGS', ' '.join(sys.argv[1:]))\n"
                    "print('{\"backend\": \"FLASH_ATTENTION\"}')\nprint('{\"backend\": \"CUDNN_ATTENTION\"}')\n"
                    f"sys.exit({code})\n")
        script = 'set -u; source tools/perf_lib.sh "$1" > /dev/null; attn_peer 128; cat "$1/l/peer_attn.txt"'
        r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
        lines = r.stdout.splitlines()
        check(lines[:1] == ['{"backend": "CUDNN_ATTENTION"}'] if code == 0 else lines[0].startswith("attn_peer: torch_attn.py failed (exit 4)"),
              f"perf_lib attn_peer {case}: {lines[:3]}")
        check("ARGS --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20" in lines, f"perf_lib attn_peer {case}: arguments {lines}")
        check(not any(l.startswith('{"backend": "FLASH') for l in lines[:3]), f"perf_lib attn_peer {case}: FLASH rows printed")
    # variant_checks: the variant's tests, then the three sanitizer runs in its build; neither after a failure
    san = os.path.join(repo, "tools", "sanitize_gpu.sh")
    sargs = os.path.join(tmp, "san_args.txt")
    for case, tests_ok, san_rc, want_rc, want_san in (("pass", True, 0, 0, True), ("tests", False, 0, 1, False),
                                                       ("san", True, 1, 1, True)):
        if os.path.exists(sargs):
            os.remove(sargs)
        with open(san, "w") as f:
            f.write(f"#!/bin/sh\necho \"$@\" > {sargs}\nexit {san_rc}\n")
        os.chmod(san, 0o755)
        script = ('set -u; source tools/perf_lib.sh "$1" > /dev/null; '
                  f'variant_tests() {{ echo "tests $1"; {"true" if tests_ok else "false"}; }}; variant_checks vv; echo "rc=$?"')
        r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
        lines = r.stdout.splitlines()
        check("tests vv" in lines and f"rc={want_rc}" in lines, f"perf_lib variant_checks {case}: {lines}")
        got = open(sargs).read().split() if os.path.exists(sargs) else None
        check((got is not None) == want_san, f"perf_lib variant_checks {case}: sanitizers run {got is not None}")
        if want_san and got:
            check(got == ["/tmp/vv/build-gpu", f"{out}/l/san_vv", "100", "memcheck:test_gpu_mm_attn:*attention_bf16*",
                          "racecheck:test_gpu_mm_attn:*attention_bf16*", "memcheck:test_gpu_ops:*attention_gqa*"],
                  f"perf_lib variant_checks {case}: the sanitizer runs {got}")
    # variant_build: the variant and the tree's stg built, then the variant's ptxas notes; 1 when the tree's build fails
    with open(os.path.join(out, "l", "build_vb.txt"), "w") as f:
        f.write(note("C7514", "kern_q"))
    for case, pb, want_rc in (("ok", 0, 0), ("treefail", 2, 1)):
        script = ('set -u; source tools/perf_lib.sh "$1" > /dev/null; variant() { echo "variant $*"; }; '
                  f'perf_build() {{ echo "perf_build $*"; return {pb}; }}; variant_build vb - "-DX=1"; echo "rc=$?"')
        r = subprocess.run(["bash", "-c", script, "x", out], cwd=repo, capture_output=True, text=True, env=env)
        lines = r.stdout.splitlines()
        check(lines[:2] == ["variant vb - -DX=1", "perf_build stg"] and f"rc={want_rc}" in lines, f"perf_lib variant_build {case}: {lines}")
        check(("[vb ptxas]       1 C7514 kern_q<Li64ELi2EEvPf>" in lines) == (pb == 0), f"perf_lib variant_build {case}: notes {lines}")


def main():
    sys.dont_write_bytecode = True
    with tempfile.TemporaryDirectory() as tmp:
        test_ncu_stalls(tmp)
        test_ncu_kernels(tmp)
        test_cubin_count(tmp)
        test_attn_trace(tmp)
        test_timeline(tmp)
        test_smi_mark(tmp)
        test_perf_lib(tmp)
    for f in fails:
        print("FAILED:", f)
    print(f"{'ok' if not fails else 'FAILED'}: tests/py/test_perf_tools.py ({len(fails)} failed checks)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
