#!/usr/bin/env bash
# For the session after the twenty-seventh (written 2026-11-29, not run): issue 28's ctx-4096 rows (batch 1) with the
# optimizer in backward (2c90914), beside the peer in both modes for 2.7B (its faster mode is not known on the H200:
# the nineteenth session ran default compile only, 216.06 ms) and reduce-overhead for xl (about 8 minutes; run it
# under `timeout 570`).
# Predicted: at batch 1 the step's products are the ctx-1024 batch-4 products' size (4096 tokens), so the in-backward
# gain is ~3% as at 2.7B ctx 1024: 2.7B 168.5 (nineteenth session, options) -> ~163 ms, 0.780 -> ~0.75 against 216;
# xl 120.7 (twenty-sixth) -> ~118, 0.822 -> ~0.80 against 146.8 (attention is the larger share at 4096: issue 28's
# backward rows).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29j-next-b.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row_ib 2.7B 4096 1 60
peer_step 2.7B 4096 1 c
step_row_ib xl 4096 1 390
perf_pack
