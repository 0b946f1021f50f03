#!/usr/bin/env bash
# Builds the tokenizer's measurement corpora from text on this machine (tools/tok/make_corpus.py):
#   tools/make_corpus.sh [DIR]   -> DIR/corpus-en.txt (100 MB, English) and DIR/corpus-mixed.txt
#                                   (60 MB: English, translated man pages, C headers); DIR: /tmp/stg-tok
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/stg-tok}
mkdir -p "$dir"
python3 tools/tok/make_corpus.py "$dir/corpus-en.txt" 100 english
python3 tools/tok/make_corpus.py "$dir/corpus-mixed.txt" 60 mixed
