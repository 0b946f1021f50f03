#!/usr/bin/env bash
# 2026-11-28 (ninth session), device call 2: the issue-24 rows (GPT-2 124M against llm.c, with the head
# variants and a profile; Llama 3.2-1B against torch.compile) and the decode step's profile (issue 26).
# On the GPU machine from the repository root, carrying .deps and .peers (torch_lm.py, llm.c's source):
#   docs/perf/2026-11-28b-run2.sh OUT
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
# llm.c's train_gpt2cu beside stg's build (the same make line tools/peer_llmc.sh runs)
(cd .peers/llm.c && sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' llmc/cuda_utils.cuh &&
  make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90 > "$out/l/llmc_build.txt" 2>&1) &
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake.txt" 2>&1 &&
  cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1) || { tail -20 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
tools/issue_perf.sh "$out/l" decode_profile
say "decode profiled"
tools/issue_perf.sh "$out/l" gpt2
say "gpt2 done"
tools/issue_perf.sh "$out/l" llama1b
say "llama1b done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude='*.bin' .
