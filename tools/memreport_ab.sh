#!/usr/bin/env bash
# Two stg builds' memory reports and `stg check` compared byte for byte over every CS336 size, six option
# sets and three formats (a refactoring must leave them identical). Each build reads the model files of its
# own tree (the folder two levels above the program, or STG_A_ROOT / STG_B_ROOT).
# Usage: tools/memreport_ab.sh STG_A STG_B      e.g. tools/memreport_ab.sh .old/build-cpu/stg build-cpu/stg
# Prints each difference and a count; exits 1 when any output differs.
set -u
[ $# -eq 2 ] || { echo "usage: tools/memreport_ab.sh STG_A STG_B" >&2; exit 2; }
for s in "$1" "$2"; do
    [ -f "$s" ] && [ -x "$s" ] || { echo "tools/memreport_ab.sh: $s is not an executable stg" >&2; exit 2; }
done
a=$(realpath "$1") b=$(realpath "$2")
ra=${STG_A_ROOT:-$(dirname "$(dirname "$a")")} rb=${STG_B_ROOT:-$(dirname "$(dirname "$b")")}
tmp=$(mktemp -d /tmp/memreport_ab_XXXXXX) || exit 2
trap 'rm -rf "$tmp"' EXIT
n=0 d=0
one() { # what, then the command's words after the program
    local what=$1; shift
    (cd "$ra" && "$a" "$@") > "$tmp/a" 2>&1
    (cd "$rb" && "$b" "$@") > "$tmp/b" 2>&1
    n=$((n + 1))
    cmp -s "$tmp/a" "$tmp/b" || { d=$((d + 1)); echo "differs: $what"; diff "$tmp/a" "$tmp/b" | head -6; }
}
for m in small medium large xl 2.7B; do
    for opts in "" "--precision bf16" "--set ctx=1024" "--mode forward" "--world 4 --zero 1" \
                "--precision bf16 --set ctx=1024 --world 8 --zero 3"; do
        for fmt in text json md; do
            # shellcheck disable=SC2086 # opts is a word list
            one "memreport $m $opts --format $fmt" memreport "models/cs336/$m.yaml" $opts --format "$fmt"
        done
    done
    one "check $m" check "models/cs336/$m.yaml"
done
echo "$n outputs compared, $d differ"
[ "$d" -eq 0 ]
