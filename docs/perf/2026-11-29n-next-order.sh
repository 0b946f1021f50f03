#!/usr/bin/env bash
# For the session after the thirty-first (written 2026-11-29, not run; about 5 minutes, run it under `timeout 400`).
# First, here: rm -rf peer/old && mkdir -p peer/old && git archive a607310 ops/attention | tar -xf - -C peer/old (the
# attention kernels before the landed persistence, c7f77d3), and carry peer.
# The question: did c7f77d3's work-item order cost L2 locality at long sequences? It orders items longest-first over
# every head and batch (all heads' longest row tile, then all heads' next), where the grid before ran one head's row
# tiles after another (x fastest). At B4 H16 S16384 head dim 64 one head's K and V are 4 MB; the resident blocks then
# work on ~64 heads at once (~256 MB of K and V, over the H200's 50 MB L2) instead of one or two. The thirty-first
# session's call 1 measured S16384 at 5.01-5.12 ms forward and 18.99-19.39 backward in every variant (a block an item
# included, which has the new order too), against 4.85-4.91 and 17.70 in the twenty-sixth session (old order; other
# changes in between, e.g. the D kernel, ae214eb). Predicted, if the reading holds: the old order's forward kernel
# reads several times fewer DRAM bytes at S16384 and is 2-3% faster, its dk/dv 5-7%; at S4096 (1 MB a head) within
# 1-2%; at S1024 the new order faster (the thirty-first session's call 1: 0.049 against the thirtieth's 0.052-0.054 ms).
# The A/B: HEAD (build-gpu) against HEAD with a607310's ops/attention (/tmp/old), attn-bench two rounds, then Nsight
# Compute's DRAM bytes and L2 hit rate of one forward and one dk/dv launch at S16384 for each.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-next-order.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
[ -d peer/old/ops/attention ] || { echo "no peer/old/ops/attention (see the header)"; exit 2; }
P=(); for f in $(cd peer/old && find ops/attention -type f); do cmp -s "peer/old/$f" "$f" || P+=("peer/old/$f:$f"); done
echo "files that differ: ${#P[@]}"
build_old "${P[@]}"
perf_build stg || { perf_pack; exit 1; }
wait
B=("new:build-gpu/stg" "old:/tmp/old/build-gpu/stg")
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 1024,4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
        timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 16384 \
            --iters 10 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
for b in "${B[@]}"; do
    for k in att_ws_fwd att_ws_dkdv; do
        f="$out/l/ncu_${b%%:*}_$k.txt"
        timeout 120 ncu -k "regex:$k" -s 2 -c 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
            "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 2 > "$f" 2>&1
        echo "[${b%%:*} $k] ncu $?: $(grep -E "gpu__time_duration|dram__bytes_read|lts__t_sector_hit" "$f" | sed 's/  */ /g' | tr '\n' ';')"
    done
done
say "ncu done"
perf_pack
