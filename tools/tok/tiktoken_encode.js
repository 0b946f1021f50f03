#!/usr/bin/env node
// Encodes a UTF-8 file with tiktoken's gpt2 encoding (npm `tiktoken`, Rust compiled to WASM), every
// special token allowed (as stg encodes special tokens found in text), and writes the ids as raw
// little-endian uint16 (what `stg tokenize` writes for a vocabulary of 50257). Prints the time of
// the encode call alone (the file is read and decoded before the clock starts).
//   NODE_PATH=/tmp/tk/node_modules node tools/tok/tiktoken_encode.js IN.txt OUT.bin
const fs = require("fs");
const { get_encoding } = require("tiktoken");

const [inp, out] = process.argv.slice(2);
if (!inp || !out) {
  console.error("usage: tiktoken_encode.js IN.txt OUT.bin");
  process.exit(2);
}
const buf = fs.readFileSync(inp);
const text = buf.toString("utf8");
const enc = get_encoding("gpt2");
const t0 = process.hrtime.bigint();
const ids = enc.encode(text, "all");
const dt = Number(process.hrtime.bigint() - t0) / 1e9;
const u16 = new Uint16Array(ids.length);
for (let i = 0; i < ids.length; i++) u16[i] = ids[i];
fs.writeFileSync(out, Buffer.from(u16.buffer));
enc.free();
console.log(`tiktoken gpt2: ${ids.length} tokens from ${(buf.length / 1e6).toFixed(1)} MB in ${dt.toFixed(2)} s: ${(buf.length / 1e6 / dt).toFixed(2)} MB/s`);
