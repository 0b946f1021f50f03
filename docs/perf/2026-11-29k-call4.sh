#!/usr/bin/env bash
# Twenty-eighth session, call 4 (2026-11-29): call 3's graph dump (docs/perf/2026-11-29k-h200-call3.txt) had every
# attention_cached node of the 2.7B decode graph depending on the q/k/v product of its layer and of every layer
# before it (node 7: 6 and 1; node 12: 11, 1 and 6; ...): the cross-stream edges behind the ~1.8 us before each
# attention kernel. Experiment switches (not to land): STG_X_LANES=1 prints the executor's lanes plan (each op's
# stream, the ops it waits on); STG_X_DEC_STREAMS=1 captures the decode step on one stream. Predicted: the lanes plan
# puts the products on a side stream (lane ANY) and attention_cached on stream 0 (lane MAIN: it uses the shared
# scratch), so each attention waits on an event recorded after its q/k/v product, and the capture carries the side
# stream's earlier nodes along; on one stream the graph is a chain and the step ~2.318 -> ~2.26 ms (-1.8 us a layer).
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29k-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
dec_prompt
dec[11]=8
STG_X_LANES=1 timeout 120 build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/lanes.json" 2> "$out/l/lanes.err"; echo "lanes: $?"
grep "^lanes" "$out/l/lanes.err" | head -16 | cut -c1-180
STG_X_DEC_STREAMS=1 STG_GRAPH_DUMP="$out/l/one" timeout 120 build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/one.json" 2> "$out/l/one.err"
echo "one stream: $? $(awk 'NF > 4' "$out"/l/one.0.txt | wc -l) nodes with more than one dependency"; head -5 "$out/l/one.0.txt" | cut -c1-160
dec[11]=512
dec_ab build-gpu/stg "env STG_X_DEC_STREAMS=1 build-gpu/stg" -- 1 64
say done
perf_pack
