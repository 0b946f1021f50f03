#!/usr/bin/env bash
# compute-sanitizer runs of GPU test programs side by side, each at small shapes (STG_GPU_TEST_SMALL=1),
# then one summary line per run (the exit status, the tool's summary, cmocka's PASSED/FAILED lines).
# Usage: tools/sanitize_gpu.sh BUILD_DIR OUT_DIR TIMEOUT TOOL:PROGRAM[:PATTERN[:SKIP]]...
#   e.g. tools/sanitize_gpu.sh build-gpu /tmp/s 260 memcheck:test_gpu_sample racecheck:test_gpu_sample:*attention_cached*
# PATTERN and SKIP are cmocka patterns (STG_TEST_FILTER and STG_TEST_SKIP, tests/gpu.h). Logs:
# OUT_DIR/TOOL_PROGRAM.txt. Exits 1 when any run did not exit 0. SAN_ARGS: more compute-sanitizer
# options for every run (e.g. --kernel-name-exclude ...); SAN_PAR=0: one run after another.
set -u
[ $# -ge 4 ] || { echo "usage: tools/sanitize_gpu.sh BUILD_DIR OUT_DIR TIMEOUT TOOL:PROGRAM[:PATTERN[:SKIP]]..." >&2; exit 2; }
B=$1 O=$2 T=$3
shift 3
mkdir -p "$O" || exit 2
one() { # tool, program, pattern, skip
    # shellcheck disable=SC2086 # SAN_ARGS is a word list
    STG_TEST_FILTER=$3 STG_TEST_SKIP=$4 STG_GPU_TEST_SMALL=1 timeout "$T" compute-sanitizer --tool "$1" ${SAN_ARGS:-} --error-exitcode 9 \
        "$B/$2" > "$O/${1}_$2.txt" 2>&1
    echo "exit $?" >> "$O/${1}_$2.txt"
}
for r in "$@"; do
    IFS=: read -r tool t f k <<< "$r"
    if [ "${SAN_PAR:-1}" = 1 ]; then one "$tool" "$t" "${f:-}" "${k:-}" & else one "$tool" "$t" "${f:-}" "${k:-}"; fi
done
wait
rc=0
for r in "$@"; do
    IFS=: read -r tool t f k <<< "$r"
    x="$O/${tool}_$t.txt"
    last=$(tail -1 "$x")
    [ "$last" = "exit 0" ] || rc=1
    echo "${tool} $t${f:+ ($f)}${k:+ (not $k)}: $last$([ "$last" = "exit 124" ] && echo " (timed out after $T s)") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$x" | tr '\n' ' ')$(grep -hE '^\[  (PASSED|FAILED|SKIPPED)' "$x" | tr '\n' ' ')"
done
exit $rc
