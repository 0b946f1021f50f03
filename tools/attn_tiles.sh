#!/usr/bin/env bash
# The attention backward's tile shapes compared on the GPU machine: one stg build per variant
# (compile definitions of ops/attention/cuda_mma.cu, built side by side), each timed by `stg attn-bench`
# at the models' attention shapes (batch 4, ctx 1024: xl's 25 heads of 64, 2.7B's 32 heads of 80)
# and at the B4 H16 Dh64 S4096.
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
  for a in "--heads 25 --dims 64 --seqs 1024" "--heads 32 --dims 80 --seqs 512,1024" "--heads 16 --dims 64 --seqs 4096"; do
    build-v-$n/stg attn-bench --batch 4 $a --iters 20 2>&1 | grep flash
  done
done
