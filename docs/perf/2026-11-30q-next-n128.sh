#!/usr/bin/env bash
# For the session after the thirty-fourth (written 2026-11-30, compiled here, never run: that session's device time was
# spent; about 7-8 minutes, run it under `timeout 560`). Head dim 128's dV and dK products in the dk/dv kernel as
# m64n128 (docs/perf/2026-11-30q-n128.patch: wg_mma_ss_n128 in wgmma.cuh, the build switch WS_DKDV_N128, 0 by default;
# the n128 binary is the tree with the patch built with -DWS_DKDV_N128=1). Compiled here: no spills, the same C7519 /
# C7520 notes as the tree; head dims 64 and 80 compile to the same code (the switch only reaches the SSA branch).
# Why: at head dim 128 every product of the dk/dv kernel reads both operands from shared memory (Sᵀ = K Qᵀ and dPᵀ = V
# dOᵀ, and dV += Pᵀ dO, dK += dSᵀ Q with Pᵀ, dSᵀ in shared tiles since the registers ran out). An SS m64n64k16 reads
# 4 KB for 32 tensor cycles, the multiprocessor's whole 128 B a cycle, so the kernel's shared traffic per 64 x 64 tile
# and warpgroup is 128 KB of products + ~16 KB of its share of the tensor copies + 16 KB of Pᵀ / dSᵀ stores: ~1,250
# cycles against 1,024 of tensor work (the twelfth session's budget, docs/perf/LOG.md). The dV and dK products are two
# m64n64 a k-step each, both reading the same Pᵀ (dSᵀ) 2 KB; one m64n128 reads it once: 6 KB for 64 tensor cycles, and
# the tile's traffic falls to ~144 KB (~1,125 cycles). Predicted: head dim 128's backward 0-5% faster at seq 4096 and
# 16384 (the kernel's tile pair, ~3,400 cycles, is well above both bounds, so how much of it is shared-memory
# contention is what this measures), bitwise the same results (each element's sum over the tile's queries in the same
# order), 64 and 80 unchanged. A miss to look at first: a wrong second panel (the descriptor's LBO, the panel stride,
# is what wg_desc_mnmaj already sets; at N = 64 it was unused) fails every head-dim-128 attention test.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/. The tree stays
# unpatched (the A/B's other side); the script makes the n128 tree itself.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30q-next-n128.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30q-n128.patch
git apply --check "$P" 2> /dev/null || patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
rm -rf /tmp/n128 && mkdir -p /tmp/n128 && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/n128
(cd /tmp/n128 && patch -p1 -s < "$P" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_FLAGS=-DWS_DKDV_N128=1 > "$out/l/cmake_n128.txt" 2>&1 && timeout 300 cmake --build build-gpu > "$out/l/build_n128.txt" 2>&1
    echo "n128 build: $?") &
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
B=("tree:build-gpu/stg")
ok=0
if (cd /tmp/n128 && attn_tests default && attn_tests hgroup3 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 &&
    attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 &&
    attn_tests cpasync STG_ATT_DKDV_TMA=0 STG_ATT_DKDV_PERSIST=3); then
    ok=1
    B+=("n128:/tmp/n128/build-gpu/stg")
    tools/sanitize_gpu.sh /tmp/n128/build-gpu "$out/l/san_n128" 120 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*'
fi
say "tests done"
attn_ab 2 "${B[@]}"
for b in "${B[@]}"; do
    timeout 40 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 16384 --iters 20 \
        --order phases 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} phases] /"
done
say "rates done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
[ $ok = 1 ] && (cd /tmp/n128 && gpu_suite 400)
perf_pack
