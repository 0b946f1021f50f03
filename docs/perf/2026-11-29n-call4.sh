#!/usr/bin/env bash
# 2026-11-29, thirty-first session, call 4 (run under `timeout 590`): a607310 with only the forward's and the dk/dv launch's
# persistence (2026-11-29m-att-persist.patch, -dkdv-persist.patch); the dq queue (-dq-persist.patch: racecheck reported
# hazards between its producer's st.shared of the item and the consumers' ld.shared, ordered only by mbarriers, in call 1)
# and the memcpy rewrite (no gain in call 2) taken back out. Tests (persistent, 3 blocks), sanitizers, the attention ctest
# variants, then the step A/B by the switches ([p]: the default, persistent; [none]: STG_ATT_FWD_PERSIST=0
# STG_ATT_DKDV_PERSIST=0), two rounds alternating, and the xl ctx 1024 row beside its reduce-overhead peer.
# Predicted (call 2: medium 1024 in backward [all] 23.23-23.28 against [none] 23.40-23.43, the forward's share of that ~0.1%):
# medium 1024 [p] ~0.5% under [none]; xl 1024 the same (97.4 -> ~96.9 ms, ~0.75 against ~129); small 512 within noise.
# Usage (GPU machine, repository root, carrying .deps and peer): bash docs/perf/2026-11-29n-call4.sh OUT
set -u
source tools/perf_lib.sh "${1:?usage: $0 OUT}"
perf_build || { perf_pack; exit 1; }
attn_tests persistent || echo "persistent: attention tests failed (see above)"
attn_tests p3 STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 || echo "p3: failed"
STG_ATT_FWD_PERSIST=3 STG_ATT_DKDV_PERSIST=3 tools/sanitize_gpu.sh build-gpu "$out/l/san" 150 \
    memcheck:test_gpu_mm_attn:'*attention_bf16*' racecheck:test_gpu_mm_attn:'*attention_bf16*' memcheck:test_gpu_ops:'*attention_gqa*'
say "tests done"
NONE="STG_ATT_FWD_PERSIST=0 STG_ATT_DKDV_PERSIST=0"
OPT=(--precision bf16 --grad-dtype bf16 --gemm-tune on --warmup 3 --iters 10)
for r in 1 2; do
    stg_step "small 512 [p] r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}"
    # shellcheck disable=SC2086 # a word list
    ( export $NONE; stg_step "small 512 [none] r$r" models/cs336/small.yaml --set ctx=512 "${OPT[@]}" )
    stg_step "medium 1024 ib [p] r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
    # shellcheck disable=SC2086
    ( export $NONE; stg_step "medium 1024 ib [none] r$r" models/cs336/medium.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward )
    stg_step "xl 1024 ib [p] r$r" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
    # shellcheck disable=SC2086
    ( export $NONE; stg_step "xl 1024 ib [none] r$r" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward )
done
say "steps done"
peer_step xl 1024 4 cg
stg_step "xl 1024 ib [p] (after the peer)" models/cs336/xl.yaml --set ctx=1024 "${OPT[@]}" --optimizer-in-backward
say "xl peer done"
(cd build-gpu && timeout 200 ctest -L gpu -R "attention|persist" --timeout 190 > "$out/l/ctest_att.txt" 2>&1; echo "ctest -L gpu -R attention|persist: $?")
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/l/ctest_att.txt" | grep -v Skipped | head -10
perf_pack
