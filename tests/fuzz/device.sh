#!/usr/bin/env bash
# One segment of a long fuzzing run on a machine without clang (the GPU machine), from programs
# built elsewhere: tests/fuzz/device.sh SECONDS OUTDIR
#   .fz/fuzz.tgz    the fuzz_* programs (bin/) and the libraries they need that the machine lacks (lib/)
#   .fzw/           the growing corpora, kept between segments (restored from .fz/work.tgz when absent)
# Every target runs SECONDS at once (JOBS = number of targets), confined to FUZZ_CPUS (default the
# last ten CPUs), so the other CPUs stay free for whatever else runs in the same call. At the end the
# corpora, logs and any findings are packed into OUTDIR/work.tgz for the next segment, and the
# per-target summary lines are printed. Exits non-zero on any finding, like run.sh. FUZZ_TARGETS
# (space-separated) picks targets (default all).
set -u
secs=$1; outdir=$2
cd "$(dirname "$0")/../.."
mkdir -p .fz/x "$outdir"
tar -xzf .fz/fuzz.tgz -C .fz/x || exit 2
if [ ! -d .fzw ] && [ -f .fz/work.tgz ]; then mkdir -p .fzw && tar -xzf .fz/work.tgz -C .fzw || exit 2; fi
mkdir -p .fzw
n=$(nproc)
cpus=${FUZZ_CPUS:-$((n > 10 ? n - 10 : 0))-$((n - 1))}
export LD_LIBRARY_PATH=$PWD/.fz/x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
FUZZ_BIN=$PWD/.fz/x/bin FUZZ_WORK=$PWD/.fzw FUZZ_CPUS=$cpus JOBS=10 tests/fuzz/run.sh "$secs" ${FUZZ_TARGETS:-}
rc=$?
seg=$(date -u +%H%M%S)
for t in .fzw/*/; do t=$(basename "$t"); cp ".fzw/$t/log" ".fzw/$t/log.$seg" 2>/dev/null; done
tar -czf "$outdir/work.tgz" -C .fzw . || rc=2
exit $rc
