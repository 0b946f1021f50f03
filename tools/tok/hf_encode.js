#!/usr/bin/env node
// Encodes a UTF-8 file with a tokenizer.json through @huggingface/tokenizers (tokenizers.js, an
// independent JavaScript implementation of the Hugging Face tokenizer formats) and writes the ids
// as raw little-endian uint16 (uint32 with a vocabulary over 65536, without stg's header: compare
// with `tail -c +17`). The text is encoded in pieces of about 1 MB cut after a newline that has a
// non-space character on both sides: a pre-token always ends there, so the pieces' ids concatenate
// to the ids of the whole text.
//   NODE_PATH=/tmp/tk/node_modules node tools/tok/hf_encode.js tokenizer.json IN.txt OUT.bin
const fs = require("fs");
const { Tokenizer } = require("@huggingface/tokenizers");

const [tj, inp, out] = process.argv.slice(2);
if (!tj || !inp || !out) {
  console.error("usage: hf_encode.js tokenizer.json IN.txt OUT.bin");
  process.exit(2);
}
const json = JSON.parse(fs.readFileSync(tj, "utf8"));
const tok = new Tokenizer(json, {});
const text = fs.readFileSync(inp).toString("utf8");
const ids = [];
const t0 = process.hrtime.bigint();
const cut = /\S\n(?=\S)/g;
let start = 0;
while (start < text.length) {
  let end = text.length;
  if (text.length - start > 1 << 20) {
    cut.lastIndex = start + (1 << 20);
    const m = cut.exec(text);
    if (m) end = m.index + 2;
  }
  const e = tok.encode(text.slice(start, end), { add_special_tokens: false });
  for (const id of e.ids) ids.push(id);
  start = end;
}
const dt = Number(process.hrtime.bigint() - t0) / 1e9;
const vocab = Object.keys(json.model.vocab).length + (json.added_tokens || []).length;
const arr = vocab > 65536 ? new Uint32Array(ids) : new Uint16Array(ids);
fs.writeFileSync(out, Buffer.from(arr.buffer));
console.log(`tokenizers.js: ${ids.length} tokens from ${(Buffer.byteLength(text) / 1e6).toFixed(1)} MB in ${dt.toFixed(2)} s`);
