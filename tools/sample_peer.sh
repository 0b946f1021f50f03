#!/usr/bin/env bash
# On the GPU machine, issue 26's decode acceptance against the PyTorch peer, in one lease: the CS336
# 2.7B (bf16, a 512-token prompt, 512 new tokens, greedy) at batch 1 and batch 64, `stg sample --json`
# (as tools/sample_gpu.sh runs it, with --temperature 0) beside tools/ref/torch_decode.py (static KV
# cache, the decode step under torch.compile(mode="reduce-overhead")), both on the same prompt ids;
# prints each JSON line (stg's without ids and text) and stg / peer. Builds nothing.
# Usage: tools/sample_peer.sh STG OUT     (from the source tree; STG a CUDA build of stg)
#   BATCHES="1 64" (the default) chooses the batch sizes; CHECK=0 skips the peer's CPU --check.
#   SIZE=2.7B PROMPT=512 NEW=512 STG_ARGS="--precision bf16 --init fill" PEER_ARGS="--compile" are the
#   defaults (a smoke test on a CPU: SIZE=tiny STG_ARGS="--device cpu --init random"
#   PEER_ARGS="--device cpu --no-compile --attn math").
# GPU time: stg about 10-20 s a batch; the peer starts once (PyTorch import, 3.4 G random parameters
# on the device) and compiles the decode step once per batch (a 32-layer graph; Inductor's first
# compile on a fresh machine is the bulk of its time: warmup_s in its JSON), then times 511 steps.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: tools/sample_peer.sh STG OUT" >&2; exit 2; }
S=$1 out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$S" ] || { echo "tools/sample_peer.sh: $S is not an executable stg" >&2; exit 2; }
mkdir -p "$out" || exit 2
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } 2>&1 | tee "$out/device.txt"
SIZE=${SIZE-2.7B} PROMPT=${PROMPT-512} NEW=${NEW-512}
read -r -a bs <<<"${BATCHES-1 64}"
read -r -a stg_args <<<"${STG_ARGS---precision bf16 --init fill}"
read -r -a peer_args <<<"${PEER_ARGS---compile --compile-mode reduce-overhead}"
M=$src/models/cs336/$SIZE.yaml
[ "$SIZE" = tiny ] && M=$src/models/tiny.yaml
[ -f "$M" ] || { echo "tools/sample_peer.sh: no model file $M" >&2; exit 2; }
head -c "$PROMPT" /dev/urandom >"$out/prompt.txt" && "$S" tokens "$out/prompt.txt" -o "$out/prompt.bin" >/dev/null || exit 1
ctx=$((PROMPT + NEW))
if [ "${CHECK-1}" != 0 ]; then # the peer computes what stg computes (CPU, float64; seconds)
  timeout 120 python3 "$src/tools/ref/torch_decode.py" --check --stg "$S" >"$out/peer_check.txt" 2>&1
  stamp "peer --check rc=$?: $(tr '\n' ' ' <"$out/peer_check.txt" | cut -c1-1500)"
fi
for b in "${bs[@]}"; do
  cmd=("$S" sample "$M" "${stg_args[@]}" --json --set "ctx=$ctx" --prompt-ids "$out/prompt.bin" -n "$NEW" --batch "$b" --temperature 0)
  echo "${cmd[*]}" >"$out/stg_b$b.cmd"
  timeout 90 "${cmd[@]}" >"$out/stg_b$b.json" 2>"$out/stg_b$b.err"
  stamp "stg batch $b rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in d if k not in ('ids', 'text')}))" "$out/stg_b$b.json" 2>&1 | cut -c1-1200)"
done
pb=$(IFS=,; echo "${bs[*]}")
cmd=(python3 "$src/tools/ref/torch_decode.py" --size "$SIZE" --batch "$pb" --prompt-ids "$out/prompt.bin" --new "$NEW" --ctx "$ctx" "${peer_args[@]}")
echo "${cmd[*]}" >"$out/peer.cmd"
timeout 540 "${cmd[@]}" >"$out/peer.jsonl" 2>"$out/peer.err"
stamp "peer rc=$?"
cat "$out/peer.jsonl"
[ -s "$out/peer.jsonl" ] || tail -30 "$out/peer.err"
grep -iE "skipping cudagraph|graph break|recompil|warn" "$out/peer.err" | sort | uniq -c | head -10
python3 - "$out" "${bs[@]}" <<'EOF'
import json, sys
out, batches = sys.argv[1], sys.argv[2:]
peer = {}
try:
    for ln in open(f"{out}/peer.jsonl"):
        if ln.startswith("{"):
            r = json.loads(ln); peer[str(r["batch"])] = r
except OSError:
    pass
for b in batches:
    try:
        s = json.load(open(f"{out}/stg_b{b}.json"))
    except (OSError, ValueError):
        s = None
    p = peer.get(b)
    if not s or not p:
        print(f"batch {b}: {'no stg result' if not s else ''} {'no peer result' if not p else ''}")
        continue
    pt = p["decode_tokens_per_s"]
    print(f"batch {b}: stg {s['decode_tokens_per_s']:.1f} tokens/s over all {s['decode_steps']} steps "
          f"(steady {s.get('steady_tokens_per_s', float('nan')):.1f}; bound {s.get('bound_tokens_per_s', float('nan')):.1f}), "
          f"peer {pt:.1f} tokens/s ({p['mode']}, {p['decode_steps']} steps after warm-up): "
          f"stg / peer {s['decode_tokens_per_s'] / pt:.3f} (steady {s.get('steady_tokens_per_s', float('nan')) / pt:.3f}); "
          f"prefill stg {s['prefill_ms']:.2f} ms, peer {p['prefill_ms']:.2f} ms (eager)")
EOF
