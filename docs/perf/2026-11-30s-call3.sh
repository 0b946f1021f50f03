#!/usr/bin/env bash
# Thirty-sixth session, call 3 (2026-11-30): head dim 128's forward with 128-key tiles and Q in shared memory in 3
# stages (qss3: docs/perf/2026-11-30s-fwd.patch with -DWS_FWD_S128=1 -DWS_FWD128_QSS=1 -DWS_FWD128_BK=128
# -DWS_FWD128_NST=3; its attention tests passed at four grids in call 2, which ran out of time before its rates) against
# the tree (a1e0fef), head dim 128 only, two rounds alternating, and cuDNN at 128 in the same call; the tree's attention
# tests. Reading of call 2: qss2 (the same in 2 stages) was 24% slower; a stage of 64 KB is refilled only after both
# warpgroups release it, about one tile's compute (~1.1 us a multiprocessor) before it is needed, which is about a
# 64 KB copy's latency from L2. Predicted: qss3 between qss2 and the tree if the depth was the cause (a third stage
# gives two tiles of lead); faster than the tree only if the tree's 64-key tiles' fixed costs were the limit.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30s-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant qss3 docs/perf/2026-11-30s-fwd.patch "-DWS_FWD_S128=1 -DWS_FWD128_QSS=1 -DWS_FWD128_BK=128 -DWS_FWD128_NST=3" stg
perf_build stg test_gpu_mm_attn test_gpu_ops || { wait; perf_pack; exit 1; }
wait
say "builds done"
attn_tests tree
for r in 1 2; do
    for b in tree:build-gpu/stg qss3:/tmp/qss3/build-gpu/stg; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 60 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN"
say "cuDNN done"
perf_pack
