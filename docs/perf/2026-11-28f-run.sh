#!/usr/bin/env bash
# (As run in call 2, on the working tree of that moment: the STG_DQ_RS128 and STG_DESC_WHOLE switches were
# folded into the code after it, WG_DQ_RS and wg_desc_off<WH> in ops/attention/sm90a; the variant builds no
# longer differ. Commands here run without timeouts: see docs/perf/2026-11-28f-h200-call2.txt.)
# Thirteenth session (2026-11-28f), on the GPU machine from the repository root (carrying .deps, .old, peer;
# .old = the tree before the five prepared patches, git archive HEAD). The first call (check,attn of
# docs/perf/2026-11-28e-next-run.sh) found head dim 128's backward 5% slower with the patches while
# every other shape was faster; this call attributes that (the dq blocks' Q and dO in registers,
# STG_DQ_RS128=0 turns it off at head dim 128; the descriptors from their base, STG_DESC_WHOLE builds
# them whole) and times Llama 3.2-1B against the tree before and the peer.
# Usage: docs/perf/2026-11-28f-run.sh OUT [attn128,llama,decode,check]
set -u
out=${1:?usage: $0 OUT [parts]}; parts=${2:-attn128,llama}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
has() { case ",$parts," in *",$1,"*) return 0;; esac; return 1; }
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
bld() { # DIR SRC FLAGS: stg only
    # shellcheck disable=SC2086
    (cd "$2" && cmake -S . -B "$1" $cfg -DSTG_TESTS=OFF ${3:+-DCMAKE_CUDA_FLAGS="$3"} > /dev/null 2>&1 &&
        cmake --build "$1" --target stg > "$out/l/build_$(basename "$1").txt" 2>&1; echo "$2/$1 [$3]: $?")
}
[ -d .old ] && bld build-ab .old "" &
if has attn128; then
    bld build-v1 . "-DSTG_DQ_RS128=0" &
    bld build-v2 . "-DSTG_DESC_WHOLE" &
    bld build-v3 . "-DSTG_DQ_RS128=0 -DSTG_DESC_WHOLE" &
fi
if has check; then
    tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*attention* racecheck:test_gpu_mm_attn:*attention* \
        racecheck:test_gpu_ops:*gqa_small* memcheck:test_gpu_sample racecheck:test_gpu_sample:*attention_cached* || exit 1
else
    bld build-gpu . ""
fi
wait
say "built"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if has attn128; then
    for r in 1 2; do for b in .old/build-ab build-gpu build-v1 build-v2 build-v3; do
        echo "== $b"
        $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep flash
        [ $r = 1 ] && $b/stg attn-bench --device cuda --batch 4 --heads 16 --dims 64 --seqs 4096 --iters 20 2>&1 | grep flash
    done; done
    say "attn128 done"
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
