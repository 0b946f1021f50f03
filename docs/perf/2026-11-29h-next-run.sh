#!/usr/bin/env bash
# For the session after the twenty-fifth (2026-11-29): one call of about 9 minutes (run it under `timeout 560`).
# Nothing here was run; the tree it measures is the twenty-fifth session's last (the tensor-core few-rows products
# landed in f7aa1b8, run on the GPU in that session's call 2).
# 1. The GPU suite (a check that the machine and the tree agree before anything is timed).
# 2. Decode beside the peer at batches 1 and 64 after f7aa1b8 (neither batch takes the new kernels: batch 1 keeps the
#    CUDA-core ones, batch 64 cuBLASLt): expected unchanged, stg / peer ~1.20 at both (issue 26 asks 1.5 and 1.2).
# 3. Llama 3.2-1B at 1 / 2 / 4 / 8 sequences, tensor cores against STG_NO_GEMV_TC=1 (grouped-query: q apart from the
#    k / v group; head dim 64): never measured; expected the 2.7B's pattern (2 rows ~1.1x, 8 rows ~2x).
# 4. large ctx 1024 beside the reduce-overhead peer (issue 28's last row of the table not run beside it on an H200).
# Usage (GPU machine, repository root, carrying .deps and peer): docs/perf/2026-11-29h-next-run.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 200 ctest -L gpu --output-on-failure > "$out/ctest.txt" 2>&1; echo "ctest: $?"; grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.txt" | tail -5)
say "suite done"
BATCHES="1 64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 200 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 |
    grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -6
say "peer done"
dec_prompt
for r in 1 2; do
    for s in "env STG_NO_GEMV_TC=1 build-gpu/stg" build-gpu/stg; do
        for b in 1 2 4 8; do
            timeout 90 $s sample models/llama3/1B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 \
                --temperature 0 --json --batch "$b" > "$out/l/d.json" 2>&1; echo "llama 1B b$b $s $(dec_keys "$out/l/d.json")"
        done
    done
done
say "llama A/B done"
step_row large 1024 "cg" 330
rm -f "$out"/l/*.bin "$out"/l/peer/*.bin
perf_pack
