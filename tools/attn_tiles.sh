#!/usr/bin/env bash
# The attention backward's tile shapes compared on the GPU machine: one stg build per variant
# (compile definitions of ops/attention/cuda_mma.cu, built side by side), each timed by `stg attn-bench`
# at the models' attention shapes (batch 4, ctx 1024: xl's 25 heads of 64, 2.7B's 32 heads of 80)
# and at the issue's B4 H16 Dh64 S4096; ATT_SHAPES (stg attn-bench arguments, ';' between shapes)
# times others instead, e.g. Llama 3.2-1B's grouped-query attention:
#   ATT_SHAPES='--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096' tools/attn_tiles.sh OUT base: nwg2:-DWG_DKDV_NWG=2
# Usage: tools/attn_tiles.sh OUTDIR 'name:-DFLAG=V -DFLAG2=V' ...
set -u
out=$1; shift; mkdir -p "$out"
for v in "$@"; do
  n=${v%%:*}; f=${v#*:}
  ( cmake -S . -B build-v-$n -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS="$f" > "$out/build-$n.txt" 2>&1 &&
    cmake --build build-v-$n --target stg >> "$out/build-$n.txt" 2>&1; echo "build $n: exit $?" ) &
done
wait
for v in "$@"; do
  n=${v%%:*}
  echo "== $n (${v#*:})"
  IFS=';' read -r -a shapes <<< "${ATT_SHAPES:---batch 4 --heads 25 --dims 64 --seqs 1024;--batch 4 --heads 32 --dims 80 --seqs 512,1024;--batch 4 --heads 16 --dims 64 --seqs 4096}"
  for a in "${shapes[@]}"; do
    # shellcheck disable=SC2086 # a is a word list
    build-v-$n/stg attn-bench --attention flash $a --iters 20 2>&1 | grep flash
  done
done
