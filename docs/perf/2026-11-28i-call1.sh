#!/usr/bin/env bash
# Sixteenth session (2026-11-28i), call 1: the prepared split-K tuning (docs/perf/2026-11-28h-next-run.sh: both builds,
# the GPU suite, the decode A/B, Llama tuned), then the batch-64 decode beside the peer with --gemm-tune on.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-28i-call1.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out" && out=$(cd "$out" && pwd)
timeout 420 docs/perf/2026-11-28h-next-run.sh "$out"
echo "next-run rc=$?"
source .deps/env.sh
BATCHES=64 CHECK=0 STG_ARGS="--precision bf16 --init fill --gemm-tune on" timeout 170 tools/sample_peer.sh build-gpu/stg "$out/peer"
echo "peer rc=$?"
tar -czf "$out/peer.tgz" -C "$out" --exclude="*.bin" peer && rm -rf "$out/peer"
