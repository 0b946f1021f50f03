#!/usr/bin/env bash
# For the session after 2026-11-28 (ninth): two changes written and compiled, not run (the device
# time was spent). Apply them first, here:
#   rm -rf .old && mkdir .old && git archive HEAD | tar -x -C .old    (the tree before them, for the A/B)
#   git apply docs/perf/2026-11-28b-pdl.patch docs/perf/2026-11-28b-lce-pad.patch
# then on the GPU machine from the repository root, carrying .deps and .old:
#   docs/perf/2026-11-28b-next-run.sh OUT
# 1. docs/perf/2026-11-28b-pdl.patch, programmatic dependent launch for decoding:
# The patch: the few-rows product kernel is launched with programmatic stream serialisation
# (cudaLaunchKernelEx) on sm_90; it loads its first trip of W before griddepcontrol.wait when every
# W is a parameter of a graph without optimizer ops (decoding), x/addend/y only after; the norm,
# element-wise, embedding and cached-attention kernels call griddepcontrol.launch_dependents at their
# start. STG_NO_PDL=1 turns it off at run time, so one build gives the A/B.
#    Prediction: 2.7B decode at batch 1 from 2.86 to about 2.5 ms a token (128 products, each hiding a
# launch and a first DRAM trip of a few microseconds under the kernel before); training steps unchanged
# (no product there is PDL-launched unless it has at most 8 rows; cuBLASLt's kernels may start earlier
# after our triggers: the bench A/B below says whether that moves anything).
# 2. docs/perf/2026-11-28b-lce-pad.patch: the fused head's forward pads its logit rows to 16 bytes in
#    its scratch when the vocabulary is not a multiple (GPT-2's 50257), and the cross-entropy row
#    kernel reads aligned rows 16 bytes at a time with a scalar tail. test_gpu_head covers vocab 1001
#    and 1003. Prediction: GPT-2 124M at its defaults (vocab 50257, fused head) from 15.7 (H200) to
#    about 12.5 ms; unchanged at vocab 50304.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
grep -q cu_pdl_wait ops/cuda/common.cuh && grep -q "int64_t ld;" ops/loss/cuda.cu ||
    { echo "apply docs/perf/2026-11-28b-pdl.patch and docs/perf/2026-11-28b-lce-pad.patch first"; exit 2; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
(cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > "$out/l/cmake_old.txt" 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1) &
(cmake -S . -B build-gpu $cfg > "$out/l/cmake.txt" 2>&1 && cmake --build build-gpu > "$out/l/build.txt" 2>&1) || { tail -30 "$out/l/build.txt"; exit 1; }
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
(cd build-gpu && timeout 260 ctest -L gpu -j4 --output-on-failure > "$out/l/ctest.txt" 2>&1; echo "ctest exit $?" >> "$out/l/ctest.txt") &
tools/sanitize_gpu.sh build-gpu "$out/l" 260 memcheck:test_gpu_sample memcheck:test_gpu_mm_attn memcheck:test_gpu_head \
    synccheck:test_gpu_sample > "$out/l/sanitize.txt"
wait
say "checks done"
grep -E "tests passed|\*\*\*Failed|ctest exit" "$out/l/ctest.txt"
cat "$out/l/sanitize.txt"
echo "== decode at batch 1 and 64: PDL on (default), off (STG_NO_PDL=1), alternating; then the peer at batch 1"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for b in 1 64; do
    for v in on off on off; do
        echo "pdl $v batch $b: $( ( [ $v = off ] && export STG_NO_PDL=1; timeout 40 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 \
            --init fill --json --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --batch $b --temperature 0 2>&1) |
            grep -oE '"(decode_tokens_per_s|steady_ms_per_step|bound_tokens_per_s)": *[0-9.]+' | tr '\n' ' ')"
    done
done
BATCHES=1 CHECK=0 timeout 150 tools/sample_peer.sh build-gpu/stg "$out/l/decode" 2>&1 | tail -1
say "decode timed"
echo "== GPT-2 124M, batch 4, ctx 1024: the defaults (vocab 50257, fused head) and vocab 50304 plain, new against .old"
for v in "50257 on" "50304 off"; do
    set -- $v
    for s in build-gpu/stg .old/build-ab/stg build-gpu/stg .old/build-ab/stg; do
        echo "$s vocab $1 fused_head $2: $($s bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=$1 --set fused_head=$2 \
            --precision bf16 --warmup 5 --iters 30 | grep -E '^  time')"
    done
done
echo "== training steps, patched tree against .old (the triggers before cuBLASLt's kernels)"
timeout 150 tools/bench_ab.sh build-gpu/stg,.old/build-ab/stg '' '' small:512 2.7B:1024
say "done"
tar -czf "$out/logs.tgz" -C "$out/l" --exclude='*.bin' .
