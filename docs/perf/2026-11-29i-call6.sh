#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 6: the attention backward's dq launch on a second stream beside its dk/dv
# launch (att_side; STG_ATT_BWD_SIDE=0 keeps one stream, for the A/B in one binary). Calls 4-5: at the CS336 sizes'
# seq 512 each launch is two waves of 192-400 blocks (one block a multiprocessor), so the dk/dv launch's last wave
# leaves multiprocessors idle that the dq blocks can take; the cp.async kernels' fused launch was 5-7% faster there.
# Predicted: backward at seq 512 10-25% faster (small 0.052 -> ~0.042 ms), at 1024 5-10%, at 4096 and above ~0-2%;
# the steps at ctx 512: small 5.33 -> ~5.2 ms, medium and xl -1 to -2%.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29i-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
ok=1
attn_tests side || ok=0
attn_tests one STG_ATT_BWD_SIDE=0 || ok=0
say "attention tests done"
for r in 1 2; do
    for m in "STG_ATT_BWD_SIDE=0" "STG_ATT_BWD_SIDE=1"; do
        echo "== [$m] round $r"
        for sh in "12 64" "25 64" "32 80"; do
            set -- $sh
            env $m timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads $1 --dims $2 \
                --seqs 512,1024,4096 --iters 30 2>&1 | grep -E "^\| flash"
        done
    done
done
say "attention A/B done"
for r in 1 2; do
    for sz in small medium xl; do
        for m in "STG_ATT_BWD_SIDE=0" "STG_ATT_BWD_SIDE=1"; do
            env $m timeout 120 build-gpu/stg bench models/cs336/$sz.yaml --set ctx=512 --set batch=4 --precision bf16 \
                --warmup 3 --iters 10 --json > "$out/l/b.json" 2> "$out/l/b.err"
            med "$out/l/b.json" "$sz ctx512 b4 [$m] r$r"
        done
    done
done
say "steps done"
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/l/ctest.txt" | tail -5)
say "suite done"
tools/sanitize_gpu.sh build-gpu "$out/l" 120 memcheck:test_gpu_ops:'*attention*' 2>&1 | tail -2
say "memcheck done"
perf_pack
