#!/usr/bin/env bash
# Mutation check of the wgmma attention kernels (GPU machine): each mutation drops one product of
# the head-dim-80 tail panel (in the forward and in both backwards), rebuilds BUILD and runs
# test_gpu_mm_attn on the kernel it touches, which must fail; the source is restored (and rebuilt) afterwards. Usage: tools/mutate_wgmma.sh BUILD
set -u
build=${1:?usage: tools/mutate_wgmma.sh BUILD}
[ -d "$build" ] || { echo "mutate_wgmma: no build directory $build" >&2; exit 2; }
bwd=ops/attention/sm90a/attention_wgmma_bwd.cu
wsb=ops/attention/sm90a/attention_ws_bwd.cu
ws=ops/attention/sm90a/attention_ws.cu
# file|text of the line to drop (each appears once)|the environment that runs the kernel holding it (the warp-specialised
# forward and backward by default; STG_ATT_WS_BWD=0: the cp.async backward)
muts=("$ws|if constexpr (TL) wg_mma_n16<1>(otl, pf[kk], wg_tdesc<NDC>(vb, BK, kk));|STG_ATT_WS=1"
      "$bwd|wg_mma_n16<1>(dvt, pa[kk], wg_tdesc<NDC, WH>(ds, BQ, kk));|STG_ATT_WS_BWD=0"
      "$bwd|if constexpr (TL) wg_mma_n16<1>(dqt, sa4[kk], wg_tdesc<NDC, WH>(ks, BK, kk));|STG_ATT_WS_BWD=0"
      "$wsb|wg_mma_n16<1>(dvt, pa[kk], wg_tdesc<NDC, WH>(ds, BQ, kk));|STG_ATT_WS_BWD=1"
      "$wsb|if constexpr (TL) wg_mma_n16<1>(dqt, sa4[kk], wg_tdesc<NDC, WH>(ks, BK, kk));|STG_ATT_WS_BWD=1")
rc=0
for m in "${muts[@]}"; do
    f=${m%%|*}; rest=${m#*|}; line=${rest%|*}; wsv=${rest##*|}
    n=$(grep -cF "$line" "$f")
    if [ "$n" != 1 ]; then echo "mutate_wgmma: '$line' appears $n times in $f" >&2; rc=2; continue; fi
    cp "$f" "$f.orig"
    grep -vF "$line" "$f.orig" > "$f"
    if ! cmake --build "$build" > /dev/null 2>&1; then echo "MUTANT BUILD FAILED: $line"; rc=1
    elif env "$wsv" STG_GPU_TEST_SMALL=1 timeout 300 "$build/test_gpu_mm_attn" > "$build/mutant.log" 2>&1; then echo "MUTANT SURVIVED: $line"; rc=1
    else echo "mutant killed: $line ($(grep -m1 -B1 'ERROR' "$build/mutant.log" | head -1 | head -c 160))"; fi
    mv "$f.orig" "$f"
done
cmake --build "$build" > /dev/null 2>&1 || { echo "mutate_wgmma: rebuild after restoring failed" >&2; rc=2; }
exit $rc
