#!/usr/bin/env bash
# For the session after the thirty-second (written 2026-11-29, not run: that session's device time was spent; about 4-5
# minutes, run it under `timeout 450`). The twenty-sixth session's timeline probe of the attention backward
# (2026-11-29i-dkdv-trace.patch, never run), rebased onto the tree of c4c4c8a (the dk/dv blocks walk work items now:
# the probe traces block WS_TRACE_X's first item, at block 0 the longest, key block 0 of head-batch 0; the dq kernel's
# block (0, 0, 0) beside it; the dump after the launches' join) as docs/perf/2026-11-29o-dkdv-trace.patch. Compiled here
# in both forms: without -DWS_TRACE the kernels' registers and ptxas notes are the tree's; with it the same notes
# (no new C7520: the stores are predicated), head dim 128's dk/dv kernel spilling 32 bytes (0 in the tree).
# Why: the backward is the row furthest from issue 28's acceptance (0.68-0.79 of cuDNN at seq 16384 and head dim 128
# at 4096, thirty-second session call 5), and the twenty-fifth and twenty-sixth sessions' ncu readings (dk/dv kernel at
# 35% tensor-pipe use against dq's 60%; each consumer warp busy ~1,500 of ~2,970 cycles a tile pair, ~48% of its samples
# at the ring's barrier, ~0 waiting for its products) cannot say why the two warpgroups' busy parts do not overlap.
# What to look for (tools/attn_trace.py): if warpgroup 1 leaves its ring wait about one busy part after warpgroup 0
# and their post-issue parts barely overlap, the ring serializes them (then: the next tile's Sᵀ issued before this
# tile's softmax, FlashAttention-3's order, needs Pᵀ and dSᵀ through shared memory at head dim 64 for registers); if
# the wait for Sᵀ is long, the tensor pipe's queue is (the other warpgroup's products ahead of it); if a warpgroup's
# warps leave the ring far apart, skew inside a warpgroup costs. Predicted from the samples: period ~2,900-3,000 cycles
# a tile pair at head dim 64 / 16384, each warpgroup busy ~1,500 of them, lag ~1,400-1,500.
# Also built (a third tree, /tmp/ssa, -DWS_SSA64=1: docs/perf/2026-11-29o-ssa64.patch, compiled here, never run): head
# dim 64's dk/dv kernel with Pᵀ and dSᵀ through shared memory as head dim 128's (SSA), the precondition of that order
# (it frees the 32 registers a second Sᵀ accumulator needs). Its attention tests run first; then its rates beside the
# tree's. Predicted: correct; head dim 64's backward within 0-5% of the tree's (a 64 x 64 bf16 tile pair stored and
# fenced a tile, against 16 register moves), so the register room is nearly free.
# Here first: the traced file is carried as
#   peer/trace/ops/attention/sm90a/attention_ws_bwd.cu (the patch applied to c4c4c8a's file; re-make it if that file
#   changed: cp ops/attention/sm90a/attention_ws_bwd.cu /tmp/x.cu && patch /tmp/x.cu docs/perf/2026-11-29o-dkdv-trace.patch),
#   and the SSA one as peer/ssa/ops/attention/sm90a/attention_ws_bwd.cu (the same with 2026-11-29o-ssa64.patch).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29o-next-trace.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
TF=peer/trace/ops/attention/sm90a/attention_ws_bwd.cu
[ -f "$TF" ] || { echo "no $TF (see the header)"; exit 2; }
rm -rf /tmp/tr && mkdir -p /tmp/tr && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/tr
cp "$TF" /tmp/tr/ops/attention/sm90a/attention_ws_bwd.cu
(cd /tmp/tr && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_FLAGS=-DWS_TRACE > "$out/l/cmake_tr.txt" 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg > "$out/l/build_tr.txt" 2>&1; echo "trace build: $?") &
SF=peer/ssa/ops/attention/sm90a/attention_ws_bwd.cu
if [ -f "$SF" ]; then
    rm -rf /tmp/ssa && mkdir -p /tmp/ssa && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/ssa
    cp "$SF" /tmp/ssa/ops/attention/sm90a/attention_ws_bwd.cu
    (cd /tmp/ssa && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_CUDA_FLAGS=-DWS_SSA64=1 > "$out/l/cmake_ssa.txt" 2>&1 &&
        timeout 300 cmake --build build-gpu --target stg --target test_gpu_mm_attn > "$out/l/build_ssa.txt" 2>&1; echo "ssa64 build: $?") &
else
    echo "no $SF: the SSA build is skipped"
fi
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
B=(build-gpu/stg /tmp/tr/build-gpu/stg)
if [ -x /tmp/ssa/build-gpu/test_gpu_mm_attn ]; then
    (cd /tmp/ssa/build-gpu && STG_TEST_FILTER='*attention*' timeout 60 ./test_gpu_mm_attn > "$out/l/ssa_tests.txt" 2>&1)
    rc=$?; echo "ssa64 attention tests: $rc $(grep -E "PASSED|FAILED" "$out/l/ssa_tests.txt" | tr '\n' ' ')"
    [ $rc = 0 ] && B+=(/tmp/ssa/build-gpu/stg)
fi
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 $b attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 \
            2>&1 | grep -E "^\| flash" | sed "s|^|[$b r$r] |"
    done
done
say "rates done (the tree, the probe's build, the SSA build if its tests passed)"
for sh in "64 16384" "64 4096" "128 16384"; do
    set -- $sh
    f="$out/l/trace_d$1_s$2.txt"
    STG_WS_TRACE_OUT="$f" timeout 60 /tmp/tr/build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 \
        --dims $1 --seqs $2 --iters 3 > "$out/l/trace_d$1_s$2.out" 2>&1
    echo "== head dim $1, seq $2: $(wc -l < "$f" 2>/dev/null) trace lines (dk/dv kernel); stg: $(tail -1 "$out/l/trace_d$1_s$2.out")"
    python3 tools/attn_trace.py "$f" --from 8 --to 56
    echo "== head dim $1, seq $2: the dq kernel (its longest block)"
    python3 tools/attn_trace.py "$f.dq" --from 8 --to 56
done
python3 tools/attn_trace.py "$out/l/trace_d64_s16384.txt" --from 20 --to 28 --tiles
say "traces done"
perf_pack
