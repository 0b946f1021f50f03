#!/usr/bin/env bash
# Thirty-sixth session, call 5 (2026-11-30): head dim 64's forward with Q in shared memory (docs/perf/2026-11-30s-d64qss.patch,
# switch WS_FWD64_QSS), in 2 consumer warpgroups at 240 registers (q2) and in 3 at 160 (q3: FlashAttention-3's 192 x 128
# tile at head dim 64; with Q in registers 3 warpgroups spill 96 bytes and ptxas serializes the wgmmas, C7512), against the
# tree (9cf8021), head dim 64 only, two rounds alternating. Predicted: q2 equal to -3% (as head dim 128's 2-stage form
# showed, the SS S product alone is no gain), q3 0-8% faster at seq 16384 if 2 warpgroups leave the tensor cores idle
# between their turns. Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30s-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30s-d64qss.patch
variant q2 "$P" "-DWS_FWD64_QSS=1" stg test_gpu_mm_attn test_gpu_ops
variant q3 "$P" "-DWS_FWD64_QSS=1 -DWS_FWD64_NWG=3 -DWS_FWD64_RG=160" stg test_gpu_mm_attn test_gpu_ops
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
B=(tree:build-gpu/stg)
for v in q2 q3; do (cd /tmp/$v && attn_tests "${v}_default" && attn_tests "${v}_p3g4" STG_ATT_FWD_PERSIST=3 STG_ATT_HGROUP=4) && B+=("$v:/tmp/$v/build-gpu/stg"); done
for r in 1 2; do
    for b in "${B[@]}"; do
        timeout 40 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 4096,16384 \
            --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
    done
done
say "rates done"
perf_pack
