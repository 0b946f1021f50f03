#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 5: the attention tiles at the CS336 sizes' short sequences, and large ctx 1024
# beside the strongest peer (the last row of PERF.md's H200 step table measured against default compile only).
# Call 4: at seq 512 / 1024 stg's attention is 1.3-3x faster than cuDNN's, but runs at 65-210 TFLOP/s against 340-450
# at 4096-16384, and it is ~10% of small's, medium's and xl's steps at ctx 512. The forward's shapes were chosen at
# 4096 / 16384 (seventeenth session): key tiles of 128 at head dim 64 (1-4 tiles a block at seq 512), 3 warpgroups at
# head dim 80 (192-row blocks: 3 a head at seq 512). A variant build: key tiles of 64 at head dim 64, 2 warpgroups of
# 240 registers at head dim 80. Predicted: the forward at seq 512 10-25% faster in the variant (more, shorter tiles to
# pipeline; 2.7B's heads in 4 blocks, not 3), slower at 4096 (as measured then); the backward unchanged (same kernels),
# and the cp.async backward (STG_ATT_WS_BWD=0) ~5% faster at 512, equal at 1024 (call 4).
# peer/var_attention_ws.cu is attention_ws.cu with docs/perf/2026-11-29i-fwd-tiles-short.patch applied (made before the call).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29i-call5.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
side /tmp/var stg peer/var_attention_ws.cu:ops/attention/sm90a/attention_ws.cu
perf_build stg || { perf_pack; exit 1; }
wait
say "builds done"
run_shapes() {
    local b=$1 sh; shift
    for sh in "12 64" "25 64" "32 80"; do
        set -- $sh
        timeout 60 $b attn-bench --device cuda --attention flash --batch 4 --heads $1 --dims $2 --seqs 512,1024,4096 --iters 30 2>&1 | grep -E "^\| flash"
    done
}
for r in 1 2; do
    echo "== base, round $r"; run_shapes build-gpu/stg
    echo "== variant (WS_FWD64_BK=64, WS_FWD80_NWG=2 RG 240), round $r"; run_shapes /tmp/var/build-gpu/stg
done
say "A/B done"
step_row large 1024 cg 400
perf_pack
