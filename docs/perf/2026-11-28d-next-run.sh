#!/usr/bin/env bash
# For the session after 2026-11-28 (eleventh): the measurements the device time of that session did
# not reach, in one call (GPU machine, repository root, carrying .deps and peer/ with copies of
# ../shared/peers/torch_lm.py and torch_attn.py). About 9 minutes; SPEED_S bounds the peer part.
#  1. build and the GPU suite;
#  2. where a batch-64 decode step of the 2.7B goes (issue 26's batch-64 row is 0.90 of the peer):
#     stg sample --profile, one step op by op: the attention over the cache against the products;
#  3. the attention table on the H200 (issue 28 item 1; PERF.md's H200 rows are head dim 128 only):
#     stg attn-bench beside torch_attn.py (cuDNN, FlashAttention-2), head dims 64 and 128, seq 4096
#     and 16384, batch 4, 16 heads, and grouped-query 32/8 at batch 1 (Llama 3.2-1B's shape);
#  4. the strongest-peer rows of xl (ctx 512, 1024, 4096) with tools/speed_run.sh, resumable: run
#     again into the same OUT/speed (or seed it from a record) to finish a row cut short.
set -u
out=${1:?usage: $0 OUT}; mkdir -p "$out/l"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
source .deps/env.sh || exit 2
tools/gpu_ab_prelude.sh "$out/l" || exit 1
head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
echo "== decode, 2.7B, batch 64, ctx 1024, prompt 512: one step op by op"
timeout 90 build-gpu/stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" \
    -n 64 --batch 64 --temperature 0 --json --profile 2>&1 | grep -E "^  profile|^ +[0-9.]+%|attention|matmul|linear" | head -30
say "decode profile done"
echo "== attention kernels, bf16, causal"
for a in "--batch 4 --heads 16 --dims 64,128 --seqs 4096,16384" "--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096"; do
    # shellcheck disable=SC2086 # a is a word list
    timeout 120 build-gpu/stg attn-bench $a --iters 20 2>&1 | grep -E "flash|head" | tee -a "$out/l/attn.txt"
done
PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 \
    2>&1 | tee "$out/l/peer_attn.txt" | grep -v EFFICIENT
say "attention done"
LONG=1 timeout ${SPEED_S:-300} tools/speed_run.sh build-gpu/stg "$out/speed" xl
python3 tools/speed_table.py "$out/speed"
say "done"
tar -czf "$out/logs.tgz" -C "$out" --exclude="*.bin" l speed
