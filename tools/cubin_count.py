#!/usr/bin/env python3
"""Count the SASS instructions of each kernel a CUDA source compiles to, with no GPU and no disassembler.

Builds the source's cubin with the exact nvcc command the build directory's ninja uses for it (`-c` replaced by
`-cubin`, the output redirected to a temporary file), then reads the ELF section headers: each kernel's code is a
section `.text.<mangled name>`, and every sm_90 instruction is 16 bytes. Compare two trees' counts to see what a
change did to a kernel before spending device time on it (the dk/dv backward kernel at head dim 64: 1,904 -> 1,720
when its producer took over the consumers' per-tile statistics, twenty-first session; ncu's source page of the
same kernel listed 1,904 instructions).

Usage: tools/cubin_count.py SOURCE_SUBSTRING [--build build-gpu] [--filter REGEX]
Needs a configured build directory (cmake -G Ninja) that compiles SOURCE, and nvcc on the PATH that it names.
"""
import argparse
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile


def text_sections(path):
    with open(path, "rb") as f:
        d = f.read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        raise ValueError(f"{path}: not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stro = secs[shstrndx][4]
    out = []
    for s in secs:
        end = d.index(b"\0", stro + s[0])
        name = d[stro + s[0]:end].decode(errors="replace")
        if name.startswith(".text."):
            out.append((name[6:], s[5] // 16))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    try:
        cmds = subprocess.run(["ninja", "-C", a.build, "-t", "commands"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"{a.build}: cannot list its build commands ({e})")
    cmd = next((c for c in cmds.splitlines() if a.source in c and " -c " in c and "nvcc" in c), None)
    if cmd is None:
        sys.exit(f"{a.build}: no nvcc command compiles a source matching '{a.source}'")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        cmd = re.sub(r" -o \S+", " -o " + shlex.quote(cubin), cmd.replace(" -c ", " -cubin ", 1), count=1)
        r = subprocess.run(cmd, shell=True, cwd=a.build, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-2000:])
            sys.exit(f"nvcc failed ({r.returncode})")
        try:
            secs = text_sections(cubin)
        except (OSError, ValueError) as e:
            sys.exit(str(e))
    rx = re.compile(a.filter)
    for name, n in sorted(secs):
        if rx.search(name):
            print(f"{n:7d}  {name}")


if __name__ == "__main__":
    main()
