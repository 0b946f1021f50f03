#!/usr/bin/env bash
# For the session after the thirteenth (2026-11-28f): what that session could not time, in calls of under
# 9 minutes, every command under `timeout` and every step stamped.
#  decode (issue 26): docs/perf/2026-11-28e-decode-kv.patch applied here first (attention over the cache loads
#    keys and values together; checked on the H200 in the thirteenth session's call 3, never timed). Builds
#    .old (the tree before it: rm -rf .old; mkdir .old; git archive HEAD | tar -x -C .old) and build-gpu, runs
#    test_gpu_sample, the 2.7B batch-1 decode A/B (two rounds), the profile's attention_cached line, then
#    tools/sample_peer.sh at batch 1 and 64 (the issue's same-call ratio). Predicted: the call 17.5 -> ~13 us,
#    the 2.7B batch-1 step 2.59 -> ~2.49 ms.
#  llama (issues 24 and 28): Llama 3.2-1B at ctx 4096, batch 1 (plain and fused head) beside
#    tools/ref/llama3_peer.py (reduce-overhead) in one call, and the attention table (stg attn-bench
#    --attention flash) beside peer/torch_attn.py. The thirteenth session's attention changes predict the step
#    about 1.4 ms faster than the twelfth's 67.66 ms (forward 0.061 and backward 0.032 ms a layer, 16 layers).
#  tiles (issue 28): head dim 128's forward with key tiles of 128 in 3 stages (240 registers, no spills, the
#    227 KB of shared memory to the byte) against the default (64 keys, 5 stages), built side by side, timed at
#    B4 H16 Dh128 S4096 and 16384 and Llama 3.2-3B's grouped-query 24/8; the variant's attention tests run too
#    (test_gpu_mm_attn's odd and model shapes at every head dim, test_gpu_ops's grouped-query cases). Predicted:
#    5-15% on that forward (per 64 keys a thread rescales its 64 O registers once, not twice, and the tile's
#    barrier and row reductions are paid once for 128 keys). And w1qa: one warpgroup a block, Q in the last of 3
#    stages (WG_FWD128_QA), 2 blocks a multiprocessor (202 registers, 97 KB each): the same 2 warpgroups a
#    multiprocessor, no longer held in step by one block barrier a tile, so one's softmax can run under the
#    other's products. Predicted: 5-20%, or slower if one tile of prefetch (3 stages) leaves the loads exposed.
# Usage (GPU machine, repository root, carrying .deps, .old, peer): docs/perf/2026-11-28f-next-run.sh OUT PART
set -u
out=${1:?usage: $0 OUT decode|llama|tiles}; part=${2:?usage: $0 OUT decode|llama|tiles}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
case $part in
decode)
    grep -q "their keys and their values are loaded together" ops/decode/cuda.cu || say "warning: is docs/perf/2026-11-28e-decode-kv.patch applied?"
    [ -d .old ] || { echo "no .old"; exit 2; }
    # shellcheck disable=SC2086 # cfg is a word list
    (cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
    # shellcheck disable=SC2086
    (cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg test_gpu_sample > "$out/l/build.txt" 2>&1; echo "build: $?")
    wait
    say "built"
    (cd build-gpu && timeout 120 ./test_gpu_sample 2>&1 | grep -E "PASSED|FAILED|OK|ERROR" | tail -8)
    say "test_gpu_sample done"
    head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
    for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
        echo "$b decode 2.7B b1: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
    done
    for b in .old/build-ab build-gpu; do
        echo "$b profile: $(timeout 60 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
            -n 64 --batch 1 --temperature 0 --json --profile 2>&1 | grep -E "attention_cached" | head -2 | tr '\n' ' ')"
    done
    say "decode A/B done"
    CHECK=0 timeout 300 tools/sample_peer.sh build-gpu/stg "$out/l/peer" 2>&1 | tail -6
    say "peer done" ;;
llama)
    # shellcheck disable=SC2086
    (cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
    say "built"
    for h in off on off on; do
        timeout 60 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=$h --precision bf16 --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('llama 1B fused_head', sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $h || tail -3 "$out/l/l1b.err"
    done
    say "stg llama done"
    for a in "--batch 4 --heads 16 --dims 64,128 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096" "--batch 4 --heads 32 --dims 80 --seqs 1024"; do
        # shellcheck disable=SC2086 # a is a word list
        timeout 60 build-gpu/stg attn-bench --device cuda --attention flash $a --iters 20 2>&1 | grep flash
    done
    say "stg attention done"
    PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep -v EFFICIENT
    say "torch_attn done"
    PYTHONUNBUFFERED=1 timeout 220 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -2
    say "llama peer done" ;;
tiles)
    for v in "base:" "bk128:-DWG_FWD128_BK=128 -DWG_FWD128_NST=3" "w1qa:-DWG_FWD128_NWG=1 -DWG_FWD128_NST=3 -DWG_FWD128_MINB=2 -DWG_FWD128_QA=1"; do
        n=${v%%:*} f=${v#*:}
        # shellcheck disable=SC2086 # cfg is a word list
        (cmake -S . -B "build-t-$n" $cfg -DCMAKE_CUDA_FLAGS="$f" > /dev/null 2>&1 &&
            timeout 400 cmake --build "build-t-$n" --target stg test_gpu_mm_attn test_gpu_ops > "$out/l/build_$n.txt" 2>&1; echo "build $n: $?") &
    done
    wait
    say "built"
    for n in bk128 w1qa; do
        echo "== $n tests"
        (cd "build-t-$n" && STG_TEST_FILTER='*attention*' timeout 150 ./test_gpu_mm_attn 2>&1 | grep -E "PASSED|FAILED|ERROR" | tail -4;
            STG_TEST_FILTER='*gqa*' timeout 150 ./test_gpu_ops 2>&1 | grep -E "PASSED|FAILED|ERROR" | tail -4) &
    done
    wait
    say "variant tests done"
    for r in 1 2; do for n in base bk128 w1qa; do
        echo "== $n round $r"
        timeout 60 "build-t-$n/stg" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 --iters 20 2>&1 | grep flash
        timeout 60 "build-t-$n/stg" attn-bench --device cuda --attention flash --batch 1 --heads 24 --kv-heads 8 --dims 128 --seqs 4096 --iters 20 2>&1 | grep flash
    done; done
    say "tiles done" ;;
*) echo "PART: decode, llama or tiles"; exit 2 ;;
esac
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
