// Numerics of the CPU reference kernels (ops/cpu/kernels.h), called directly, mostly in float64:
// finite-difference checks of every differentiable op against its backward, f32 against f64,
// fused attention against its naive composition, cross-entropy against an independent
// log-sum-exp, AdamW against a hand-computed example, and the layout ops. Kernel outputs are
// poisoned with NaN before every call, so an element a kernel forgets to write fails the test.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops/cpu/cpu.h"
#include "ops/cpu/kernels.h"

// ---- helpers: a local deterministic RNG (splitmix64) and buffers ----------------------------

typedef struct { uint64_t s; } test_rng;

static uint64_t rng_u64(test_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unif(test_rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; } // [0, 1)

// A random value in +-[0.1, 1.1): never zero, never near a kink of relu.
static double rng_val(test_rng *r) {
    double m = 0.1 + rng_unif(r);
    return (rng_u64(r) & 1) ? m : -m;
}

static double *buf_nan(int64_t n) {
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static void poison(double *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

static double *buf_rand(test_rng *r, int64_t n) {
    double *p = buf_nan(n);
    for (int64_t i = 0; i < n; i++) p[i] = rng_val(r);
    return p;
}

static double *buf_copy(const double *x, int64_t n) {
    double *p = buf_nan(n);
    memcpy(p, x, (size_t)n * sizeof(double));
    return p;
}

// ---- scratch: the kernels that need working memory take it from the caller --------------------
//
// These wrappers keep the kernels' calls short in the tests: each gives its kernel a scratch
// buffer of exactly the size the kernel asks for (so ASan sees any use past it), then frees it.

static void *scratch_new(size_t n) {
    if (n == 0) return NULL;
    void *p = malloc(n);
    assert_non_null(p);
    return p;
}

#define T_SCRATCH_WRAPPERS(T, S)                                                                   \
    static int t_matmul_##S(const T *A, const T *B, T *C, int64_t batch, int64_t m, int64_t n,     \
                            int64_t k, int ta, int tb, int b_batched, stg_err *err) {              \
        size_t nb = cpu_matmul_scratch_##S(batch, m, n, k, ta, tb, b_batched);                     \
        void *sc = scratch_new(nb);                                                                \
        int rc = cpu_matmul_##S(A, B, C, batch, m, n, k, ta, tb, b_batched, 0, sc, nb, err);       \
        free(sc);                                                                                  \
        return rc;                                                                                 \
    }                                                                                              \
    static int t_attention_fwd_##S(const T *q, const T *k, const T *v, T *o, T *lse, int64_t B,    \
                                   int64_t Sq, int64_t H, int64_t Dh, double scale, stg_err *err) { \
        size_t nb = cpu_attention_fwd_scratch_##S(B, Sq, H, Dh);                                   \
        void *sc = scratch_new(nb);                                                                \
        int rc = cpu_attention_fwd_##S(q, k, v, NULL, o, lse, B, Sq, H, H, Dh, scale, sc, nb, err);\
        free(sc);                                                                                  \
        return rc;                                                                                 \
    }                                                                                              \
    static int t_attention_bwd_##S(const T *q, const T *k, const T *v, const T *o, const T *lse,   \
                                   const T *dout, T *dq, T *dk, T *dv, int64_t B, int64_t Sq,      \
                                   int64_t H, int64_t Dh, double scale, stg_err *err) {            \
        size_t nb = cpu_attention_bwd_scratch_##S(B, Sq, H, Dh);                                   \
        void *sc = scratch_new(nb);                                                                \
        int rc = cpu_attention_bwd_##S(q, k, v, NULL, o, lse, dout, dq, dk, dv, B, Sq, H, H, Dh,   \
                                       scale, sc, nb, err);                                        \
        free(sc);                                                                                  \
        return rc;                                                                                 \
    }                                                                                              \
    static int t_embedding_bwd_##S(const int32_t *tok, const T *dy, T *dW, int64_t n, int64_t V,   \
                                   int64_t D, stg_err *err) {                                      \
        size_t nb = cpu_embedding_bwd_scratch_##S(n, V, D);                                        \
        void *sc = scratch_new(nb);                                                                \
        int rc = cpu_embedding_bwd_##S(tok, dy, dW, n, V, D, 0, sc, nb, err);                      \
        free(sc);                                                                                  \
        return rc;                                                                                 \
    }

T_SCRATCH_WRAPPERS(float, f32)
T_SCRATCH_WRAPPERS(double, f64)
#undef T_SCRATCH_WRAPPERS

// cpu_op_run with exactly cpu_op_scratch_bytes of scratch.
static int t_op_run(const stg_graph *g, int op, void *const *data, stg_err *err) {
    size_t nb = cpu_op_scratch_bytes(g, op);
    void *sc = scratch_new(nb);
    int rc = cpu_op_run(g, op, data, sc, nb, err);
    free(sc);
    return rc;
}

static void check_finite(const double *x, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) fail_msg("%s: element %lld is %g (not written, or not finite)", what, (long long)i, x[i]);
}

// max |a - b| / max(max |b|, floor)
static double rel_maxnorm(const double *a, const double *b, int64_t n, double floor) {
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

static void assert_close(const double *got, const double *want, int64_t n, double tol, const char *what) {
    check_finite(got, n, what);
    double e = rel_maxnorm(got, want, n, 1e-300);
    if (!(e <= tol)) fail_msg("%s: relative max error %.3g > %.3g", what, e, tol);
}

// ---- finite-difference gradient checks --------------------------------------------------------
//
// Each case is an op with differentiable inputs in[0..n_in) (random, nonzero) and a primary
// output y. With a random upstream gradient dy, L = sum dy . y; the op's backward kernel(s) give
// dL/din, checked against central differences (L(x + eps) - L(x - eps)) / 2 eps, eps = 1e-6, per
// element: |fd - bwd| / max(|fd|, |bwd|, 0.1) < 1e-6. (The 0.1 floor keeps rounding noise in L,
// about 1e-16 |L| / eps, from counting as error on gradients near zero.)

#define FD_MAX_IN 4

typedef struct fd_case fd_case;
struct fd_case {
    const char *name;
    int n_in;
    int64_t in_n[FD_MAX_IN];
    int64_t out_n;
    int64_t d[6];         // sizes, meaning per op
    int f[4];             // flags, meaning per op
    double attr;          // eps, theta, fill, scale or factor
    const int32_t *idx;   // tokens or targets
    void (*fwd)(const fd_case *c, double *const *in, double *y);
    void (*bwd)(const fd_case *c, double *const *in, const double *dy, double *const *din);
};

static long double fd_loss(const double *dy, const double *y, int64_t n) {
    long double s = 0;
    for (int64_t i = 0; i < n; i++) s += (long double)dy[i] * (long double)y[i];
    return s;
}

static void fd_check(const fd_case *c, uint64_t seed) {
    test_rng r = {seed};
    double *in[FD_MAX_IN] = {0}, *din[FD_MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        in[i] = buf_rand(&r, c->in_n[i]);
        din[i] = buf_nan(c->in_n[i]);
    }
    double *dy = buf_rand(&r, c->out_n), *y = buf_nan(c->out_n);
    char what[160];
    c->fwd(c, in, y);
    snprintf(what, sizeof what, "%s forward", c->name);
    check_finite(y, c->out_n, what);
    c->bwd(c, in, dy, din);
    for (int i = 0; i < c->n_in; i++) {
        snprintf(what, sizeof what, "%s backward, gradient of input %d", c->name, i);
        check_finite(din[i], c->in_n[i], what);
    }
    const double eps = 1e-6;
    double worst = 0;
    for (int i = 0; i < c->n_in; i++) {
        for (int64_t j = 0; j < c->in_n[i]; j++) {
            double x0 = in[i][j];
            in[i][j] = x0 + eps;
            poison(y, c->out_n);
            c->fwd(c, in, y);
            check_finite(y, c->out_n, c->name);
            long double lp = fd_loss(dy, y, c->out_n);
            in[i][j] = x0 - eps;
            poison(y, c->out_n);
            c->fwd(c, in, y);
            check_finite(y, c->out_n, c->name);
            long double lm = fd_loss(dy, y, c->out_n);
            in[i][j] = x0;
            double fd = (double)((lp - lm) / (2.0L * eps)), bw = din[i][j];
            double rel = fabs(fd - bw) / fmax(fmax(fabs(fd), fabs(bw)), 0.1);
            if (!(rel < 1e-6))
                fail_msg("%s: d/d input %d [%lld]: finite difference %.12g, backward %.12g (rel %.3g)", c->name, i,
                         (long long)j, fd, bw, rel);
            worst = fmax(worst, rel);
        }
    }
    for (int i = 0; i < c->n_in; i++) {
        free(in[i]);
        free(din[i]);
    }
    free(dy);
    free(y);
}

// embedding: in W (V, D); tokens idx (n). d = {n, V, D}
static void fd_embedding_fwd(const fd_case *c, double *const *in, double *y) {
    assert_int_equal(cpu_embedding_fwd_f64(c->idx, in[0], y, c->d[0], c->d[1], c->d[2], NULL), 0);
}
static void fd_embedding_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    assert_int_equal(t_embedding_bwd_f64(c->idx, dy, din[0], c->d[0], c->d[1], c->d[2], NULL), 0);
}

// linear: in x (rows, in), W (out, in). d = {rows, in, out}. Backward as the registry emits it:
// dx = dy W (matmul), dW = dy^T x (matmul, ta).
static void fd_linear_fwd(const fd_case *c, double *const *in, double *y) {
    assert_int_equal(t_matmul_f64(in[0], in[1], y, 1, c->d[0], c->d[2], c->d[1], 0, 1, 0, NULL), 0);
}
static void fd_linear_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    assert_int_equal(t_matmul_f64(dy, in[1], din[0], 1, c->d[0], c->d[1], c->d[2], 0, 0, 0, NULL), 0);
    assert_int_equal(t_matmul_f64(dy, in[0], din[1], 1, c->d[2], c->d[1], c->d[0], 1, 0, 0, NULL), 0);
}

// linear with a bias: in x (rows, in), W (out, in), b (out). d = {rows, in, out}. db = the sum of
// dy's rows (sum_rows).
static void fd_linear_bias_fwd(const fd_case *c, double *const *in, double *y) {
    fd_linear_fwd(c, in, y);
    cpu_add_bias_f64(y, in[2], c->d[0], c->d[2]);
}
static void fd_linear_bias_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    fd_linear_bwd(c, in, dy, din);
    cpu_sum_rows_f64(dy, din[2], c->d[0], c->d[2]);
}

// pos_embedding: in x (outer, S, D), W (P, D). d = {outer, S, D, P}. dx = dy, dW rows past S zero.
static void fd_pos_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_pos_embedding_fwd_f64(in[0], in[1], y, c->d[0], c->d[1], c->d[2]);
}
static void fd_pos_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_copy_f64(dy, din[0], c->in_n[0]);
    cpu_pos_embedding_bwd_f64(dy, din[1], c->d[0], c->d[1], c->d[3], c->d[2]);
}

// split then weighted by dy (the three outputs side by side in y): in x (rows, 3m). d = {rows, m}.
// Backward: concat of the parts' gradients.
static void fd_split_fwd(const fd_case *c, double *const *in, double *y) {
    int64_t part = c->d[0] * c->d[1];
    double *ys[3] = {y, y + part, y + 2 * part};
    cpu_split_f64(in[0], ys, 3, c->d[0], c->d[1]);
}
static void fd_split_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    int64_t part = c->d[0] * c->d[1];
    const double *ds[3] = {dy, dy + part, dy + 2 * part};
    cpu_concat_f64(ds, din[0], 3, c->d[0], c->d[1]);
}

// matmul: in A, B. d = {batch, m, n, k}, f = {ta, tb, B broadcast}. Backward as the registry's
// rule: dop(A) = dC op(B)^T (transposed back when ta); dB = op(A)^T dC, or dC^T op(A) when tb,
// with A's batch flattened into rows when B is broadcast.
static void fd_matmul_fwd(const fd_case *c, double *const *in, double *y) {
    assert_int_equal(t_matmul_f64(in[0], in[1], y, c->d[0], c->d[1], c->d[2], c->d[3], c->f[0], c->f[1], !c->f[2], NULL), 0);
}
static void fd_matmul_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    int64_t bt = c->d[0], m = c->d[1], n = c->d[2], k = c->d[3];
    int ta = c->f[0], tb = c->f[1], bc = c->f[2];
    // dop(A) (batch, m, k) = dC (batch, m, n) . op(B)^T
    double *dA = buf_nan(bt * m * k);
    assert_int_equal(t_matmul_f64(dy, in[1], dA, bt, m, k, n, 0, !tb, !bc, NULL), 0);
    if (ta) {
        int64_t s[3] = {bt, m, k};
        cpu_transpose_f64(dA, din[0], 3, s, 1, 2);
    } else {
        memcpy(din[0], dA, (size_t)(bt * m * k) * sizeof(double));
    }
    free(dA);
    if (!bc) {
        if (!tb) // dB (k, n) = op(A)^T dC
            assert_int_equal(t_matmul_f64(in[0], dy, din[1], bt, k, n, m, !ta, 0, 1, NULL), 0);
        else // dB (n, k) = dC^T op(A)
            assert_int_equal(t_matmul_f64(dy, in[0], din[1], bt, n, k, m, 1, ta, 1, NULL), 0);
    } else {
        double *aop = buf_nan(bt * m * k); // op(A) (batch, m, k) flattened to (batch m, k)
        if (ta) {
            int64_t s[3] = {bt, k, m};
            cpu_transpose_f64(in[0], aop, 3, s, 1, 2);
        } else {
            memcpy(aop, in[0], (size_t)(bt * m * k) * sizeof(double));
        }
        if (!tb)
            assert_int_equal(t_matmul_f64(aop, dy, din[1], 1, k, n, bt * m, 1, 0, 0, NULL), 0);
        else
            assert_int_equal(t_matmul_f64(dy, aop, din[1], 1, n, k, bt * m, 1, 0, 0, NULL), 0);
        free(aop);
    }
}

// rmsnorm: in x (rows, D), w (D). d = {rows, D}
static void fd_rmsnorm_fwd(const fd_case *c, double *const *in, double *y) {
    double *rstd = buf_nan(c->d[0]);
    cpu_rmsnorm_fwd_f64(in[0], in[1], y, rstd, c->d[0], c->d[1], c->attr);
    check_finite(rstd, c->d[0], "rmsnorm rstd");
    free(rstd);
}
static void fd_rmsnorm_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    double *y = buf_nan(c->d[0] * c->d[1]), *rstd = buf_nan(c->d[0]);
    cpu_rmsnorm_fwd_f64(in[0], in[1], y, rstd, c->d[0], c->d[1], c->attr);
    cpu_rmsnorm_bwd_f64(in[0], in[1], rstd, dy, din[0], din[1], c->d[0], c->d[1]);
    free(y);
    free(rstd);
}

// layernorm: in x (rows, D), w (D), b (D). d = {rows, D}
static void fd_layernorm_fwd(const fd_case *c, double *const *in, double *y) {
    double *st = buf_nan(2 * c->d[0]);
    cpu_layernorm_fwd_f64(in[0], in[1], in[2], y, st, c->d[0], c->d[1], c->attr);
    check_finite(st, 2 * c->d[0], "layernorm stats");
    free(st);
}
static void fd_layernorm_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    double *y = buf_nan(c->d[0] * c->d[1]), *st = buf_nan(2 * c->d[0]);
    cpu_layernorm_fwd_f64(in[0], in[1], in[2], y, st, c->d[0], c->d[1], c->attr);
    cpu_layernorm_bwd_f64(in[0], in[1], st, dy, din[0], din[1], din[2], c->d[0], c->d[1]);
    free(y);
    free(st);
}

// rope: in x (outer, S, H, Dh). d = {outer, S, H, Dh}, f = {inverse}; backward: the other way.
static void fd_rope_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_rope_f64(in[0], y, c->d[0], c->d[1], c->d[2], c->d[3], c->attr, c->f[0]);
}
static void fd_rope_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_rope_f64(dy, din[0], c->d[0], c->d[1], c->d[2], c->d[3], c->attr, !c->f[0]);
}

// causal_mask: in x (outer, Sq, Sk). d = {outer, Sq, Sk}; forward fills a finite constant (so
// L is finite); backward is the mask with fill 0.
static void fd_mask_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_causal_mask_f64(in[0], y, c->d[0], c->d[1], c->d[2], c->attr);
}
static void fd_mask_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_causal_mask_f64(dy, din[0], c->d[0], c->d[1], c->d[2], 0.0);
}

// softmax: in x (rows, N). d = {rows, N}; backward from the output y.
static void fd_softmax_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_softmax_fwd_f64(in[0], y, c->d[0], c->d[1]);
}
static void fd_softmax_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    double *y = buf_nan(c->d[0] * c->d[1]);
    cpu_softmax_fwd_f64(in[0], y, c->d[0], c->d[1]);
    cpu_softmax_bwd_f64(y, dy, din[0], c->d[0], c->d[1]);
    free(y);
}

// attention: in q, k, v (B, S, H, Dh). d = {B, S, H, Dh}
static void fd_attention_fwd(const fd_case *c, double *const *in, double *y) {
    double *lse = buf_nan(c->d[0] * c->d[2] * c->d[1]);
    assert_int_equal(t_attention_fwd_f64(in[0], in[1], in[2], y, lse, c->d[0], c->d[1], c->d[2], c->d[3], c->attr, NULL), 0);
    check_finite(lse, c->d[0] * c->d[2] * c->d[1], "attention lse");
    free(lse);
}
static void fd_attention_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    int64_t n = c->d[0] * c->d[1] * c->d[2] * c->d[3];
    double *o = buf_nan(n), *lse = buf_nan(c->d[0] * c->d[2] * c->d[1]);
    assert_int_equal(t_attention_fwd_f64(in[0], in[1], in[2], o, lse, c->d[0], c->d[1], c->d[2], c->d[3], c->attr, NULL), 0);
    assert_int_equal(t_attention_bwd_f64(in[0], in[1], in[2], o, lse, dy, din[0], din[1], din[2], c->d[0], c->d[1],
                                           c->d[2], c->d[3], c->attr, NULL),
                     0);
    free(o);
    free(lse);
}

// elementwise: n = in_n[0]
static void fd_silu_fwd(const fd_case *c, double *const *in, double *y) { cpu_silu_fwd_f64(in[0], y, c->in_n[0]); }
static void fd_silu_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_silu_bwd_f64(in[0], dy, din[0], c->in_n[0]);
}
static void fd_gelu_fwd(const fd_case *c, double *const *in, double *y) { cpu_gelu_fwd_f64(in[0], y, c->in_n[0]); }
static void fd_gelu_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_gelu_bwd_f64(in[0], dy, din[0], c->in_n[0]);
}
static void fd_relu_fwd(const fd_case *c, double *const *in, double *y) { cpu_relu_fwd_f64(in[0], y, c->in_n[0]); }
static void fd_relu_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    double *y = buf_nan(c->in_n[0]);
    cpu_relu_fwd_f64(in[0], y, c->in_n[0]); // relu_bwd reads the output
    cpu_relu_bwd_f64(y, dy, din[0], c->in_n[0]);
    free(y);
}
static void fd_swiglu_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_swiglu_fwd_f64(in[0], in[1], y, c->in_n[0]);
}
static void fd_swiglu_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_swiglu_bwd_f64(in[0], in[1], dy, din[0], din[1], c->in_n[0]);
}
static void fd_mul_fwd(const fd_case *c, double *const *in, double *y) { cpu_mul_f64(in[0], in[1], y, c->in_n[0]); }
static void fd_mul_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_mul_f64(dy, in[1], din[0], c->in_n[0]); // da = dy b, db = dy a (the registry's rule)
    cpu_mul_f64(dy, in[0], din[1], c->in_n[0]);
}
static void fd_add_fwd(const fd_case *c, double *const *in, double *y) { cpu_add_f64(in[0], in[1], y, c->in_n[0]); }
static void fd_add_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_copy_f64(dy, din[0], c->in_n[0]); // da = db = dy
    cpu_copy_f64(dy, din[1], c->in_n[0]);
}
static void fd_scale_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_scale_f64(in[0], y, c->in_n[0], c->attr);
}
static void fd_scale_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_scale_f64(dy, din[0], c->in_n[0], c->attr);
}
static void fd_reshape_fwd(const fd_case *c, double *const *in, double *y) { cpu_copy_f64(in[0], y, c->in_n[0]); }
static void fd_reshape_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    cpu_copy_f64(dy, din[0], c->in_n[0]);
}

// transpose: in x with shape d[0..f[0]), swapping f[1] and f[2]; backward: the same swap of dy.
static void fd_transpose_fwd(const fd_case *c, double *const *in, double *y) {
    cpu_transpose_f64(in[0], y, c->f[0], c->d, c->f[1], c->f[2]);
}
static void fd_transpose_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    int64_t s[6];
    memcpy(s, c->d, sizeof s);
    s[c->f[1]] = c->d[c->f[2]];
    s[c->f[2]] = c->d[c->f[1]];
    cpu_transpose_f64(dy, din[0], c->f[0], s, c->f[1], c->f[2]);
}

// cross_entropy: in logits (rows, V); targets idx (rows); y = the loss (1). d = {rows, V}
static void fd_ce_fwd(const fd_case *c, double *const *in, double *y) {
    double *lse = buf_nan(c->d[0]);
    assert_int_equal(cpu_cross_entropy_fwd_f64(in[0], c->idx, y, lse, c->d[0], c->d[1], NULL), 0);
    check_finite(lse, c->d[0], "cross_entropy lse");
    free(lse);
}
static void fd_ce_bwd(const fd_case *c, double *const *in, const double *dy, double *const *din) {
    double loss = NAN, *lse = buf_nan(c->d[0]);
    assert_int_equal(cpu_cross_entropy_fwd_f64(in[0], c->idx, &loss, lse, c->d[0], c->d[1], NULL), 0);
    assert_int_equal(cpu_cross_entropy_bwd_f64(in[0], c->idx, lse, din[0], c->d[0], c->d[1], NULL), 0);
    cpu_scale_f64(din[0], din[0], c->d[0] * c->d[1], dy[0]); // the loss is the seed: times dy
    free(lse);
}

static void test_fd_norms_and_embedding(void **state) {
    (void)state;
    static const int32_t tok[7] = {2, 0, 4, 2, 2, 1, 4};
    fd_case emb = {"embedding", 1, {5 * 3}, 7 * 3, {7, 5, 3}, {0}, 0, tok, fd_embedding_fwd, fd_embedding_bwd};
    fd_check(&emb, 1);
    fd_case rms = {"rmsnorm", 2, {4 * 7, 7}, 4 * 7, {4, 7}, {0}, 1e-5, NULL, fd_rmsnorm_fwd, fd_rmsnorm_bwd};
    fd_check(&rms, 2);
    fd_case ln = {"layernorm", 3, {3 * 6, 6, 6}, 3 * 6, {3, 6}, {0}, 1e-5, NULL, fd_layernorm_fwd, fd_layernorm_bwd};
    fd_check(&ln, 3);
}

static void test_fd_linear_matmul(void **state) {
    (void)state;
    fd_case lin = {"linear", 2, {5 * 4, 3 * 4}, 5 * 3, {5, 4, 3}, {0}, 0, NULL, fd_linear_fwd, fd_linear_bwd};
    fd_check(&lin, 4);
    fd_case linb = {"linear + bias", 3, {5 * 4, 3 * 4, 3}, 5 * 3, {5, 4, 3}, {0}, 0, NULL, fd_linear_bias_fwd, fd_linear_bias_bwd};
    fd_check(&linb, 5);
    fd_case pos = {"pos_embedding", 2, {2 * 3 * 4, 5 * 4}, 2 * 3 * 4, {2, 3, 4, 5}, {0}, 0, NULL, fd_pos_fwd, fd_pos_bwd};
    fd_check(&pos, 6);
    fd_case spl = {"split", 1, {4 * 3 * 5}, 4 * 3 * 5, {4, 5}, {0}, 0, NULL, fd_split_fwd, fd_split_bwd};
    fd_check(&spl, 7);
    for (int bc = 0; bc < 2; bc++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t bt = 2, m = 3, n = 4, k = 5;
                char name[64];
                snprintf(name, sizeof name, "matmul ta=%d tb=%d %s", ta, tb, bc ? "broadcast B" : "batched B");
                fd_case mm = {name, 2, {bt * m * k, (bc ? 1 : bt) * k * n}, bt * m * n, {bt, m, n, k}, {ta, tb, bc},
                              0, NULL, fd_matmul_fwd, fd_matmul_bwd};
                fd_check(&mm, 10 + (uint64_t)(4 * bc + 2 * ta + tb));
            }
}

static void test_fd_attention_path(void **state) {
    (void)state;
    fd_case rope = {"rope", 1, {2 * 3 * 2 * 6}, 2 * 3 * 2 * 6, {2, 3, 2, 6}, {0}, 10000.0, NULL, fd_rope_fwd, fd_rope_bwd};
    fd_check(&rope, 20);
    fd_case rinv = {"rope inverse", 1, {3 * 2 * 4}, 3 * 2 * 4, {1, 3, 2, 4}, {1}, 100.0, NULL, fd_rope_fwd, fd_rope_bwd};
    fd_check(&rinv, 21);
    fd_case mask = {"causal_mask", 1, {2 * 3 * 5}, 2 * 3 * 5, {2, 3, 5}, {0}, 2.5, NULL, fd_mask_fwd, fd_mask_bwd};
    fd_check(&mask, 22);
    fd_case sm = {"softmax", 1, {3 * 6}, 3 * 6, {3, 6}, {0}, 0, NULL, fd_softmax_fwd, fd_softmax_bwd};
    fd_check(&sm, 23);
    int64_t n = 2 * 5 * 2 * 4;
    fd_case att = {"attention", 3, {n, n, n}, n, {2, 5, 2, 4}, {0}, 0.0, NULL, fd_attention_fwd, fd_attention_bwd};
    fd_check(&att, 24);
    fd_case att2 = {"attention scale 0.7", 3, {n, n, n}, n, {2, 5, 2, 4}, {0}, 0.7, NULL, fd_attention_fwd, fd_attention_bwd};
    fd_check(&att2, 25);
}

static void test_fd_elementwise_and_layout(void **state) {
    (void)state;
    fd_case cs[] = {
        {"silu", 1, {17}, 17, {0}, {0}, 0, NULL, fd_silu_fwd, fd_silu_bwd},
        {"relu", 1, {17}, 17, {0}, {0}, 0, NULL, fd_relu_fwd, fd_relu_bwd},
        {"gelu", 1, {17}, 17, {0}, {0}, 0, NULL, fd_gelu_fwd, fd_gelu_bwd},
        {"swiglu", 2, {17, 17}, 17, {0}, {0}, 0, NULL, fd_swiglu_fwd, fd_swiglu_bwd},
        {"mul", 2, {17, 17}, 17, {0}, {0}, 0, NULL, fd_mul_fwd, fd_mul_bwd},
        {"add", 2, {17, 17}, 17, {0}, {0}, 0, NULL, fd_add_fwd, fd_add_bwd},
        {"scale", 1, {17}, 17, {0}, {0}, -1.75, NULL, fd_scale_fwd, fd_scale_bwd},
        {"reshape", 1, {17}, 17, {0}, {0}, 0, NULL, fd_reshape_fwd, fd_reshape_bwd},
        {"transpose 0,2", 1, {2 * 3 * 4 * 2}, 2 * 3 * 4 * 2, {2, 3, 4, 2}, {4, 0, 2}, 0, NULL, fd_transpose_fwd,
         fd_transpose_bwd},
        {"transpose 3,1", 1, {2 * 3 * 4 * 2}, 2 * 3 * 4 * 2, {2, 3, 4, 2}, {4, 3, 1}, 0, NULL, fd_transpose_fwd,
         fd_transpose_bwd},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) fd_check(&cs[i], 30 + i);
    static const int32_t tgt[4] = {3, 0, 6, 3};
    fd_case ce = {"cross_entropy", 1, {4 * 7}, 1, {4, 7}, {0}, 0, tgt, fd_ce_fwd, fd_ce_bwd};
    fd_check(&ce, 50);
}

// ---- f32 kernels agree with f64 kernels ---------------------------------------------------------
//
// Every kernel runs on the same inputs (random, rounded to float so both see identical values) in
// both precisions; each output must agree: max |y32 - y64| / max |y64| < 1e-5.

enum { AG_R = 6, AG_D = 10, AG_V = 13, AG_B = 2, AG_S = 7, AG_H = 2, AG_DH = 6, AG_BT = 2, AG_M = 5, AG_N = 7, AG_K = 9 };
#define AG_NQ (AG_B * AG_S * AG_H * AG_DH)

#define AG_INPUTS(X)                                                                                   \
    X(XIN, AG_R *AG_D) X(W, AG_D) X(BIAS, AG_D) X(DY, AG_R *AG_D) X(Q, AG_NQ) X(K, AG_NQ) X(V, AG_NQ)     \
    X(DO, AG_NQ) X(LOGITS, AG_R *AG_V) X(EMB, AG_V *AG_D) X(A, AG_BT *AG_M *AG_K) X(B, AG_BT *AG_K *AG_N) \
    X(DC, AG_BT *AG_M *AG_N) X(PARAM, AG_R *AG_D) X(MOM, AG_R *AG_D) X(VAR, AG_R *AG_D)

#define AG_OUTPUTS(X)                                                                                  \
    X(RMS_Y, AG_R *AG_D) X(RMS_RSTD, AG_R) X(RMS_DX, AG_R *AG_D) X(RMS_DW, AG_D)                       \
    X(LN_Y, AG_R *AG_D) X(LN_ST, 2 * AG_R) X(LN_DX, AG_R *AG_D) X(LN_DW, AG_D) X(LN_DB, AG_D)          \
    X(ROPE, AG_NQ) X(ROPE_INV, AG_NQ) X(MASK, AG_R *AG_D) X(SM, AG_R *AG_D) X(SM_DX, AG_R *AG_D)        \
    X(ATT_O, AG_NQ) X(ATT_LSE, AG_B *AG_H *AG_S) X(ATT_DQ, AG_NQ) X(ATT_DK, AG_NQ) X(ATT_DV, AG_NQ)     \
    X(SILU, AG_R *AG_D) X(SILU_DX, AG_R *AG_D) X(RELU, AG_R *AG_D) X(RELU_DX, AG_R *AG_D)               \
    X(SWI, AG_R *AG_D) X(SWI_DA, AG_R *AG_D) X(SWI_DB, AG_R *AG_D) X(MUL, AG_R *AG_D) X(ADD, AG_R *AG_D)   \
    X(SCALE, AG_R *AG_D) X(COPY, AG_R *AG_D) X(TRANSPOSE, AG_NQ) X(CE_LOSS, 1) X(CE_LSE, AG_R)            \
    X(CE_DX, AG_R *AG_V) X(EMB, AG_R *AG_D) X(EMB_DW, AG_V *AG_D) X(LIN, AG_R *AG_V)                    \
    X(MM00, AG_BT *AG_M *AG_N) X(MM01, AG_BT *AG_M *AG_N) X(MM10, AG_BT *AG_M *AG_N)                    \
    X(MM11, AG_BT *AG_M *AG_N) X(MMBC, AG_BT *AG_M *AG_N) X(ADAM_P, AG_R *AG_D) X(ADAM_M, AG_R *AG_D)   \
    X(ADAM_V, AG_R *AG_D) X(SUMSQ, 1)

enum {
#define AG_ENUM(n, s) I_##n,
    AG_INPUTS(AG_ENUM) I_COUNT
#undef AG_ENUM
};
enum {
#define AG_ENUM(n, s) O_##n,
    AG_OUTPUTS(AG_ENUM) O_COUNT
#undef AG_ENUM
};
#define AG_SIZE(n, s) (s),
#define AG_NAME(n, s) #n,
static const int64_t ag_in_size[I_COUNT] = {AG_INPUTS(AG_SIZE)};
static const int64_t ag_out_size[O_COUNT] = {AG_OUTPUTS(AG_SIZE)};
static const char *const ag_out_name[O_COUNT] = {AG_OUTPUTS(AG_NAME)};
#undef AG_SIZE
#undef AG_NAME

// Runs every kernel once over T. tok (AG_R) in [0, AG_V), tgt (AG_R) in [0, AG_V).
#define AG_DEFINE_RUN(T, S)                                                                            \
    static void ag_run_##S(T *const *in, T *const *out, const int32_t *tok, const int32_t *tgt) {      \
        cpu_rmsnorm_fwd_##S(in[I_XIN], in[I_W], out[O_RMS_Y], out[O_RMS_RSTD], AG_R, AG_D, 1e-5);       \
        cpu_rmsnorm_bwd_##S(in[I_XIN], in[I_W], out[O_RMS_RSTD], in[I_DY], out[O_RMS_DX], out[O_RMS_DW], \
                            AG_R, AG_D);                                                               \
        cpu_layernorm_fwd_##S(in[I_XIN], in[I_W], in[I_BIAS], out[O_LN_Y], out[O_LN_ST], AG_R, AG_D, 1e-5); \
        cpu_layernorm_bwd_##S(in[I_XIN], in[I_W], out[O_LN_ST], in[I_DY], out[O_LN_DX], out[O_LN_DW],    \
                              out[O_LN_DB], AG_R, AG_D);                                               \
        cpu_rope_##S(in[I_Q], out[O_ROPE], AG_B, AG_S, AG_H, AG_DH, 10000.0, 0);                       \
        cpu_rope_##S(in[I_Q], out[O_ROPE_INV], AG_B, AG_S, AG_H, AG_DH, 10000.0, 1);                   \
        cpu_causal_mask_##S(in[I_XIN], out[O_MASK], 2, 3, 10, -1e4);                                     \
        cpu_softmax_fwd_##S(in[I_XIN], out[O_SM], AG_R, AG_D);                                           \
        cpu_softmax_bwd_##S(out[O_SM], in[I_DY], out[O_SM_DX], AG_R, AG_D);                            \
        assert_int_equal(t_attention_fwd_##S(in[I_Q], in[I_K], in[I_V], out[O_ATT_O], out[O_ATT_LSE], \
                                               AG_B, AG_S, AG_H, AG_DH, 0.0, NULL), 0);                \
        assert_int_equal(t_attention_bwd_##S(in[I_Q], in[I_K], in[I_V], out[O_ATT_O], out[O_ATT_LSE], \
                                               in[I_DO], out[O_ATT_DQ], out[O_ATT_DK], out[O_ATT_DV], \
                                               AG_B, AG_S, AG_H, AG_DH, 0.0, NULL), 0);                \
        cpu_silu_fwd_##S(in[I_XIN], out[O_SILU], AG_R * AG_D);                                           \
        cpu_silu_bwd_##S(in[I_XIN], in[I_DY], out[O_SILU_DX], AG_R * AG_D);                              \
        cpu_relu_fwd_##S(in[I_XIN], out[O_RELU], AG_R * AG_D);                                           \
        cpu_relu_bwd_##S(out[O_RELU], in[I_DY], out[O_RELU_DX], AG_R * AG_D);                          \
        cpu_swiglu_fwd_##S(in[I_XIN], in[I_PARAM], out[O_SWI], AG_R * AG_D);                             \
        cpu_swiglu_bwd_##S(in[I_XIN], in[I_PARAM], in[I_DY], out[O_SWI_DA], out[O_SWI_DB], AG_R * AG_D); \
        cpu_mul_##S(in[I_XIN], in[I_DY], out[O_MUL], AG_R * AG_D);                                       \
        cpu_add_##S(in[I_XIN], in[I_DY], out[O_ADD], AG_R * AG_D);                                       \
        cpu_scale_##S(in[I_XIN], out[O_SCALE], AG_R * AG_D, 0.125);                                      \
        cpu_copy_##S(in[I_XIN], out[O_COPY], AG_R * AG_D);                                               \
        {                                                                                              \
            int64_t shape[4] = {AG_B, AG_S, AG_H, AG_DH};                                              \
            cpu_transpose_##S(in[I_Q], out[O_TRANSPOSE], 4, shape, 1, 3);                              \
        }                                                                                              \
        assert_int_equal(cpu_cross_entropy_fwd_##S(in[I_LOGITS], tgt, out[O_CE_LOSS], out[O_CE_LSE],   \
                                                   AG_R, AG_V, NULL), 0);                              \
        assert_int_equal(cpu_cross_entropy_bwd_##S(in[I_LOGITS], tgt, out[O_CE_LSE], out[O_CE_DX],     \
                                                   AG_R, AG_V, NULL), 0);                              \
        assert_int_equal(cpu_embedding_fwd_##S(tok, in[I_EMB], out[O_EMB], AG_R, AG_V, AG_D, NULL), 0); \
        assert_int_equal(t_embedding_bwd_##S(tok, in[I_DY], out[O_EMB_DW], AG_R, AG_V, AG_D, NULL), 0); \
        assert_int_equal(t_matmul_##S(in[I_XIN], in[I_EMB], out[O_LIN], 1, AG_R, AG_V, AG_D, 0, 1, 0, NULL), 0); \
        for (int t = 0; t < 4; t++)                                                                    \
            assert_int_equal(t_matmul_##S(in[I_A], in[I_B], out[O_MM00 + t], AG_BT, AG_M, AG_N, AG_K, t >> 1, \
                                             t & 1, 1, NULL), 0);                                      \
        assert_int_equal(t_matmul_##S(in[I_A], in[I_B], out[O_MMBC], AG_BT, AG_M, AG_N, AG_K, 1, 1, 0, NULL), 0); \
        memcpy(out[O_ADAM_P], in[I_PARAM], AG_R * AG_D * sizeof(T));                                   \
        memcpy(out[O_ADAM_M], in[I_MOM], AG_R * AG_D * sizeof(T));                                     \
        memcpy(out[O_ADAM_V], in[I_VAR], AG_R * AG_D * sizeof(T));                                     \
        stg_adamw_attrs aw = {0.9, 0.95, 1e-8, 0.1, 1.0, 0};                                          \
        cpu_adamw_##S(out[O_ADAM_P], in[I_DY], out[O_ADAM_M], out[O_ADAM_V], AG_R * AG_D, 2.5, 3.0, 1e-3, &aw); \
        out[O_SUMSQ][0] = (T)cpu_sumsq_##S(in[I_XIN], AG_R * AG_D);                                      \
    }

AG_DEFINE_RUN(float, f32)
AG_DEFINE_RUN(double, f64)

static void test_f32_matches_f64(void **state) {
    (void)state;
    test_rng r = {77};
    double *in64[I_COUNT], *out64[O_COUNT], *o32d;
    float *in32[I_COUNT], *out32[O_COUNT];
    for (int i = 0; i < I_COUNT; i++) {
        in64[i] = buf_rand(&r, ag_in_size[i]);
        in32[i] = malloc((size_t)ag_in_size[i] * sizeof(float));
        assert_non_null(in32[i]);
        for (int64_t j = 0; j < ag_in_size[i]; j++) {
            if (i == I_VAR) in64[i][j] = fabs(in64[i][j]) * 0.01; // a second moment is >= 0
            in32[i][j] = (float)in64[i][j];
            in64[i][j] = (double)in32[i][j];
        }
    }
    for (int o = 0; o < O_COUNT; o++) {
        out64[o] = buf_nan(ag_out_size[o]);
        out32[o] = malloc((size_t)ag_out_size[o] * sizeof(float));
        assert_non_null(out32[o]);
        for (int64_t j = 0; j < ag_out_size[o]; j++) out32[o][j] = NAN;
    }
    int32_t tok[AG_R], tgt[AG_R];
    for (int i = 0; i < AG_R; i++) {
        tok[i] = (int32_t)(rng_u64(&r) % AG_V);
        tgt[i] = (int32_t)(rng_u64(&r) % AG_V);
    }
    tok[AG_R - 1] = tok[0]; // a repeated token
    ag_run_f64(in64, out64, tok, tgt);
    ag_run_f32(in32, out32, tok, tgt);
    for (int o = 0; o < O_COUNT; o++) {
        o32d = buf_nan(ag_out_size[o]);
        for (int64_t j = 0; j < ag_out_size[o]; j++) o32d[j] = (double)out32[o][j];
        check_finite(out64[o], ag_out_size[o], ag_out_name[o]);
        check_finite(o32d, ag_out_size[o], ag_out_name[o]);
        double e = rel_maxnorm(o32d, out64[o], ag_out_size[o], 1e-30);
        if (!(e < 1e-5)) fail_msg("%s: f32 and f64 kernels differ by %.3g (relative, max norm)", ag_out_name[o], e);
        free(o32d);
    }
    for (int i = 0; i < I_COUNT; i++) {
        free(in64[i]);
        free(in32[i]);
    }
    for (int o = 0; o < O_COUNT; o++) {
        free(out64[o]);
        free(out32[o]);
    }
}

// ---- attention against the naive composition ---------------------------------------------------
//
// o = transpose(softmax(causal_mask(scale . q k^T)) v) with q, k, v transposed to (B, H, S, Dh);
// the backward composed from matmul, softmax_bwd, causal_mask and scale as autodiff would. Agree
// to 1e-10 in f64.

static void test_attention_matches_naive(void **state) {
    (void)state;
    enum { B = 2, S = 6, H = 3, Dh = 5 };
    const int64_t n = B * S * H * Dh, ns = B * H * S * S;
    const double scale = 1.0 / sqrt((double)Dh);
    test_rng r = {99};
    double *q = buf_rand(&r, n), *k = buf_rand(&r, n), *v = buf_rand(&r, n), *dO = buf_rand(&r, n);
    for (int64_t i = 0; i < n; i++) q[i] *= 2.0; // sharper rows
    double *o = buf_nan(n), *lse = buf_nan(B * H * S), *dq = buf_nan(n), *dk = buf_nan(n), *dv = buf_nan(n);
    assert_int_equal(t_attention_fwd_f64(q, k, v, o, lse, B, S, H, Dh, 0.0, NULL), 0);
    assert_int_equal(t_attention_bwd_f64(q, k, v, o, lse, dO, dq, dk, dv, B, S, H, Dh, 0.0, NULL), 0);

    int64_t shp[4] = {B, S, H, Dh}, shp_t[4] = {B, H, S, Dh};
    double *qt = buf_nan(n), *kt = buf_nan(n), *vt = buf_nan(n), *dot = buf_nan(n);
    cpu_transpose_f64(q, qt, 4, shp, 1, 2);
    cpu_transpose_f64(k, kt, 4, shp, 1, 2);
    cpu_transpose_f64(v, vt, 4, shp, 1, 2);
    cpu_transpose_f64(dO, dot, 4, shp, 1, 2);
    double *sc = buf_nan(ns), *p = buf_nan(ns), *ot = buf_nan(n), *o_ref = buf_nan(n);
    assert_int_equal(t_matmul_f64(qt, kt, sc, B * H, S, S, Dh, 0, 1, 1, NULL), 0); // (BH, S, S)
    cpu_scale_f64(sc, sc, ns, scale);
    cpu_causal_mask_f64(sc, p, B * H, S, S, -INFINITY);
    cpu_softmax_fwd_f64(p, p, B * H * S, S);
    assert_int_equal(t_matmul_f64(p, vt, ot, B * H, S, Dh, S, 0, 0, 1, NULL), 0);
    cpu_transpose_f64(ot, o_ref, 4, shp_t, 1, 2);
    assert_close(o, o_ref, n, 1e-10, "attention output vs naive");
    // lse (B, H, S) from the scaled scores, in long double
    for (int64_t row = 0; row < B * H * S; row++) {
        int64_t i = row % S;
        long double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) mx = fmaxl(mx, (long double)sc[row * S + j]);
        for (int64_t j = 0; j <= i; j++) sum += expl((long double)sc[row * S + j] - mx);
        double want = (double)(mx + logl(sum));
        if (!(fabs(lse[row] - want) <= 1e-12 * fmax(1.0, fabs(want))))
            fail_msg("attention lse[%lld] = %.15g, log-sum-exp of the scores = %.15g", (long long)row, lse[row], want);
    }

    double *dp = buf_nan(ns), *ds = buf_nan(ns), *dqt = buf_nan(n), *dkt = buf_nan(n), *dvt = buf_nan(n);
    double *ref = buf_nan(n);
    assert_int_equal(t_matmul_f64(dot, vt, dp, B * H, S, S, Dh, 0, 1, 1, NULL), 0);  // dP = dO v^T
    assert_int_equal(t_matmul_f64(p, dot, dvt, B * H, S, Dh, S, 1, 0, 1, NULL), 0);  // dv = P^T dO
    cpu_softmax_bwd_f64(p, dp, ds, B * H * S, S);
    cpu_causal_mask_f64(ds, ds, B * H, S, S, 0.0);
    cpu_scale_f64(ds, ds, ns, scale);
    assert_int_equal(t_matmul_f64(ds, kt, dqt, B * H, S, Dh, S, 0, 0, 1, NULL), 0);  // dq = dS k
    assert_int_equal(t_matmul_f64(ds, qt, dkt, B * H, S, Dh, S, 1, 0, 1, NULL), 0);  // dk = dS^T q
    cpu_transpose_f64(dqt, ref, 4, shp_t, 1, 2);
    assert_close(dq, ref, n, 1e-10, "attention dq vs naive");
    cpu_transpose_f64(dkt, ref, 4, shp_t, 1, 2);
    assert_close(dk, ref, n, 1e-10, "attention dk vs naive");
    cpu_transpose_f64(dvt, ref, 4, shp_t, 1, 2);
    assert_close(dv, ref, n, 1e-10, "attention dv vs naive");

    double *bufs[] = {q, k, v, dO, o, lse, dq, dk, dv, qt, kt, vt, dot, sc, p, ot, o_ref, dp, ds, dqt, dkt, dvt, ref};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

// ---- cross-entropy against an independent log-sum-exp (long double) -----------------------------

static void test_cross_entropy(void **state) {
    (void)state;
    enum { R = 5, V = 11 };
    test_rng r = {5};
    double *x = buf_rand(&r, R * V), *lse = buf_nan(R), *dx = buf_nan(R * V), loss = NAN;
    for (int i = 0; i < R * V; i++) x[i] *= 4.0;
    x[3] = 30.0; // a large logit: the max must be subtracted
    int32_t tgt[R] = {0, 10, 3, 3, 7};
    assert_int_equal(cpu_cross_entropy_fwd_f64(x, tgt, &loss, lse, R, V, NULL), 0);
    assert_int_equal(cpu_cross_entropy_bwd_f64(x, tgt, lse, dx, R, V, NULL), 0);
    long double total = 0;
    for (int i = 0; i < R; i++) {
        long double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmaxl(mx, (long double)x[i * V + j]);
        for (int j = 0; j < V; j++) s += expl((long double)x[i * V + j] - mx);
        long double l = mx + logl(s);
        if (!(fabsl((long double)lse[i] - l) <= 1e-13L * fmaxl(1.0L, fabsl(l))))
            fail_msg("cross_entropy lse[%d] = %.17g, expected %.17Lg", i, lse[i], l);
        total += l - (long double)x[i * V + tgt[i]];
        for (int j = 0; j < V; j++) {
            long double want = (expl((long double)x[i * V + j] - l) - (j == tgt[i] ? 1.0L : 0.0L)) / R;
            if (!(fabsl((long double)dx[i * V + j] - want) <= 1e-15L))
                fail_msg("cross_entropy_bwd [%d][%d] = %.17g, expected %.17Lg", i, j, dx[i * V + j], want);
        }
    }
    long double want_loss = total / R;
    if (!(fabsl((long double)loss - want_loss) <= 1e-13L * fabsl(want_loss)))
        fail_msg("cross_entropy loss %.17g, expected %.17Lg", loss, want_loss);

    // in place: dlogits over logits
    double *xi = buf_copy(x, R * V);
    assert_int_equal(cpu_cross_entropy_bwd_f64(xi, tgt, lse, xi, R, V, NULL), 0);
    assert_memory_equal(xi, dx, R * V * sizeof(double));

    // a target out of range is an error naming the position and the value
    stg_err err = {{0}};
    tgt[2] = V;
    assert_int_equal(cpu_cross_entropy_fwd_f64(x, tgt, &loss, lse, R, V, &err), -1);
    assert_non_null(strstr(err.msg, "target 11 at position 2"));
    tgt[2] = -2; // -1 is an ignored target (tests/test_gqa.c)
    assert_int_equal(cpu_cross_entropy_bwd_f64(x, tgt, lse, dx, R, V, &err), -1);
    assert_non_null(strstr(err.msg, "target -2 at position 2"));
    free(x);
    free(xi);
    free(lse);
    free(dx);
}

// ---- AdamW against a hand-computed example ------------------------------------------------------
//
// beta1 0.9, beta2 0.99, eps 1e-3 (large, so that where it is added shows), weight decay 0.1,
// lr 0.01, two parameters theta = [1, -2], gradients [0.5, -1] then [-0.25, 2], m = v = 0.
//
// Step 1: alpha_1 = 0.01 sqrt(1 - 0.99) / (1 - 0.9) = 0.01 * 0.1 / 0.1 = 0.01.
//   theta0: m = 0.1*0.5 = 0.05; v = 0.01*0.25 = 0.0025, sqrt(v) = 0.05;
//           step = 0.01*0.05/(0.05 + 0.001) = 0.0005/0.051 = 0.00980392156862745...;
//           theta = 1 - 0.0098039215686275 = 0.9901960784313725; decay: *(1 - 0.01*0.1) = *0.999
//           -> 0.98920588235294118
//   theta1: m = -0.1; v = 0.01, sqrt(v) = 0.1; step = 0.01*(-0.1)/0.101 = -0.00990099009900990;
//           theta = -2 + 0.0099009900990099 = -1.9900990099009901; *0.999 -> -1.98810891089108911
// Step 2: alpha_2 = 0.01 sqrt(1 - 0.99^2) / (1 - 0.9^2) = 0.01 sqrt(0.0199) / 0.19
//         = 0.01 * 0.14106735979665885 / 0.19 = 0.0074245978840346760.
//   theta0: m = 0.9*0.05 + 0.1*(-0.25) = 0.02; v = 0.99*0.0025 + 0.01*0.0625 = 0.0031,
//           sqrt(v) = 0.055677643628300219; step = alpha_2*0.02/0.056677643628300219
//           = 0.0026199388008175534; theta = 0.98920588235294118 - 0.0026199388008175534
//           = 0.98658594355212362; *0.999 -> 0.98559935760857150
//   theta1: m = 0.9*(-0.1) + 0.1*2 = 0.11; v = 0.99*0.01 + 0.01*4 = 0.0499,
//           sqrt(v) = 0.22338307903688677; step = alpha_2*0.11/0.22438307903688677
//           = 0.0036397832258534723; theta = -1.98810891089108911 - 0.0036397832258534723
//           = -1.99174869411694258; *0.999 -> -1.98975694542282564
// Clipping (one step from the same start, global norm 5, max_norm 1): c = 1/(5 + 1e-6)
//   = 0.19999996000000800, g = c * grad = [0.0999999800000040, -0.1999999600000080];
//   theta0: m = 0.1 g = 0.0099999980000004 = sqrt(v); step = 0.01*m/(m + 0.001)
//           = 0.0090909089256198377; theta = 0.99090909107438016; *0.999 -> 0.98991818198330578
//   theta1: m = -0.0199999960000008 = -sqrt(v); step = 0.01*m/(|m| + 0.001) = -0.0095238094331065768;
//           theta = -1.99047619056689342; *0.999 -> -1.98848571437632653

static void adamw_steps(const double *grads, const double *norms, int steps, double max_norm, double *theta,
                        double *m, double *v) {
    stg_adamw_attrs a = {0.9, 0.99, 1e-3, 0.1, max_norm, 0};
    theta[0] = 1.0;
    theta[1] = -2.0;
    m[0] = m[1] = v[0] = v[1] = 0.0;
    for (int t = 1; t <= steps; t++)
        cpu_adamw_f64(theta, grads + 2 * (t - 1), m, v, 2, norms[t - 1], (double)t, 0.01, &a);
}

// |got - want| <= rel |want|
static int near(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want); }

static void test_adamw_hand_example(void **state) {
    (void)state;
    const double grads[4] = {0.5, -1.0, -0.25, 2.0};
    double theta[2], m[2], v[2];

    const double norms_small[2] = {0.5, 3.0}; // max_norm 0: never clipped
    adamw_steps(grads, norms_small, 1, 0.0, theta, m, v);
    if (!(near(theta[0], 0.98920588235294118, 1e-14) && near(theta[1], -1.98810891089108911, 1e-14)))
        fail_msg("adamw one step: theta = [%.17g, %.17g], expected [0.98920588235294118, -1.98810891089108911]",
                 theta[0], theta[1]);
    assert_true(near(m[0], 0.05, 1e-14) && near(m[1], -0.1, 1e-14));
    assert_true(near(v[0], 0.0025, 1e-14) && near(v[1], 0.01, 1e-14));
    adamw_steps(grads, norms_small, 2, 0.0, theta, m, v);
    if (!(near(theta[0], 0.98559935760857150, 1e-14) && near(theta[1], -1.98975694542282564, 1e-14)))
        fail_msg("adamw two steps: theta = [%.17g, %.17g], expected [0.98559935760857150, -1.98975694542282564]",
                 theta[0], theta[1]);
    assert_true(near(m[0], 0.02, 1e-14) && near(m[1], 0.11, 1e-14));
    assert_true(near(v[0], 0.0031, 1e-14) && near(v[1], 0.0499, 1e-14));

    const double norm_big[1] = {5.0};
    adamw_steps(grads, norm_big, 1, 1.0, theta, m, v); // clipped by 1/(5 + 1e-6)
    if (!(near(theta[0], 0.98991818198330578, 1e-14) && near(theta[1], -1.98848571437632653, 1e-14)))
        fail_msg("adamw clipped: theta = [%.17g, %.17g], expected [0.98991818198330578, -1.98848571437632653]",
                 theta[0], theta[1]);
    assert_true(near(m[0], 0.0099999980000004, 1e-14) && near(m[1], -0.0199999960000008, 1e-14));
    const double norm_below[1] = {0.5};
    adamw_steps(grads, norm_below, 1, 1.0, theta, m, v); // norm <= max_norm: not clipped
    assert_true(near(theta[0], 0.98920588235294118, 1e-14) && near(theta[1], -1.98810891089108911, 1e-14));

    // the f32 kernel gives the same numbers to float precision
    float tf[2] = {1.0f, -2.0f}, mf[2] = {0, 0}, vf[2] = {0, 0}, gf[4] = {0.5f, -1.0f, -0.25f, 2.0f};
    stg_adamw_attrs a = {0.9, 0.99, 1e-3, 0.1, 0.0, 0};
    cpu_adamw_f32(tf, gf, mf, vf, 2, 0.5, 1.0, 0.01, &a);
    cpu_adamw_f32(tf, gf + 2, mf, vf, 2, 3.0, 2.0, 0.01, &a);
    assert_true(near(tf[0], 0.98559935760857150, 1e-6) && near(tf[1], -1.98975694542282564, 1e-6));
}

// ---- global norm --------------------------------------------------------------------------------

static void test_global_norm_kernel(void **state) {
    (void)state;
    const double a[2] = {3.0, -4.0}, b[1] = {12.0};
    assert_true(cpu_sumsq_f64(a, 2) == 25.0);
    assert_true(sqrt(cpu_sumsq_f64(a, 2) + cpu_sumsq_f64(b, 1)) == 13.0);
    // many small float values: accumulated in double
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float));
    assert_non_null(x);
    for (int i = 0; i < N; i++) x[i] = 1e-3f;
    double want = (double)N * (double)1e-3f * (double)1e-3f;
    double got = cpu_sumsq_f32(x, N);
    free(x);
    // a float accumulator would be off by far more than this
    if (!near(got, want, 1e-9)) fail_msg("sum of squares %.17g, expected %.17g", got, want);
}

// ---- rope ---------------------------------------------------------------------------------------

static void test_rope(void **state) {
    (void)state;
    enum { O = 2, S = 5, H = 3, Dh = 8 };
    const int64_t n = O * S * H * Dh;
    test_rng r = {11};
    double *x = buf_rand(&r, n), *y = buf_nan(n), *z = buf_nan(n);
    cpu_rope_f64(x, y, O, S, H, Dh, 10000.0, 0);
    cpu_rope_f64(y, z, O, S, H, Dh, 10000.0, 1);
    assert_close(z, x, n, 1e-14, "rope then inverse rope");
    for (int o = 0; o < O; o++) // position 0 is the identity, exactly
        for (int64_t i = 0; i < H * Dh; i++) assert_true(y[(int64_t)o * S * H * Dh + i] == x[(int64_t)o * S * H * Dh + i]);
    // p = 3, k = 1: angle = 3 * 10000^(-2/8) = 0.3
    int64_t at = ((1 * S + 3) * H + 2) * Dh + 2;
    double c = cos(0.3), s = sin(0.3);
    assert_true(fabs(y[at] - (x[at] * c - x[at + 1] * s)) < 1e-15);
    assert_true(fabs(y[at + 1] - (x[at] * s + x[at + 1] * c)) < 1e-15);
    // in place
    double *w = buf_copy(x, n);
    cpu_rope_f64(w, w, O, S, H, Dh, 10000.0, 0);
    assert_memory_equal(w, y, n * sizeof(double));
    free(x);
    free(y);
    free(z);
    free(w);
}

// ---- causal mask and softmax ----------------------------------------------------------------------

static void test_causal_mask_softmax(void **state) {
    (void)state;
    enum { O = 2, Sq = 3, Sk = 5 };
    test_rng r = {12};
    double *x = buf_rand(&r, O * Sq * Sk), *y = buf_nan(O * Sq * Sk);
    cpu_causal_mask_f64(x, y, O, Sq, Sk, -INFINITY);
    for (int o = 0; o < O; o++)
        for (int i = 0; i < Sq; i++)
            for (int j = 0; j < Sk; j++) {
                int64_t at = ((int64_t)o * Sq + i) * Sk + j;
                if (j > i + (Sk - Sq)) assert_true(isinf(y[at]) && y[at] < 0);
                else assert_true(y[at] == x[at]);
            }
    double *w = buf_copy(x, O * Sq * Sk);
    cpu_causal_mask_f64(w, w, O, Sq, Sk, -INFINITY);
    assert_memory_equal(w, y, O * Sq * Sk * sizeof(double));

    // softmax over masked rows: -inf gives exactly 0; a row of only -inf gives zeros
    double row[8] = {-INFINITY, 0.0, -INFINITY, 1.0, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, p[8];
    for (int i = 0; i < 8; i++) p[i] = NAN;
    cpu_softmax_fwd_f64(row, p, 2, 4);
    double e = exp(1.0);
    assert_true(p[0] == 0.0 && p[2] == 0.0);
    assert_true(fabs(p[1] - 1.0 / (1.0 + e)) < 1e-16 && fabs(p[3] - e / (1.0 + e)) < 1e-16);
    for (int i = 4; i < 8; i++) assert_true(p[i] == 0.0);
    // large logits do not overflow
    double big[3] = {1000.0, 1000.0, -1000.0}, pb[3];
    cpu_softmax_fwd_f64(big, pb, 1, 3);
    assert_true(fabs(pb[0] - 0.5) < 1e-16 && fabs(pb[1] - 0.5) < 1e-16 && pb[2] == 0.0);
    free(x);
    free(y);
    free(w);
}

// ---- embedding ------------------------------------------------------------------------------------

static void test_embedding(void **state) {
    (void)state;
    enum { N = 5, V = 5, D = 3 };
    test_rng r = {13};
    const int32_t tok[N] = {1, 3, 1, 1, 0};
    double *W = buf_rand(&r, V * D), *y = buf_nan(N * D), *dy = buf_rand(&r, N * D), *dW = buf_nan(V * D);
    assert_int_equal(cpu_embedding_fwd_f64(tok, W, y, N, V, D, NULL), 0);
    for (int i = 0; i < N; i++) assert_memory_equal(y + i * D, W + tok[i] * D, D * sizeof(double));
    assert_int_equal(t_embedding_bwd_f64(tok, dy, dW, N, V, D, NULL), 0);
    for (int d = 0; d < D; d++) {
        assert_true(dW[1 * D + d] == (dy[0 * D + d] + dy[2 * D + d]) + dy[3 * D + d]); // three repeats
        assert_true(dW[3 * D + d] == dy[1 * D + d]);
        assert_true(dW[0 * D + d] == dy[4 * D + d]);
        assert_true(dW[2 * D + d] == 0.0 && dW[4 * D + d] == 0.0); // unused rows are zeroed
    }
    stg_err err = {{0}};
    const int32_t bad[3] = {0, 1, 5};
    assert_int_equal(cpu_embedding_fwd_f64(bad, W, y, 3, V, D, &err), -1);
    assert_non_null(strstr(err.msg, "token id 5 at position 2"));
    const int32_t neg[2] = {-3, 1};
    assert_int_equal(t_embedding_bwd_f64(neg, dy, dW, 2, V, D, &err), -1);
    assert_non_null(strstr(err.msg, "token id -3 at position 0"));
    free(W);
    free(y);
    free(dy);
    free(dW);
}

// ---- transpose ------------------------------------------------------------------------------------

static void test_transpose(void **state) {
    (void)state;
    enum { A = 2, B = 3, C = 4, D = 5 };
    const int64_t n = A * B * C * D, shape[4] = {A, B, C, D};
    double *x = buf_nan(n), *y = buf_nan(n), *z = buf_nan(n);
    for (int64_t i = 0; i < n; i++) x[i] = (double)i + 1.0;
    cpu_transpose_f64(x, y, 4, shape, 0, 2); // y (C, B, A, D)
    for (int a = 0; a < A; a++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int d = 0; d < D; d++)
                    assert_true(y[((c * B + b) * A + a) * D + d] == x[((a * B + b) * C + c) * D + d]);
    poison(y, n);
    cpu_transpose_f64(x, y, 4, shape, 3, 1); // y (A, D, C, B); d0 > d1 is fine
    for (int a = 0; a < A; a++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int d = 0; d < D; d++)
                    assert_true(y[((a * D + d) * C + c) * B + b] == x[((a * B + b) * C + c) * D + d]);
    const int64_t shape_t[4] = {A, D, C, B};
    cpu_transpose_f64(y, z, 4, shape_t, 1, 3); // and back
    assert_memory_equal(z, x, n * sizeof(double));
    poison(y, n);
    cpu_transpose_f64(x, y, 4, shape, 2, 2); // the same dim twice: a copy
    assert_memory_equal(y, x, n * sizeof(double));
    free(x);
    free(y);
    free(z);
}

// ---- matmul: every ta/tb, batched B and 2-D B broadcast over A's batch ---------------------------

static void test_matmul_all_forms(void **state) {
    (void)state;
    enum { BT = 3, M = 4, N = 5, K = 6 };
    test_rng r = {14};
    double *A = buf_rand(&r, BT * M * K), *B = buf_rand(&r, BT * K * N), *C = buf_nan(BT * M * N), *R = buf_nan(BT * M * N);
    for (int bc = 0; bc < 2; bc++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                poison(C, BT * M * N);
                assert_int_equal(t_matmul_f64(A, B, C, BT, M, N, K, ta, tb, !bc, NULL), 0);
                for (int b = 0; b < BT; b++)
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            long double s = 0;
                            const double *Ab = A + b * M * K, *Bb = B + (bc ? 0 : b) * K * N;
                            for (int p = 0; p < K; p++) {
                                double av = ta ? Ab[p * M + i] : Ab[i * K + p];
                                double bv = tb ? Bb[j * K + p] : Bb[p * N + j];
                                s += (long double)av * bv;
                            }
                            R[(b * M + i) * N + j] = (double)s;
                        }
                char what[64];
                snprintf(what, sizeof what, "matmul ta=%d tb=%d %s", ta, tb, bc ? "broadcast B" : "batched B");
                assert_close(C, R, BT * M * N, 1e-14, what);
            }
    free(A);
    free(B);
    free(C);
    free(R);
}

// ---- in place: the kernels the registry lets run in place give the out-of-place result --------

static void test_in_place(void **state) {
    (void)state;
    enum { R = 4, D = 6, N = R * D };
    test_rng rg = {15};
    double *x = buf_rand(&rg, N), *b = buf_rand(&rg, N), *dy = buf_rand(&rg, N), *w = buf_rand(&rg, D);
    double *ref = buf_nan(N), *ref2 = buf_nan(N), *io = buf_nan(N), *t1 = buf_nan(N), *t2 = buf_nan(N);
    double *st = buf_nan(2 * R);
#define INPLACE_CHECK(what) \
    do { \
        check_finite(ref, N, what); \
        if (memcmp(io, ref, N * sizeof(double)) != 0) fail_msg("%s: in place differs from out of place", what); \
    } while (0)
#define RESET(src) memcpy(io, src, N * sizeof(double))
    cpu_softmax_fwd_f64(x, ref, R, D); RESET(x); cpu_softmax_fwd_f64(io, io, R, D); INPLACE_CHECK("softmax");
    cpu_softmax_bwd_f64(x, dy, ref, R, D); RESET(dy); cpu_softmax_bwd_f64(x, io, io, R, D); INPLACE_CHECK("softmax_bwd");
    cpu_add_f64(x, b, ref, N); RESET(x); cpu_add_f64(io, b, io, N); INPLACE_CHECK("add");
    cpu_mul_f64(x, b, ref, N); RESET(x); cpu_mul_f64(io, b, io, N); INPLACE_CHECK("mul");
    cpu_scale_f64(x, ref, N, 3.5); RESET(x); cpu_scale_f64(io, io, N, 3.5); INPLACE_CHECK("scale");
    cpu_silu_fwd_f64(x, ref, N); RESET(x); cpu_silu_fwd_f64(io, io, N); INPLACE_CHECK("silu");
    cpu_silu_bwd_f64(x, dy, ref, N); RESET(dy); cpu_silu_bwd_f64(x, io, io, N); INPLACE_CHECK("silu_bwd");
    cpu_relu_fwd_f64(x, ref, N); RESET(x); cpu_relu_fwd_f64(io, io, N); INPLACE_CHECK("relu");
    cpu_gelu_fwd_f64(x, ref, N); RESET(x); cpu_gelu_fwd_f64(io, io, N); INPLACE_CHECK("gelu");
    cpu_gelu_bwd_f64(x, dy, ref, N); RESET(dy); cpu_gelu_bwd_f64(x, io, io, N); INPLACE_CHECK("gelu_bwd");
    cpu_relu_bwd_f64(x, dy, ref, N); RESET(dy); cpu_relu_bwd_f64(x, io, io, N); INPLACE_CHECK("relu_bwd");
    cpu_swiglu_fwd_f64(x, b, ref, N); RESET(x); cpu_swiglu_fwd_f64(io, b, io, N); INPLACE_CHECK("swiglu");
    cpu_swiglu_bwd_f64(x, b, dy, ref, ref2, N); RESET(dy); cpu_swiglu_bwd_f64(x, b, io, io, t1, N);
    INPLACE_CHECK("swiglu_bwd da");
    assert_memory_equal(t1, ref2, N * sizeof(double));
    cpu_causal_mask_f64(x, ref, 1, R, D, -INFINITY); RESET(x); cpu_causal_mask_f64(io, io, 1, R, D, -INFINITY);
    if (memcmp(io, ref, N * sizeof(double)) != 0) fail_msg("causal_mask: in place differs");
    cpu_copy_f64(x, ref, N); RESET(x); cpu_copy_f64(io, io, N); INPLACE_CHECK("reshape");
    // pos_embedding: x (1, R, D) + the (R, D) table b
    cpu_pos_embedding_fwd_f64(x, b, ref, 1, R, D); RESET(x); cpu_pos_embedding_fwd_f64(io, b, io, 1, R, D);
    INPLACE_CHECK("pos_embedding");
    // norm backwards: dx over dy
    cpu_rmsnorm_fwd_f64(x, w, t1, st, R, D, 1e-5);
    cpu_rmsnorm_bwd_f64(x, w, st, dy, ref, ref2, R, D);
    RESET(dy);
    cpu_rmsnorm_bwd_f64(x, w, st, io, io, t2, R, D);
    INPLACE_CHECK("rmsnorm_bwd dx");
    assert_memory_equal(t2, ref2, D * sizeof(double));
    cpu_layernorm_fwd_f64(x, w, b, t1, st, R, D, 1e-5);
    double *db = buf_nan(D), *db2 = buf_nan(D);
    cpu_layernorm_bwd_f64(x, w, st, dy, ref, ref2, db, R, D);
    RESET(dy);
    cpu_layernorm_bwd_f64(x, w, st, io, io, t2, db2, R, D);
    INPLACE_CHECK("layernorm_bwd dx");
    assert_memory_equal(t2, ref2, D * sizeof(double));
    assert_memory_equal(db2, db, D * sizeof(double));
#undef INPLACE_CHECK
#undef RESET
    double *bufs[] = {x, b, dy, w, ref, ref2, io, t1, t2, st, db, db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

// ---- sizes large enough to run in parallel: same bits with 1 thread and with several ------------
//
// Every parallel loop splits work by rows, heads or columns and sums each in a fixed order, so
// the results do not depend on the thread count (a wrong per-thread scratch row would show here).
// The cross-entropy loss and the sum of squares add fixed chunks in order: the same bits too.

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

typedef struct {
    double *mm, *att_o, *att_lse, *dq, *dk, *dv, *emb_dw, *rms_dx, *rms_dw, *ln_dx, *ln_dw, *ln_db, *sm, *ce_dx, *rope;
    double loss, sumsq;
} par_out;

enum { PB = 2, PS = 64, PH = 4, PDh = 16, PBT = 4, PM = 64, PN = 96, PK = 80, PROWS = 4096, PD = 96, PV = 64 };
#define PNQ ((int64_t)PB * PS * PH * PDh)

static void par_run(const double *const *in, const int32_t *tok, par_out *o) {
    const double *x = in[0], *w = in[1], *dy = in[2], *q = in[3], *k = in[4], *v = in[5], *dO = in[6], *A = in[7], *B = in[8];
    assert_int_equal(t_matmul_f64(A, B, o->mm, PBT, PM, PN, PK, 0, 1, 0, NULL), 0);
    assert_int_equal(t_attention_fwd_f64(q, k, v, o->att_o, o->att_lse, PB, PS, PH, PDh, 0.0, NULL), 0);
    assert_int_equal(t_attention_bwd_f64(q, k, v, o->att_o, o->att_lse, dO, o->dq, o->dk, o->dv, PB, PS, PH, PDh, 0.0, NULL), 0);
    assert_int_equal(t_embedding_bwd_f64(tok, dy, o->emb_dw, PROWS, PV, PD, NULL), 0);
    double *st = buf_nan(2 * PROWS), *y = buf_nan(PROWS * PD), *lse = buf_nan(PROWS);
    cpu_rmsnorm_fwd_f64(x, w, y, st, PROWS, PD, 1e-5);
    cpu_rmsnorm_bwd_f64(x, w, st, dy, o->rms_dx, o->rms_dw, PROWS, PD);
    cpu_layernorm_fwd_f64(x, w, w, y, st, PROWS, PD, 1e-5);
    cpu_layernorm_bwd_f64(x, w, st, dy, o->ln_dx, o->ln_dw, o->ln_db, PROWS, PD);
    cpu_softmax_fwd_f64(x, o->sm, PROWS, PD);
    assert_int_equal(cpu_cross_entropy_fwd_f64(x, tok, &o->loss, lse, PROWS, PD, NULL), 0);
    assert_int_equal(cpu_cross_entropy_bwd_f64(x, tok, lse, o->ce_dx, PROWS, PD, NULL), 0);
    cpu_rope_f64(x, o->rope, PROWS / 64, 64, PD / 16, 16, 10000.0, 0); // x as (64, 64, 6, 16)
    o->sumsq = cpu_sumsq_f64(x, PROWS * PD);
    free(st);
    free(y);
    free(lse);
}

static void par_alloc(par_out *o) {
    o->mm = buf_nan((int64_t)PBT * PM * PN);
    o->att_o = buf_nan(PNQ);
    o->att_lse = buf_nan(PB * PH * PS);
    o->dq = buf_nan(PNQ);
    o->dk = buf_nan(PNQ);
    o->dv = buf_nan(PNQ);
    o->emb_dw = buf_nan(PV * PD);
    o->rms_dx = buf_nan(PROWS * PD);
    o->rms_dw = buf_nan(PD);
    o->ln_dx = buf_nan(PROWS * PD);
    o->ln_dw = buf_nan(PD);
    o->ln_db = buf_nan(PD);
    o->sm = buf_nan(PROWS * PD);
    o->ce_dx = buf_nan(PROWS * PD);
    o->rope = buf_nan(PROWS * PD);
}

static void par_free(par_out *o) {
    double *b[] = {o->mm, o->att_o, o->att_lse, o->dq, o->dk, o->dv, o->emb_dw, o->rms_dx, o->rms_dw, o->ln_dx, o->ln_dw,
                   o->ln_db, o->sm, o->ce_dx, o->rope};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
}

static void test_parallel_matches_serial(void **state) {
    (void)state;
    test_rng r = {17};
    const int64_t sizes[9] = {PROWS * PD, PD, PROWS * PD, PNQ, PNQ, PNQ, PNQ, (int64_t)PBT * PM * PK, (int64_t)PN * PK};
    double *in[9];
    for (int i = 0; i < 9; i++) in[i] = buf_rand(&r, sizes[i]);
    int32_t *tok = malloc(PROWS * sizeof(int32_t));
    assert_non_null(tok);
    for (int i = 0; i < PROWS; i++) tok[i] = (int32_t)(rng_u64(&r) % PV); // < PV <= PD: valid targets too
    par_out one, many;
    par_alloc(&one);
    par_alloc(&many);
    set_threads(1);
    par_run((const double *const *)in, tok, &one);
    set_threads(3);
    par_run((const double *const *)in, tok, &many);
    set_threads(2);
#define SAME(f, n) \
    do { \
        check_finite(many.f, n, #f); \
        if (memcmp(one.f, many.f, (size_t)(n) * sizeof(double)) != 0) fail_msg("%s: 1 and 3 threads differ", #f); \
    } while (0)
    SAME(mm, (int64_t)PBT * PM * PN);
    SAME(att_o, PNQ);
    SAME(att_lse, PB * PH * PS);
    SAME(dq, PNQ);
    SAME(dk, PNQ);
    SAME(dv, PNQ);
    SAME(emb_dw, PV * PD);
    SAME(rms_dx, PROWS * PD);
    SAME(rms_dw, PD);
    SAME(ln_dx, PROWS * PD);
    SAME(ln_dw, PD);
    SAME(ln_db, PD);
    SAME(sm, PROWS * PD);
    SAME(ce_dx, PROWS * PD);
    SAME(rope, PROWS * PD);
#undef SAME
    if (!(many.loss == one.loss && many.sumsq == one.sumsq))
        fail_msg("loss %.17g vs %.17g, sum of squares %.17g vs %.17g (1 and 3 threads)", one.loss, many.loss,
                 one.sumsq, many.sumsq);
    // and the big matmul (as linear: 2-D B, tb) against a naive sum
    for (int64_t row = 0; row < (int64_t)PBT * PM; row += 37)
        for (int64_t j = 0; j < PN; j++) {
            long double s = 0;
            for (int64_t p = 0; p < PK; p++) s += (long double)in[7][row * PK + p] * in[8][j * PK + p];
            if (!(fabsl((long double)many.mm[row * PN + j] - s) <= 1e-13L))
                fail_msg("large matmul [%lld][%lld] = %.17g, expected %.17Lg", (long long)row, (long long)j,
                         many.mm[row * PN + j], s);
        }
    par_free(&one);
    par_free(&many);
    for (int i = 0; i < 9; i++) free(in[i]);
    free(tok);
}

// ---- the dispatch: cpu_op_supported and cpu_op_run on a hand-built graph ---------------------------

typedef struct {
    stg_graph g;
    stg_tensor t[8];
    stg_op op;
    int in[8];
} mini_graph;

// A graph holding one op; tensors are added with mini_tensor and wired with mini_op.
static void mini_init(mini_graph *m) {
    memset(m, 0, sizeof *m);
    m->g.t = m->t;
    m->g.ops = &m->op;
    m->g.nops = 1;
}

static int mini_tensor(mini_graph *m, const char *name, stg_dtype dt, int ndim, const int64_t *shape) {
    int id = m->g.nt++;
    stg_tensor *t = &m->t[id];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->producer = t->base = t->param = t->grad = t->group = -1;
    return id;
}

static void mini_op(mini_graph *m, stg_op_kind k, int n_in, const int *in, int n_out, const int *out) {
    m->op.kind = k;
    m->op.n_in = n_in;
    for (int i = 0; i < n_in; i++) m->in[i] = in[i];
    m->op.in = m->in;
    m->op.n_out = n_out;
    for (int i = 0; i < n_out; i++) m->op.out[i] = out[i];
    m->op.fwd = -1;
}

static void test_dispatch_every_kind(void **state) {
    (void)state;
    for (int k = 0; k < STG_OP_COUNT; k++)
        if (!cpu_op_supported((stg_op_kind)k)) fail_msg("op kind %d has no CPU kernel", k);
    assert_false(cpu_op_supported(STG_OP_COUNT));
    assert_false(cpu_op_supported((stg_op_kind)-1));
}

static void test_dispatch_run(void **state) {
    (void)state;
    mini_graph m;
    stg_err err = {{0}};
    void *data[8] = {0};

    // global_norm over two f64 tensors: sqrt(9 + 16 + 144) = 13
    mini_init(&m);
    int64_t s2[1] = {2}, s1[1] = {1};
    int a = mini_tensor(&m, "ga", STG_F64, 1, s2), b = mini_tensor(&m, "gb", STG_F64, 1, s1);
    int nrm = mini_tensor(&m, "norm", STG_F64, 0, NULL);
    mini_op(&m, STG_OP_GLOBAL_NORM, 2, (int[]){a, b}, 1, (int[]){nrm});
    double ga[2] = {3, -4}, gb[1] = {12}, norm = NAN;
    data[a] = ga;
    data[b] = gb;
    data[nrm] = &norm;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_true(norm == 13.0);
    // the same in f32
    float fa[2] = {3, -4}, fb[1] = {12}, fnorm = NAN;
    m.t[a].dtype = m.t[b].dtype = m.t[nrm].dtype = STG_F32;
    data[a] = fa;
    data[b] = fb;
    data[nrm] = &fnorm;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_true(fnorm == 13.0f);

    // bf16 is refused with a clear message
    mini_init(&m);
    int64_t sx[2] = {2, 4}, sw[1] = {4}, sr[1] = {2};
    int x = mini_tensor(&m, "x", STG_BF16, 2, sx), w = mini_tensor(&m, "w", STG_F32, 1, sw);
    int y = mini_tensor(&m, "y", STG_BF16, 2, sx), rs = mini_tensor(&m, "rstd", STG_F32, 1, sr);
    mini_op(&m, STG_OP_RMSNORM, 2, (int[]){x, w}, 2, (int[]){y, rs});
    m.op.a.norm.eps = 1e-5;
    float dummy[8] = {0};
    for (int i = 0; i < 4; i++) data[i] = dummy;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), -1);
    assert_string_equal(err.msg, "cpu backend: op rmsnorm (tensor x) is bf16; the CPU backend runs fp32 and fp64");

    // an out-of-range token fails with its position and value
    mini_init(&m);
    int64_t st[1] = {3}, se[2] = {4, 2}, sy[2] = {3, 2};
    int tk = mini_tensor(&m, "tokens", STG_I32, 1, st), emb = mini_tensor(&m, "emb", STG_F32, 2, se);
    int ey = mini_tensor(&m, "h", STG_F32, 2, sy);
    mini_op(&m, STG_OP_EMBEDDING, 2, (int[]){tk, emb}, 1, (int[]){ey});
    int32_t toks[3] = {0, 9, 1};
    float ew[8] = {0}, eo[6];
    data[tk] = toks;
    data[emb] = ew;
    data[ey] = eo;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), -1);
    assert_non_null(strstr(err.msg, "token id 9 at position 1"));
    toks[1] = 3;
    ew[3 * 2 + 1] = 7.5f;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_true(eo[1 * 2 + 1] == 7.5f);

    // matmul with a 3-D A and a 2-D B (broadcast), tb, through the dispatch
    mini_init(&m);
    int64_t sa[3] = {2, 3, 4}, sb[2] = {5, 4}, sc[3] = {2, 3, 5};
    int ma = mini_tensor(&m, "A", STG_F64, 3, sa), mb = mini_tensor(&m, "B", STG_F64, 2, sb);
    int mc = mini_tensor(&m, "C", STG_F64, 3, sc);
    mini_op(&m, STG_OP_MATMUL, 2, (int[]){ma, mb}, 1, (int[]){mc});
    m.op.a.matmul.tb = 1;
    test_rng r = {16};
    double *A = buf_rand(&r, 24), *B = buf_rand(&r, 20), *C = buf_nan(30), *R = buf_nan(30);
    data[ma] = A;
    data[mb] = B;
    data[mc] = C;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_int_equal(t_matmul_f64(A, B, R, 2, 3, 5, 4, 0, 1, 0, NULL), 0);
    assert_memory_equal(C, R, 30 * sizeof(double));
    free(A);
    free(B);
    free(C);
    free(R);

    // adamw: 6 inputs run (step and lr read from the schedule state); 7 (master weights) is CUDA-only
    mini_init(&m);
    int p = mini_tensor(&m, "p", STG_F64, 1, s2), gr = mini_tensor(&m, "p.grad", STG_F64, 1, s2);
    int mm = mini_tensor(&m, "p.m", STG_F64, 1, s2), vv = mini_tensor(&m, "p.v", STG_F64, 1, s2);
    int nn = mini_tensor(&m, "grad_norm", STG_F64, 0, NULL), sch = mini_tensor(&m, "sched", STG_F64, 1, s2);
    int ms = mini_tensor(&m, "p.master", STG_F32, 1, s2);
    mini_op(&m, STG_OP_ADAMW, 6, (int[]){p, gr, mm, vv, nn, sch}, 0, NULL);
    m.op.a.adamw = (stg_adamw_attrs){0.9, 0.99, 1e-3, 0.1, 0.0, 0};
    double pv[2] = {1, -2}, gv[2] = {0.5, -1}, mv[2] = {0, 0}, vv2[2] = {0, 0}, nv = 0.5, sv[2] = {1, 0.01};
    float master[2] = {1, -2};
    data[p] = pv;
    data[gr] = gv;
    data[mm] = mv;
    data[vv] = vv2;
    data[nn] = &nv;
    data[sch] = sv;
    data[ms] = master;
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_true(fabs(pv[0] - 0.98920588235294118) < 1e-15 && fabs(pv[1] - -1.98810891089108911) < 1e-15);
    mini_op(&m, STG_OP_ADAMW, 7, (int[]){p, gr, mm, vv, nn, sch, ms}, 0, NULL);
    assert_int_equal(t_op_run(&m.g, 0, data, &err), -1);
    assert_non_null(strstr(err.msg, "CUDA-only"));
}

// Scratch: the ops that need it say how much (from shapes), fail with a message when given less
// (NULL, one byte short, or sized for fewer threads), write no output then, and run with exactly
// that much. Ops that need none run with NULL.
static void test_dispatch_scratch(void **state) {
    (void)state;
    mini_graph m;
    stg_err err = {{0}};
    void *data[8] = {0};

    // global_norm needs none
    mini_init(&m);
    int64_t s2[1] = {2};
    int a = mini_tensor(&m, "ga", STG_F64, 1, s2), nrm = mini_tensor(&m, "norm", STG_F64, 0, NULL);
    mini_op(&m, STG_OP_GLOBAL_NORM, 1, (int[]){a}, 1, (int[]){nrm});
    double ga[2] = {3, -4}, norm = NAN;
    data[a] = ga;
    data[nrm] = &norm;
    assert_int_equal(cpu_op_scratch_bytes(&m.g, 0), 0);
    assert_int_equal(cpu_op_run(&m.g, 0, data, NULL, 0, &err), 0);
    assert_true(norm == 5.0);
    assert_int_equal(cpu_op_scratch_bytes(&m.g, 7), 0); // no such op
    assert_int_equal(cpu_op_scratch_bytes(NULL, 0), 0);

    // matmul (f32, tb: B is converted to double in scratch)
    mini_init(&m);
    int64_t sa[3] = {2, 3, 4}, sb[2] = {5, 4}, sc[3] = {2, 3, 5};
    int ma = mini_tensor(&m, "A", STG_F32, 3, sa), mb = mini_tensor(&m, "B", STG_F32, 2, sb);
    int mc = mini_tensor(&m, "C", STG_F32, 3, sc);
    mini_op(&m, STG_OP_MATMUL, 2, (int[]){ma, mb}, 1, (int[]){mc});
    m.op.a.matmul.tb = 1;
    float A[24], B[20], C[30];
    for (int i = 0; i < 24; i++) A[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 20; i++) B[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 30; i++) C[i] = NAN;
    data[ma] = A;
    data[mb] = B;
    data[mc] = C;
    size_t need = cpu_op_scratch_bytes(&m.g, 0);
    assert_true(need >= 20 * sizeof(double)); // at least B in double
    assert_int_equal(need, cpu_matmul_scratch_f32(2, 3, 5, 4, 0, 1, 0));
    // an exact-size heap buffer: ASan reports a kernel that writes past what it asked for
    char *buf = malloc(need);
    assert_non_null(buf);
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "cpu backend: op matmul (C): matmul: scratch is 0 bytes"));
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, buf, need - 1, &err), -1);
    assert_non_null(strstr(err.msg, "scratch"));
    assert_non_null(strstr(err.msg, "needs"));
    for (int i = 0; i < 30; i++) assert_true(isnan(C[i])); // nothing written
    assert_int_equal(cpu_op_run(&m.g, 0, data, buf, need, &err), 0);
    for (int i = 0; i < 30; i++) assert_false(isnan(C[i]));
    // A (2, 3, 4) x B^T (4, 5): C[0][0][0] = sum_p A[p] B[p]
    float c000 = 0.0f;
    for (int p = 0; p < 4; p++) c000 += A[p] * B[p];
    assert_true(C[0] == c000);
#ifdef _OPENMP
    // Sized for one thread, run where more may be used: too small, and said so (not a crash).
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    size_t need1 = cpu_op_scratch_bytes(&m.g, 0);
    omp_set_num_threads(4);
    size_t need4 = cpu_op_scratch_bytes(&m.g, 0);
    assert_true(need4 > need1);
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, buf, need1, &err), -1);
    assert_non_null(strstr(err.msg, "4 threads"));
    omp_set_num_threads(saved);
#endif
    free(buf);

    // attention, its backward, embedding_bwd and linear (f64): each needs scratch and refuses too little
    mini_init(&m);
    int64_t sq[4] = {1, 4, 2, 2}, sl[3] = {1, 2, 4};
    int q = mini_tensor(&m, "q", STG_F64, 4, sq), k = mini_tensor(&m, "k", STG_F64, 4, sq);
    int v = mini_tensor(&m, "v", STG_F64, 4, sq), o = mini_tensor(&m, "o", STG_F64, 4, sq);
    int l = mini_tensor(&m, "lse", STG_F64, 3, sl);
    mini_op(&m, STG_OP_ATTENTION, 3, (int[]){q, k, v}, 2, (int[]){o, l});
    double qkv[16] = {0}, ob[16], lb[8];
    for (int i = 0; i < 16; i++) qkv[i] = 0.1 * i;
    for (int i = 0; i < 16; i++) ob[i] = NAN;
    data[q] = data[k] = data[v] = qkv;
    data[o] = ob;
    data[l] = lb;
    need = cpu_op_scratch_bytes(&m.g, 0);
    assert_true(need >= 6 * sizeof(double)); // scores (S) and an accumulator (Dh)
    buf = malloc(need);
    assert_non_null(buf);
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, buf, need / 2, &err), -1);
    assert_non_null(strstr(err.msg, "cpu backend: op attention (o): attention: scratch is"));
    for (int i = 0; i < 16; i++) assert_true(isnan(ob[i]));
    assert_int_equal(cpu_op_run(&m.g, 0, data, buf, need, &err), 0);
    free(buf);
    // the kernel checks on its own too
    err.msg[0] = 0;
    assert_int_equal(cpu_attention_bwd_f64(qkv, qkv, qkv, NULL, ob, lb, qkv, ob, ob, ob, 1, 4, 2, 2, 2, 0.0, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "attention backward: scratch is 0 bytes"));
    assert_true(cpu_attention_bwd_scratch_f64(1, 4, 2, 2) >= 2 * 4 * 2 * sizeof(double));

    int64_t st[1] = {3}, sw[2] = {4, 2}, sy[2] = {3, 2};
    int32_t toks[3] = {0, 3, 0};
    double dy[6] = {1, 2, 3, 4, 5, 6}, dW[8];
    err.msg[0] = 0;
    assert_int_equal(cpu_embedding_bwd_f64(toks, dy, dW, 3, 4, 2, 0, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "embedding backward: scratch is 0 bytes"));
    mini_init(&m);
    int tk = mini_tensor(&m, "tokens", STG_I32, 1, st), dyt = mini_tensor(&m, "dy", STG_F64, 2, sy);
    int dwt = mini_tensor(&m, "emb.grad", STG_F64, 2, sw);
    mini_op(&m, STG_OP_EMBEDDING_BWD, 2, (int[]){tk, dyt}, 1, (int[]){dwt});
    data[tk] = toks;
    data[dyt] = dy;
    data[dwt] = dW;
    assert_int_equal(cpu_op_scratch_bytes(&m.g, 0), cpu_embedding_bwd_scratch_f64(3, 4, 2));
    assert_int_equal(cpu_op_scratch_bytes(&m.g, 0), (4 + 1 + 3) * sizeof(int64_t));
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "cpu backend: op embedding_bwd (emb.grad): embedding backward: scratch"));
    assert_int_equal(t_op_run(&m.g, 0, data, &err), 0);
    assert_true(dW[0] == 1 + 5 && dW[1] == 2 + 6 && dW[2] == 0 && dW[6] == 3 && dW[7] == 4);

    mini_init(&m);
    int64_t sx[2] = {3, 4}, sW[2] = {5, 4}, so[2] = {3, 5};
    int x = mini_tensor(&m, "x", STG_F64, 2, sx), W = mini_tensor(&m, "W", STG_F64, 2, sW);
    int y = mini_tensor(&m, "y", STG_F64, 2, so);
    mini_op(&m, STG_OP_LINEAR, 2, (int[]){x, W}, 1, (int[]){y});
    assert_int_equal(cpu_op_scratch_bytes(&m.g, 0), cpu_matmul_scratch_f64(1, 3, 5, 4, 0, 1, 0));
    assert_true(cpu_op_scratch_bytes(&m.g, 0) >= 20 * sizeof(double));
    double xb[12] = {0}, Wb[20] = {0}, yb[15];
    data[x] = xb;
    data[W] = Wb;
    data[y] = yb;
    err.msg[0] = 0;
    assert_int_equal(cpu_op_run(&m.g, 0, data, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "cpu backend: op linear (y): matmul: scratch"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_norms_and_embedding),
        cmocka_unit_test(test_fd_linear_matmul),
        cmocka_unit_test(test_fd_attention_path),
        cmocka_unit_test(test_fd_elementwise_and_layout),
        cmocka_unit_test(test_f32_matches_f64),
        cmocka_unit_test(test_attention_matches_naive),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_adamw_hand_example),
        cmocka_unit_test(test_global_norm_kernel),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_causal_mask_softmax),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_matmul_all_forms),
        cmocka_unit_test(test_in_place),
        cmocka_unit_test(test_parallel_matches_serial),
        cmocka_unit_test(test_dispatch_every_kind),
        cmocka_unit_test(test_dispatch_run),
        cmocka_unit_test(test_dispatch_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
