#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz and runs each on its seed corpus.
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default 20 s, all ten targets)
# Environment: JOBS (targets run at once, default 2), FUZZ_ARGS (more libFuzzer flags),
# FUZZ_WORK (where the growing corpora, logs and crash files go, default build-fuzz/fuzz-work),
# FUZZ_BIN (a folder of fuzz_* programs built elsewhere: no build here, e.g. on a machine without
# clang), FUZZ_CPUS (a taskset CPU list the targets are confined to).
# The seed corpora in tests/fuzz/corpus/ are read, never written. Exits non-zero when any target
# finds a crash, a leak, an out-of-memory or an input slower than 1 s (the file is in FUZZ_WORK,
# and the log's tail is printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(model expr npy safetensors tokens tok_json tok_gpt2 tok_encode cli json)
jobs=${JOBS:-2}
work=${FUZZ_WORK:-build-fuzz/fuzz-work}
bin=${FUZZ_BIN:-}
if [ -z "$bin" ]; then
    cc=${CC:-clang}
    command -v "$cc" >/dev/null || { echo "run.sh: $cc not found (install clang and libclang-rt-dev)"; exit 2; }
    CC="$cc" cmake -S . -B build-fuzz -DSTG_FUZZ=ON -DSTG_CUDA=OFF -DSTG_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build-fuzz -j"$jobs" >/dev/null
    bin=build-fuzz/tests/fuzz
fi
pin=()
[ -n "${FUZZ_CPUS:-}" ] && pin=(taskset -c "$FUZZ_CPUS")
[ -d tests/fuzz/corpus/npy ] || "$bin/fuzz_gen_corpus" tests/fuzz/corpus

mkdir -p "$work"
run_one() {
    local t=$1 dir="$work/$t" to=1
    # A model may expand to 30,000 forward ops (the loader's cap) and about three times that after
    # autodiff: linear work that takes 1.0-1.3 s under ASan, UBSan and coverage (measured: 600
    # layers 0.62 s, 1228 layers 1.20 s), so the model target's timeout is 4 s. A quadratic pass at
    # that size takes minutes, which is what the timeout is for. The expr target loads
    # models/cs336/lm.yaml with its --set lines, so n_layers=2256 is the same linear work (0.66 s alone
    # under the sanitizers, over 1 s beside nine other targets on eight CPUs): the same 4 s.
    case $t in model | expr) to=4 ;; esac
    mkdir -p "$dir/corpus" "$dir/artifacts"
    # detect_leaks: LeakSanitizer at exit and between inputs; -error_exitcode: any finding fails.
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "${pin[@]}" "$bin/fuzz_$t" "$dir/corpus" "tests/fuzz/corpus/$t" -dict=tests/fuzz/stg.dict \
        -max_total_time="$secs" -timeout="$to" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/" $([ "$t" = cli ] && echo -close_fd_mask=2) ${FUZZ_ARGS:-} >"$dir/log" 2>&1
}

fail=0
pids=()
names=()
for t in "${targets[@]}"; do
    run_one "$t" &
    pids+=($!)
    names+=("$t")
    if [ ${#pids[@]} -ge "$jobs" ]; then
        wait "${pids[0]}" || { echo "fuzz_${names[0]}: FAILED"; tail -40 "$work/${names[0]}/log"; fail=1; }
        pids=("${pids[@]:1}")
        names=("${names[@]:1}")
    fi
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "fuzz_${names[$i]}: FAILED"; tail -40 "$work/${names[$i]}/log"; fail=1; }
done
for t in "${targets[@]}"; do
    printf '%-12s ' "$t"
    grep -E '^Done|stat::number_of_executed_units' "$work/$t/log" | tr '\n' ' ' || true
    grep -E '#[0-9]+.*(DONE|cov:)' "$work/$t/log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || echo
done
exit $fail
