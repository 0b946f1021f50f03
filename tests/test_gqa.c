// Grouped-query attention on the CPU reference: attention(q, k, v) with k, v of fewer heads than q
// (query head h reads kv head h / G), and repeat_kv, the written-out path's head expansion.
// - finite differences of the loss through autodiff in fp64 (q, k, v and a head weight are the
//   parameters), at 4:1 and 8:1 groups, head dims 64 and 128, S = 13 (not a multiple of 64), for
//   the fused op, the fused op over repeat_kv copies, and the written-out softmax path;
// - the three give the same loss and gradients (to 1e-11);
// - the kernels: attention(GQA) against attention(q, repeat_kv(k), repeat_kv(v)) forward and
//   backward (dk = repeat_kv_bwd of the expanded dk) in f64 and f32;
// - bad input: query heads not a multiple of kv heads (file:line:col), repeat_kv n < 1.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/loader.h"
#include "ops/attention/kernels.h"
#include "ops/layout/kernels.h"
#include "tests/rig.h"

// The test model: q, k, v are parameters; o = attention over them (by `mode`), then a linear head
// and the mean cross-entropy against fixed targets.
static const char *gqa_model =
    "name: gqa\n"
    "dims: {B: 2, S: 13, Hq: 8, Hkv: 2, D: 64, G: Hq / Hkv, V: 5, N: B * S, HD: Hq * D}\n"
    "options:\n"
    "  mode: [gqa, repeat, naive]\n"
    "inputs:\n"
    "  targets: [N, i32]\n"
    "graph:\n"
    "  - param q [B, S, Hq, D] init=embedding\n"
    "  - param k [B, S, Hkv, D] init=embedding\n"
    "  - param v [B, S, Hkv, D] init=embedding\n"
    "  - param w [V, HD] init=linear\n"
    "  - if: mode == gqa\n"
    "    then:\n"
    "      - o, lse = attention(q, k, v)\n"
    "    else:\n"
    "      - kr = repeat_kv(k, n=G)\n"
    "      - vr = repeat_kv(v, n=G)\n"
    "      - if: mode == repeat\n"
    "        then:\n"
    "          - o, lse = attention(q, kr, vr)\n"
    "        else:\n"
    "          - qt = transpose(q, d0=1, d1=2)\n"
    "          - kt = transpose(kr, d0=1, d1=2)\n"
    "          - vt = transpose(vr, d0=1, d1=2)\n"
    "          - s = scale(matmul(qt, kt, tb=1), factor=1 / sqrt(D))\n"
    "          - p = softmax(causal_mask(s))\n"
    "          - o = transpose(matmul(p, vt), d0=1, d1=2)\n"
    "  - logits = linear(reshape(o, shape=[N, HD]), w)\n"
    "  - loss = cross_entropy(logits, targets)\n"
    "loss: loss\n";

typedef struct gqa_run {
    double loss;
    double *grad[4]; // d loss / d q, k, v, w
    int64_t n[4];
} gqa_run;

static const char *const pnames[4] = {"q", "k", "v", "w"};

// Opens the model in fp64 with these dims and mode, initializes (seed 1), writes fixed targets.
static void gqa_open(rig *r, int Hq, int Hkv, int D, const char *mode) {
    static char sets[4][64];
    snprintf(sets[0], sizeof sets[0], "Hq=%d", Hq);
    snprintf(sets[1], sizeof sets[1], "Hkv=%d", Hkv);
    snprintf(sets[2], sizeof sets[2], "D=%d", D);
    snprintf(sets[3], sizeof sets[3], "mode=%s", mode);
    const char *const sv[4] = {sets[0], sets[1], sets[2], sets[3]};
    stg_step_opts o = rig_opts("gqa.yaml", STG_PREC_FP64, sv, 4);
    o.text = gqa_model;
    o.text_len = strlen(gqa_model);
    rig_open(r, rig_step(&o), &(rig_cfg){.init_seed = 1, .feed_seed = -1});
    int t = graph_find_tensor(r->g, "targets");
    assert_true(t >= 0);
    int64_t n = stg_numel(&r->g->t[t]);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) tg[i] = (int32_t)((i * 7 + 3) % 5);
    stg_err err;
    if (rt_exec_write(r->e, t, tg, sizeof(int32_t) * (size_t)n, &err)) fail_msg("%s", err.msg);
    free(tg);
}

static int param_id(const rig *r, int i) {
    int t = graph_find_tensor(r->g, pnames[i]);
    assert_true(t >= 0 && r->g->t[t].cls == STG_CLASS_PARAM);
    return t;
}

// Loss and gradients of one forward + backward.
static void gqa_grads(rig *r, gqa_run *out) {
    stg_err err;
    if (rt_exec_run(r->e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err) || rt_exec_read_f64(r->e, r->g->loss, &out->loss, &err))
        fail_msg("%s", err.msg);
    for (int i = 0; i < 4; i++) {
        int p = param_id(r, i);
        out->n[i] = stg_numel(&r->g->t[p]);
        out->grad[i] = malloc(sizeof(double) * (size_t)out->n[i]);
        if (rt_exec_read_f64(r->e, r->g->t[p].grad, out->grad[i], &err)) fail_msg("%s", err.msg);
    }
}

static void gqa_free(gqa_run *g) {
    for (int i = 0; i < 4; i++) free(g->grad[i]);
}

// Central differences of the loss against the backward for `per` entries of each parameter.
static void gqa_fd(rig *r, const gqa_run *an, int per, const char *what) {
    stg_err err;
    rt_rng rng;
    rt_rng_seed(&rng, 11);
    for (int i = 0; i < 4; i++) {
        int p = param_id(r, i);
        int64_t n = an->n[i];
        double *w = malloc(sizeof(double) * (size_t)n);
        if (rt_exec_read_f64(r->e, p, w, &err)) fail_msg("%s", err.msg);
        for (int c = 0; c < per; c++) {
            int64_t e = (int64_t)rt_rng_below(&rng, (uint64_t)n);
            double h = 1e-5, orig = w[e], lp, lm;
            w[e] = orig + h;
            if (rt_exec_write_f64(r->e, p, w, &err) || rt_exec_run(r->e, RT_PHASE_FORWARD, &err) ||
                rt_exec_read_f64(r->e, r->g->loss, &lp, &err))
                fail_msg("%s", err.msg);
            w[e] = orig - h;
            if (rt_exec_write_f64(r->e, p, w, &err) || rt_exec_run(r->e, RT_PHASE_FORWARD, &err) ||
                rt_exec_read_f64(r->e, r->g->loss, &lm, &err))
                fail_msg("%s", err.msg);
            w[e] = orig;
            double fd = (lp - lm) / (2 * h), g = an->grad[i][e];
            double rel = fabs(fd - g) / fmax(1e-6, fmax(fabs(fd), fabs(g)));
            if (!(rel < 1e-5))
                fail_msg("%s: d loss / d %s[%lld]: finite difference %.12g, backward %.12g (rel %.3g)", what, pnames[i],
                         (long long)e, fd, g, rel);
        }
        if (rt_exec_write_f64(r->e, p, w, &err)) fail_msg("%s", err.msg);
        free(w);
    }
}

static double max_rel(const double *a, const double *b, int64_t n) {
    double m = 0.0, d = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    return d / fmax(m, 1e-300);
}

// Every (group, head dim): FD through autodiff for the three modes, and the modes agree.
static void test_gqa_autodiff(void **state) {
    (void)state;
    const int cfg[4][3] = {{8, 2, 64}, {8, 1, 64}, {8, 2, 128}, {8, 1, 128}}; // Hq, Hkv, D: 4:1 and 8:1
    const char *modes[3] = {"gqa", "repeat", "naive"};
    for (int c = 0; c < 4; c++) {
        gqa_run runs[3];
        for (int m = 0; m < 3; m++) {
            char what[128];
            snprintf(what, sizeof what, "Hq %d Hkv %d D %d %s", cfg[c][0], cfg[c][1], cfg[c][2], modes[m]);
            rig r;
            gqa_open(&r, cfg[c][0], cfg[c][1], cfg[c][2], modes[m]);
            gqa_grads(&r, &runs[m]);
            assert_true(isfinite(runs[m].loss));
            gqa_fd(&r, &runs[m], m == 0 ? 6 : 3, what);
            rig_close(&r);
            if (m == 0) continue;
            double dl = fabs(runs[m].loss - runs[0].loss) / fabs(runs[0].loss);
            if (!(dl < 1e-12)) fail_msg("%s: loss %.15g, fused GQA %.15g", what, runs[m].loss, runs[0].loss);
            for (int i = 0; i < 4; i++) {
                double e = max_rel(runs[m].grad[i], runs[0].grad[i], runs[0].n[i]);
                if (!(e < 1e-11)) fail_msg("%s: d loss / d %s differs from the fused GQA op's by %.3g", what, pnames[i], e);
            }
        }
        for (int m = 0; m < 3; m++) gqa_free(&runs[m]);
    }
}

// ---- the kernels: attention(GQA) = attention(q, repeat_kv(k), repeat_kv(v)) ----------------------

static uint64_t krng = 0x243f6a8885a308d3ull;
static double urand(void) {
    krng = krng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(krng >> 11) / 9007199254740992.0;
}

#define KERNEL_CHECK(T, S, tol)                                                                                    \
    static void kernel_check_##S(int64_t B, int64_t Sq, int64_t H, int64_t Hkv, int64_t D) {                        \
        const int64_t G = H / Hkv, nq = B * Sq * H * D, nk = B * Sq * Hkv * D;                                      \
        T *q = malloc(sizeof(T) * nq), *k = malloc(sizeof(T) * nk), *v = malloc(sizeof(T) * nk);                  \
        T *dout = malloc(sizeof(T) * nq), *kr = malloc(sizeof(T) * nq), *vr = malloc(sizeof(T) * nq);             \
        T *o1 = malloc(sizeof(T) * nq), *o2 = malloc(sizeof(T) * nq), *l1 = malloc(sizeof(T) * B * H * Sq);       \
        T *l2 = malloc(sizeof(T) * B * H * Sq), *dq1 = malloc(sizeof(T) * nq), *dq2 = malloc(sizeof(T) * nq);     \
        T *dk1 = malloc(sizeof(T) * nk), *dv1 = malloc(sizeof(T) * nk), *dkr = malloc(sizeof(T) * nq);            \
        T *dvr = malloc(sizeof(T) * nq), *dk2 = malloc(sizeof(T) * nk), *dv2 = malloc(sizeof(T) * nk);            \
        for (int64_t i = 0; i < nq; i++) q[i] = (T)(2 * urand() - 1), dout[i] = (T)(2 * urand() - 1);             \
        for (int64_t i = 0; i < nk; i++) k[i] = (T)(2 * urand() - 1), v[i] = (T)(2 * urand() - 1);                \
        for (int64_t i = 0; i < nq; i++) o1[i] = o2[i] = dq1[i] = dq2[i] = (T)NAN;                                \
        for (int64_t i = 0; i < nk; i++) dk1[i] = dv1[i] = dk2[i] = dv2[i] = (T)NAN;                              \
        size_t fb = cpu_attention_fwd_scratch_##S(B, Sq, H, D), bb = cpu_attention_bwd_scratch_##S(B, Sq, H, D);  \
        void *sc = malloc(fb > bb ? fb : bb);                                                                     \
        stg_err err;                                                                                              \
        if (cpu_attention_fwd_##S(q, k, v, NULL, o1, l1, B, Sq, H, Hkv, D, 0.0, sc, fb, &err) ||                  \
            cpu_attention_bwd_##S(q, k, v, NULL, o1, l1, dout, dq1, dk1, dv1, B, Sq, H, Hkv, D, 0.0, sc, bb, &err))  \
            fail_msg("%s", err.msg);                                                                              \
        cpu_repeat_kv_##S(k, kr, B * Sq, Hkv, G, D);                                                              \
        cpu_repeat_kv_##S(v, vr, B * Sq, Hkv, G, D);                                                              \
        if (cpu_attention_fwd_##S(q, kr, vr, NULL, o2, l2, B, Sq, H, H, D, 0.0, sc, fb, &err) ||                  \
            cpu_attention_bwd_##S(q, kr, vr, NULL, o2, l2, dout, dq2, dkr, dvr, B, Sq, H, H, D, 0.0, sc, bb, &err)) \
            fail_msg("%s", err.msg);                                                                              \
        cpu_repeat_kv_bwd_##S(dkr, dk2, B * Sq, Hkv, G, D);                                                       \
        cpu_repeat_kv_bwd_##S(dvr, dv2, B * Sq, Hkv, G, D);                                                       \
        const T *got[5] = {o1, l1, dq1, dk1, dv1}, *want[5] = {o2, l2, dq2, dk2, dv2};                            \
        const int64_t cnt[5] = {nq, B * H * Sq, nq, nk, nk};                                                      \
        const char *nm[5] = {"o", "lse", "dq", "dk", "dv"};                                                       \
        for (int j = 0; j < 5; j++) {                                                                             \
            double m = 0.0, d = 0.0;                                                                              \
            for (int64_t i = 0; i < cnt[j]; i++) {                                                                \
                if (!isfinite((double)got[j][i])) fail_msg(#S " %s[%lld] is not finite", nm[j], (long long)i);    \
                m = fmax(m, fabs((double)want[j][i]));                                                            \
                d = fmax(d, fabs((double)got[j][i] - (double)want[j][i]));                                        \
            }                                                                                                     \
            if (!(d / m < tol))                                                                                   \
                fail_msg(#S " H %lld Hkv %lld D %lld: %s differs from the repeat_kv path by %.3g", (long long)H,  \
                         (long long)Hkv, (long long)D, nm[j], d / m);                                             \
        }                                                                                                         \
        T *all[18] = {q, k, v, dout, kr, vr, o1, o2, l1, l2, dq1, dq2, dk1, dv1, dkr, dvr, dk2, dv2};             \
        for (int j = 0; j < 18; j++) free(all[j]);                                                                \
        free(sc);                                                                                                 \
    }

KERNEL_CHECK(double, f64, 1e-13)
KERNEL_CHECK(float, f32, 1e-5)

static void test_gqa_kernels_match_repeat_kv(void **state) {
    (void)state;
    kernel_check_f64(2, 13, 8, 2, 64);
    kernel_check_f64(1, 70, 8, 1, 128);
    kernel_check_f64(1, 9, 6, 3, 16);
    kernel_check_f32(2, 13, 8, 2, 64);
    kernel_check_f32(1, 70, 8, 1, 128);
}

// repeat_kv itself: head h of the output is head h / n of the input; the backward sums in order.
static void test_repeat_kv(void **state) {
    (void)state;
    enum { R = 3, H = 2, N = 3, D = 4 };
    double x[R * H * D], y[R * H * N * D], dx[R * H * D];
    for (int i = 0; i < R * H * D; i++) x[i] = i + 1;
    cpu_repeat_kv_f64(x, y, R, H, N, D);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H * N; h++)
            for (int d = 0; d < D; d++) assert_true(y[(r * H * N + h) * D + d] == x[(r * H + h / N) * D + d]);
    for (int i = 0; i < R * H * N * D; i++) y[i] = i * 0.5;
    cpu_repeat_kv_bwd_f64(y, dx, R, H, N, D);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                double s = 0.0;
                for (int c = 0; c < N; c++) s += y[(r * H * N + h * N + c) * D + d];
                assert_true(dx[(r * H + h) * D + d] == s);
            }
}

// ---- bad input ----------------------------------------------------------------------------------

static void expect_load_error(const char *yaml, const char *want) {
    stg_step_opts o = rig_opts("m.yaml", STG_PREC_FP32, NULL, 0);
    o.text = yaml;
    o.text_len = strlen(yaml);
    stg_step *s = NULL;
    stg_err err = {{0}};
    assert_int_equal(stg_step_build(&o, &s, &err), -1);
    if (!strstr(err.msg, want)) fail_msg("got '%s', expected '%s'", err.msg, want);
}

static void test_gqa_bad_input(void **state) {
    (void)state;
    expect_load_error("dims: {B: 1, S: 4, D: 8}\n"
                      "inputs: {t: [B, S, i32]}\n"
                      "graph:\n"
                      "  - param q [B, S, 6, D] init=embedding\n"
                      "  - param k [B, S, 4, D] init=embedding\n"
                      "  - o, lse = attention(q, k, k)\n"
                      "  - loss = cross_entropy(reshape(o, shape=[B, S, 48]), t)\n"
                      "loss: loss\n",
                      "m.yaml:6:14: attention: query heads (6) must be a multiple of kv heads (4)");
    expect_load_error("dims: {B: 1, S: 4, D: 8}\n"
                      "inputs: {t: [B, S, i32]}\n"
                      "graph:\n"
                      "  - param q [B, S, 4, D] init=embedding\n"
                      "  - param k [B, S, 2, 16] init=embedding\n"
                      "  - o, lse = attention(q, k, k)\n"
                      "  - loss = cross_entropy(reshape(o, shape=[B, S, 32]), t)\n"
                      "loss: loss\n",
                      "must match 'q' [1, 4, 4, 8] f32 in dtype, batch, sequence and head dim");
    expect_load_error("dims: {B: 1, S: 4, D: 8}\n"
                      "inputs: {t: [B, S, i32]}\n"
                      "graph:\n"
                      "  - param q [B, S, 2, D] init=embedding\n"
                      "  - kr = repeat_kv(q, n=0)\n"
                      "  - loss = cross_entropy(reshape(kr, shape=[B, S, 16]), t)\n"
                      "loss: loss\n",
                      "m.yaml:5:10: repeat_kv: n must be at least 1");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_kv),
        cmocka_unit_test(test_gqa_kernels_match_repeat_kv),
        cmocka_unit_test(test_gqa_bad_input),
        cmocka_unit_test(test_gqa_autodiff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
