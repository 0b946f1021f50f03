#!/usr/bin/env python3
"""Tests of the in-kernel performance tools (no GPU needed): tools/ncu_stalls.py on synthetic Nsight Compute
source-page CSVs (the sums, shares and ranges it prints, and its refusals of bad input), and tools/cubin_count.py's
ELF reader on a hand-built ELF file (its section sizes as instruction counts) and its refusal of a non-ELF file.
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


def main():
    sys.dont_write_bytecode = True
    with tempfile.TemporaryDirectory() as tmp:
        test_ncu_stalls(tmp)
        test_cubin_count(tmp)
    for f in fails:
        print("FAILED:", f)
    print(f"{'ok' if not fails else 'FAILED'}: tests/py/test_perf_tools.py ({len(fails)} failed checks)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
