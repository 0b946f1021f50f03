#!/usr/bin/env bash
# (As run in call 3. Its `ab` function assigns r, the loop variable of the rounds, so the Dh80 row never
# ran; and attn-bench there still timed the written-out path beside flash: --attention flash came after.)
# Thirteenth session (2026-11-28f), the last device call: the tree to land (the forward's mask decided
# once a tile, descriptors from their base, the dq blocks' Q and dO in registers; head dim 128's backward
# keeps whole descriptors and shared-memory Q and dO; attention over the cache loading K and V together)
# checked and timed against the tree before (.old = git archive of the last commit).
# The second call of the session stalled for 440 s inside one `stg attn-bench` of the patched build
# (head dim 128, round 2), with no output after it; every command here runs under `timeout` and the
# same sequence runs three times, beside synccheck of the attention tests.
# Usage (GPU machine, repository root, carrying .deps, .old): docs/perf/2026-11-28f-final.sh OUT [SECONDS]
set -u
out=${1:?usage: $0 OUT [SECONDS]}; lim=${2:-530}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "[$(el) s] $*"; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" memcheck:test_gpu_mm_attn:*attention* racecheck:test_gpu_mm_attn:*attention* \
    racecheck:test_gpu_ops:*gqa* synccheck:test_gpu_ops:*gqa* synccheck:test_gpu_mm_attn:*attention* \
    memcheck:test_gpu_sample racecheck:test_gpu_sample:*attention_cached* || exit 1
say "checked"
ab() { # the command after the build directory; prints each build's lines, and any timeout
    for b in .old/build-ab build-gpu; do
        r=$(timeout 40 $b/stg "$@" 2>&1); rc=$?
        echo "$b: $(echo "$r" | grep flash | tr '\n' ' ')"; [ $rc = 0 ] || echo "$b: exit $rc$([ $rc = 124 ] && echo ' (TIMED OUT after 40 s)')"
    done
}
for r in 1 2 3; do
    ab attn-bench --device cuda --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20
    ab attn-bench --device cuda --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20
    [ $r = 1 ] && ab attn-bench --device cuda --batch 4 --heads 32 --dims 80 --seqs 1024 --iters 20
done
say "attention done"
for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
    timeout 60 $b/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'llama 1B', {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $b || tail -3 "$out/l/l1b.err"
done
say "llama done"
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
for b in .old/build-ab build-gpu .old/build-ab build-gpu; do
    echo "$b decode 2.7B b1: $(timeout 40 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
        --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' ')"
done
say "decode done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
left=$((lim - $(el) - 5))
if [ $left -gt 100 ]; then
    say "the Llama peer, $left s at most"
    PYTHONUNBUFFERED=1 timeout $left python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/l1b_peer.json" 2>&1 | tail -2
fi
say "done"
