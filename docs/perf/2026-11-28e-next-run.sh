#!/usr/bin/env bash
# For the session after 2026-11-28 (twelfth): two changes written and compiled for sm_90a, not run (the
# device time was spent).
#  - docs/perf/2026-11-28e-dq-rs.patch: the attention backward's dq blocks load Q and dO once into
#    registers (ldmatrix from padded shared rows) and run S = Q Kᵀ and dP = dO Vᵀ with A from registers,
#    so those products read only K or V from shared memory. Per 64 x 64 tile a dq warpgroup read 16 KB for
#    each SS product at N = 64 (A and B both from shared memory: 4 KB per m64n64k16 of 32 tensor cycles,
#    the whole 128 B a cycle) plus the K/V stage writes: 56 KB a tile against 384 tensor cycles, so shared
#    memory bound; after: 40 KB. ptxas: no spills, 238 registers in the fused kernel (unchanged), the
#    head-dim-128 dq kernel 186 -> 237. Predicted: the fused backward 5-10% faster (dq is about a third of
#    it), the forward unchanged (it only gains wg_ldsm4, the same instruction).
#  - docs/perf/2026-11-28e-mma-g1.patch: the mma.sync and CUDA-core loaders keep the plain row at G = 1
#    (the twelfth session's att_grp change made mma.sync MHA 2.7% slower while GQA went 24% faster).
#  - docs/perf/2026-11-28e-mask-branch.patch: the forward's and the key-tile blocks' causal/document mask
#    decided once a tile (warp-uniform) with a loop without it for unmasked tiles. The forward's SASS
#    (2026-11-28e, cuobjdump) had the per-element test if-converted: 155 predicated instructions (ISETP,
#    FSEL, VIADD) issued by every warp on every tile, of about 560; the key-tile loop the same. Predicted:
#    the forward 10-20% faster (issue-bound at 57% busy with 4 warps a scheduler), the backward 5-10%.
#    ptxas: forward 128 registers; fused backward 238 -> 251 (2 blocks a multiprocessor still fit); head
#    dim 128's key-tile kernel keeps the old loop (both loops spilled 284 bytes there against 176).
#  - docs/perf/2026-11-28e-desc.patch: a tile's wgmma descriptors as one add each from its base's
#    (wg_desc_at), the same bits as before while addresses stay below 2^18. The SASS had about six
#    uniform-datapath instructions per wgmma building each descriptor whole (address, mask, shift, or,
#    two moves): a quarter of the attention loops' instructions. PTX: the and/shr pairs of the
#    descriptors 77 -> 18 in the forward's file, 316 -> 60 in the backward's. Predicted: the forward and
#    the backward 3-8% faster. ptxas: no new spills except head dim 128's key-tile kernel (176 -> 212 bytes).
#  - docs/perf/2026-11-28e-decode-kv.patch (issue 26): attention over the cache loads each trip's keys and
#    values together, raw (the values waited for the scores: two memory round trips a trip, 17.5 us a call
#    for about 8 MB in the eleventh session's profile, 0.56 of a 2.7B decode step's ms). The same
#    arithmetic in the same order: the same bits. ptxas: 128 registers (bf16), no spills, as before.
#    Predicted: the call 17.5 -> ~13 us, the 2.7B batch-1 step 2.59 -> ~2.49 ms.
# Here: git apply docs/perf/2026-11-28e-dq-rs.patch docs/perf/2026-11-28e-mma-g1.patch
# docs/perf/2026-11-28e-mask-branch.patch docs/perf/2026-11-28e-desc.patch docs/perf/2026-11-28e-decode-kv.patch
# (they apply together); rm -rf .old;
# mkdir .old; git archive HEAD | tar -x -C .old; then on the GPU machine (carrying .deps, .old, peer):
#   docs/perf/2026-11-28e-next-run.sh OUT [PARTS]   (PARTS: check,attn,llama,decode; default check,attn)
# Two calls of under 10 minutes each: `check,attn` (builds, the GPU suite and sanitizers, the mma.sync A/B, the
# attention A/B beside torch_attn.py), then `llama,decode` (builds stg only: Llama 3.2-1B A/B and its peer,
# decoding A/B, its profile and tools/sample_peer.sh for issue 26's ratio).
# The A/B below is the five together against the tree before; land them if the checks pass and it measures
# faster (attribution: tools/attn_tiles.sh-style builds with one patch each, if the device time allows).
set -u
out=${1:?usage: $0 OUT [check,attn,llama,decode]}; parts=${2:-check,attn}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
has() { case ",$parts," in *",$1,"*) return 0;; esac; return 1; }
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
grep -q wg_rs_product ops/attention/sm90a/wgmma.cuh || { echo "apply docs/perf/2026-11-28e-dq-rs.patch first"; exit 2; }
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
if has check; then
    # shellcheck disable=SC2086 # cfg is a word list
    (cmake -S . -B build-nowg $cfg -DCMAKE_CUDA_FLAGS=-DSTG_NO_WGMMA_BWD > /dev/null 2>&1 &&
        cmake --build build-nowg --target stg test_gpu_ops > "$out/l/build_nowg.txt" 2>&1; echo "build-nowg: $?") &
    if [ -d .old ]; then
        # shellcheck disable=SC2086
        (cd .old && cmake -S . -B build-nowg $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DSTG_NO_WGMMA_BWD > /dev/null 2>&1 &&
            cmake --build build-nowg --target stg > "$out/l/build_old_nowg.txt" 2>&1; echo "old build-nowg: $?") &
    fi
fi
if has check; then
    tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*attention* racecheck:test_gpu_mm_attn:*attention* \
        racecheck:test_gpu_ops:*gqa_small* memcheck:test_gpu_sample racecheck:test_gpu_sample:*attention_cached* || exit 1
else # timing only (a second call after the checks passed): stg of both trees, no tests
    # shellcheck disable=SC2086
    (cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
    # shellcheck disable=SC2086
    (cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
fi
wait
say "built and checked"
if has check; then
    (cd build-nowg && timeout 200 ./test_gpu_ops > "$out/l/ops_nowg.txt" 2>&1; echo "test_gpu_ops (mma.sync backward) exit $?" >> "$out/l/ops_nowg.txt")
    grep -E "PASSED|FAILED|exit" "$out/l/ops_nowg.txt"
    for b in .old/build-nowg build-nowg .old/build-nowg build-nowg; do
        echo "== $b (backward on mma.sync)"
        $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 64 --seqs 4096 --iters 10 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 10 2>&1 | grep flash
    done
    say "check done"
fi
if has attn; then
    for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
        echo "== $b"
        $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep flash
        $b/stg attn-bench --device cuda --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 20 2>&1 | grep flash
    done
    PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep -v EFFICIENT
    say "attention done"
fi
if has llama; then
    for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
        timeout 120 $b/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'llama 1B', {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $b || tail -3 "$out/l/l1b.err"
    done
    PYTHONUNBUFFERED=1 timeout 200 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
    say "llama done"
fi
if has decode; then
    head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
    for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
        echo "$b decode 2.7B b1: $(timeout 40 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
    done
    timeout 60 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
        -n 64 --batch 1 --temperature 0 --json --profile 2>&1 | grep -E "^  profile|attention_cached" | head -4
    CHECK=0 timeout 240 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | tail -6
    say "decode done"
fi
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
