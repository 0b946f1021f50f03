#!/usr/bin/env bash
# On the GPU machine (after a build into build-gpu): stg beside its peers for the 2026-11-25 issue
# rows, each pair in this one call. Usage: tools/issue_perf.sh OUT [PARTS]
# PARTS (comma-separated, default all): gpt2 (GPT-2 124M, batch 4, ctx 1024, against llm.c's
# train_gpt2cu built without cuDNN from .peers/llm.c), accum (2.7B, ctx 1024, micro-batch 4, 8
# micro-batches, against torch_lm.py --flash --sdpa cudnn --accum 8 from .peers/; before 2026-11-28's sixteenth session
# the peer ran without --flash, so with written-out attention), head (the fused head at
# Llama 3.2-1B, ctx 4096, batch 1: planned and measured peak and step, plain and fused), small_accum
# (small, ctx 512, micro-batch 4, 8 micro-batches, against the peer with default compile and with
# reduce-overhead: the shared peer as is, and .peers/torch_lm_markstep.py, the same file with
# torch.compiler.cudagraph_mark_step_begin() before each micro-batch, the documented remedy for the
# as-is run's "accessing tensor output of CUDAGraphs that has been overwritten"), llama1b (Llama
# 3.2-1B, ctx 4096, batch 1, plain and fused head, against tools/ref/llama3_peer.py with cuDNN
# attention, default compile and reduce-overhead), decode_profile (stg sample --profile: 2.7B, batch 1,
# the device time of one decode step by op; writes OUT/prompt512.bin).
set -u
out=${1:-/tmp/stg-perf}; parts=${2:-gpt2,accum,head}; mkdir -p "$out"
stg=build-gpu/stg
has() { case ",$parts," in *",$1,"*) return 0;; esac; return 1; }
if has gpt2; then
  echo "== GPT-2 124M, batch 4, ctx 1024, bf16"
  # the model file's head (fused, vocab 50257) and llm.c's (plain, padded to 50304), and the two others
  for v in "50257 on" "50304 off" "50304 on" "50257 off"; do
    set -- $v
    $stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=$1 --set fused_head=$2 --precision bf16 --warmup 5 --iters 30 --json \
      > "$out/gpt2_stg_$1_$2.json" 2> "$out/gpt2_stg_$1_$2.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('stg vocab $1 fused_head=$2', {k: d[k] for k in ('median_ms','min_ms','max_ms','mfu','tflops')})" \
      "$out/gpt2_stg_$1_$2.json" || tail -3 "$out/gpt2_stg_$1_$2.err"
  done
  $stg bench models/gpt2/124M.yaml --set batch=4 --set ctx=1024 --set vocab=50304 --set fused_head=off --precision bf16 --warmup 3 --iters 5 --profile \
    > "$out/gpt2_profile.txt" 2>&1; grep -A40 "by op name" "$out/gpt2_profile.txt" | head -32
  timeout 300 tools/peer_llmc.sh .peers/llm.c "$out/llmc" 4 1024 30 | tail -6
fi
if has decode_profile; then
  echo "== decode profile: 2.7B, batch 1, prompt 512, 64 new, bf16"
  head -c 512 /dev/urandom > "$out/prompt512.txt" && $stg tokens "$out/prompt512.txt" -o "$out/prompt512.bin" > /dev/null
  $stg sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/prompt512.bin" -n 64 --temperature 0 \
    --json --profile > "$out/decode_profile.json" 2> "$out/decode_profile.txt"
  grep -oE '"steady_ms_per_step": *[0-9.]+' "$out/decode_profile.json"; head -60 "$out/decode_profile.txt"
fi
if has accum; then
  echo "== 2.7B, ctx 1024, micro-batch 4, 8 micro-batches, bf16"
  $stg bench models/cs336/2.7B.yaml --set ctx=1024 --precision bf16 --grad-accum 8 --warmup 2 --iters 5 --json > "$out/accum_stg.json" 2> "$out/accum_stg.err"
  tail -c 1500 "$out/accum_stg.json"; echo
  timeout 400 python3 .peers/torch_lm.py --flash --sdpa cudnn --sizes 2.7B --ctx 1024 --modes bf16c --accum 8 --warm 2 --iters 3 --out "$out/accum_peer.json" 2>&1 | tail -3
fi
if has head; then
  echo "== fused head, Llama 3.2-1B, ctx 4096, batch 1, bf16"
  for f in off on; do
    $stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=$f --precision bf16 --warmup 3 --iters 10 --json > "$out/head_$f.json" 2> "$out/head_$f.err"
    echo "fused_head=$f: $(tail -c 1200 "$out/head_$f.json")"
  done
fi
if has small_accum; then
  echo "== small, ctx 512, micro-batch 4, 8 micro-batches, bf16"
  for i in 1 2; do
    $stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --grad-accum 8 --warmup 5 --iters 30 --json > "$out/sacc_stg$i.json" 2> "$out/sacc_stg$i.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('stg run $i', {k: d[k] for k in ('median_ms','min_ms','max_ms','grad_accum','mfu','tflops','measured_bytes')})" "$out/sacc_stg$i.json" || tail -3 "$out/sacc_stg$i.err"
  done
  timeout 300 python3 .peers/torch_lm.py --flash --sdpa cudnn --sizes small --ctx 512 --modes bf16c --accum 8 --warm 5 --iters 20 --out "$out/sacc_peer_default.json" 2>&1 | tail -2
  timeout 300 python3 .peers/torch_lm.py --flash --sdpa cudnn --sizes small --ctx 512 --modes bf16c --accum 8 --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/sacc_peer_ro.json" 2>&1 | tail -2
  # the shared peer with torch.compiler.cudagraph_mark_step_begin() before each micro-batch, made here when missing
  [ -f .peers/torch_lm_markstep.py ] || sed 's/^\( *\)for _ in range(ACCUM):.*$/&\n\1    torch.compiler.cudagraph_mark_step_begin()/' \
    .peers/torch_lm.py > .peers/torch_lm_markstep.py
  timeout 300 python3 .peers/torch_lm_markstep.py --flash --sdpa cudnn --sizes small --ctx 512 --modes bf16c --accum 8 --compile-mode reduce-overhead --warm 5 --iters 20 --out "$out/sacc_peer_ro_markstep.json" 2>&1 | tail -2
  echo "== small, ctx 512, batch 4, one micro-batch (the issue-28 row, same lease)"
  $stg bench models/cs336/small.yaml --set ctx=512 --set batch=4 --precision bf16 --warmup 5 --iters 50 --json > "$out/s1_stg.json" 2> "$out/s1_stg.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('stg', {k: d[k] for k in ('median_ms','min_ms','max_ms','mfu','tflops')})" "$out/s1_stg.json" || tail -3 "$out/s1_stg.err"
  timeout 300 python3 .peers/torch_lm.py --flash --sdpa cudnn --sizes small --ctx 512 --modes bf16c --compile-mode reduce-overhead --warm 5 --iters 30 --out "$out/s1_peer_ro.json" 2>&1 | tail -1
fi
if has llama1b; then
  echo "== Llama 3.2-1B, ctx 4096, batch 1, bf16"
  for f in off on; do
    $stg bench models/llama3/1B.yaml --set ctx=4096 --set batch=1 --set fused_head=$f --precision bf16 --warmup 5 --iters 20 --json > "$out/l1b_$f.json" 2> "$out/l1b_$f.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('stg fused_head=$f', {k: d[k] for k in ('median_ms','min_ms','mfu','tflops','measured_bytes')})" "$out/l1b_$f.json" || tail -3 "$out/l1b_$f.err"
  done
  for cm in default reduce-overhead; do
    PYTHONUNBUFFERED=1 timeout 400 python3 tools/ref/llama3_peer.py --model models/llama3/1B.yaml --ctx 4096 --batch 1 --compile-mode $cm --warm 5 --iters 20 --out "$out/l1b_peer_$cm.json" 2>&1 | tail -1
  done
fi
