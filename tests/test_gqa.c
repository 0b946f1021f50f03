// Grouped-query attention on the CPU reference: attention(q, k, v) with k, v of fewer heads than q
// (query head h reads kv head h / G), and repeat_kv, the written-out path's head expansion.
// - finite differences of the loss through autodiff in fp64 (q, k, v and a head weight are the
//   parameters), at 4:1 and 8:1 groups, head dims 64 and 128, S = 13 (not a multiple of 64), for
//   the fused op, the fused op over repeat_kv copies, and the written-out softmax path;
// - the three give the same loss and gradients (to 1e-11);
// - the kernels: attention(GQA) against attention(q, repeat_kv(k), repeat_kv(v)) forward and
//   backward (dk = repeat_kv_bwd of the expanded dk) in f64 and f32;
// - bad input: query heads not a multiple of kv heads (file:line:col), repeat_kv n < 1;
// - packed documents: attention with docs against the written-out softmax with an explicit
//   block-diagonal causal mask (forward) and finite differences (backward), through autodiff in
//   fp64 with GQA; the data path (document starts, separators' targets ignored) and stg train's
//   bad input; cross_entropy's ignored targets.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/loader.h"
#include "ops/attention/kernels.h"
#include "ops/layout/kernels.h"
#include "ops/loss/kernels.h"
#include "runtime/data.h"
#include "tests/rig.h"
#include "tests/testutil.h"

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
            // central differences of a loss near 1.6 carry ~1e-11 of rounding: relative to at least 1e-4
            double rel = fabs(fd - g) / fmax(1e-4, fmax(fabs(fd), fabs(g)));
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

// ---- cross-entropy with ignored targets (-1; --doc-loss-mask) ---------------------------------------
//
// Equals the cross-entropy of the kept rows alone; ignored rows get a zero gradient; all rows
// ignored: loss 0; other negative targets are refused.
static void test_cross_entropy_ignore(void **state) {
    (void)state;
    enum { R = 9, V = 7 };
    double x[R * V], lse[R], loss, d[R * V], xk[R * V], lk[R], lossk, dk[R * V];
    int32_t t[R], tk[R];
    int nk = 0;
    for (int i = 0; i < R * V; i++) x[i] = 4 * urand() - 2;
    for (int r = 0; r < R; r++) {
        t[r] = r % 3 == 1 ? -1 : (int32_t)((r * 5) % V);
        if (t[r] < 0) continue;
        memcpy(xk + nk * V, x + r * V, sizeof(double) * V);
        tk[nk++] = t[r];
    }
    stg_err err;
    if (cpu_cross_entropy_fwd_f64(x, t, &loss, lse, R, V, &err) || cpu_cross_entropy_bwd_f64(x, t, lse, d, R, V, &err) ||
        cpu_cross_entropy_fwd_f64(xk, tk, &lossk, lk, nk, V, &err) || cpu_cross_entropy_bwd_f64(xk, tk, lk, dk, nk, V, &err))
        fail_msg("%s", err.msg);
    assert_true(fabs(loss - lossk) < 1e-14 * fabs(lossk));
    for (int r = 0, k = 0; r < R; r++)
        for (int j = 0; j < V; j++) {
            if (t[r] < 0) assert_true(d[r * V + j] == 0.0);
            else assert_true(fabs(d[r * V + j] - dk[k * V + j]) < 1e-15);
            if (t[r] >= 0 && j == V - 1) k++;
        }
    for (int r = 0; r < R; r++) t[r] = -1;
    if (cpu_cross_entropy_fwd_f64(x, t, &loss, lse, R, V, &err) || cpu_cross_entropy_bwd_f64(x, t, lse, d, R, V, &err))
        fail_msg("%s", err.msg);
    assert_true(loss == 0.0);
    for (int i = 0; i < R * V; i++) assert_true(d[i] == 0.0);
    t[4] = -2;
    assert_int_equal(cpu_cross_entropy_fwd_f64(x, t, &loss, lse, R, V, &err), -1);
    assert_non_null(strstr(err.msg, "target -2 at position 4 is outside [0, 7)"));
}

// ---- packed documents -------------------------------------------------------------------------------

// Document starts of rows of random documents (lengths 1 .. 2 mean), as the data path makes them.
static void make_docs(int32_t *d, int64_t B, int64_t S, int mean) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0, start = 0, end = 0; s < S; s++) {
            if (s == end) {
                start = s;
                end = s + 1 + (int64_t)(urand() * 2 * mean);
            }
            d[b * S + s] = (int32_t)start;
        }
}

// The written-out reference: scores, an explicit (S, S) mask per row (query i sees key j iff
// docs[i] <= j <= i: block-diagonal and causal), softmax, weighted sum; in double.
static void masked_naive(const double *q, const double *k, const double *v, const int32_t *docs, double *o, double *lse,
                         int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D) {
    const int64_t G = H / Hkv;
    unsigned char *mask = malloc((size_t)(S * S));
    double *sc = malloc(sizeof(double) * (size_t)S);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++) mask[i * S + j] = docs[b * S + i] <= j && j <= i;
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < S; j++) {
                    sc[j] = -INFINITY;
                    if (!mask[i * S + j]) continue;
                    double x = 0.0;
                    for (int64_t d = 0; d < D; d++) x += q[((b * S + i) * H + h) * D + d] * k[((b * S + j) * Hkv + h / G) * D + d];
                    sc[j] = x / sqrt((double)D);
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j < S; j++) sum += mask[i * S + j] ? exp(sc[j] - mx) : 0.0;
                lse[(b * H + h) * S + i] = mx + log(sum);
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < S; j++)
                        if (mask[i * S + j]) acc += exp(sc[j] - mx) / sum * v[((b * S + j) * Hkv + h / G) * D + d];
                    o[((b * S + i) * H + h) * D + d] = acc;
                }
            }
    }
    free(mask);
    free(sc);
}

static void test_docs_match_masked_naive(void **state) {
    (void)state;
    enum { B = 2, S = 37, H = 4, HK = 2, D = 8 };
    const int64_t nq = B * S * H * D, nk = B * S * HK * D;
    double *q = malloc(sizeof(double) * nq), *k = malloc(sizeof(double) * nk), *v = malloc(sizeof(double) * nk);
    double *o = malloc(sizeof(double) * nq), *o2 = malloc(sizeof(double) * nq), *lse = malloc(sizeof(double) * B * H * S);
    double *lse2 = malloc(sizeof(double) * B * H * S), *dout = malloc(sizeof(double) * nq), *dq = malloc(sizeof(double) * nq);
    double *dk = malloc(sizeof(double) * nk), *dv = malloc(sizeof(double) * nk);
    int32_t docs[B * S];
    for (int64_t i = 0; i < nq; i++) q[i] = 4 * urand() - 2, dout[i] = 2 * urand() - 1;
    for (int64_t i = 0; i < nk; i++) k[i] = 4 * urand() - 2, v[i] = 2 * urand() - 1;
    make_docs(docs, B, S, 6);
    size_t fb = cpu_attention_fwd_scratch_f64(B, S, H, D), bb = cpu_attention_bwd_scratch_f64(B, S, H, D);
    void *sc = malloc(fb > bb ? fb : bb);
    stg_err err;
    if (cpu_attention_fwd_f64(q, k, v, docs, o, lse, B, S, H, HK, D, 0.0, sc, fb, &err) ||
        cpu_attention_bwd_f64(q, k, v, docs, o, lse, dout, dq, dk, dv, B, S, H, HK, D, 0.0, sc, bb, &err))
        fail_msg("%s", err.msg);
    masked_naive(q, k, v, docs, o2, lse2, B, S, H, HK, D);
    double e1 = max_rel(o, o2, nq), e2 = max_rel(lse, lse2, B * H * S);
    if (!(e1 < 1e-13 && e2 < 1e-13)) fail_msg("docs: o differs from the masked naive path by %.3g, lse by %.3g", e1, e2);
    // backward: central differences of L = sum(dout . o) through the masked naive path
    double *xs[3] = {q, k, v}, *gs[3] = {dq, dk, dv};
    const int64_t ns[3] = {nq, nk, nk};
    for (int t = 0; t < 3; t++)
        for (int c = 0; c < 12; c++) {
            int64_t i = (int64_t)(urand() * (double)ns[t]);
            double orig = xs[t][i], h = 1e-6, lp = 0.0, lm = 0.0;
            xs[t][i] = orig + h;
            masked_naive(q, k, v, docs, o2, lse2, B, S, H, HK, D);
            for (int64_t j = 0; j < nq; j++) lp += dout[j] * o2[j];
            xs[t][i] = orig - h;
            masked_naive(q, k, v, docs, o2, lse2, B, S, H, HK, D);
            for (int64_t j = 0; j < nq; j++) lm += dout[j] * o2[j];
            xs[t][i] = orig;
            double fd = (lp - lm) / (2 * h), g = gs[t][i];
            if (!(fabs(fd - g) <= 1e-7 * fmax(1.0, fabs(fd))))
                fail_msg("docs: d/d %s[%lld]: finite difference %.12g, backward %.12g", t == 0 ? "q" : t == 1 ? "k" : "v",
                         (long long)i, fd, g);
        }
    // bad document starts are refused
    docs[5] = 7;
    assert_int_equal(cpu_attention_fwd_f64(q, k, v, docs, o, lse, B, S, H, HK, D, 0.0, sc, fb, &err), -1);
    assert_non_null(strstr(err.msg, "docs[0][5] = 7 is not a document start at or before 5"));
    double *all[11] = {q, k, v, o, o2, lse, lse2, dout, dq, dk, dv};
    for (int i = 0; i < 11; i++) free(all[i]);
    free(sc);
}

// The model with docs: fp64 finite differences through autodiff (GQA 4:1, head dim 64, S 70).
static const char *docs_model = "name: gqa-docs\n"
                                "dims: {B: 2, S: 70, Hq: 8, Hkv: 2, D: 64, V: 5, N: B * S, HD: Hq * D}\n"
                                "inputs:\n"
                                "  targets: [N, i32]\n"
                                "  docs: [B, S, i32]\n"
                                "graph:\n"
                                "  - param q [B, S, Hq, D] init=embedding\n"
                                "  - param k [B, S, Hkv, D] init=embedding\n"
                                "  - param v [B, S, Hkv, D] init=embedding\n"
                                "  - param w [V, HD] init=linear\n"
                                "  - o, lse = attention(q, k, v, docs)\n"
                                "  - logits = linear(reshape(o, shape=[N, HD]), w)\n"
                                "  - loss = cross_entropy(logits, targets)\n"
                                "loss: loss\n";

static void test_docs_autodiff(void **state) {
    (void)state;
    stg_step_opts o = rig_opts("docs.yaml", STG_PREC_FP64, NULL, 0);
    o.text = docs_model;
    o.text_len = strlen(docs_model);
    rig r;
    rig_open(&r, rig_step(&o), &(rig_cfg){.init_seed = 3, .feed_seed = -1});
    int t = graph_find_tensor(r.g, "targets"), d = graph_find_tensor(r.g, "docs");
    assert_true(t >= 0 && d >= 0);
    int32_t tg[2 * 70], dc[2 * 70];
    for (int i = 0; i < 2 * 70; i++) tg[i] = (i * 3 + 1) % 5;
    make_docs(dc, 2, 70, 12);
    stg_err err;
    if (rt_exec_write(r.e, t, tg, sizeof tg, &err) || rt_exec_write(r.e, d, dc, sizeof dc, &err)) fail_msg("%s", err.msg);
    gqa_run run;
    gqa_grads(&r, &run);
    gqa_fd(&r, &run, 6, "docs");
    gqa_free(&run);
    rig_close(&r);
}

// The data path: rows of a token file packed into documents after each separator.
static void test_feed_docs(void **state) {
    (void)state;
    char path[] = "/tmp/stg_test_gqa_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    uint16_t toks[600];
    for (int i = 0; i < 600; i++) toks[i] = (uint16_t)(urand() < 0.1 ? 0 : 1 + (int)(urand() * 60));
    assert_int_equal(write(fd, toks, sizeof toks), (ssize_t)sizeof toks);
    close(fd);
    const char *sets[] = {RIG_TINY, "batch=3", "ctx=40", "docs=on"};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, sets, 8);
    rig r;
    rt_exec_opts eo = {.separate = true}; // the inputs keep their own memory: read back after a run
    rig_open(&r, rig_step(&o), &(rig_cfg){.eo = &eo, .init_seed = 1, .feed_seed = -1});
    stg_err err;
    rt_feed *f;
    if (rt_feed_new(r.g, path, 4, 1, &f, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_feed_docs(f, 64, false, &err), -1);
    assert_non_null(strstr(err.msg, "the document separator 64 is outside the vocabulary [0, 64)"));
    for (int mask = 0; mask < 2; mask++) {
        if (rt_feed_docs(f, 0, mask, &err)) fail_msg("%s", err.msg);
        rt_rng rng;
        rt_rng_seed(&rng, 9);
        if (rt_feed_next(f, r.e, &rng, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err)) fail_msg("%s", err.msg);
        int32_t tok[3 * 40], tgt[3 * 40], dc[3 * 40];
        if (rt_exec_read(r.e, graph_find_tensor(r.g, "tokens"), tok, sizeof tok, &err) ||
            rt_exec_read(r.e, graph_find_tensor(r.g, "targets"), tgt, sizeof tgt, &err) ||
            rt_exec_read(r.e, graph_find_tensor(r.g, "docs"), dc, sizeof dc, &err))
            fail_msg("%s", err.msg);
        int seps = 0;
        for (int b = 0; b < 3; b++)
            for (int p = 0, start = 0; p < 40; p++) {
                assert_int_equal(dc[b * 40 + p], start);
                if (tok[b * 40 + p] == 0) {
                    start = p + 1;
                    seps++;
                    assert_int_equal(tgt[b * 40 + p] == -1, mask);
                } else {
                    assert_true(tgt[b * 40 + p] >= 0);
                }
            }
        assert_true(seps > 0);
        rt_exec_results res;
        if (rt_exec_run_results(r.e, RT_PHASE_ALL, &res, &err)) fail_msg("%s", err.msg);
        assert_true(isfinite(res.loss));
    }
    rt_feed_free(f);
    rig_close(&r);
    const char *off[] = {RIG_TINY, "batch=3", "ctx=40"}; // docs=off (the default): no docs input
    o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, off, 7);
    stg_step *st = rig_step(&o);
    assert_true(graph_find_tensor(st->g, "docs") < 0);
    stg_step_free(st);
    // stg train: the separator outside the vocabulary, a model without docs: exit 2 with a message
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "%s train %s --data %s --doc-sep 300 --steps 1 --device cpu 2>&1", STG_BINARY, MODEL("tiny.yaml"),
             path);
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--doc-sep 300 is outside the model's vocabulary [0, 256)"));
    snprintf(cmd, sizeof cmd, "%s train %s --data %s --doc-sep 0 --attention naive --steps 1 --device cpu 2>&1", STG_BINARY,
             MODEL("tiny.yaml"), path);
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "no op of the model reads its input 'docs'"));
    snprintf(cmd, sizeof cmd, "%s train %s --doc-sep 1 --steps 1 --device cpu 2>&1", STG_BINARY, MODEL("toy.yaml"));
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "'docs' is neither a dim nor an option of this model"));
    unlink(path);
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
    // inputs declared under a condition ({if: option == value, is: [dims..., dtype]})
    expect_load_error("dims: {B: 1, S: 4}\n"
                      "options: {docs: [off, on]}\n"
                      "inputs: {t: [B, S, i32], docs: {if: docs == on, iz: [B, S, i32]}}\n"
                      "graph: []\n"
                      "loss: t\n",
                      "m.yaml:3:49: unknown key 'iz'; expected if, is");
    expect_load_error("dims: {B: 1, S: 4}\n"
                      "inputs: {t: [B, S, i32], docs: {if: docs == on, is: [B, S, i32]}}\n"
                      "graph: []\n"
                      "loss: t\n",
                      "m.yaml:2:37: 'docs' is not an option");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_kv),
        cmocka_unit_test(test_gqa_kernels_match_repeat_kv),
        cmocka_unit_test(test_gqa_bad_input),
        cmocka_unit_test(test_cross_entropy_ignore),
        cmocka_unit_test(test_docs_match_masked_naive),
        cmocka_unit_test(test_docs_autodiff),
        cmocka_unit_test(test_feed_docs),
        cmocka_unit_test(test_gqa_autodiff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
