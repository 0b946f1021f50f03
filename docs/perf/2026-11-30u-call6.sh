#!/usr/bin/env bash
# 2026-11-30, thirty-eighth session, call 6 (the session's last ~5 minutes of device time, under `timeout 300`): a smoke
# run of the study suite (tools/bench_suite.py, last run whole on 2026-11-23 on an H100) on the current stg and the
# strongest peer, at one cell (small, ctx 128), to see that it still runs end to end and what a size's commands cost
# (the per-command walls it prints) before a session spends its device time on the whole suite. Records go to OUT, not
# docs/bench (the page is not rewritten from one cell).
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-30u-call6.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build stg || { perf_pack; exit 1; }
timeout 220 python3 tools/bench_suite.py --stg build-gpu/stg --parts stg,peer --sizes small --ctx 128 --out "$out/l/bench" \
    --doc "$out/l/benchmarks.md" > "$out/l/suite.txt" 2>&1
echo "suite: $?"; grep -E "rc [0-9]+|stg:|peer" "$out/l/suite.txt" | head -40
python3 tools/bench_suite.py --stg build-gpu/stg --parts report --sizes small --ctx 128 --out "$out/l/bench" \
    --doc "$out/l/benchmarks.md" > "$out/l/report.txt" 2>&1; echo "report: $?"; tail -3 "$out/l/report.txt"
say done
perf_pack
