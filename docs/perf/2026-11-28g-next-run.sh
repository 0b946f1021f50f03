#!/usr/bin/env bash
# For the session after the fourteenth (2026-11-28g): what that session could not run, in calls of under 9 minutes,
# every command under `timeout` and every step stamped. The three patches touch different files and apply together:
#   rm -rf .old; mkdir .old; git archive HEAD | tar -x -C .old
#   git apply docs/perf/2026-11-28g-nsplit1.patch docs/perf/2026-11-28g-bulk-prefetch.patch docs/perf/2026-11-28g-dq-mask.patch
# and .old then serves every part's A/B. Run the whole GPU suite first (ctest -L gpu): the fourteenth session's last
# refactors (its note, section 4) came after its last GPU run.
#  decode (issue 26): first `git apply docs/perf/2026-11-28g-nsplit1.patch docs/perf/2026-11-28g-bulk-prefetch.patch`
#    here, after `rm -rf .old; mkdir .old; git archive HEAD | tar -x -C .old` (the tree before them). nsplit1: attention
#    over the cache writes the output itself when a pair has one split (at batch 64 on the 2.7B model every pair has):
#    each block skips the partials' write, the fence, the atomic count and the combine's read-back. bulk-prefetch: the
#    rows two trips ahead go to L2 by one `cp.async.bulk.prefetch.L2` a row from the row group's first lane (the
#    fourteenth session's per-lane prefetch of every 16-byte chunk issued 4-8 requests a row and measured 30% slower;
#    not at 4 heads a pass, where it spilled). Builds .old, build-gpu (both patches) and build-np (-DDEC_PFD=0: nsplit1
#    alone), runs test_gpu_sample on build-gpu, times the 2.7B decode at batch 64 and 1 and Llama 3.2-1B at batch 1
#    alternating (2 rounds), then Nsight Compute (--set full) on the cached attention at batch 64 and 1 of build-gpu.
#    Predicted: nsplit1 batch 64 7.49 -> ~7.2 ms a step, batch 1 unchanged; the prefetch batch 64 -> ~6.8 ms if the
#    loads wait on memory latency (ncu then shows fewer long-scoreboard stalls), nothing or worse if L2 requests limit.
#  llama (issue 24): Llama 3.2-1B at ctx 4096, batch 1, plain head, with and without --gemm-tune on, alternating
#    (2 rounds; the fourteenth session had one tuned run at 65.27 ms against 66.25), beside tools/ref/llama3_peer.py
#    (reduce-overhead) in the same call, and the tuned step's profile (which products the tuning changes: a rule that
#    picks those algorithms without timing would make it the default, deterministic across processes).
#  attn (issue 28): the attention table at head dims 64, 80 and 128 (seq 4096 and 16384, batch 4, 16 heads) beside
#    peer/torch_attn.py (cuDNN, FlashAttention-2) in one call: the issue's head-dim-80 row (at least 90% of head dim
#    64's rate) has not been measured at these lengths; then tools/attn_ncu.sh's profiles of today's backward (the last
#    ones predate the division fix and the thirteenth session's changes).
#  dqmask (issues 24, 28): first `git apply docs/perf/2026-11-28g-dq-mask.patch` (after .old = the tree before it, as
#    for decode). The backward's dq blocks decide their mask once a tile for the whole warp (__any_sync) and run a loop
#    without the per-element test on unmasked tiles, as the forward and the key-tile blocks have since the thirteenth
#    session (there it was a per-thread condition inside the element loop, which ptxas if-converts: the forward's
#    SASS had 155 predicated instructions a tile from the same pattern). ptxas: the fused kernels keep 251 / 254
#    registers at head dims 64 / 80, no spills; head dim 128's dq kernel 186 -> 199 (one block a multiprocessor
#    either way). Runs the attention tests of test_gpu_mm_attn and the grouped-query ones of test_gpu_ops, then the
#    backward at B4 H16 Dh64 S4096 and 16384, Llama 3.2-1B's GQA 32/8, B4 H32 Dh80 S1024 and B4 H16 Dh128 S4096,
#    old and new alternating (2 rounds). Predicted: the backward 2-6% faster (the dq blocks are about 3/7 of its
#    products).
# Usage (GPU machine, repository root, carrying .deps, .old, peer): docs/perf/2026-11-28g-next-run.sh OUT PART
set -u
out=${1:?usage: $0 OUT decode|llama|attn|dqmask}; part=${2:?usage: $0 OUT decode|llama|attn|dqmask}; mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
tps() { grep -oE '"(decode_tokens_per_s|steady_ms_per_step)": *[0-9.]+' | tr '\n' ' '; }
case $part in
decode)
    { grep -q "the pair's only split" ops/decode/cuda.cu && grep -q dec_prefetch_row ops/decode/cuda.cu; } || say "warning: are the two patches applied?"
    [ -d .old ] || { echo "no .old"; exit 2; }
    # shellcheck disable=SC2086 # cfg is a word list
    (cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
    # shellcheck disable=SC2086
    (cmake -S . -B build-np $cfg -DSTG_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DDEC_PFD=0 > /dev/null 2>&1 && timeout 300 cmake --build build-np --target stg > "$out/l/build_np.txt" 2>&1; echo "np build: $?") &
    # shellcheck disable=SC2086
    (cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg test_gpu_sample > "$out/l/build.txt" 2>&1; echo "build: $?")
    wait
    say "built"
    (cd build-gpu && timeout 120 ./test_gpu_sample 2>&1 | grep -E "^\[  (PASSED|FAILED)|ERROR" | head -4)
    timeout 200 tools/sanitize_gpu.sh build-gpu "$out/l/san" 190 memcheck:test_gpu_sample:'*attention_cached*'
    head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
    for r in 1 2; do for b in .old/build-ab build-np build-gpu; do
        for n in 64 1; do
            echo "$b 2.7B b$n round $r: $(timeout 90 $b/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --json --set ctx=1024 \
                --prompt-ids "$out/l/p.bin" -n 512 --batch $n --temperature 0 2>&1 | tps)"
        done
        echo "$b llama 1B b1 round $r: $(timeout 90 $b/stg sample models/llama3/1B.yaml --precision bf16 --init fill --json --set ctx=1024 \
            --prompt-ids "$out/l/p.bin" -n 512 --batch 1 --temperature 0 2>&1 | tps)"
    done; done
    say "A/B done"
    for n in 64 1; do
        timeout 150 ncu --set full -k regex:attention_cached -s 40 -c 1 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 \
            --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 256 --batch $n --temperature 0 --json > "$out/l/ncu-dec-b$n.txt" 2>&1
        say "ncu b$n: $?"
        grep -E "^\s+(Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Active Warps Per SM|Warp Cycles Per Issued Instruction) " "$out/l/ncu-dec-b$n.txt"
    done ;;
llama)
    # shellcheck disable=SC2086 # cfg is a word list
    (cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
    say "built"
    for r in 1 2; do for t in off on; do
        timeout 90 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune $t \
            --warmup 5 --iters 20 --json > "$out/l/l1b.json" 2> "$out/l/l1b.err"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('llama 1B gemm-tune', sys.argv[2], {k: d[k] for k in ('median_ms','min_ms','mfu')})" "$out/l/l1b.json" $t || tail -3 "$out/l/l1b.err"
    done; done
    say "stg done"
    timeout 120 build-gpu/stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=off --precision bf16 --gemm-tune on \
        --warmup 3 --iters 5 --profile > "$out/l/l1b-tuned-profile.txt" 2>&1 # which shapes the tuning changed, and by how much
    say "tuned profile done"
    PYTHONUNBUFFERED=1 timeout 220 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode reduce-overhead \
        --warm 5 --iters 20 --out "$out/l/l1b_peer.json" 2>&1 | tail -1
    say "peer done" ;;
attn)
    # shellcheck disable=SC2086 # cfg is a word list
    (cmake -S . -B build-gpu $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg > "$out/l/build.txt" 2>&1; echo "build: $?")
    say "built"
    timeout 90 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "flash|head"
    say "stg attention done"
    PYTHONUNBUFFERED=1 timeout 180 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,80,128 --seqs 4096,16384 --iters 20 2>&1 | grep -v EFFICIENT
    say "torch_attn done"
    timeout 300 tools/attn_ncu.sh "$out/l/ncu" > "$out/l/attn_ncu.txt" 2>&1
    say "attn_ncu: $?" ;;
dqmask)
    grep -q "__any_sync(0xffffffffu, k0 + BK - 1" ops/attention/sm90a/attention_wgmma_bwd.cu || say "warning: is docs/perf/2026-11-28g-dq-mask.patch applied?"
    [ -d .old ] || { echo "no .old"; exit 2; }
    # shellcheck disable=SC2086 # cfg is a word list
    (cd .old && cmake -S . -B build-ab $cfg -DSTG_TESTS=OFF > /dev/null 2>&1 && timeout 300 cmake --build build-ab --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
    # shellcheck disable=SC2086
    (cmake -S . -B build-gpu $cfg > /dev/null 2>&1 && timeout 300 cmake --build build-gpu --target stg test_gpu_mm_attn test_gpu_ops > "$out/l/build.txt" 2>&1; echo "build: $?")
    wait
    say "built"
    (cd build-gpu && STG_TEST_FILTER='*attention*' timeout 150 ./test_gpu_mm_attn 2>&1 | grep -E "^\[  (PASSED|FAILED)|ERROR" | head -3;
        STG_TEST_FILTER='*gqa*' timeout 150 ./test_gpu_ops 2>&1 | grep -E "^\[  (PASSED|FAILED)|ERROR" | head -3)
    say "tests done"
    for r in 1 2; do for b in .old/build-ab build-gpu; do
        echo "== $b round $r"
        for a in "--batch 4 --heads 16 --dims 64 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096" \
            "--batch 4 --heads 32 --dims 80 --seqs 1024" "--batch 4 --heads 16 --dims 128 --seqs 4096"; do
            # shellcheck disable=SC2086 # a is a word list
            timeout 60 $b/stg attn-bench --device cuda --attention flash $a --iters 20 2>&1 | grep flash
        done
    done; done
    say "timing done" ;;
*) echo "PART: decode, llama, attn or dqmask"; exit 2 ;;
esac
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l
