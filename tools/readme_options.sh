#!/usr/bin/env bash
# Prints the README's "Options" section from the program itself (stg CMD --help for every command),
# so the section is regenerated, never edited:  tools/readme_options.sh build/stg
# tests/test_readme.c fails when the README's section differs from this output.
set -euo pipefail
stg=${1:-build/stg}
for c in check graph memreport train step bench attn-bench comm-bench launch tokens sample eval export import plot; do
  echo "<!-- stg $c --help -->"
  echo '```text'
  "$stg" "$c" --help
  echo '```'
  echo
done
