#!/usr/bin/env bash
# Twenty-ninth session, call 5 (about 6 minutes; run it under `timeout 560`): the tree with both of this session's GPU
# changes (the upload kernel, fdf1200; attention_cached's pre-wait phase, b65db50): the GPU suite, then issue 26's
# acceptance beside the peer (tools/sample_peer.sh: the torch peer with reduce-overhead and a static cache; stg tuned).
# Predicted: 14/14; batch 1 ~452 tokens/s tuned against the peer's ~358 (1.26x), batch 64 ~1.23x.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29l-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
(cd build-gpu && timeout 300 ctest -L gpu --timeout 280 > "$out/l/ctest_gpu.txt" 2>&1; echo "ctest -L gpu: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
say "tests done"
BATCHES="1 64" CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 240 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 |
    grep -vE '^\{"model"|^\[.*stg batch' | cut -c1-600 | tail -8
say done
perf_pack
