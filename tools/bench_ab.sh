#!/usr/bin/env bash
# stg bench with two sets of options, alternating (A B A B), for each MODEL:CTX[:EXEC] given (bf16,
# batch 4; small and medium 10 warm-up + 30 timed steps, others 3 + 10). Prints the time and speed
# lines under a header naming the options.
# STG may name two binaries, STG_A,STG_B (two builds compared with the same or different options).
# Usage: tools/bench_ab.sh STG[,STG_B] 'OPTIONS A' 'OPTIONS B' MODEL:CTX[:EXEC]...
#   e.g. tools/bench_ab.sh build-gpu/stg '--gemm-tune on' '--gemm-tune off' small:128:eager 2.7B:1024
#        tools/bench_ab.sh build-gpu/stg,build-old/stg '' '' 2.7B:1024
set -u
usage="usage: tools/bench_ab.sh STG[,STG_B] 'OPTIONS A' 'OPTIONS B' MODEL:CTX[:graph|eager]..."
[ $# -ge 4 ] || { echo "$usage" >&2; exit 2; }
stg_a=${1%%,*} stg_b=${1#*,} a=$2 b=$3
shift 3
for s in "$stg_a" "$stg_b"; do
    [ -x "$s" ] || { echo "bench_ab: $s is not an executable" >&2; exit 2; }
done
rc=0
for spec in "$@"; do
    IFS=: read -r model ctx exe <<< "$spec"
    exe=${exe:-graph}
    f=models/cs336/$model.yaml
    [ -f "$f" ] || { echo "bench_ab: no model $f" >&2; rc=2; continue; }
    case $model in small|medium) w=10; n=30 ;; *) w=3; n=10 ;; esac
    for ab in a b a b; do
        if [ $ab = a ]; then stg=$stg_a opts=$a; else stg=$stg_b opts=$b; fi
        echo "== $model ctx $ctx $exe $stg $opts"
        # shellcheck disable=SC2086 # the option sets are word lists
        "$stg" bench "$f" --set ctx="$ctx" --precision bf16 --exec "$exe" --warmup $w --iters $n $opts \
            | grep -E '^  (time|speed)' || rc=1
    done
done
exit $rc
