#!/usr/bin/env node
// Re-derives the expected pre-tokens of tests/test_tokenizer.c's table (the lines between
// "PRETOK CASES BEGIN" and "PRETOK CASES END": C string literals, pre-tokens joined by '|') with
// JavaScript's own regex engine and GPT-2's pattern, and reports any case where they differ.
// Cases that are not valid UTF-8 are skipped (a JS string cannot hold them). JS's \s differs from
// Unicode's White_Space (which stg, Rust's regex and Python's `regex` use) in U+0085 and U+FEFF;
// the table has neither.
//   node tools/tok/pretok_check.js [tests/test_tokenizer.c]
const fs = require("fs");
const src = fs.readFileSync(process.argv[2] || "tests/test_tokenizer.c", "utf8");
const block = src.split("PRETOK CASES BEGIN")[1].split("PRETOK CASES END")[0];
const pat = /'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

// The bytes of a line's C string literals (escapes \n \t \r \\ \" \' \xHH; other bytes as written).
function cbytes(line) {
  const out = [];
  const lits = line.match(/"(?:[^"\\]|\\.)*"/g) || [];
  for (const lit of lits) {
    const b = Buffer.from(lit.slice(1, -1), "utf8");
    for (let i = 0; i < b.length; i++) {
      if (b[i] !== 0x5c) { out.push(b[i]); continue; }
      const c = String.fromCharCode(b[++i]);
      if (c === "x") {
        let h = "";
        while (i + 1 < b.length && /[0-9a-fA-F]/.test(String.fromCharCode(b[i + 1]))) h += String.fromCharCode(b[++i]);
        out.push(parseInt(h, 16));
      } else out.push({ n: 10, t: 9, r: 13, "\\": 92, '"': 34, "'": 39 }[c]);
    }
  }
  return lits.length ? Buffer.from(out) : null;
}

let checked = 0, skipped = 0, bad = 0;
for (const line of block.split("\n")) {
  const b = cbytes(line);
  if (!b) continue;
  const s = b.toString("utf8");
  if (!Buffer.from(s, "utf8").equals(b)) { skipped++; continue; }
  const want = s.split("|");
  const got = s.replace(/\|/g, "").match(pat) || [];
  checked++;
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    bad++;
    console.log(`MISMATCH ${JSON.stringify(s)}: JS regex gives ${JSON.stringify(got)}`);
  }
}
console.log(`${checked} cases agree with the JS regex${bad ? ` except ${bad}` : ""}; ${skipped} skipped (not valid UTF-8)`);
process.exit(bad ? 1 : 0);
