#!/usr/bin/env bash
# For the session after the thirty-seventh (written 2026-11-30; about 6-8 minutes, run it under `timeout 570`): issue 28's
# 2.7B rows beside the reduce-overhead peer in one call, last measured in the thirty-fourth session (0.718-0.723) and
# touched since only by the head-dim-80 changes a later call lands (run docs/perf/2026-11-30t-next-w3.sh first; if
# WS_DQ80_W3 lands, this measures it): stg with options and --optimizer-in-backward, two rounds, at ctx 4096 b1 and
# ctx 1024 b4, then the peers (a 2.7B reduce-overhead compile takes ~120 s; peer_rows skips one that cannot finish).
# Predicted: ctx 4096 154.4-154.7 ms as in the thirty-seventh session's call 2 (a WS_DQ80_W3 landing -0.3 to -1.0),
# against a 211-215-ms peer: 0.72; ctx 1024 ~138.7 against ~192: 0.72. The rows stay above 0.7.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30t-next-rows.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
steps_ab 2.7B 4096 1 2 tree:build-gpu/stg
steps_ab 2.7B 1024 4 2 tree:build-gpu/stg
say "stg rows done"
peer_rows 560 2.7B:4096:1 2.7B:1024:4
perf_pack
