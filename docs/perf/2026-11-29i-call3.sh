#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 3: what bounds the dk/dv kernel at head dim 64 (timing mutants, wrong results,
# no tests). With 2026-11-29i-dkdv-mutants.patch applied: STG_WS_MUT=k removes one part of the consumers' work a tile:
# 1 the 32 exponentials (MUFU), 2 the dV / dK products, 3 the Sᵀ / dPᵀ products, 4 the 32 bf16 packs (F2FP) of Pᵀ
# and dSᵀ, 6 the loads of -lse log2 e and D, 7 both 1 and 4. Call 2's stall samples: the consumers wait ~48% at the
# ring and ~0 at their products' waits; the tensor pipe 35% busy. Prediction: if the chain is the bound, 1 / 4 / 7
# gain most; if the tensor pipe or shared memory, 2 and 3 gain ~40% each.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-29i-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
for r in 1 2; do
    for m in 0 1 2 3 4 6 7; do
        echo "== mut $m round $r"
        STG_WS_MUT=$m timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 \
            --seqs 4096,16384 --iters 20 2>&1 | grep -E "^\| flash"
    done
done
say "done"
perf_pack
