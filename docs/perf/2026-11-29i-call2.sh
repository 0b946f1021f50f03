#!/usr/bin/env bash
# 2026-11-29 (twenty-sixth session), call 2: the dk/dv kernel's stall samples per SASS instruction (head dim 64, seq
# 16384, batch 4, 16 heads; the tree at 2ca3b35), to read its consumers' chain beside the SASS; and the device's
# cuobjdump and nvdisasm copied back (gzip), so that the SASS of a kernel built here can be read here without a call.
# Call 1 (the 128-row tiles): correct and 12% slower (310.6 -> 274.1 TFLOP/s), not explained yet.
# Usage (GPU machine, repository root, carrying .deps): docs/perf/2026-11-29i-call2.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
for b in cuobjdump nvdisasm; do
    p=$(command -v $b || echo /usr/local/cuda/bin/$b)
    ls -la "$p"; ldd "$p" | grep -v "linux-vdso\|ld-linux" | sed 's/^/  /'
    gzip -9 -c "$p" > "$out/$b.gz"
done
perf_build stg || { perf_pack; exit 1; }
args=(attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64 --seqs 16384 --iters 1)
kn=dkdv
timeout 150 ncu -k regex:"att_ws_${kn}_kernel" -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section Occupancy --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis -o "$out/l/$kn" build-gpu/stg "${args[@]}" > "$out/l/ncu_$kn.log" 2>&1
echo "ncu $kn: $?"
ncu --import "$out/l/$kn.ncu-rep" --page details > "$out/$kn.details.txt" 2>&1
ncu --import "$out/l/$kn.ncu-rep" --page source --csv --print-source sass > "$out/l/$kn.sass.csv" 2>&1
echo "source page $kn: $? $(wc -l < "$out/l/$kn.sass.csv") lines"
gzip -9 -c "$out/l/$kn.sass.csv" > "$out/$kn.sass.csv.gz"
grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Duration|Throughput|Registers|Shared Memory" "$out/$kn.details.txt" | sed 's/  */ /g' | head -40
python3 tools/ncu_stalls.py "$out/l/$kn.sass.csv" --top 25 | head -60
say "done"
rm -f "$out"/l/*.ncu-rep "$out"/l/*.csv
perf_pack
