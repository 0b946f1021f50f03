#!/usr/bin/env bash
# For the session after the thirty-fifth (written 2026-11-30, compiled here, never run: that session's device time was
# spent; about 9 minutes, run it under `timeout 570`). The dk/dv kernel's Sᵀ = K Qᵀ and dPᵀ = V dOᵀ at head dim 64 with K
# and V as register fragments (RS, loaded once a work item by ldmatrix from their swizzled tiles) instead of shared-memory
# descriptors (SS): docs/perf/2026-11-30r-rsk.patch, switch WS_DKDV_RSK, reached at 240 consumer registers only (the TMA
# producer's instantiation built with -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240; at 224 it spilled).
# Why: an SS m64n64k16 reads A and B, 4 KB of shared memory, in its 32 tensor cycles, which is the multiprocessor's 128
# bytes a cycle; two of the tile's four products (Sᵀ, dPᵀ) are SS at head dims 64 and 80, and the thirty-third session's
# probe (docs/perf/2026-11-29p-h200-call2.txt) had each consumer warpgroup stalled 712 / 1,035 cycles of a 2,086-cycle tile
# pair in issuing its products: the tensor pipe took the tile's 1,024 cycles of work at half its rate. RS reads 2 KB a
# product. The thirty-fifth session's pipelined variants ruled out the softmax's overlap as the lever (LOG.md).
# Binaries: tree (build-gpu), rg (the tree with -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240, the registers' own effect: equal
# in the thirty-fourth session), rsk (the patch with those flags and -DWS_DKDV_RSK=1).
# Predicted: the attention tests pass at every grid; the backward at head dim 64 3-12% faster at seq 4096 and 16384 (the
# two SS products up to twice as fast if shared memory is what they wait on), 80 and 128 and the forward unchanged; the xl
# ctx-1024 step (head dim 64) -0.3 to -1 ms. If nothing changes, the SS products were not bandwidth-bound: then the
# issue stall is the tensor pipe itself and the tile's work (not its operands) is the lever.
# Here first (a fresh checkout): ../shared/device/prep.sh; mkdir -p peer && cp ../shared/peers/*.py peer/.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30r-next-rsk.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
P=docs/perf/2026-11-30r-rsk.patch
patch -p1 --dry-run -s < "$P" > /dev/null || { echo "$P does not apply to this tree"; exit 2; }
variant rsk "$P" "-DWS_DKDV_RSK=1 -DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240" stg test_gpu_mm_attn test_gpu_ops
variant rg - "-DWS_DKDV_TQ_PR=24 -DWS_DKDV_TQ_RG=240" stg
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
variants_ab rsk
B+=("rg:/tmp/rg/build-gpu/stg")
if [[ " ${B[*]} " == *" rsk:"* ]]; then
    tools/sanitize_gpu.sh /tmp/rsk/build-gpu "$out/l/san_rsk" 150 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
fi
say "tests done"
attn_ab 2 "${B[@]}"
say "rates done"
PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 \
    | tee "$out/l/peer_attn.txt" | grep -E "CUDNN|FLASH"
say "cuDNN done"
if [[ " ${B[*]} " == *" rsk:"* ]]; then
    steps_ab xl 1024 4 2 tree:build-gpu/stg rsk:/tmp/rsk/build-gpu/stg
    say "steps done"
    (cd /tmp/rsk && gpu_suite 380)
fi
perf_pack
