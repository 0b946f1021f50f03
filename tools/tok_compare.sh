#!/usr/bin/env bash
# Encoding against independent implementations (docs/TOKENIZER.md), on the 60 MB mixed corpus:
#   1. GPT-2's tokenizer: stg with vocab.json + merges.txt converted from the ranks in the npm package
#      `tiktoken` (tools/tok/tiktoken_to_gpt2.js), against tiktoken's gpt2 encoding: ids identical
#      (cmp) and the throughput of each;
#   2. the tokenizer stg trained (tools/tok_bench.sh), as tokenizer.json, read by
#      @huggingface/tokenizers (tokenizers.js): ids identical;
#   3. GPT-2's files written back by stg as tokenizer.json, through tokenizers.js: ids identical.
#   tools/tok_compare.sh [STG] [DIR] [NODE_MODULES]   (defaults build-rel/stg, /tmp/stg-tok, /tmp/tk/node_modules,
#                                                     where `npm install tiktoken @huggingface/tokenizers` put them)
set -euo pipefail
cd "$(dirname "$0")/.."
stg=${1:-build-rel/stg}
dir=${2:-/tmp/stg-tok}
export NODE_PATH=${3:-/tmp/tk/node_modules}
[ -f "$dir/corpus-mixed.txt" ] || tools/make_corpus.sh "$dir"
text=$dir/corpus-mixed.txt
mb=$(awk -v b="$(stat -c %s "$text")" 'BEGIN {printf "%.1f", b / 1e6}')
echo "== $(date -u +%F) $(nproc) cores; $text: $mb MB"
[ -f "$dir/gpt2/merges.txt" ] || node tools/tok/tiktoken_to_gpt2.js "$dir/gpt2"

echo "== 1. GPT-2: tiktoken (npm, WASM) against stg tokenize"
node tools/tok/tiktoken_encode.js "$text" "$dir/mixed.tiktoken.bin"
t0=$(date +%s.%N)
"$stg" tokenize --tokenizer "$dir/gpt2/vocab.json" "$text" -o "$dir/mixed.stg-gpt2.bin" 2>/dev/null
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v mb="$mb" 'BEGIN {printf "stg tokenize (whole command: load, read, encode, write): %.2f s: %.2f MB/s\n", b - a, mb / (b - a)}'
cmp "$dir/mixed.tiktoken.bin" "$dir/mixed.stg-gpt2.bin" && echo "ids identical ($(( $(stat -c %s "$dir/mixed.stg-gpt2.bin") / 2 )) tokens)"

echo "== 2. stg's trained tokenizer (tokenizer.json) through tokenizers.js"
[ -f "$dir/stg10k/tokenizer.json" ] || "$stg" tokenizer train "$dir/corpus-en.txt" --vocab 10000 --special '<|endoftext|>' -o "$dir/stg10k/"
node tools/tok/hf_encode.js "$dir/stg10k/tokenizer.json" "$text" "$dir/mixed.hf-stg10k.bin"
"$stg" tokenize --tokenizer "$dir/stg10k/tokenizer.json" "$text" -o "$dir/mixed.stg10k.bin" 2>/dev/null
cmp "$dir/mixed.hf-stg10k.bin" "$dir/mixed.stg10k.bin" && echo "ids identical ($(( $(stat -c %s "$dir/mixed.stg10k.bin") / 2 )) tokens)"

echo "== 3. GPT-2 as written by stg (tokenizer.json) through tokenizers.js, first 10 MB"
"$stg" tokenizer convert "$dir/gpt2/vocab.json" -o "$dir/gpt2-stg.json"
head -c 10000000 "$text" | iconv -f utf-8 -t utf-8 -c > "$dir/mixed10.txt"
node tools/tok/hf_encode.js "$dir/gpt2-stg.json" "$dir/mixed10.txt" "$dir/mixed10.hf-gpt2.bin"
"$stg" tokenize --tokenizer "$dir/gpt2/vocab.json" "$dir/mixed10.txt" -o "$dir/mixed10.stg-gpt2.bin" 2>/dev/null
cmp "$dir/mixed10.hf-gpt2.bin" "$dir/mixed10.stg-gpt2.bin" && echo "ids identical ($(( $(stat -c %s "$dir/mixed10.stg-gpt2.bin") / 2 )) tokens)"
