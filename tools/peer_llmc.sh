#!/usr/bin/env bash
# On the GPU machine: llm.c's train_gpt2cu (built without cuDNN) on GPT-2 124M from random init,
# the peer of models/gpt2/124M.yaml (issue 24). llm.c's source is not vendored: copy a checkout
# into an ignored folder and carry it (here .peers/llm.c, with its commit in .peers/llm.c/COMMIT).
# Usage: tools/peer_llmc.sh LLMC_DIR OUT_DIR [BATCH] [CTX] [STEPS]
# Prints llm.c's per-step lines; OUT_DIR/llmc.txt keeps them.
set -euo pipefail
src=$1 out=$2 B=${3:-4} T=${4:-1024} steps=${5:-40}
mkdir -p "$out"
work=$(mktemp -d)
cp -r "$src"/. "$work"/
cd "$work"
# CUDA 13 takes a cudaMemLocation in cudaMemAdvise (llm.c's out-of-memory fallback to managed
# memory, never reached at these sizes); the one call rewritten so it compiles
sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' llmc/cuda_utils.cuh
# llm.c's token files: a 256-int32 header (magic 20240520, version 1, token count), then uint16 ids
python3 - <<'PY'
import struct, random
random.seed(0)
for name, n in (("train.bin", 4_000_000), ("val.bin", 200_000)):
    with open(name, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
PY
# a train_gpt2cu already built in LLMC_DIR (with the same make line, e.g. beside another build) is used as is
[ -x train_gpt2cu ] || make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 > "$out/llmc_build.txt" 2>&1 || { tail -30 "$out/llmc_build.txt"; exit 1; }
echo "llm.c commit: $(cat COMMIT 2>/dev/null || echo unknown)" | tee "$out/llmc.txt"
./train_gpt2cu -i train.bin -j val.bin -e d12 -b "$B" -t "$T" -x "$steps" -v 100000 -m 1 -s 0 -h 0 2>&1 | tee -a "$out/llmc.txt" | grep -E "^step|num_parameters|total average"
