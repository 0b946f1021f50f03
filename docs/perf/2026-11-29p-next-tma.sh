#!/usr/bin/env bash
# For the session after the thirty-third (written 2026-11-29, compiled here, never run: that session's device time was
# spent; about 9 minutes, run it under `timeout 590`). The dk/dv producer loading Q and dO by tensor copies (TMA),
# docs/perf/2026-11-29p-dkdv-tma.patch: where a 64-row tile of a kv head's group is a tensor box (G divides 64) and
# there are no packed documents, one producer thread issues two boxes a tile (each panel: 64 dims x G heads x 64 / G
# positions; rows land in the tile's order R = s G + h % G) that complete on the stage's transaction barrier, and the
# producer publishes the tile's statistics at once; each consumer warpgroup waits for the barrier's phase after the
# stage's named barrier. STG_ATT_DKDV_TMA=0 keeps cp.async (new ctest variants *_attention_cpasync run the attention
# tests that way with 3 persistent blocks). Compiled here: every dk/dv instantiation 0 spills, the same two C7520 notes
# (the single-pass ones) as the tree.
# Why: the thirty-third session's probe (docs/perf/2026-11-29p-h200-call2.txt) of the tree with the producer publishing
# first still has the consumers waiting 146-197 cycles a tile at head dim 64 and 155-519 at 128 for the producer, whose
# 128 threads' 16-byte cp.async of a tile (16 KB at 64, 32 KB at 128) land in about a tile pair; two lanes of 64 threads
# (more copies in flight, each thread twice the copies) were slower (call 3). With tensor copies the issue is two
# instructions and the publication no longer waits for the copies at all: a tile's copies have from the release of its
# stage (the middle of tile t - 2) to the start of tile t.
# Predicted (B4 H16 causal, against the tree in the same call): the backward at head dim 128 seq 16384 27.0 -> ~25-26 ms,
# 4096 1.79 -> ~1.70; head dim 64 16384 15.2 -> ~14.6-15.0, 4096 1.08 -> ~1.04; head dim 80 between; the forward
# unchanged; 2.7B ctx 4096 batch 1 156.5 -> ~155.5 ms. A miss to look at first: a misplaced box (wrong coordinates or
# swizzle) fails the attention tests at every shape; a consumer reading before the copies land shows as rare mismatches
# (run the tests twice) or racecheck reports. Also (--order phases, new in the thirty-third session): every forward
# iteration before the first backward one, against attn-bench's alternating order, at seq 16384: the thirty-third
# session measured the forward 3-5% slower beside the faster backward with the same forward code; if the phases order
# shows both binaries' forwards equal, it is the backward before each forward that slows it.
# Also (a third binary, if its attention tests pass): docs/perf/2026-11-29p-ssa-stmatrix.patch on top, head dim 128's
# Pᵀ and dSᵀ stored by stmatrix; predicted head dim 128's backward 1-4% faster than the TMA tree's, 64 and 80 equal.
# Here first (a fresh checkout, the tree at the commit after 2026-11-29p): ../shared/device/prep.sh; mkdir -p peer &&
# cp ../shared/peers/*.py peer/; rm -rf peer/rev && mkdir -p peer/rev && git archive HEAD ops/attention CMakeLists.txt |
# tar -xf - -C peer/rev; git apply docs/perf/2026-11-29p-dkdv-tma.patch (the tree under test; peer/rev the A/B's other side).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29p-next-tma.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
grep -q ws_dkdv_tma ops/attention/sm90a/attention_ws_bwd.cu || { echo "the patch is not applied (see the header)"; exit 2; }
[ -f peer/rev/ops/attention/sm90a/attention_ws_bwd.cu ] || { echo "no peer/rev (see the header)"; exit 2; }
build_rev peer/rev
# the third binary: this tree with docs/perf/2026-11-29p-ssa-stmatrix.patch (head dim 128's Pᵀ and dSᵀ stored by 8
# stmatrix.x4 a warp instead of 32 32-bit stores; its probe's "packs, release" took 755 of warpgroup 0's 3,783 cycles)
rm -rf /tmp/stm && mkdir -p /tmp/stm && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/stm
(cd /tmp/stm && patch -p1 -s < docs/perf/2026-11-29p-ssa-stmatrix.patch &&
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake_stm.txt" 2>&1 &&
    timeout 300 cmake --build build-gpu --target stg --target test_gpu_mm_attn > "$out/l/build_stm.txt" 2>&1; echo "stm build: $?") &
perf_build || { perf_pack; exit 1; }
wait
say "builds done"
(cd /tmp/stm/build-gpu && STG_TEST_FILTER='*attention*' timeout 60 ./test_gpu_mm_attn > "$out/l/stm_tests.txt" 2>&1)
stm=$?; echo "stm attention tests: $stm $(grep -E "PASSED|FAILED" "$out/l/stm_tests.txt" | tr '\n' ' ')"
[ $stm = 0 ] && tools/sanitize_gpu.sh /tmp/stm/build-gpu "$out/l/san_stm" 150 racecheck:test_gpu_mm_attn:'*attention_bf16*'
attn_grids
attn_tests again || echo "again: attention tests failed"
attn_tests cpasync STG_ATT_DKDV_TMA=0 STG_ATT_DKDV_PERSIST=3 || echo "cpasync: failed"
tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
B=("tma:build-gpu/stg" "tree:/tmp/old/build-gpu/stg")
[ $stm = 0 ] && B+=("stm:/tmp/stm/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
        timeout 30 "${b#*:}" attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64,128 --seqs 4096 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} gqa r$r] /"
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 16384 --iters 20 \
            --order phases 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} phases r$r] /"
    done
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 120 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
IB=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    STG_BIN=build-gpu/stg stg_step "2.7B 4096 b1 [options ib, tma] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
    STG_BIN=/tmp/old/build-gpu/stg stg_step "2.7B 4096 b1 [options ib, tree] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${IB[@]}"
done
say "steps done"
gpu_suite 380
perf_pack
