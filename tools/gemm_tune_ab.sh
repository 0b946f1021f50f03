#!/usr/bin/env bash
# stg bench with --gemm-tune on and off, alternating, for each MODEL:CTX[:EXEC] given (bf16, batch
# 4; small models 10 warm-up + 30 timed steps, others 3 + 10). Prints the time and speed lines.
# Usage: tools/gemm_tune_ab.sh STG MODEL:CTX[:EXEC]...   e.g. build-gpu/stg small:128:eager 2.7B:1024
set -u
stg=${1:?usage: tools/gemm_tune_ab.sh STG MODEL:CTX[:graph|eager]...}
shift
[ -x "$stg" ] || { echo "gemm_tune_ab: $stg is not an executable" >&2; exit 2; }
[ $# -ge 1 ] || { echo "gemm_tune_ab: no MODEL:CTX given" >&2; exit 2; }
rc=0
for spec in "$@"; do
    IFS=: read -r model ctx exe <<< "$spec"
    exe=${exe:-graph}
    f=models/cs336/$model.yaml
    [ -f "$f" ] || { echo "gemm_tune_ab: no model $f" >&2; rc=2; continue; }
    case $model in small|medium) w=10; n=30 ;; *) w=3; n=10 ;; esac
    for t in on off on off; do
        echo "== $model ctx $ctx $exe --gemm-tune $t"
        "$stg" bench "$f" --set ctx="$ctx" --precision bf16 --exec "$exe" --warmup $w --iters $n --gemm-tune $t \
            | grep -E '^  (time|speed)' || rc=1
    done
done
exit $rc
