#!/usr/bin/env bash
# For a later session (written 2026-11-30, thirty-eighth session): issue 28's study suite (tools/bench_suite.py,
# docs/benchmarks.md) against the strongest peer, in runs of a few sizes each, one or two at once on the nvidia-h200-x2
# kind (a run a GPU, CUDA_VISIBLE_DEVICES), each run `--parts stg,peer --sizes S --ctx C --out DIR`: a size's stg and
# peer rows in one run, so every ratio is from one lease. Afterwards, here (no GPU): unpack each call's logs.tgz, keep
# each run's records under docs/bench/runs/NAME/, then
#   python3 tools/bench_suite.py --parts merge,report --merge-from docs/bench/runs/A,docs/bench/runs/B,... \
#       --out docs/bench --doc docs/benchmarks.md --source COMMIT
# Costs measured (2026-11-30u call 6, H200): a peer cell of small ~68 s (~52 s of it whole-model compilation, ~4
# compilations of 9-18 s at 12 layers; deeper models take longer), stg's cells seconds. Estimated the whole suite ~45
# minutes of one GPU: small (with the warm-up studies) ~5.5, medium ~6, large ~9, xl ~11, 2.7B ~11 (with the memory
# study) minutes. A plan within 10-minute calls, two runs a call on the x2 kind (~3 calls, ~30 min of device time;
# the first call's walls correct the rest):
#   call 1: "small:128,256,512,1024" "medium:128,256,512,1024"
#   call 2: "large:128,256,512,1024" "2.7B:128,256,512"
#   call 3: "xl:128,256,512" "xl:1024 2.7B:1024"  (a spec may name several SIZES:CTXS groups, run in turn)
# fp32 cells at 2 warm-up and 3 timed steps, as the 2026-11-23 page ran them (a 2.7B fp32 step is ~2 s; every run
# must use the same settings, which the merge checks).
# A run stopped by its limit keeps the records written so far (each is flushed as made): run its missing ctx again in
# a later call (stg's cells with them); the merge pairs each cell's stg and peer rows from the latest lease that has
# both, and names a cell whose rows share no lease.
# Usage (GPU machine, repository root, carrying .deps and peer; SOURCE=commit for the page):
#   bash docs/perf/2026-11-30u-next-suite.sh OUT "SPEC0" ["SPEC1"]     SPEC: "SIZES:CTXS[ SIZES:CTXS...]"
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT SPEC0 [SPEC1]}"
shift
[ $# -ge 1 ] || { echo "usage: $0 OUT SPEC0 [SPEC1]"; exit 2; }
perf_build stg || { perf_pack; exit 1; }
LIMIT=${LIMIT:-520}
gpu=0
for spec in "$@"; do
    (
        for grp in $spec; do
            sizes=${grp%%:*} ctxs=${grp#*:} name="run${gpu}-${sizes//,/-}-${ctxs//,/-}" left=$((LIMIT - $(el)))
            [ "$left" -ge 60 ] || { echo "gpu $gpu $grp: skipped ($left s left)"; continue; }
            CUDA_VISIBLE_DEVICES=$gpu timeout "$left" python3 tools/bench_suite.py --stg build-gpu/stg --parts stg,peer \
                --sizes "$sizes" --ctx "$ctxs" --fp32-warmup 2 --fp32-iters 3 --source "${SOURCE:-the working tree}" --out "$out/l/$name" \
                > "$out/l/$name.txt" 2>&1
            echo "[$(el) s] gpu $gpu $grp: rc $?"
            grep -E "rc [0-9]+" "$out/l/$name.txt" | grep -v "rc 0" | head -5
        done
    ) &
    gpu=$((gpu + 1))
done
wait
say done
perf_pack
