#!/usr/bin/env bash
# On the GPU machine, issue 26 in one lease: build stg and test_gpu_sample, run the test, time
# `stg sample` on the CS336 2.7B (bf16, 512-token prompt, 512 new tokens; batch 1 and 64; a
# 4096-token prefill) with the bandwidth bound it prints, `stg memreport --mode sample --device cuda`
# against the plan, and the test under compute-sanitizer memcheck (a shorter run).
# Usage: tools/sample_gpu.sh SRC BUILD OUT    (after `source .deps/env.sh`)
#   RUNS="b1 b64 b1_greedy prefill4096" and MEMS="1 64" (the defaults) choose the timings and reports.
set -uo pipefail
src=$1 bld=$2 out=$3
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; } | tee "$out/device.txt"
cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTG_TESTS=ON >"$out/cmake.txt" 2>&1 || { tail -20 "$out/cmake.txt"; exit 1; }
cmake --build "$bld" --target stg test_gpu_sample >"$out/build.txt" 2>&1 || { grep -E "error" "$out/build.txt" | head -20; tail -5 "$out/build.txt"; exit 1; }
stamp built
S=$bld/stg M=$src/models/cs336/2.7B.yaml
timeout 60 "$bld/test_gpu_sample" >"$out/test_gpu_sample.txt" 2>&1
stamp "test_gpu_sample rc=$? $(grep -E 'PASSED|FAILED' "$out/test_gpu_sample.txt" | tr '\n' ' ')"
grep -E "rel err|draws|bitwise|ERROR|error" "$out/test_gpu_sample.txt" | head -40
tmp=$(mktemp -d)
head -c 512 /dev/urandom >"$tmp/p512.txt" && "$S" tokens "$tmp/p512.txt" -o "$tmp/p512.bin" >/dev/null
head -c 4096 /dev/urandom >"$tmp/p4096.txt" && "$S" tokens "$tmp/p4096.txt" -o "$tmp/p4096.bin" >/dev/null
run() { # name, args...
  local n=$1; shift
  echo "$S sample $M $*" >"$out/$n.cmd"
  timeout 60 "$S" sample "$M" "$@" >"$out/$n.json" 2>"$out/$n.err"
  stamp "$n rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in d if k not in ('ids','text')})" "$out/$n.json" 2>&1 | cut -c1-900)"
}
common=(--precision bf16 --init fill --json)
RUNS=${RUNS-b1 b64 b1_greedy prefill4096} MEMS=${MEMS-1 64}
want() { case " $RUNS " in *" $1 "*) return 0;; esac; return 1; }
want b1 && run b1 "${common[@]}" --set ctx=1024 --prompt-ids "$tmp/p512.bin" -n 512
STG_GPU_TEST_SMALL=1 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 3 "$bld/test_gpu_sample" >"$out/memcheck.txt" 2>&1
stamp "memcheck rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/memcheck.txt" | tail -3 | tr '\n' ' ')"
want b64 && run b64 "${common[@]}" --set ctx=1024 --prompt-ids "$tmp/p512.bin" -n 512 --batch 64
want b1_greedy && run b1_greedy "${common[@]}" --set ctx=1024 --prompt-ids "$tmp/p512.bin" -n 512 --temperature 0
want prefill4096 && run prefill4096 "${common[@]}" --set ctx=4100 --prompt-ids "$tmp/p4096.bin" -n 4
for b in $MEMS; do
  timeout 60 "$S" memreport "$M" --mode sample --precision bf16 --set ctx=1024 --set batch=$b --prompt 512 --device cuda >"$out/mem_b$b.txt" 2>&1
  stamp "memreport batch $b rc=$?"; cat "$out/mem_b$b.txt"
done
rm -rf "$tmp"
