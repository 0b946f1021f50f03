#!/usr/bin/env bash
# Functions shared by the device-call scripts in docs/perf (one call each: build, tests, A/B timings beside the
# peers), so that a new script holds only what its call measures. Source it from the repository root on the GPU
# machine, after `set -u`:   source tools/perf_lib.sh OUT
# It makes OUT/l (logs, packed by perf_pack), sets $out (absolute) and $t0, sources .deps/env.sh and prints the
# device. Functions:
#   el, say MSG...          seconds since the start; a line stamped with them
#   perf_build [TARGET...]  configures build-gpu (Release, sm_90a) and builds it (or the targets); prints "build: RC"
#   attn_tests NAME [VAR=VALUE...]   test_gpu_mm_attn and test_gpu_ops, filter *attention*, under the variables;
#                           prints each result; returns 1 on a failure or a hang (45 s each), with the last lines
#   attn_rates [VAR=VALUE...]  stg attn-bench (flash) under the variables: batch 4, 16 heads, head dims 64 and 80,
#                           seq 4096 and 16384, then the GQA row (batch 1, 32 / 8 heads, 64, 4096); the table rows
#   attn_d128 [VAR=VALUE...]  the head-dim-128 rows (batch 4, 16 heads, seq 4096 and 16384) under the variables
#   build_old SRC:DST...    a copy of the tree in /tmp/old with each DST (a repository path) replaced by SRC (a
#                           carried file, e.g. the file before the change under test), its stg built in the
#                           background (wait for it; prints "old build: RC"), for A/B runs in one call
#   build_rev DIR           build_old with every file under DIR (a carried copy of some of the tree's paths, e.g.
#                           `git archive REV ops/attention | tar -xf - -C peer/rev` here) that differs from the tree's
#   side DIR TARGET SRC:DST...  like build_old, into DIR and for one build target (e.g. a test program of a variant);
#                           prints "DIR build: RC" (wait for it)
#   med JSON LABEL [KEY...] the named keys (median_ms, min_ms, mfu by default) of an `stg bench --json` record
#   stg_step LABEL MODEL [ARG...]   `stg bench MODEL ARG... --json` (120 s at most), then med; STG_BIN=PATH: that stg
#   peer_step SIZE CTX BATCH MODE   torch_lm.py --flash --sdpa cudnn (MODE c: default compile, cg: reduce-overhead), killed
#                           after PEER_TIMEOUT s (240 by default: xl's reduce-overhead compile outran 170 s twice, 2026-11-29n)
#   step_row SIZE CTX MODES GATE [BATCH]   models/cs336/SIZE.yaml: stg_step default and with --grad-dtype bf16
#                           --gemm-tune on, then peer_step for each of MODES (c, cg), if the clock is below GATE s
#   step_row_ib SIZE CTX BATCH GATE   models/cs336/SIZE.yaml with --grad-dtype bf16 --gemm-tune on, ordinary and with
#                           --optimizer-in-backward, two rounds alternating, then the reduce-overhead peer; skipped when the
#                           clock is past GATE s (count ~30 s for stg's runs and ~100-150 s for the peer's compile)
#   dec_prompt              a 512-token prompt (random bytes, `stg tokens`) in OUT/l/p.bin, and the array dec: the
#                           2.7B decode of it (bf16, --init fill, ctx 1024, 512 new tokens, greedy, --json)
#   dec_keys JSON           batch, tokens/s, steady ms a step and the bound of a `stg sample --json` record
#   dec_tests               build-gpu's test_gpu_sample (200 s at most), then memcheck and racecheck of its
#                           attention_cached tests (tools/sanitize_gpu.sh); prints each result
#   dec_ab STG... -- B...   `stg "${dec[@]}" --batch B` for each build and batch (90 s each), two rounds, alternating
#   ncu_step STG B SKIP N   Nsight Compute's duration and DRAM bytes of N kernels after SKIP of `stg "${dec[@]}" --batch B`
#                           (clocks and caches left alone), summed by kernel (tools/ncu_kernels.py) into OUT/l/ncu_step_bB.txt
#   tl_lib                  builds tools/probes/timeline.c (CUPTI) into OUT/libtimeline.so; returns 1 when it cannot
#   tl NAME STG ARG...      `STG ARG...` with the timeline injected (150 s at most): OUT/l/tl_NAME.tsv.gz, its reading by
#                           tools/timeline.py in OUT/l/tl_NAME.txt (the first 30 lines printed); STG may be `env V=X stg`
#   attn_grids              attn_tests at the default grid, a block an item in head-batch groups of 3 (hgroup3) and 3
#                           persistent blocks in groups of 4 (p3g4), as the ctest variants run them
#   build_traced FILE       a copy of the tree in /tmp/tr with FILE as ops/attention/sm90a/attention_ws_bwd.cu, its stg
#                           built with -DWS_TRACE in the background (wait for it; prints "trace build: RC")
#   gpu_suite GATE          ctest -L gpu in build-gpu (200 s at most) if the clock is below GATE s, its summary printed;
#                           returns 1 on a failure, and names tests "Not Run" (a build of some targets only) as no run
#   attn_ab ROUNDS NAME:STG...  for each round, each binary: attn-bench B4 H16 causal, head dims 64, 80, 128, seq 1024,
#                           4096, 16384, 20 iterations (ATT_AB_ARGS: more options, e.g. --order phases); rows tagged [NAME rR]
#   attn_peer [DIMS]        torch_attn.py (batch 4, 16 heads, causal) at head dims DIMS (64,80,128), seq 4096 and 16384,
#                           20 iterations, 90 s at most: its output in OUT/l/peer_attn.txt, the cuDNN rows printed
#   variant NAME PATCH FLAGS [TARGET...]  a copy of the tree in /tmp/NAME with PATCH applied (none when PATCH is -), built
#                           with CMAKE_CUDA_FLAGS=FLAGS (the targets, or everything) in the background (wait for it;
#                           prints "/tmp/NAME build: RC")
#   variant_tests NAME      attn_tests in /tmp/NAME at the default grid, hgroup3, p3g4 and with the cp.async producer
#                           (STG_ATT_DKDV_TMA=0, 3 persistent blocks); returns 1 at the first failure
#   variant_build NAME PATCH FLAGS   variant NAME PATCH FLAGS (built whole, so its GPU suite can run) beside perf_build stg
#                           of the tree, waited for, then serial_report of the variant; returns 1 when the tree's build fails
#   variant_checks NAME     what landing a variant needs before its suite: variant_tests NAME, then memcheck and
#                           racecheck of the bf16 attention tests and memcheck of the GQA tests (tools/sanitize_gpu.sh,
#                           100 s) in /tmp/NAME; returns 1 at the first failure (the sanitizers not run after failed tests)
#   variants_ab NAME...     after perf_build stg and the variants' builds: sets B (attn_ab's list) to the tree's stg
#                           and each variant's whose variant_tests pass (a failing one is named and left out); prints
#                           serial_report of each build, and a WARNING line for a variant with a note the tree's lacks
#   serial_report LOG NAME  ptxas's wgmma serialization notes (C7510-C7529) in a build log, one line per note and kernel
#   steps_ab SIZE CTX BATCH ROUNDS NAME:STG...  stg_step of models/cs336/SIZE.yaml with options and
#                           --optimizer-in-backward, ROUNDS rounds of each binary alternating; rows tagged [options ib, NAME]
#   peer_rows LIMIT SIZE:CTX:BATCH...  the reduce-overhead peer (peer_step ... cg) of each row in turn, each killed at
#                           LIMIT s on the clock, a row skipped when less than 150 s are left (a 2.7B compile takes ~120 s)
#   perf_pack               packs OUT/l into OUT/logs.tgz (the device returns at most 8 files)
out=${1:?usage: source tools/perf_lib.sh OUT}
mkdir -p "$out/l" && out=$(cd "$out" && pwd)
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
say() { echo "[$(el) s] $*"; }
source .deps/env.sh || { echo "no .deps/env.sh (run ../shared/device/prep.sh here, carry .deps)"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
perf_build() {
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake.txt" 2>&1 || {
        echo "build: cmake failed"; tail -5 "$out/l/cmake.txt"; return 1; }
    local tg=() rc
    for t in "$@"; do tg+=(--target "$t"); done
    timeout 300 cmake --build build-gpu "${tg[@]}" > "$out/l/build.txt" 2>&1
    rc=$?; echo "build: $rc"; grep -m5 -E "error" "$out/l/build.txt"
    say "built"
    return $rc
}
attn_tests() {
    local name=$1 p rc f bad=0; shift
    for p in test_gpu_mm_attn test_gpu_ops; do
        f="$out/l/${p}_$name.txt"
        (cd build-gpu && env "$@" STG_TEST_FILTER='*attention*' timeout 45 stdbuf -oL "./$p" > "$f" 2>&1)
        rc=$?; echo "$p attention [$name: $*]: $rc $(grep -E "PASSED|FAILED" "$f")"; grep -m3 -E "ERROR|differs" "$f"
        if [ $rc != 0 ]; then bad=1; echo "  last lines:"; tail -2 "$f"; break; fi
    done
    return $bad
}
attn_rates() {
    env "$@" timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80 --seqs 4096,16384 \
        --iters 20 2>&1 | grep -E "^\| flash"
    env "$@" timeout 30 build-gpu/stg attn-bench --device cuda --attention flash --batch 1 --heads 32 --kv-heads 8 --dims 64 --seqs 4096 \
        --iters 20 2>&1 | grep -E "^\| flash"
}
attn_d128() {
    env "$@" timeout 60 build-gpu/stg attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 128 --seqs 4096,16384 \
        --iters 20 2>&1 | grep -E "^\| flash"
}
build_old() {
    local p
    rm -rf /tmp/old && mkdir -p /tmp/old && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/old
    for p in "$@"; do cp "${p%%:*}" "/tmp/old/${p#*:}" || { echo "build_old: $p"; return 1; }; done
    (cd /tmp/old && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake_old.txt" 2>&1 &&
        timeout 300 cmake --build build-gpu --target stg > "$out/l/build_old.txt" 2>&1; echo "old build: $?") &
}
build_rev() {
    local p=() f
    [ -d "$1" ] || { echo "build_rev: no $1"; return 1; }
    for f in $(cd "$1" && find . -type f | sed 's|^\./||'); do cmp -s "$1/$f" "$f" || p+=("$1/$f:$f"); done
    echo "files that differ: ${#p[@]}"
    build_old "${p[@]}"
}
side() {
    local d=$1 tg=$2 p; shift 2
    rm -rf "$d" && mkdir -p "$d" && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C "$d"
    for p in "$@"; do cp "${p%%:*}" "$d/${p#*:}" || { echo "side: $p"; return 1; }; done
    (cd "$d" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/l/cmake_$(basename "$d").txt" 2>&1 &&
        timeout 300 cmake --build build-gpu --target "$tg" > "$out/l/build_$(basename "$d").txt" 2>&1; echo "$d build: $?") &
}
med() {
    local f=$1 label=$2; shift 2
    python3 - "$f" "$label" "$@" <<'PY' 2>/dev/null || echo "$label failed: $(tail -2 "$out/l/b.err" 2>/dev/null)"
import json, sys
d = json.load(open(sys.argv[1]))
keys = sys.argv[3:] or ["median_ms", "min_ms", "mfu"]
print(sys.argv[2], {k: d.get(k) for k in keys})
PY
}
stg_step() {
    local label=$1 model=$2 rc; shift 2
    timeout 120 "${STG_BIN:-build-gpu/stg}" bench "$model" "$@" --json > "$out/l/b.json" 2> "$out/l/b.err"
    rc=$?
    # a run that failed is no measurement, whatever it printed
    if [ $rc -ne 0 ]; then echo "$label failed (exit $rc): $(tail -2 "$out/l/b.err" 2>/dev/null | tr '\n' ' ')"; return; fi
    med "$out/l/b.json" "$label"
}
peer_step() {
    local extra=()
    [ "$4" = cg ] && extra=(--compile-mode reduce-overhead)
    local log="$out/l/peer_$1_$2_$3_$4.txt"
    PYTHONUNBUFFERED=1 timeout "${PEER_TIMEOUT:-240}" python3 peer/torch_lm.py --flash --sdpa cudnn --sizes "$1" --ctx "$2" --batch "$3" --modes bf16c \
        "${extra[@]}" --warm 3 --iters 10 --out "$out/l/peer_$1_$2_$3_$4.json" > "$log" 2>&1
    grep -E '^\{' "$log" | tail -1 | grep . || echo "peer $1 ctx $2 b$3 [$4] failed: $(tail -2 "$log" | tr '\n' ' ')"
}
step_row() {
    local b=${5:-4} m
    if [ "$(el)" -gt "$4" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    stg_step "$1 ctx$2 b$b [default]" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$b" --precision bf16 --warmup 3 --iters 10
    stg_step "$1 ctx$2 b$b [--grad-dtype bf16 --gemm-tune on]" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$b" --precision bf16 \
        --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10
    for m in $3; do peer_step "$1" "$2" "$b" "$m"; done
    say "$1 ctx $2 done"
}
step_row_ib() {
    local r
    if [ "$(el)" -gt "$4" ]; then say "$1 ctx $2 skipped (time)"; return; fi
    for r in 1 2; do
        stg_step "$1 ctx$2 b$3 [options] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" --precision bf16 \
            --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10
        stg_step "$1 ctx$2 b$3 [options, --optimizer-in-backward] r$r" "models/cs336/$1.yaml" --set ctx="$2" --set batch="$3" \
            --precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10
    done
    peer_step "$1" "$2" "$3" cg
    say "$1 ctx $2 done"
}
# The step with options and the optimizer in backward (the PERF.md rows), ROUNDS rounds of each NAME:BIN alternating:
# steps_ab SIZE CTX BATCH ROUNDS NAME:BIN...
steps_ab() {
    local size=$1 ctx=$2 b=$3 rounds=$4 r x; shift 4
    for r in $(seq 1 "$rounds"); do
        for x in "$@"; do
            STG_BIN=${x#*:} stg_step "$size $ctx b$b [options ib, ${x%%:*}] r$r" "models/cs336/$size.yaml" --set ctx="$ctx" \
                --set batch="$b" --precision bf16 --grad-dtype bf16 --gemm-tune on --optimizer-in-backward --warmup 3 --iters 10
        done
    done
}
dec_prompt() {
    head -c 512 /dev/urandom > "$out/l/p.txt" && build-gpu/stg tokens "$out/l/p.txt" -o "$out/l/p.bin" > /dev/null
    dec=(sample models/cs336/2.7B.yaml --precision bf16 --init fill --set ctx=1024 --prompt-ids "$out/l/p.bin" -n 512 --temperature 0 --json)
}
dec_tests() {
    (cd build-gpu && timeout 200 ./test_gpu_sample > "$out/l/test_gpu_sample.txt" 2>&1
     echo "test_gpu_sample: $? $(grep -E "PASSED|FAILED" "$out/l/test_gpu_sample.txt" | tr '\n' ' ')")
    tools/sanitize_gpu.sh build-gpu "$out/l/san" 200 memcheck:test_gpu_sample:'*attention_cached*' racecheck:test_gpu_sample:'*attention_cached*'
}
dec_keys() {
    python3 - "$1" <<'PY' 2>&1 | cut -c1-300
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print({k: d[k] for k in ("batch", "decode_tokens_per_s", "steady_ms_per_step", "bound_tokens_per_s")})
except (OSError, ValueError, KeyError) as e:
    print("no decode record:", repr(e))
PY
}
dec_ab() {
    local builds=() r s b
    while [ $# -gt 0 ] && [ "$1" != -- ]; do builds+=("$1"); shift; done
    shift
    for r in 1 2; do
        for s in "${builds[@]}"; do
            for b in "$@"; do
                timeout 90 $s "${dec[@]}" --batch "$b" > "$out/l/d.json" 2> "$out/l/d.err"; echo "$s b$b rc=$? $(dec_keys "$out/l/d.json")"
            done
        done
    done
}
ncu_step() {
    local f="$out/l/ncu_step_b$2"
    timeout 240 ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --clock-control none \
        --cache-control none -s "$3" -c "$4" $1 "${dec[@]}" --batch "$2" > "$f.csv" 2> "$f.err"
    echo "ncu_step $1 b$2: $?"
    python3 tools/ncu_kernels.py "$f.csv" > "$f.txt" 2>&1; head -14 "$f.txt"
}
tl_lib() {
    local cu inc
    cu=$(dirname "$(dirname "$(command -v nvcc)")")
    tl_cupti=$(ls "$cu"/lib64/libcupti.so "$cu"/extras/CUPTI/lib64/libcupti.so 2>/dev/null | head -1)
    inc=$(ls -d "$cu"/include/cupti.h "$cu"/extras/CUPTI/include/cupti.h 2>/dev/null | head -1)
    [ -n "$tl_cupti" ] && [ -n "$inc" ] || { echo "timeline: no CUPTI under $cu"; return 1; }
    gcc -O2 -Wall -std=c11 -shared -fPIC tools/probes/timeline.c -I"$(dirname "$inc")" -L"$(dirname "$tl_cupti")" -lcupti \
        -o "$out/libtimeline.so" || { echo "timeline library: build failed"; return 1; }
}
tl() {
    local name=$1 s=$2; shift 2
    # shellcheck disable=SC2086 # s may be `env V=X stg`
    LD_LIBRARY_PATH="$(dirname "$tl_cupti"):${LD_LIBRARY_PATH:-}" STG_TIMELINE_OUT="$out/l/tl_$name.tsv" \
        CUDA_INJECTION64_PATH="$out/libtimeline.so" timeout 150 $s "$@" > "$out/l/tl_$name.out" 2>&1
    echo "[$name] stg: $? $(grep -E "^  time|timeline:" "$out/l/tl_$name.out" | tr '\n' ' ')"
    python3 tools/timeline.py "$out/l/tl_$name.tsv" > "$out/l/tl_$name.txt" 2>&1; echo "[$name] timeline.py: $?"
    head -30 "$out/l/tl_$name.txt"
    gzip -9 "$out/l/tl_$name.tsv"
}
attn_grids() {
    attn_tests default || echo "default: attention tests failed (see above)"
    attn_tests hgroup3 STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 || echo "hgroup3: failed"
    attn_tests p3g4 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 || echo "p3g4: failed"
}
build_traced() {
    [ -f "$1" ] || { echo "build_traced: no $1"; return 1; }
    rm -rf /tmp/tr && mkdir -p /tmp/tr && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C /tmp/tr
    cp "$1" /tmp/tr/ops/attention/sm90a/attention_ws_bwd.cu
    (cd /tmp/tr && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_CUDA_FLAGS=-DWS_TRACE > "$out/l/cmake_tr.txt" 2>&1 &&
        timeout 300 cmake --build build-gpu --target stg > "$out/l/build_tr.txt" 2>&1; echo "trace build: $?") &
}
gpu_suite() {
    if [ "$(el)" -ge "$1" ]; then echo "ctest -L gpu skipped (clock: $(el) s, gate $1 s)"; return; fi
    local rc nr
    (cd build-gpu && timeout 200 ctest -L gpu --timeout 200 > "$out/l/ctest_gpu.txt" 2>&1)
    rc=$?; echo "ctest -L gpu: $rc"
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_gpu.txt" | grep -v Skipped | head -20
    # a test program the build did not make is "Not Run": a build of some targets only is no run of the suite
    nr=$(grep -c "Not Run" "$out/l/ctest_gpu.txt")
    [ "$nr" -gt 0 ] && echo "gpu_suite: $nr test(s) not built in $(pwd)/build-gpu: NOT a run of the GPU suite"
    say "ctest done"
    [ "$rc" -eq 0 ] && [ "$nr" -eq 0 ]
}
attn_ab() {
    local rounds=$1 r b; shift
    for r in $(seq 1 "$rounds"); do
        for b in "$@"; do
            timeout 60 "${b#*:}" attn-bench --device cuda --attention flash --batch 4 --heads 16 --dims 64,80,128 \
                --seqs 1024,4096,16384 --iters 20 ${ATT_AB_ARGS:-} 2>&1 | grep -E "^\| flash" | sed "s/^/[${b%%:*} r$r] /"
        done
    done
}
attn_peer() {
    PYTHONUNBUFFERED=1 timeout 90 python3 peer/torch_attn.py --batch 4 --heads 16 --dims "${1:-64,80,128}" --seqs 4096,16384 \
        --iters 20 > "$out/l/peer_attn.txt" 2>&1 || echo "attn_peer: torch_attn.py failed (exit $?): $(tail -2 "$out/l/peer_attn.txt" | tr '\n' ' ')"
    grep -E "CUDNN" "$out/l/peer_attn.txt"
    say "cuDNN done"
}
variant() {
    local d=/tmp/$1 p=$2 fl=$3 tg=() t; shift 3
    for t in "$@"; do tg+=(--target "$t"); done
    rm -rf "$d" && mkdir -p "$d" && tar --exclude=./build-gpu --exclude=./build --exclude=./.deps -cf - . | tar -xf - -C "$d"
    (cd "$d" && { [ "$p" = - ] || patch -p1 -s < "$p"; } &&
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=$fl" \
            > "$out/l/cmake_$(basename "$d").txt" 2>&1 &&
        timeout 400 cmake --build build-gpu "${tg[@]}" > "$out/l/build_$(basename "$d").txt" 2>&1; echo "$d build: $?") &
}
variant_tests() {
    (cd "/tmp/$1" && attn_tests "$1_default" && attn_tests "$1_hgroup3" STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0 STG_ATT_HGROUP=3 &&
        attn_tests "$1_p3g4" STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 STG_ATT_HGROUP=4 &&
        attn_tests "$1_cpasync" STG_ATT_DKDV_TMA=0 STG_ATT_DKDV_PERSIST=3)
}
variant_build() {
    variant "$1" "$2" "$3"
    perf_build stg || { wait; return 1; }
    wait
    say "builds done"
    serial_report "$out/l/build_$1.txt" "$1"
}
variant_checks() {
    variant_tests "$1" || return 1
    tools/sanitize_gpu.sh "/tmp/$1/build-gpu" "$out/l/san_$1" 100 memcheck:test_gpu_mm_attn:'*attention_bf16*' \
        racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*' || return 1
    say "$1: tests and sanitizers done"
}
# ptxas's wgmma serialization notes (C7510-C7518, C7520: every wgmma of the kernel waited for at once) in a build log,
# one line per (note, kernel); the thirty-fifth session's pipe variant ran 1.8x slower under C7514 that nobody read.
serial_report() {
    grep -o "(C75[12][0-9]) Potential Performance Loss.*function '[^']*'" "$1" 2>/dev/null |
        sed -E "s/^\((C75[0-9]+)\).*function '_Z[0-9]+([A-Za-z_]+)I([^']{0,40}).*/\1 \2<\3>/" | sort | uniq -c | sed "s|^|[$2 ptxas] |"
}
variants_ab() {
    local v new
    B=("tree:build-gpu/stg")
    serial_report "$out/l/build.txt" tree
    for v in "$@"; do
        serial_report "$out/l/build_$v.txt" "$v"
        # notes the tree's build does not have: the variant's rates would measure ptxas's serialization, not the change
        new=$(comm -13 <(serial_report "$out/l/build.txt" x | sed 's/^\[x ptxas\] *[0-9]* //' | sort -u) \
            <(serial_report "$out/l/build_$v.txt" x | sed 's/^\[x ptxas\] *[0-9]* //' | sort -u))
        [ -n "$new" ] && echo "$v: WARNING: wgmma serialized where the tree's is not: $(echo "$new" | tr '\n' ';')"
        if variant_tests "$v"; then
            B+=("$v:/tmp/$v/build-gpu/stg")
        else
            echo "$v: attention tests failed; its rates not run"
        fi
    done
}
peer_rows() {
    local lim=$1 r s c b; shift
    for r in "$@"; do
        IFS=: read -r s c b <<< "$r"
        if [ "$(el)" -gt $((lim - 150)) ]; then say "peer $s ctx $c b$b skipped (clock $(el) s, limit $lim s)"; continue; fi
        PEER_TIMEOUT=$((lim - $(el))) peer_step "$s" "$c" "$b" cg
        say "$s ctx $c b$b reduce-overhead peer done"
    done
}
perf_pack() { tar -czf "$out/logs.tgz" -C "$out" l && rm -rf "$out/l"; }
