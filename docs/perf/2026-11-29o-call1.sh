#!/usr/bin/env bash
# For the session after the thirty-first (written 2026-11-29, not run: that session's device time was spent; about 9
# minutes, run it under `timeout 590`). First: git apply docs/perf/2026-11-29n-snake.patch (compiled here, never run; no
# spills). The patch changes the order in which c7f77d3's persistent attention blocks (forward, dk/dv) take their work
# items, two ways:
#   (1) block x takes its k-th item from the k-th wave back and forth (tm_item_of: x, 2 G - 1 - x, 2 G + x, ...)
#       instead of x, G + x, 2 G + x, ..., which gave block 0 the longest item of every wave;
#   (2) the items may come in groups of head-batches (tm_item_split; STG_ATT_HGROUP=N, for A/B runs; by default one
#       group, c7f77d3's order): a group's items longest first, the groups one after another, so fewer heads' K and V
#       are live at once. The attention ctest variants at 3 blocks now run with groups of 4.
# Why (1) (docs/perf/2026-11-29n-snake.py, a model of each item as its tiles plus one tile of start and end): the landed
# order's longest block is 1.12-1.17 of the average at 4-8 waves of causal items (medium and xl ctx 1024, 2.7B ctx 4096)
# and 1.06 at 15.5 waves; back and forth, 1.03-1.05 and 1.00, as good as the hardware's own placement or better. The
# thirty-first session measured persistence (with the landed order) as even at S1024 and -4.5% / -2.5% at S4096.
# Why (2): docs/perf/LOG.md (thirty-first session): S16384 forward and backward 3-10% slower than in earlier sessions
# since the landed order (every head's longest items first: ~64 heads' K and V live at B4 H16, 256 MB against 50 MB of
# L2); not settled (2026-11-29n-next-order.sh settles it against a607310's kernels).
# Predicted (attn-bench, B4 H16 D64): S1024 forward 0.049 -> ~0.045 ms, backward 0.120 -> ~0.112; S4096 forward 0.380 ->
# ~0.360, backward 1.249 -> ~1.18; S16384 with STG_ATT_HGROUP=1 or 4 2-3% (forward) and 5-7% (backward) under the
# default if the L2 reading holds, with several times fewer DRAM bytes. Steps: medium 1024 in backward -0.5 to -1%, xl
# 1024 -1 to -1.5%, 2.7B ctx 4096 -1%. Small ctx 512 with persistence forced at its 1.45 waves: -0.5 to -1% if the start
# and end gain holds.
# The A/B: the patched tree (build-gpu) against the same tree with the patch taken back out (/tmp/old, built beside it).
# The xl ctx 1024 peer does not fit this call: give it the next, beside an xl step of the same tree (PEER_TIMEOUT 240).
# Run as docs/perf/2026-11-29o-call1.sh in the thirty-second session (2026-11-29), patch applied in the tree.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-next-snake.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
F=(CMakeLists.txt ops/attention/sm90a/attention_ws.cu ops/attention/sm90a/attention_ws_bwd.cu ops/attention/sm90a/tma.cuh
   ops/attention/sm90a/tma_map.h)
# the files before the patch: git archive HEAD CMakeLists.txt ops/attention/sm90a | tar -xf - -C peer/rev (here)
[ -f peer/rev/ops/attention/sm90a/tma.cuh ] || { echo "no peer/rev (see above)"; exit 2; }
P=(); for f in "${F[@]}"; do P+=("peer/rev/$f:$f"); done
build_old "${P[@]}"
perf_build || { perf_pack; exit 1; }
wait
attn_tests default || echo "default: attention tests failed (see above)"
attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 || echo "p3g4: failed"
STG_ATT_FWD_PERSIST=5 STG_ATT_DKDV_PERSIST=5 STG_ATT_HGROUP=4 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
for r in 1 2; do
    for s in build-gpu/stg /tmp/old/build-gpu/stg; do
        timeout 60 $s attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s|^|[$s r$r] |"
        timeout 60 $s attn-bench --device cuda --attention flash --batch 1 --heads 32 --dims 80 --seqs 4096 \
            --iters 30 2>&1 | grep -E "^\| flash" | sed "s|^|[$s r$r] |"
    done
done
for g in 1 4 16; do
    STG_ATT_HGROUP=$g timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 \
        --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash" | sed "s|^|[groups of $g] |"
done
say "rates done"
for g in "" 1; do
    for k in att_ws_fwd att_ws_dkdv; do
        f="$out/l/ncu_g${g:-all}_$k.txt"
        STG_ATT_HGROUP=$g timeout 100 ncu -k "regex:$k" -s 2 -c 1 \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct build-gpu/stg attn-bench \
            --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 2 > "$f" 2>&1
        echo "[groups of ${g:-all} $k] ncu $?: $(grep -E "gpu__time_duration|dram__bytes_read|lts__t_sector_hit" "$f" | sed 's/  */ /g' | tr '\n' ';')"
    done
done
say "ncu done"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10)
for r in 1 2; do
    for s in build-gpu/stg /tmp/old/build-gpu/stg; do
        STG_BIN=$s stg_step "medium 1024 ib [$s] r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}"
        STG_BIN=$s stg_step "xl 1024 ib [$s] r$r" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}"
        [ "$r" = 1 ] && STG_BIN=$s stg_step "2.7B 4096 b1 ib [$s] r$r" models/cs336/2.7B.yaml --set ctx=4096 --set batch=1 "${OPT[@]}"
    done
done
# Small ctx 512's 1.45 waves: under the two-wave rule a block an item; back and forth, a fixed share is as even as the
# hardware's placement in the model (1.18 both), so persistent blocks there may gain their start and end: forced by the
# caps (132 blocks: the H200's multiprocessors, a block each), the new tree only.
SOPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "small 512 [two-wave rule] r$r" models/cs336/small.yaml --set ctx=512 "${SOPT[@]}"
    ( export STG_ATT_FWD_PERSIST=132 STG_ATT_DKDV_PERSIST=132
      stg_step "small 512 [persistent, 132 blocks] r$r" models/cs336/small.yaml --set ctx=512 "${SOPT[@]}" )
done
say "steps done"
perf_pack
