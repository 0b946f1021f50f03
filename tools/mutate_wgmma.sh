#!/usr/bin/env bash
# Mutation check of the wgmma attention kernels (GPU machine): each mutation drops one product of
# the head-dim-80 tail panel (in the two forwards and the backward), rebuilds BUILD and runs
# test_gpu_mm_attn, which must fail; the source is restored (and rebuilt) afterwards. Usage: tools/mutate_wgmma.sh BUILD
set -u
build=${1:?usage: tools/mutate_wgmma.sh BUILD}
[ -d "$build" ] || { echo "mutate_wgmma: no build directory $build" >&2; exit 2; }
fwd=ops/attention/sm90a/attention_wgmma.cu
bwd=ops/attention/sm90a/attention_wgmma_bwd.cu
# file|text of the line to drop (each appears once)|STG_ATT_WS for the test run (the cp.async forward in
# attention_wgmma.cu runs only with STG_ATT_WS=0 on sm_90a; the warp-specialised one, attention_ws.cu, by default)
ws=ops/attention/sm90a/attention_ws.cu
muts=("$fwd|if constexpr (TL) wg_mma_n16<1>(otl, pf[kk], wg_tdesc<NDC>(vb, BK, kk));|0"
      "$ws|if constexpr (TL) wg_mma_n16<1>(otl, pf[kk], wg_tdesc<NDC>(vb, BK, kk));|1"
      "$bwd|wg_mma_n16<1>(dvt, pa[kk], wg_tdesc<NDC>(ds, BQ, kk));|1"
      "$bwd|if constexpr (TL) wg_mma_n16<1>(dqt, sa4[kk], wg_tdesc<NDC>(ks, BK, kk));|1")
rc=0
for m in "${muts[@]}"; do
    f=${m%%|*}; rest=${m#*|}; line=${rest%|*}; wsv=${rest##*|}
    n=$(grep -cF "$line" "$f")
    if [ "$n" != 1 ]; then echo "mutate_wgmma: '$line' appears $n times in $f" >&2; rc=2; continue; fi
    cp "$f" "$f.orig"
    grep -vF "$line" "$f.orig" > "$f"
    if ! cmake --build "$build" > /dev/null 2>&1; then echo "MUTANT BUILD FAILED: $line"; rc=1
    elif STG_ATT_WS=$wsv STG_GPU_TEST_SMALL=1 timeout 300 "$build/test_gpu_mm_attn" > "$build/mutant.log" 2>&1; then echo "MUTANT SURVIVED: $line"; rc=1
    else echo "mutant killed: $line ($(grep -m1 -B1 'ERROR' "$build/mutant.log" | head -1 | head -c 160))"; fi
    mv "$f.orig" "$f"
done
cmake --build "$build" > /dev/null 2>&1 || { echo "mutate_wgmma: rebuild after restoring failed" >&2; rc=2; }
exit $rc
