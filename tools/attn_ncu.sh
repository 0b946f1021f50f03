#!/usr/bin/env bash
# Where the sm_90a attention kernels spend their cycles: Nsight Compute (--set full) of the backward
# (the fused launch and, from a -DWG_BWD_FUSED=0 build, its dk/dv and dq kernels apart) and the
# forward, at the B4 H16 Dh64 S4096 and Llama 3.2-1B's grouped-query B1 H32/8 S4096; then
# stg attn-bench beside ../shared/peers/torch_attn.py (copied into peer/) for the rates in one call.
# GPU machine, repository root, after source .deps/env.sh:   tools/attn_ncu.sh OUT
# Writes OUT/ncu-<build>-<shape>.txt (ncu's details pages) and OUT/rates.txt.
set -u
out=${1:?usage: tools/attn_ncu.sh OUT}; mkdir -p "$out"
source .deps/env.sh || exit 2
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=OFF"
# shellcheck disable=SC2086 # cfg is a word list
(cmake -S . -B build-ncu $cfg > "$out/build-fused.txt" 2>&1 && cmake --build build-ncu --target stg >> "$out/build-fused.txt" 2>&1; echo "build fused: $?") &
# shellcheck disable=SC2086
(cmake -S . -B build-ncu-unfused $cfg -DCMAKE_CUDA_FLAGS=-DWG_BWD_FUSED=0 > "$out/build-unfused.txt" 2>&1 &&
    cmake --build build-ncu-unfused --target stg >> "$out/build-unfused.txt" 2>&1; echo "build unfused: $?") &
wait
for shape in "mha:--batch 4 --heads 16 --dims 64 --seqs 4096" "gqa:--batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096"; do
    n=${shape%%:*}; a=${shape#*:}
    # shellcheck disable=SC2086 # a is a word list
    timeout 120 ncu --set full -k regex:'att_wg_(bwd|fwd)_kernel' -c 2 build-ncu/stg attn-bench --device cuda --attention flash $a --iters 1 \
        > "$out/ncu-fused-$n.txt" 2>&1; echo "ncu fused $n: $?"
    # shellcheck disable=SC2086
    timeout 120 ncu --set full -k regex:'att_wg_(dkdv|dq)_kernel' -c 2 build-ncu-unfused/stg attn-bench --device cuda --attention flash $a --iters 1 \
        > "$out/ncu-unfused-$n.txt" 2>&1; echo "ncu unfused $n: $?"
done
{
    echo "== stg attn-bench (fused build)"
    build-ncu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep -E "flash|head"
    build-ncu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 --iters 20 2>&1 | grep flash
    echo "== torch_attn.py"
    PYTHONUNBUFFERED=1 timeout 150 python3 peer/torch_attn.py --batch 4 --heads 16 --dims 64,128 --seqs 4096,16384 --iters 20 2>&1 | grep -v EFFICIENT
} > "$out/rates.txt"
cat "$out/rates.txt"
