#!/usr/bin/env bash
# Thirty-seventh session, call 2 (2026-11-30): head dim 80's forward with Q in shared memory (WS_FWD80_QSS, new in the
# tree, off by default; the Q panels loaded by wg_load_rows_x, in the K tiles' layout with the 16-dim tail panel, which
# the D64 and D128 forms now use too), two shapes against the tree (Q in registers, 3 warpgroups at 160, 64-key tiles,
# 5 stages):
#   a = 3 warpgroups at 160 registers, 64-key tiles, 6 stages (Q in shared memory frees 20 registers; the 128-key tile
#       spills 68 bytes at 160 and ptxas serializes it, C7512, so not tried);
#   b = 2 warpgroups at 240 registers, 128-key tiles in 5 stages (head dim 128's shape).
# Predicted: a 0-4% faster (fewer registers, the same tile), b -5% to +10% (the 128-key tile gained 13% at head dims 64
# and 128, but 2 warpgroups at head dim 80 ran 10-12% slower than 3 in the seventeenth session); head dims 64 and 128
# unchanged by the new Q load (rates one round, the tree). The 2.7B ctx-4096 step (head dim 80) A/B; the single-pass
# backward (STG_ATT_BWD_DQ=1) of the tree at 64 and 80 for a current reading (twentieth session: 0.65 of the two launches).
# Then the tree's GPU suite (its D64 / D128 forwards load Q the new way) and the sanitizers in the build of the faster
# variant (the tree if neither beats it by 1%).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant a - "-DWS_FWD80_QSS=1 -DWS_FWD80_BK=64 -DWS_FWD80_NST=6" stg test_gpu_mm_attn test_gpu_ops
variant b - "-DWS_FWD80_QSS=1 -DWS_FWD80_NWG=2 -DWS_FWD80_RG=240 -DWS_FWD80_BK=128 -DWS_FWD80_NST=5" stg test_gpu_mm_attn test_gpu_ops
perf_build || { wait; perf_pack; exit 1; }
wait
say "builds done"
variants_ab a b
say "tests done"
for r in 1 2; do
    for x in "${B[@]}"; do
        timeout 40 "${x#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 80 --seqs 4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${x%%:*} r$r] /" | tee -a "$out/l/d80.txt"
    done
done
attn_ab 1 tree:build-gpu/stg
attn_peer 80
STG_ATT_BWD_DQ=1 timeout 40 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 \
    --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[tree single pass] /"
say "rates done"
steps_ab 2.7B 4096 1 2 "${B[@]}"
say "steps done"
# the winner: the least sum of head dim 80's forward ms (both lengths, both rounds), if 1% below the tree's
win=$(python3 - "$out/l/d80.txt" <<'PY'
import sys, collections
t = collections.defaultdict(float)
for l in open(sys.argv[1]):
    f = [x.strip() for x in l.split("|")]
    t[l.split("]")[0].strip("[").split()[0]] += float(f[4])
best = min(t, key=t.get)
print(best if best != "tree" and t[best] < 0.99 * t["tree"] else "tree")
PY
)
echo "winner: $win"
W=build-gpu
[ "$win" != tree ] && W=/tmp/$win/build-gpu
gpu_suite 480
tools/sanitize_gpu.sh "$W" "$out/l/san_$win" 100 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
    racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "suite done"
perf_pack
