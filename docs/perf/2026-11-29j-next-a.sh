#!/usr/bin/env bash
# For the session after the twenty-seventh (written 2026-11-29, not run): issue 28's ctx-1024 rows not re-run with the
# optimizer in backward (2c90914), beside the reduce-overhead peer (about 6 minutes; run it under `timeout 570`).
# Predicted (the twenty-seventh session's call 3 A/B without the peer: xl 1024 100.8 -> ~99.3 ms; medium and small
# scaled from their ctx-512 gains, -2.5% and 0%): xl 1024 0.793 (twenty-fifth session, with options) -> ~0.775 (not
# met); medium 1024 0.786 (nineteenth) -> ~0.75 (stg's ordinary step has moved since: the dq stream, -1 to -2%);
# small 1024 0.721 (twentieth) -> ~0.72.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29j-next-a.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
step_row_ib xl 1024 4 60
step_row_ib medium 1024 4 260
step_row_ib small 1024 4 400
perf_pack
