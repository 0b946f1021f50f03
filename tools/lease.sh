#!/usr/bin/env bash
# Everything one session needs from the GPU machine, in one device call, under one deadline:
#   1. build   build-gpu (everything) on all CPUs; with AB_OLD=DIR (a checkout of another commit, carried),
#              DIR/build-ab (the stg program only) beside it
#   2. fuzz    in the background from here on: tests/fuzz/device.sh on FUZZ_CPUS (default 8-15)
#              until the deadline, when .fz/fuzz.tgz was carried (tests/fuzz/pack.sh makes it)
#   3. tests   tools/session_gpu.sh: ctest -L gpu and memcheck of every GPU test program (on GPU_CPUS),
#      race    beside it tools/race_gpu.sh: racecheck and synccheck of stg's kernels
#   4. ab      with AB_OLD: tools/bench_ab.sh build-gpu/stg,DIR/build-ab/stg over AB_SPECS (the GPU alone)
# Usage (from the repository root on the device): tools/lease.sh OUT   [STAGES="build fuzz ab tests race"]
# DEADLINE (seconds after the start, default 560) bounds every stage; a stage that would start after it
# is skipped and says so. Logs go to OUT/logs.tgz (one file: the device returns at most eight), the fuzz
# corpora to OUT/work.tgz, a summary to standard output and OUT/summary.txt.
set -u
out=${1:?usage: tools/lease.sh OUT}
mkdir -p "$out/l"
t0=$(date +%s)
dl=${DEADLINE:-560}
stages=" ${STAGES:-build fuzz ab tests race} "
gpu_cpus=${GPU_CPUS:-0-7}
left() { echo $((dl - ($(date +%s) - t0))); }
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
on() { [[ $stages == *" $1 "* ]]; }
source .deps/env.sh || exit 2

if on build; then
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake.txt" 2>&1 &&
        timeout "$(left)" cmake --build build-gpu > "$out/l/build.txt" 2>&1 &
    p1=$!
    if [ -n "${AB_OLD:-}" ]; then
        (cd "$AB_OLD" && cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
             -DSTG_TESTS=OFF > "$out/l/cmake_ab.txt" 2>&1 && timeout "$(left)" cmake --build build-ab --target stg) \
            > "$out/l/build_ab.txt" 2>&1 &
        p2=$!
        wait $p2 || say "build of $AB_OLD failed: $(tail -3 "$out/l/build_ab.txt")"
    fi
    wait $p1 || { say "build failed"; tail -40 "$out/l/build.txt"; tar -czf "$out/logs.tgz" -C "$out/l" .; exit 1; }
    say "built"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/summary.txt"
fi

fz=
if on fuzz && [ -f .fz/fuzz.tgz ] && [ "$(left)" -gt 60 ]; then
    FUZZ_CPUS=${FUZZ_CPUS:-8-15} tests/fuzz/device.sh $(($(left) - 25)) "$out" > "$out/l/fuzz.txt" 2>&1 &
    fz=$!
    say "fuzzing on ${FUZZ_CPUS:-8-15} for $(($(left) - 25)) s"
fi

gp=()
# tests and race share the GPU (neither is timed) and GPU_CPUS; the A/B timing runs after them alone
if on tests && [ "$(left)" -gt 30 ]; then
    (CPUS=$gpu_cpus timeout "$(left)" tools/session_gpu.sh "$out/l/s" > "$out/l/session.txt" 2>&1; echo $? > "$out/l/session.rc") &
    gp+=($!)
fi
if on race && [ "$(left)" -gt 30 ]; then
    (RACE_PAR=1 RACE_TIMEOUT=$(( $(left) - 10 < ${RACE_SECS:-300} ? $(left) - 10 : ${RACE_SECS:-300} )) taskset -c "$gpu_cpus" tools/race_gpu.sh build-gpu "$out/l/r" \
        > "$out/l/race.txt" 2>&1; echo $? > "$out/l/race.rc") &
    gp+=($!)
fi
for p in "${gp[@]}"; do wait "$p"; done
if [ -f "$out/l/session.rc" ]; then
    say "tests: exit $(cat "$out/l/session.rc")"
    grep -E 'tests passed|Failed|\*\*\*|ctest rc|memcheck ' "$out/l/session.txt" | tee -a "$out/summary.txt"
fi
if [ -f "$out/l/race.rc" ]; then
    say "race: exit $(cat "$out/l/race.rc")"
    tee -a "$out/summary.txt" < "$out/l/race.txt"
fi

if on ab && [ -n "${AB_OLD:-}" ] && [ -x "$AB_OLD/build-ab/stg" ]; then
    # shellcheck disable=SC2086 # AB_SPECS is a word list
    timeout "$(left)" taskset -c "$gpu_cpus" tools/bench_ab.sh "build-gpu/stg,$AB_OLD/build-ab/stg" '' '' \
        ${AB_SPECS:-small:512 xl:1024 2.7B:1024 medium:1024 large:1024 small:1024 medium:512 large:512 xl:512 2.7B:512} \
        > "$out/l/ab.txt" 2>&1
    say "ab: exit $? ($(grep -c '^==' "$out/l/ab.txt") runs)"
    awk '/^==/ {h = $2 " " $4 " " $6} /^  time/ {for (i = 1; i <= NF; i++) if ($i == "median") {m = $(i + 1); sub(",", "", m); print "ab", h, m}}' \
        "$out/l/ab.txt" | tee -a "$out/summary.txt"
fi

if [ -n "$fz" ]; then
    wait $fz
    say "fuzz: exit $?"
    tail -12 "$out/l/fuzz.txt" | tee -a "$out/summary.txt"
fi
tar -czf "$out/logs.tgz" -C "$out/l" . && rm -rf "$out/l"
say "done"
