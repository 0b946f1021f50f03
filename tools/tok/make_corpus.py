#!/usr/bin/env python3
"""Builds a text corpus from documentation found on this machine (Debian's /usr/share/doc, man
pages with their roff markup stripped, Python's standard library sources, other .txt/.md/.rst
files), for measuring the tokenizer (docs/TOKENIZER.md). Every file is decompressed when gzipped,
kept only when it is UTF-8 text, and written as one document followed by a blank line. The output
is valid UTF-8 (so that tiktoken, which takes strings, sees the same bytes as stg).

    python3 tools/tok/make_corpus.py OUT MEGABYTES [english|mixed]

english: English sources only (the man pages of man1..man8); mixed: also the translated man pages
(de, fr, ja, ru, zh_CN, ...), interleaved, and the C headers of /usr/include.
"""
import gzip
import os
import re
import sys

ROFF_REQ = re.compile(r"^[.'][ \t]*[A-Za-z\\\"]")
ROFF_ESC = re.compile(r"\\f[BIRPC1-4]|\\f\(..|\\f\[[^]]*\]|\\s[-+]?\d|\\\(..|\\\[[^]]*\]|\\[&|^%e-]")


def read(path):
    try:
        with open(path, "rb") as f:
            data = f.read(8 << 20)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile, ValueError):
        return None
    if b"\0" in data[:4096]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text


def strip_roff(text):
    out = []
    for line in text.split("\n"):
        if ROFF_REQ.match(line):
            # keep the words of headings and font requests (.SH NAME, .B word), drop the rest
            m = re.match(r"^[.'][ \t]*(SH|SS|B|I|BR|IR|RB|RI|BI|IB|TP|IP)\b[ \t]*(.*)$", line)
            if m and m.group(2):
                out.append(ROFF_ESC.sub("", m.group(2)).replace('"', ""))
            continue
        out.append(ROFF_ESC.sub("", line).replace("\\-", "-").replace("\\\\", "\\"))
    return "\n".join(out)


def walk(root, pred):
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p) and pred(p):
                yield p


def sources(kind):
    man_en = [("/usr/share/man/man%d" % i) for i in range(1, 9)]
    man_xx = sorted(os.path.join("/usr/share/man", d) for d in os.listdir("/usr/share/man") if not d.startswith("man"))
    lists = []
    lists.append(("doc", walk("/usr/share/doc", lambda p: not p.endswith((".png", ".jpg", ".gif", ".pdf", ".svg", ".ico")))))
    lists.append(("man", (p for r in man_en for p in walk(r, lambda p: True))))
    lists.append(("py", walk("/usr/lib/python3.11", lambda p: p.endswith((".py", ".txt", ".rst")))))
    lists.append(("txt", (p for r in ("/usr/share", "/usr/lib", "/etc") for p in
                          walk(r, lambda p: p.endswith((".txt", ".md", ".rst")) and not p.startswith(("/usr/share/doc", "/usr/lib/python3.11"))))))
    if kind == "mixed":
        lists.append(("man-xx", (p for r in man_xx for p in walk(r, lambda p: True))))
        lists.append(("include", walk("/usr/include", lambda p: p.endswith(".h"))))
    return lists


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, limit = sys.argv[1], int(float(sys.argv[2]) * 1e6)
    kind = sys.argv[3] if len(sys.argv) > 3 else "english"
    total, files, seen = 0, 0, set()
    gens = [(name, iter(g)) for name, g in sources(kind)]
    stats = {}
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        # Round robin over the sources, so that any prefix of the corpus mixes them all.
        while gens and total < limit:
            for name, g in list(gens):
                try:
                    p = next(g)
                except StopIteration:
                    gens.remove((name, g))
                    continue
                real = os.path.realpath(p)
                if real in seen:
                    continue
                seen.add(real)
                text = read(p)
                if not text or not text.strip():
                    continue
                if name.startswith("man"):
                    text = strip_roff(text)
                data = (text.rstrip("\n") + "\n\n").encode("utf-8")
                data = data[: limit - total] if total + len(data) > limit else data
                data = data.decode("utf-8", "ignore").encode("utf-8")  # a cut may split a character
                f.write(data)
                total += len(data)
                files += 1
                stats[name] = stats.get(name, 0) + len(data)
                if total >= limit:
                    break
    os.replace(tmp, out)
    print("%s: %.1f MB from %d files (%s)" % (out, total / 1e6, files,
                                              ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in stats.items())))


main()
