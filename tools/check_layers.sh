#!/usr/bin/env bash
# The layering rules, checked by the project's own means (run by CI through ctest: test_layers):
#   1. nothing under ops/ includes graph/ (the op rules see the IR through ops/base/ and emit
#      gradient ops through stg_grad_emit);
#   2. the base layer ops/base/ includes nothing outside itself (system headers aside);
#   3. `case STG_OP_` appears only inside an op family's folder ops/<family>/ (the backends and
#      the graph layer dispatch through tables of records, never through switches over kinds);
#   4. the pipeline is one-way: graph/ includes no planner/, runtime/ or tools/ header, planner/
#      no runtime/ or tools/ header, runtime/ no tools/ header;
#   5. the CUDA backend's context and dispatch (ops/cuda/cuda.cu) name no op family (nor adamw):
#      what a family prepares hangs off its records (per-op state, cuda_group), not the backend.
# Prints each violation as file:line: text and exits 1 when there is any.
set -u
cd "$(dirname "$0")/.." || exit 2
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
report() { while IFS= read -r l; do echo "$1: $l"; done >> "$out"; }
src() { find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null; }
src ops | xargs -r grep -nE '#include *"graph/' | report "ops/ includes graph/"
src ops/base | xargs -r grep -nE '#include *"' | grep -vE '#include *"ops/base/' | report "ops/base/ includes outside itself"
fams=$(find ops -mindepth 1 -maxdepth 1 -type d ! -name base ! -name cpu ! -name cuda -printf '%f\n' | paste -sd'|')
src graph planner runtime tools tests ops | grep -vE "^ops/($fams)/" | xargs -r grep -nE 'case +STG_OP_' \
    | report "case STG_OP_ outside ops/<family>/"
src graph | xargs -r grep -nE '#include *"(planner|runtime|tools)/' | report "graph/ reaches up"
src planner | xargs -r grep -nE '#include *"(runtime|tools)/' | report "planner/ reaches up"
src runtime | xargs -r grep -nE '#include *"tools/' | report "runtime/ reaches up"
grep -nE "(^|[^a-zA-Z])($fams|adamw)([^a-zA-Z]|\$)" ops/cuda/cuda.cu | report "ops/cuda/cuda.cu names an op family"
if [ -s "$out" ]; then cat "$out"; exit 1; fi
echo "layers: ok"
