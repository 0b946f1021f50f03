#!/usr/bin/env bash
# For a session after the twenty-sixth (written 2026-11-29, not run): the dk/dv kernel's timeline, warp by warp.
# Call 2 (ncu's stall samples): each consumer warp of att_ws_dkdv_kernel at head dim 64 is busy ~1,500 of the ~2,970
# cycles a row tile takes and waits ~48% of its samples at the ring's barrier, almost never for its products, while
# the tensor pipe is 35% busy: the two warpgroups' busy parts seem to run one after the other. Samples cannot say why.
# This call builds the kernel with docs/perf/2026-11-29i-dkdv-trace.patch and -DWS_TRACE (clock64 at 8 points a tile
# in every warp of one block, stored without a branch: the probe's build has the same ptxas warnings as the default,
# no C7520; 80 more instructions, ~40 a tile, so it runs some % slower, measured here) and reads the timeline with
# tools/attn_trace.py: each phase's cycles, the period, the two warpgroups' lag and overlap, the warps' spread inside
# a warpgroup, and whether the producer is ever late; the dq kernel's block is traced beside it (FILE.dq; its producer
# is one TMA thread, not traced), the same phases, for the kernel that reaches 60% of the tensor pipe. The probe's build
# spills 48 bytes at head dim 128's dk/dv kernel (32 in the default). About 4 minutes (run it under `timeout 330`).
# What to look for: if wg 1 leaves its ring wait about one busy part after wg 0 (lag ~1,500) and their post-issue
# parts barely overlap, the ring serializes them (then: a ring turn per product group, or none with the next tile's
# Sᵀ issued early); if the wait for Sᵀ is long, the tensor pipe's queue is (the other warpgroup's products ahead of
# this Sᵀ); if the warps of a warpgroup leave the ring far apart, skew inside a warpgroup is the cost.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29i-trace-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
rm -rf /tmp/tr && mkdir -p /tmp/tr && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/tr
(cd /tmp/tr && patch -p1 -s < docs/perf/2026-11-29i-dkdv-trace.patch && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-DWS_TRACE > "$out/l/cmake_tr.txt" 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build_tr.txt" 2>&1; echo "trace build: $?") &
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
for r in 1 2; do
    for b in build-gpu/stg /tmp/tr/build-gpu/stg; do
        echo "== $b, round $r"
        timeout 60 $b attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    done
done
say "rates done (default, then the probe's build)"
for sh in "64 16384" "64 4096" "128 16384"; do
    set -- $sh
    f="$out/trace_d$1_s$2.txt"
    STG_WS_TRACE_OUT="$f" timeout 60 /tmp/tr/build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 \
        --dims $1 --seqs $2 --iters 3 > /dev/null 2>&1
    echo "== head dim $1, seq $2: $(wc -l < "$f" 2>/dev/null) trace lines (dk/dv kernel)"
    python3 tools/attn_trace.py "$f" --from 8 --to 56
    echo "== head dim $1, seq $2: the dq kernel (its block with the most key tiles; at the tree's 60% tensor-pipe use, against dk/dv's 35%)"
    python3 tools/attn_trace.py "$f.dq" --from 8 --to 56
done
python3 tools/attn_trace.py "$out/trace_d64_s16384.txt" --from 20 --to 28 --tiles
say "traces done"
perf_pack
