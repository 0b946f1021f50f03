#!/usr/bin/env bash
# Twenty-ninth session, call 3 (about 4 minutes; run it under `timeout 500`).
# The question: the batch-1 decode step's layer (2.7B, ctx 1024) is 69.6 us against ~53 at copy rate, and its timeline
# puts ~10 us between the end of the q/k/v product and the end of attention_cached, for ~8 MB of cache (2 us at copy
# rate); the twenty-fifth session's ncu had the kernel alone at 10.9 us (before PDL and the one-trip combine). Nsight
# Compute, the kernel alone: its duration, DRAM throughput, occupancy and warp stall reasons, the SASS with its stall
# samples; the same for three consecutive mm_gv launches (wo, w2, the next layer's q/k/v); and every kernel of two
# decode steps alone (ncu_step). Predicted: attention_cached alone ~6-8 us, latency-bound (long-scoreboard and
# barrier stalls, a few waves of dependent round trips), DRAM well under 1 TB/s.
# Usage (GPU machine, repository root, carrying .deps): bash docs/perf/2026-11-29l-call3.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
dec_prompt
dec[11]=24
ncu_step build-gpu/stg 1 3000 328
full() { # NAME KERNEL-REGEX SKIP COUNT
    timeout 200 ncu --set full -k "regex:$2" -s "$3" -c "$4" -o "$out/l/$1" -f build-gpu/stg "${dec[@]}" --batch 1 > "$out/l/$1.out" 2>&1
    echo "ncu $1: $?"
    ncu -i "$out/l/$1.ncu-rep" --page details > "$out/l/$1.txt" 2>&1
    ncu -i "$out/l/$1.ncu-rep" --page raw --csv > "$out/l/$1.raw.csv" 2>&1
    ncu -i "$out/l/$1.ncu-rep" --page source --csv --print-source sass > "$out/l/$1.sass.csv" 2>&1; echo "sass page: $?"
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Waves Per SM|L2 Hit Rate|Grid Size" "$out/l/$1.txt" | head -60
    python3 - "$out/l/$1.raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: sys.exit(print("no raw rows"))
h = rows[0]
for r in rows[2:]:
    d = dict(zip(h, r))
    st = sorted(((float(v.replace(",", "")), k) for k, v in d.items()
                 if "issue_stalled_" in k and k.endswith("per_issue_active.ratio") and v.replace(",", "").replace(".", "").isdigit()), reverse=True)
    print(d.get("Kernel Name", "?")[:40], d.get("gpu__time_duration.sum", "?"), "stall cycles a warp instruction:",
          " ".join(f"{k.split('issue_stalled_')[1].split('_per_issue')[0]}={v:.2f}" for v, k in st[:7]))
PY
}
full att attention_cached 200 2
full gv mm_gv_kernel 300 3
perf_pack
