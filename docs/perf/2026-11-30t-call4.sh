#!/usr/bin/env bash
# Thirty-seventh session, call 4 (2026-11-30): head dim 64's dq kernel in 3 consumer warpgroups at 160 registers with Q
# and dO in swizzled tiles read by the S and dP products (SS, as head dim 128 does; with Q and dO in registers 3
# warpgroups do not fit), the forward's winning shape (call 1: -12%): dq3 = the tree built with -DWS_DQ64_W3=1 (ptxas:
# no spills, no serialization notes). Predicted: head dim
# 64's backward 2-7% faster at seq 4096 and 16384 (the dq launch is ~35-40% of it and, like the forward, waits on its
# softmax between turns), 80 and 128 unchanged. Then dq3's attention tests at four grids, its sanitizers and, whole, its
# GPU suite. Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
variant dq3 - "-DWS_DQ64_W3=1"
perf_build stg || { wait; perf_pack; exit 1; }
wait
say "builds done"
serial_report "$out/l/build_dq3.txt" dq3
if variant_tests dq3; then
    for r in 1 2; do
        for x in tree:build-gpu/stg dq3:/tmp/dq3/build-gpu/stg; do
            timeout 40 "${x#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 4096,16384 \
                --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[${x%%:*} r$r] /"
        done
    done
    timeout 30 /tmp/dq3/build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 \
        --iters 20 2>&1 | grep -E "^\| flash" | sed "s/^/[dq3 GQA] /"
    say "rates done"
    tools/sanitize_gpu.sh /tmp/dq3/build-gpu "$out/l/san_dq3" 100 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
    say "sanitizers done"
    (cd /tmp/dq3 && gpu_suite 300)
fi
perf_pack
