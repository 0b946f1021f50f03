#!/usr/bin/env node
// Writes GPT-2's vocab.json and merges.txt from the ranks that the npm package `tiktoken` ships
// (tiktoken/encoders/gpt2.json: lines "KEY OFFSET b64 b64 ...", token i of a line having rank
// OFFSET + i). tiktoken keeps only bytes -> rank; the merges are recovered the way tiktoken's own
// loader derives them the other way round: for each multi-byte token of rank r, BPE over its bytes
// with the tokens of rank < r ends in exactly two parts, and those are the merge that made it.
//   NODE_PATH=/tmp/tk/node_modules node tools/tok/tiktoken_to_gpt2.js OUT_DIR
const fs = require("fs");
const path = require("path");

const out = process.argv[2];
if (!out) {
  console.error("usage: tiktoken_to_gpt2.js OUT_DIR");
  process.exit(2);
}
const enc = require(require.resolve("tiktoken/encoders/gpt2.json"));
const ranks = new Map(); // "b,b,b" -> rank
const tokens = []; // rank -> Buffer
for (const line of enc.bpe_ranks.split("\n")) {
  if (!line) continue;
  const f = line.split(" ");
  const off = parseInt(f[1], 10);
  for (let i = 2; i < f.length; i++) {
    const b = Buffer.from(f[i], "base64");
    tokens[off + i - 2] = b;
    ranks.set([...b].join(","), off + i - 2);
  }
}
const key = (arr) => arr.join(",");

// GPT-2's bytes-to-unicode alphabet.
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++)
  if (!bs.includes(b)) {
    bs.push(b);
    cs.push(256 + n++);
  }
const b2u = new Array(256);
bs.forEach((b, i) => (b2u[b] = String.fromCodePoint(cs[i])));
const str = (buf) => [...buf].map((b) => b2u[b]).join("");

const merges = [];
for (let r = 0; r < tokens.length; r++) {
  const t = tokens[r];
  if (!t || t.length < 2) continue;
  let parts = [...t].map((b) => [b]);
  for (;;) {
    let best = -1, at = -1;
    for (let i = 0; i + 1 < parts.length; i++) {
      const k = ranks.get(key(parts[i].concat(parts[i + 1])));
      if (k !== undefined && k < r && (best < 0 || k < best)) {
        best = k;
        at = i;
      }
    }
    if (best < 0) break;
    parts.splice(at, 2, parts[at].concat(parts[at + 1]));
  }
  if (parts.length !== 2) throw new Error(`token ${r} does not split into two parts`);
  merges.push([r, parts[0], parts[1]]);
}
merges.sort((a, b) => a[0] - b[0]);

const vocab = {};
tokens.forEach((t, r) => (vocab[str(t)] = r));
for (const [s, id] of Object.entries(enc.special_tokens)) vocab[s] = id;
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "vocab.json"), JSON.stringify(vocab));
fs.writeFileSync(path.join(out, "merges.txt"),
                 "#version: 0.2\n" + merges.map(([, a, b]) => str(Buffer.from(a)) + " " + str(Buffer.from(b))).join("\n") + "\n");
console.log(`${out}: ${Object.keys(vocab).length} tokens, ${merges.length} merges`);
