#!/usr/bin/env bash
# For a session after the thirty-third (written 2026-11-29, compiled here, never run; about 5-6 minutes, run it under
# `timeout 500`). Half of the attention softmax's exponentials on the FMA pipe instead of the MUFU
# (docs/perf/2026-11-29p-ex2-fma.patch: wg_ex2_fma, 2^x by round-to-integer, a cubic for 2^f and an exponent-field add;
# relative error at most 7.5e-5 in a float32 emulation over x in [-130, 2], 0 below -125, NaN kept; build-time splits
# WS_EX2_FMA (the backward's dq and dk/dv kernels) and WS_FWD_EX2_FMA (the forward), element e of a thread's 32 on the
# FMA pipe when e & the mask; 0 leaves the kernels as they are).
# Why: a multiprocessor's MUFU gives 16 exponentials a clock against 4,096 tensor FLOPs, so a 64 x 64 tile pair's
# 8,192 exponentials take 512 MUFU clocks, beside ~1,024 of tensor work at head dim 64 (the thirty-third session's probe:
# 2,086 clocks a tile pair in the dk/dv kernel, the softmax phase 400-610 of them a warpgroup; the dq kernel 1,356, ~460).
# FlashAttention-4 moves part of the exponentials to the FMA pipe for that reason. Predicted: the backward 3-8% faster at
# seq 4096 and 16384 if the softmax phases are bound by the MUFU, ~0 if by latency; the forward 0-4%. Compiled here:
# no new C7520; head dim 128's dk/dv kernel spills 4 bytes with the split (0 in the tree), the rest none.
# Binaries: tree (build-gpu, as it is), bwd (the patch, -DWS_EX2_FMA=2: half of each thread's 32 in the dq and dk/dv
# kernels), fwd (the patch, -DWS_FWD_EX2_FMA=2). Each variant's attention tests (both programs) first; its rates only if
# they pass.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29p-next-ex2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-29p-ex2-fma.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant() { # DIR FLAGS
    rm -rf "$1" && mkdir -p "$1" && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C "$1"
    (cd "$1" && patch -p1 -s < "$P" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        "-DCMAKE_CUDA_FLAGS=$2" > "$out/l/cmake_$(basename "$1").txt" 2>&1 &&
        timeout 300 cmake --build build-gpu --target stg --target test_gpu_mm_attn --target test_gpu_ops \
            > "$out/l/build_$(basename "$1").txt" 2>&1; echo "$1 build: $?") &
}
variant /tmp/eb -DWS_EX2_FMA=2
variant /tmp/ef -DWS_FWD_EX2_FMA=2
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
B=("tree:build-gpu/stg")
for v in eb ef; do
    ok=1
    for p in test_gpu_mm_attn test_gpu_ops; do
        (cd /tmp/$v/build-gpu && STG_TEST_FILTER='*attention*' timeout 60 ./$p > "$out/l/${v}_$p.txt" 2>&1) || ok=0
        echo "$v $p: $(grep -E "PASSED|FAILED" "$out/l/${v}_$p.txt" | tr '\n' ' ')"; grep -m3 -E "ERROR|rel err.*tolerance" "$out/l/${v}_$p.txt"
    done
    [ $ok = 1 ] && B+=("$v:/tmp/$v/build-gpu/stg")
done
say "tests done"
attn_ab 2 "${B[@]}"
say "rates done"
perf_pack
