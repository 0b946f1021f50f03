#!/usr/bin/env bash
# Training speed (docs/TOKENIZER.md): `stg tokenizer train` against SentencePiece's BPE trainer on the
# same 100 MB English corpus, vocabulary 10000, both on all cores (2 here), one after the other.
#   tools/tok_bench.sh [STG] [DIR]     STG: a Release build's stg (default build-rel/stg);
#                                      DIR: corpora and outputs (default /tmp/stg-tok)
# Needs python3-sentencepiece (Debian). Builds the corpora with tools/make_corpus.sh when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
stg=${1:-build-rel/stg}
dir=${2:-/tmp/stg-tok}
[ -f "$dir/corpus-en.txt" ] || tools/make_corpus.sh "$dir"
cores=$(nproc)
echo "== $(date -u +%F) $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; corpus $(stat -c %s "$dir/corpus-en.txt") bytes"
echo "== stg tokenizer train --vocab 10000 --special '<|endoftext|>'"
/usr/bin/time -f "wall %e s, max RSS %M KiB" "$stg" tokenizer train "$dir/corpus-en.txt" --vocab 10000 --special '<|endoftext|>' \
    -o "$dir/stg10k/"
echo "== SentencePiece BPE, vocab 10000, $cores threads"
/usr/bin/time -f "wall %e s, max RSS %M KiB" /usr/bin/python3 tools/tok/spm_train.py "$dir/corpus-en.txt" 10000 "$dir/spm10k" "$cores" 2>&1 |
    grep -v "LOG(WARNING)\|^trainer_interface"
