// The CUDA kernels against the CPU reference: every op kind, run through cuda_op_run on a tiny
// one-op graph, in fp32 and bf16, at the sizes users run (d_model 1600 and 2560, vocab 10000,
// head_dim 64 and 80, ctx 200 and 1024, 25 heads; grouped-query attention and packed documents). Inputs are fresh random values (never zeros),
// outputs are poisoned (0xFF bytes: NaN) before each run, and the result is compared by
// max |gpu - cpu| / max |cpu| (fp32 < 1e-5, bf16 < 2e-2; NaN fails). Each case also runs in place
// where the registry allows it, a second time (bitwise equal), and replayed from a captured CUDA
// Graph (bitwise equal to eager). The global norm, learning-rate schedule and multi-tensor AdamW
// run together over parameters of several sizes, also in the bf16 master-weight form.
//
// Exits 77 (skipped) without CUDA or without a GPU.
#include "tests/gpu.h"

#ifdef STG_HAVE_CUDA

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "ops/cpu/cpu.h"
#include "ops/cpu/kernels.h"
#include "ops/cuda/cuda.h"
#include "ops/registry.h"
#include "tests/gpu_kernels.h"

// ---- host helpers -------------------------------------------------------------------------------

static float round_bf(float f) { return gk_round_bf(f); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void) { return tu_urand(&rng); } // [0, 1)

static float nrand(void) { return (float)tu_nrand(&rng); }

// ---- one op in a tiny graph --------------------------------------------------------------------

enum { R_ACT, R_GRAD, R_I32 };   // dtype role: the graph's act dtype, its grad dtype, i32
enum {
    G_NORMAL,  // N(0, 1) * p
    G_POS,     // uniform [0.5, 2)
    G_TOK,     // integers in [0, p)
    G_STATS,   // layernorm (rows, 2): [mean N(0, 0.5), rstd uniform [0.5, 2)]
    G_MASKED,  // N(0, 1) with 10% -inf, the first row all -inf
    G_UNIT,    // uniform [0, 1)
    G_SCHED,   // schedule state [p steps done, lr 0.5]
    G_LSE,     // log-sum-exp of each row of input 0 (cross-entropy backward)
    G_ATT_O,   // attention output of inputs 0..2 (attention backward)
    G_ATT_LSE, // attention log-sum-exp of inputs 0..2 (and the docs input 6 when there)
    G_DOCS,    // packed documents (B, S): each position's document start, lengths 1 .. 2p (seeded by p)
    G_TOK_IGN, // integers in [0, p), a quarter of them -1 (ignored targets); p < 0: all -1
};

typedef struct {
    int role, gen;
    double p;
    int ndim;
    int64_t shape[STG_MAX_DIMS];
    stg_tclass cls;
} in_spec;

typedef struct {
    const char *name;
    stg_op_kind kind;
    int n_in;
    in_spec in[8];
    stg_attrs a;
} op_case;

#define SH(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}
#define ACT(gen, p, ...) {R_ACT, gen, p, SH(__VA_ARGS__), STG_CLASS_INPUT}
#define PRM(gen, p, ...) {R_ACT, gen, p, SH(__VA_ARGS__), STG_CLASS_PARAM}
// Inputs of the grad dtype (statistics, gradients). Class INPUT: the scheduler accepts unwritten
// tensors only of the persistent classes.
#define GRD(gen, p, ...) {R_GRAD, gen, p, SH(__VA_ARGS__), STG_CLASS_INPUT}
#define I32(gen, p, ...) {R_I32, gen, p, SH(__VA_ARGS__), STG_CLASS_INPUT}

static stg_graph *build(const op_case *oc, stg_precision prec, int *op) {
    stg_err err = {{0}};
    stg_graph *g = graph_new(prec, &err);
    assert_non_null(g);
    int ids[8];
    for (int i = 0; i < oc->n_in; i++) {
        const in_spec *s = &oc->in[i];
        stg_dtype dt = s->role == R_I32 ? STG_I32 : s->role == R_GRAD ? g->grad_dtype : g->act_dtype;
        char nm[32];
        snprintf(nm, sizeof nm, "in%d", i);
        ids[i] = graph_add_tensor(g, nm, s->ndim, s->shape, dt, s->cls, (stg_loc){0}, &err);
        assert_true(ids[i] >= 0);
    }
    *op = graph_add_op(g, oc->kind, ids, oc->n_in, &oc->a, STG_PHASE_FORWARD, "out", (stg_loc){0}, NULL, &err);
    if (*op < 0) fail_msg("%s: graph_add_op: %s", oc->name, err.msg);
    if (graph_schedule(g, &err)) fail_msg("%s: graph_schedule: %s", oc->name, err.msg);
    return g;
}

// Document starts (B, S) of rows packed with documents of random lengths 1 .. 2 mean (the same for the
// same arguments: the attention backward's o and lse are made before its docs input).
static void docs_fill(int32_t *d, int64_t B, int64_t S, double mean) {
    uint64_t r = 0x853c49e6748fea9bull ^ (uint64_t)(mean * 1000);
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0, start = 0, end = 0; s < S; s++) {
            if (s == end) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                start = s;
                end = s + 1 + (int64_t)((r >> 33) % (uint64_t)(2 * mean));
            }
            d[b * S + s] = (int32_t)start;
        }
}

static void gen_input(const op_case *oc, const stg_graph *g, int op, int i, float **host) {
    const in_spec *s = &oc->in[i];
    const stg_tensor *t = &g->t[g->ops[op].in[i]];
    int64_t n = stg_numel(t);
    float *h = host[g->ops[op].in[i]];
    int32_t *hi = (int32_t *)h;
    switch (s->gen) {
    case G_NORMAL: for (int64_t k = 0; k < n; k++) h[k] = nrand() * (float)s->p; break;
    case G_POS: for (int64_t k = 0; k < n; k++) h[k] = (float)(0.5 + 1.5 * urand()); break;
    case G_TOK: for (int64_t k = 0; k < n; k++) hi[k] = (int32_t)(urand() * s->p); break;
    case G_STATS:
        for (int64_t k = 0; k < n; k += 2) {
            h[k] = 0.5f * nrand();
            h[k + 1] = (float)(0.5 + 1.5 * urand());
        }
        break;
    case G_MASKED: {
        int64_t last = t->shape[t->ndim - 1];
        for (int64_t k = 0; k < n; k++) h[k] = (k < last || urand() < 0.1) ? -INFINITY : nrand();
        break;
    }
    case G_UNIT: for (int64_t k = 0; k < n; k++) h[k] = (float)urand(); break;
    case G_DOCS: docs_fill(hi, t->shape[0], t->shape[1], s->p); break;
    case G_TOK_IGN:
        for (int64_t k = 0; k < n; k++) hi[k] = s->p < 0 || urand() < 0.25 ? -1 : (int32_t)(urand() * s->p);
        break;
    case G_SCHED:
        h[0] = (float)s->p;
        h[1] = 0.5f;
        break;
    case G_LSE: {
        const stg_tensor *x = &g->t[g->ops[op].in[0]];
        const float *xv = host[g->ops[op].in[0]];
        int64_t V = x->shape[x->ndim - 1];
        for (int64_t r = 0; r < n; r++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < V; j++) mx = fmax(mx, xv[r * V + j]);
            for (int64_t j = 0; j < V; j++) sum += exp(xv[r * V + j] - mx);
            h[r] = (float)(mx + log(sum));
        }
        break;
    }
    case G_ATT_O:
    case G_ATT_LSE: {
        const stg_op *o = &g->ops[op];
        const stg_tensor *q = &g->t[o->in[0]];
        int64_t B = q->shape[0], S = q->shape[1], H = q->shape[2], Dh = q->shape[3], Hkv = g->t[o->in[1]].shape[2];
        float *ob = malloc(sizeof(float) * (size_t)stg_numel(q)), *lb = malloc(sizeof(float) * (size_t)(B * H * S));
        int32_t *docs = NULL;
        if (o->n_in > 6) { // the backward's docs input, as G_DOCS will make it
            docs = malloc(sizeof(int32_t) * (size_t)(B * S));
            docs_fill(docs, B, S, oc->in[6].p);
        }
        stg_err err = {{0}};
        size_t sb = cpu_attention_fwd_scratch_f32(B, S, H, Dh);
        void *scr = sb ? malloc(sb) : NULL;
        if (cpu_attention_fwd_f32(host[o->in[0]], host[o->in[1]], host[o->in[2]], docs, ob, lb, B, S, H, Hkv, Dh,
                                  o->a.attention.scale, scr, sb, &err))
            fail_msg("cpu attention: %s", err.msg);
        free(scr);
        free(docs);
        memcpy(h, s->gen == G_ATT_O ? ob : lb, (size_t)n * sizeof(float));
        free(ob);
        free(lb);
        break;
    }
    }
}

// Compares every written tensor of the device graph gd with the reference values ref[t].
static void compare(const char *name, const stg_graph *gd, gk_dev *d, float *const *ref, double tol_f32,
                    double tol_bf16, const char *mode) {
    for (int t = 0; t < gd->nt; t++) {
        if (!d->dptr[t] || !gk_written(gd, t)) continue;
        const stg_tensor *tt = &gd->t[t];
        int64_t n = stg_numel(tt);
        float *got = malloc(sizeof(float) * (size_t)n);
        void *raw = gk_read(tt, d->dptr[t], got);
        int64_t bad;
        double e = rel_err_f32(got, ref[t], n, true, &bad);
        double tol = gd->precision == STG_PREC_BF16 ? tol_bf16 : tol_f32;
        printf("  %-34s %-4s %-10s %-14s rel err %.3e%s\n", name, gd->precision == STG_PREC_BF16 ? "bf16" : "fp32",
               mode, tt->name, e, e < tol ? "" : "  FAIL");
        if (!(e < tol))
            fail_msg("%s (%s, %s): tensor %s: rel err %g >= %g (at %lld: gpu %g, cpu %g)", name,
                     gd->precision == STG_PREC_BF16 ? "bf16" : "fp32", mode, tt->name, e, tol, (long long)bad,
                     bad >= 0 ? got[bad] : 0.0, bad >= 0 ? ref[t][bad] : 0.0);
        free(raw);
        free(got);
    }
}

static void run_case_prec(const op_case *oc, stg_precision prec, int inplace) {
    int opr, opd;
    stg_graph *gr = build(oc, STG_PREC_FP32, &opr);
    stg_graph *gd = build(oc, prec, &opd);
    assert_int_equal(gr->nt, gd->nt);
    int alias = inplace ? ops_def(oc->kind)->inplace_in : -1;
    assert_true(alias < oc->n_in);

    gk_dev d;
    gk_dev_alloc(gd, opd, alias, &d);
    // Inputs: generated, rounded to the device dtype (the CPU gets the rounded values).
    for (int i = 0; i < oc->n_in; i++) {
        int t = gd->ops[opd].in[i];
        gen_input(oc, gd, opd, i, d.host);
        if (gd->t[t].dtype == STG_BF16)
            for (int64_t k = 0; k < stg_numel(&gd->t[t]); k++) d.host[t][k] = round_bf(d.host[t][k]);
    }

    // CPU reference on the fp32 graph, outputs poisoned.
    float **ref = gk_ref_alloc(gr, d.host);
    stg_err err = {{0}};
    if (gk_cpu_run(gr, opr, (void *const *)ref, &err)) fail_msg("%s: cpu_op_run: %s", oc->name, err.msg);

    // GPU: eager, again (bitwise), and from a captured graph (bitwise).
    if (cuda_prepare(ctx, gd, d.dptr, &err)) fail_msg("%s: cuda_prepare: %s", oc->name, err.msg);
    gk_upload_and_poison(gd, &d);
    gk_run(gd, d.dptr, 0);
    compare(oc->name, gd, &d, ref, 1e-5, 2e-2, inplace ? "in-place" : "eager");
    gk_expect_repeatable(gd, &d, oc->name);

    gk_ref_free(gr, ref);
    gk_dev_free(&d);
    graph_free(gr);
    graph_free(gd);
}

static void run_case(const op_case *oc) {
    for (int p = 0; p < 2; p++) {
        stg_precision prec = p ? STG_PREC_BF16 : STG_PREC_FP32;
        run_case_prec(oc, prec, 0);
        int ip = ops_def(oc->kind)->inplace_in; // an optional input (embedding_bwd's addend) may be absent
        if (ip >= 0 && ip < oc->n_in) run_case_prec(oc, prec, 1);
    }
}

static void run_cases(const op_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) run_case(&cases[i]);
}

static stg_attrs attrs0(void) {
    stg_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

// ---- the cases --------------------------------------------------------------------------------

static void test_elementwise(void **state) {
    (void)state;
    stg_attrs sc = attrs0();
    sc.scale.factor = -0.37;
    const op_case cases[] = {
        {"silu (2, 200, 1600)", STG_OP_SILU, 1, {ACT(G_NORMAL, 3, 2, 200, 1600)}, attrs0()},
        {"silu odd (7, 333)", STG_OP_SILU, 1, {ACT(G_NORMAL, 3, 7, 333)}, attrs0()},
        {"gelu (2, 200, 3072)", STG_OP_GELU, 1, {ACT(G_NORMAL, 3, 2, 200, 3072)}, attrs0()},
        {"gelu odd (7, 333)", STG_OP_GELU, 1, {ACT(G_NORMAL, 3, 7, 333)}, attrs0()},
        {"gelu_bwd (2, 200, 3072)", STG_OP_GELU_BWD, 2, {ACT(G_NORMAL, 3, 2, 200, 3072), ACT(G_NORMAL, 1, 2, 200, 3072)}, attrs0()},
        {"gelu_bwd odd (5, 77)", STG_OP_GELU_BWD, 2, {ACT(G_NORMAL, 3, 5, 77), ACT(G_NORMAL, 1, 5, 77)}, attrs0()},
        {"silu_bwd (2, 200, 2560)", STG_OP_SILU_BWD, 2, {ACT(G_NORMAL, 3, 2, 200, 2560), ACT(G_NORMAL, 1, 2, 200, 2560)}, attrs0()},
        {"relu (2, 200, 1600)", STG_OP_RELU, 1, {ACT(G_NORMAL, 1, 2, 200, 1600)}, attrs0()},
        {"relu_bwd (7, 333)", STG_OP_RELU_BWD, 2, {ACT(G_NORMAL, 1, 7, 333), ACT(G_NORMAL, 1, 7, 333)}, attrs0()},
        {"swiglu (2, 200, 1600)", STG_OP_SWIGLU, 2, {ACT(G_NORMAL, 3, 2, 200, 1600), ACT(G_NORMAL, 1, 2, 200, 1600)}, attrs0()},
        {"swiglu_bwd (3, 1001)", STG_OP_SWIGLU_BWD, 3,
         {ACT(G_NORMAL, 3, 3, 1001), ACT(G_NORMAL, 1, 3, 1001), ACT(G_NORMAL, 1, 3, 1001)}, attrs0()},
        {"swiglu_bwd (2, 100, 2560)", STG_OP_SWIGLU_BWD, 3,
         {ACT(G_NORMAL, 3, 2, 100, 2560), ACT(G_NORMAL, 1, 2, 100, 2560), ACT(G_NORMAL, 1, 2, 100, 2560)}, attrs0()},
        {"mul (2, 200, 1600)", STG_OP_MUL, 2, {ACT(G_NORMAL, 1, 2, 200, 1600), ACT(G_NORMAL, 1, 2, 200, 1600)}, attrs0()},
        {"add (7, 333)", STG_OP_ADD, 2, {ACT(G_NORMAL, 1, 7, 333), ACT(G_NORMAL, 1, 7, 333)}, attrs0()},
        {"add (2, 200, 1600)", STG_OP_ADD, 2, {ACT(G_NORMAL, 1, 2, 200, 1600), ACT(G_NORMAL, 1, 2, 200, 1600)}, attrs0()},
        {"scale (2, 200, 1600)", STG_OP_SCALE, 1, {ACT(G_NORMAL, 1, 2, 200, 1600)}, sc},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_norms(void **state) {
    (void)state;
    stg_attrs a = attrs0();
    a.norm.eps = 1e-5;
    const op_case cases[] = {
        {"rmsnorm (2, 200, 1600)", STG_OP_RMSNORM, 2, {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 1, 1600)}, a},
        {"rmsnorm (3, 50, 2560)", STG_OP_RMSNORM, 2, {ACT(G_NORMAL, 2, 3, 50, 2560), PRM(G_NORMAL, 1, 2560)}, a},
        {"rmsnorm_bwd (2, 200, 1600)", STG_OP_RMSNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 1, 1600), GRD(G_POS, 0, 2, 200), ACT(G_NORMAL, 1, 2, 200, 1600)}, a},
        {"rmsnorm_bwd (1, 700, 2560)", STG_OP_RMSNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 1, 700, 2560), PRM(G_NORMAL, 1, 2560), GRD(G_POS, 0, 1, 700), ACT(G_NORMAL, 1, 1, 700, 2560)}, a},
        {"rmsnorm odd (3, 70, 1001)", STG_OP_RMSNORM, 2, {ACT(G_NORMAL, 1, 3, 70, 1001), PRM(G_NORMAL, 1, 1001)}, a},
        {"rmsnorm_bwd odd (3, 70, 1001)", STG_OP_RMSNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 3, 70, 1001), PRM(G_NORMAL, 1, 1001), GRD(G_POS, 0, 3, 70), ACT(G_NORMAL, 1, 3, 70, 1001)}, a},
        {"rmsnorm_bwd (4, 512, 768)", STG_OP_RMSNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 4, 512, 768), PRM(G_NORMAL, 1, 768), GRD(G_POS, 0, 4, 512), ACT(G_NORMAL, 1, 4, 512, 768)}, a},
        {"layernorm odd (2, 100, 1001)", STG_OP_LAYERNORM, 3,
         {ACT(G_NORMAL, 2, 2, 100, 1001), PRM(G_NORMAL, 1, 1001), PRM(G_NORMAL, 1, 1001)}, a},
        {"layernorm_bwd (4, 300, 512)", STG_OP_LAYERNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 4, 300, 512), PRM(G_NORMAL, 1, 512), GRD(G_STATS, 0, 4, 300, 2), ACT(G_NORMAL, 1, 4, 300, 512)}, a},
        {"layernorm (2, 200, 1600)", STG_OP_LAYERNORM, 3,
         {ACT(G_NORMAL, 2, 2, 200, 1600), PRM(G_NORMAL, 1, 1600), PRM(G_NORMAL, 1, 1600)}, a},
        {"layernorm_bwd (2, 200, 1600)", STG_OP_LAYERNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 1, 1600), GRD(G_STATS, 0, 2, 200, 2), ACT(G_NORMAL, 1, 2, 200, 1600)}, a},
        {"layernorm_bwd (1, 300, 2560)", STG_OP_LAYERNORM_BWD, 4,
         {ACT(G_NORMAL, 1, 1, 300, 2560), PRM(G_NORMAL, 1, 2560), GRD(G_STATS, 0, 1, 300, 2), ACT(G_NORMAL, 1, 1, 300, 2560)}, a},
        // with the addend (the residual stream's gradient so far): vectorised and row-per-block paths
        {"rmsnorm_bwd + addend (2, 200, 1600)", STG_OP_RMSNORM_BWD, 5,
         {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 1, 1600), GRD(G_POS, 0, 2, 200), ACT(G_NORMAL, 1, 2, 200, 1600),
          ACT(G_NORMAL, 2, 2, 200, 1600)}, a},
        {"rmsnorm_bwd + addend odd (3, 70, 1001)", STG_OP_RMSNORM_BWD, 5,
         {ACT(G_NORMAL, 1, 3, 70, 1001), PRM(G_NORMAL, 1, 1001), GRD(G_POS, 0, 3, 70), ACT(G_NORMAL, 1, 3, 70, 1001),
          ACT(G_NORMAL, 2, 3, 70, 1001)}, a},
        // more rows than one wave of blocks holds: blocks of 10 and 11 rows on an H100
        {"rmsnorm_bwd + addend (4, 1030, 2560)", STG_OP_RMSNORM_BWD, 5,
         {ACT(G_NORMAL, 1, 4, 1030, 2560), PRM(G_NORMAL, 1, 2560), GRD(G_POS, 0, 4, 1030), ACT(G_NORMAL, 1, 4, 1030, 2560),
          ACT(G_NORMAL, 2, 4, 1030, 2560)}, a},
        {"layernorm_bwd + addend (3, 1100, 768)", STG_OP_LAYERNORM_BWD, 5,
         {ACT(G_NORMAL, 1, 3, 1100, 768), PRM(G_NORMAL, 1, 768), GRD(G_STATS, 0, 3, 1100, 2), ACT(G_NORMAL, 1, 3, 1100, 768),
          ACT(G_NORMAL, 2, 3, 1100, 768)}, a},
        {"layernorm_bwd + addend (2, 200, 1600)", STG_OP_LAYERNORM_BWD, 5,
         {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 1, 1600), GRD(G_STATS, 0, 2, 200, 2), ACT(G_NORMAL, 1, 2, 200, 1600),
          ACT(G_NORMAL, 2, 2, 200, 1600)}, a},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_rope_mask_softmax(void **state) {
    (void)state;
    stg_attrs r = attrs0(), ri = attrs0(), m = attrs0(), m0 = attrs0();
    r.rope.theta = 10000.0;
    ri.rope.theta = 10000.0;
    ri.rope.inverse = 1;
    m.mask.fill = -INFINITY;
    m0.mask.fill = 0.0;
    const op_case cases[] = {
        {"rope (2, 200, 25, 64)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 2, 200, 25, 64)}, r},
        {"rope (1, 1024, 4, 80)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 1, 1024, 4, 80)}, r},
        {"rope inverse (2, 1024, 2, 80)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 2, 1024, 2, 80)}, ri},
        {"rope (4, 512, 12, 64)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 4, 512, 12, 64)}, r},
        // 2.7B's heads: a position's vectors in 2 (bf16) or 3 (fp32) chunks, up to 4 vectors a thread
        {"rope inverse (4, 96, 32, 80)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 4, 96, 32, 80)}, ri},
        {"rope odd head (2, 30, 3, 6)", STG_OP_ROPE, 1, {ACT(G_NORMAL, 1, 2, 30, 3, 6)}, ri},
        {"causal_mask (2, 3, 200, 200)", STG_OP_CAUSAL_MASK, 1, {ACT(G_NORMAL, 1, 2, 3, 200, 200)}, m},
        {"causal_mask fill 0 (3, 100, 200)", STG_OP_CAUSAL_MASK, 1, {ACT(G_NORMAL, 1, 3, 100, 200)}, m0},
        {"softmax (2, 3, 200, 200) with -inf", STG_OP_SOFTMAX, 1, {ACT(G_MASKED, 0, 2, 3, 200, 200)}, attrs0()},
        {"softmax (16, 10000)", STG_OP_SOFTMAX, 1, {ACT(G_NORMAL, 3, 16, 10000)}, attrs0()},
        {"softmax (4, 1024)", STG_OP_SOFTMAX, 1, {ACT(G_NORMAL, 3, 4, 1024)}, attrs0()},
        {"softmax_bwd (2, 3, 200, 200)", STG_OP_SOFTMAX_BWD, 2, {ACT(G_UNIT, 0, 2, 3, 200, 200), ACT(G_NORMAL, 1, 2, 3, 200, 200)}, attrs0()},
        {"softmax_bwd (8, 10000)", STG_OP_SOFTMAX_BWD, 2, {ACT(G_UNIT, 0, 8, 10000), ACT(G_NORMAL, 1, 8, 10000)}, attrs0()},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_embedding_loss_layout(void **state) {
    (void)state;
    stg_attrs eb = attrs0(), eb2 = attrs0(), eb3 = attrs0(), eb4 = attrs0(), rs = attrs0(), tr = attrs0(), tr2 = attrs0(), pe = attrs0(),
              pe2 = attrs0();
    pe.pos_embedding_bwd.positions = 1024;
    pe.pos_embedding_bwd.grad_out = 1;
    pe2.pos_embedding_bwd.positions = 50;
    eb.embedding_bwd.vocab = 1000;
    eb2.embedding_bwd.vocab = 10000;
    eb3.embedding_bwd.vocab = 20;
    eb4.embedding_bwd.vocab = 50000;
    rs.reshape.ndim = 2;
    rs.reshape.shape[0] = 400;
    rs.reshape.shape[1] = 1600;
    tr.transpose.d0 = 1;
    tr.transpose.d1 = 2;
    tr2.transpose.d0 = 0;
    tr2.transpose.d1 = -1;
    const op_case cases[] = {
        {"embedding (2, 200) x (10000, 256)", STG_OP_EMBEDDING, 2, {I32(G_TOK, 10000, 2, 200), PRM(G_NORMAL, 1, 10000, 256)}, attrs0()},
        {"embedding (4, 100) x (1000, 1600)", STG_OP_EMBEDDING, 2, {I32(G_TOK, 1000, 4, 100), PRM(G_NORMAL, 1, 1000, 1600)}, attrs0()},
        {"embedding_bwd (2, 200, 1600) V 1000", STG_OP_EMBEDDING_BWD, 2, {I32(G_TOK, 1000, 2, 200), ACT(G_NORMAL, 1, 2, 200, 1600)}, eb},
        {"embedding_bwd (2, 200, 256) V 10000", STG_OP_EMBEDDING_BWD, 2, {I32(G_TOK, 10000, 2, 200), ACT(G_NORMAL, 1, 2, 200, 256)}, eb2},
        {"embedding_bwd (4, 512, 768) V 10000", STG_OP_EMBEDDING_BWD, 2, {I32(G_TOK, 10000, 4, 512), ACT(G_NORMAL, 1, 4, 512, 768)}, eb2},
        {"embedding_bwd (2, 300, 250) V 20", STG_OP_EMBEDDING_BWD, 2, {I32(G_TOK, 20, 2, 300), ACT(G_NORMAL, 1, 2, 300, 250)}, eb3},
        // With an addend (a tied weight's other gradient): copied into dW, or dW in its buffer (in-place).
        {"embedding_bwd + addend (2, 200, 1600) V 1000", STG_OP_EMBEDDING_BWD, 3,
         {I32(G_TOK, 1000, 2, 200), ACT(G_NORMAL, 1, 2, 200, 1600), GRD(G_NORMAL, 1, 1000, 1600)}, eb},
        {"embedding_bwd + addend (2, 300, 250) V 20", STG_OP_EMBEDDING_BWD, 3,
         {I32(G_TOK, 20, 2, 300), ACT(G_NORMAL, 1, 2, 300, 250), GRD(G_NORMAL, 1, 20, 250)}, eb3},
        // most rows read by no token (a large vocabulary): they keep the addend
        {"embedding_bwd + addend (2, 200, 64) V 50000", STG_OP_EMBEDDING_BWD, 3,
         {I32(G_TOK, 50000, 2, 200), ACT(G_NORMAL, 1, 2, 200, 64), GRD(G_NORMAL, 1, 50000, 64)}, eb4},
        {"cross_entropy (2, 100, 10000)", STG_OP_CROSS_ENTROPY, 2, {ACT(G_NORMAL, 3, 2, 100, 10000), I32(G_TOK, 10000, 2, 100)}, attrs0()},
        {"cross_entropy_bwd (2, 100, 10000)", STG_OP_CROSS_ENTROPY_BWD, 3,
         {ACT(G_NORMAL, 3, 2, 100, 10000), I32(G_TOK, 10000, 2, 100), GRD(G_LSE, 0, 2, 100)}, attrs0()},
        {"reshape (2, 200, 1600) copy", STG_OP_RESHAPE, 1, {ACT(G_NORMAL, 1, 2, 200, 1600)}, rs},
        {"transpose (2, 200, 25, 64) 1<->2", STG_OP_TRANSPOSE, 1, {ACT(G_NORMAL, 1, 2, 200, 25, 64)}, tr},
        {"transpose (3, 5, 7) 0<->-1", STG_OP_TRANSPOSE, 1, {ACT(G_NORMAL, 1, 3, 5, 7)}, tr2},
        // GPT-2's position embedding (added in place where allowed) and its gradient, and the split of
        // the fused qkv (and its inverse)
        {"pos_embedding (4, 1024, 768) + (1024, 768)", STG_OP_POS_EMBEDDING, 2,
         {ACT(G_NORMAL, 1, 4, 1024, 768), PRM(G_NORMAL, 0.5, 1024, 768)}, attrs0()},
        {"pos_embedding odd (3, 37, 100) + (50, 100)", STG_OP_POS_EMBEDDING, 2,
         {ACT(G_NORMAL, 1, 3, 37, 100), PRM(G_NORMAL, 0.5, 50, 100)}, attrs0()},
        {"pos_embedding_bwd (4, 1024, 768) P 1024", STG_OP_POS_EMBEDDING_BWD, 1, {ACT(G_NORMAL, 1, 4, 1024, 768)}, pe},
        {"pos_embedding_bwd odd (3, 37, 100) P 50", STG_OP_POS_EMBEDDING_BWD, 1, {ACT(G_NORMAL, 1, 3, 37, 100)}, pe2},
        {"split (2, 200, 2304)", STG_OP_SPLIT, 1, {ACT(G_NORMAL, 1, 2, 200, 2304)}, attrs0()},
        {"split odd (3, 7, 3 * 33)", STG_OP_SPLIT, 1, {ACT(G_NORMAL, 1, 3, 7, 99)}, attrs0()},
        {"concat 3 x (2, 200, 768)", STG_OP_CONCAT, 3,
         {ACT(G_NORMAL, 1, 2, 200, 768), ACT(G_NORMAL, 2, 2, 200, 768), ACT(G_NORMAL, 3, 2, 200, 768)}, attrs0()},
        {"concat odd 3 x (5, 33)", STG_OP_CONCAT, 3, {ACT(G_NORMAL, 1, 5, 33), ACT(G_NORMAL, 2, 5, 33), ACT(G_NORMAL, 3, 5, 33)},
         attrs0()},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_lr_schedule(void **state) {
    (void)state;
    stg_attrs a = attrs0();
    a.lr.lr = 1e-3;
    a.lr.min_lr = 1e-4;
    a.lr.warmup = 10;
    a.lr.cosine_steps = 100;
    stg_attrs c = a;
    c.lr.cosine_steps = 0;
    stg_attrs w = a, l = a; // WSD (sqrt decay over the last 30%) and linear: also replayed from a captured graph
    w.lr.kind = STG_LR_WSD;
    w.lr.wsd_shape = STG_WSD_SQRT;
    w.lr.wsd_decay_frac = 0.3;
    l.lr.kind = STG_LR_LINEAR;
    const op_case cases[] = {
        {"lr_schedule wsd done 57", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 57, 2)}, w},
        {"lr_schedule wsd done 83", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 83, 2)}, w},
        {"lr_schedule linear done 57", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 57, 2)}, l},
        {"lr_schedule done 0", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 0, 2)}, a},
        {"lr_schedule done 5", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 5, 2)}, a},
        {"lr_schedule done 10", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 10, 2)}, a},
        {"lr_schedule done 57", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 57, 2)}, a},
        {"lr_schedule done 100", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 100, 2)}, a},
        {"lr_schedule done 300", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 300, 2)}, a},
        {"lr_schedule constant done 57", STG_OP_LR_SCHEDULE, 1, {GRD(G_SCHED, 57, 2)}, c},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_global_norm_single(void **state) {
    (void)state;
    const op_case cases[] = {
        {"global_norm mixed sizes", STG_OP_GLOBAL_NORM, 5,
         {GRD(G_NORMAL, 1, 1600), GRD(G_NORMAL, 0.1, 2560, 64), GRD(G_NORMAL, 2, 5), GRD(G_NORMAL, 1, 16384 * 3 + 7),
          ACT(G_NORMAL, 1, 3, 333)},
         attrs0()},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_matmul_attention(void **state) {
    (void)state;
    stg_attrs mm = attrs0(), mmt = attrs0(), mmg = attrs0(), at = attrs0(), lb = attrs0(), sr = attrs0();
    lb.linear.bias = 1;
    sr.sum_rows.grad_out = 1;
    mmt.matmul.tb = 1;
    mmg.matmul.ta = 1;
    mmg.matmul.grad_out = 1;
    const op_case cases[] = {
        {"linear (2, 200, 1600) x (256, 1600)", STG_OP_LINEAR, 2, {ACT(G_NORMAL, 1, 2, 200, 1600), PRM(G_NORMAL, 0.05, 256, 1600)}, attrs0()},
        // with a bias (cuBLASLt's bias epilogue), and a bias and an addend (beta 1): GPT-2's c_attn, c_proj
        {"linear + bias (2, 200, 768) x (2304, 768)", STG_OP_LINEAR, 3,
         {ACT(G_NORMAL, 1, 2, 200, 768), PRM(G_NORMAL, 0.05, 2304, 768), PRM(G_NORMAL, 1, 2304)}, lb},
        {"linear + bias odd (3, 37, 100) x (77, 100)", STG_OP_LINEAR, 3,
         {ACT(G_NORMAL, 1, 3, 37, 100), PRM(G_NORMAL, 0.1, 77, 100), PRM(G_NORMAL, 1, 77)}, lb},
        {"linear + bias + addend (2, 200, 3072) x (768, 3072)", STG_OP_LINEAR, 4,
         {ACT(G_NORMAL, 1, 2, 200, 3072), PRM(G_NORMAL, 0.02, 768, 3072), PRM(G_NORMAL, 1, 768), ACT(G_NORMAL, 1, 2, 200, 768)}, lb},
        // the bias gradient: one pass (few rows) and partial sums over row chunks (many rows)
        {"sum_rows (2, 200, 2304) grad_out", STG_OP_SUM_ROWS, 1, {ACT(G_NORMAL, 1, 2, 200, 2304)}, sr},
        {"sum_rows (4, 1024, 768) grad_out", STG_OP_SUM_ROWS, 1, {ACT(G_NORMAL, 1, 4, 1024, 768)}, sr},
        {"sum_rows odd (7, 33, 101)", STG_OP_SUM_ROWS, 1, {ACT(G_NORMAL, 1, 7, 33, 101)}, attrs0()},
        {"sum_rows (1, 4096, 3072) grad_out", STG_OP_SUM_ROWS, 1, {ACT(G_NORMAL, 1, 1, 4096, 3072)}, sr},
        {"matmul (2, 3, 200, 64) (2, 3, 64, 200)", STG_OP_MATMUL, 2, {ACT(G_NORMAL, 1, 2, 3, 200, 64), ACT(G_NORMAL, 1, 2, 3, 64, 200)}, mm},
        {"matmul tb (2, 3, 200, 80) (2, 3, 200, 80)", STG_OP_MATMUL, 2, {ACT(G_NORMAL, 1, 2, 3, 200, 80), ACT(G_NORMAL, 1, 2, 3, 200, 80)}, mmt},
        {"matmul ta grad_out (400, 256) (400, 1600)", STG_OP_MATMUL, 2, {ACT(G_NORMAL, 1, 400, 256), ACT(G_NORMAL, 1, 400, 1600)}, mmg},
        {"attention (2, 200, 4, 64)", STG_OP_ATTENTION, 3,
         {ACT(G_NORMAL, 1, 2, 200, 4, 64), ACT(G_NORMAL, 1, 2, 200, 4, 64), ACT(G_NORMAL, 1, 2, 200, 4, 64)}, at},
        {"attention (1, 256, 25, 80)", STG_OP_ATTENTION, 3,
         {ACT(G_NORMAL, 1, 1, 256, 25, 80), ACT(G_NORMAL, 1, 1, 256, 25, 80), ACT(G_NORMAL, 1, 1, 256, 25, 80)}, at},
        {"attention (1, 1024, 2, 64)", STG_OP_ATTENTION, 3,
         {ACT(G_NORMAL, 1, 1, 1024, 2, 64), ACT(G_NORMAL, 1, 1, 1024, 2, 64), ACT(G_NORMAL, 1, 1, 1024, 2, 64)}, at},
        {"attention_bwd (2, 200, 4, 64)", STG_OP_ATTENTION_BWD, 6,
         {ACT(G_NORMAL, 1, 2, 200, 4, 64), ACT(G_NORMAL, 1, 2, 200, 4, 64), ACT(G_NORMAL, 1, 2, 200, 4, 64),
          ACT(G_ATT_O, 0, 2, 200, 4, 64), GRD(G_ATT_LSE, 0, 2, 4, 200), ACT(G_NORMAL, 1, 2, 200, 4, 64)}, at},
        {"attention_bwd (1, 256, 25, 80)", STG_OP_ATTENTION_BWD, 6,
         {ACT(G_NORMAL, 1, 1, 256, 25, 80), ACT(G_NORMAL, 1, 1, 256, 25, 80), ACT(G_NORMAL, 1, 1, 256, 25, 80),
          ACT(G_ATT_O, 0, 1, 256, 25, 80), GRD(G_ATT_LSE, 0, 1, 25, 256), ACT(G_NORMAL, 1, 1, 256, 25, 80)}, at},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

// Grouped-query attention (k, v of fewer heads: 3:1, 4:1 and 8:1, head dims 64, 80, 128, S not a multiple
// of 64) and packed documents (docs: document starts, tiles skipped by the kernels), forward and
// backward, against the CPU reference; repeat_kv and its backward.
#define QKV(B, S, H, HK, D) ACT(G_NORMAL, 1, B, S, H, D), ACT(G_NORMAL, 1, B, S, HK, D), ACT(G_NORMAL, 1, B, S, HK, D)
#define ATT_BWD_IN(B, S, H, HK, D)                                                                               \
    QKV(B, S, H, HK, D), ACT(G_ATT_O, 0, B, S, H, D), GRD(G_ATT_LSE, 0, B, H, S), ACT(G_NORMAL, 1, B, S, H, D)
static void test_attention_gqa(void **state) {
    (void)state;
    stg_attrs at = attrs0(), rk = attrs0();
    rk.repeat_kv.n = 4;
    const op_case cases[] = {
        {"attention gqa 4:1 (2, 200, 8/2, 64)", STG_OP_ATTENTION, 3, {QKV(2, 200, 8, 2, 64)}, at},
        {"attention gqa 8:1 (1, 300, 8/1, 128)", STG_OP_ATTENTION, 3, {QKV(1, 300, 8, 1, 128)}, at},
        {"attention gqa 4:1 (1, 260, 8/2, 80)", STG_OP_ATTENTION, 3, {QKV(1, 260, 8, 2, 80)}, at},
        {"attention gqa 8:1 (1, 77, 8/1, 64)", STG_OP_ATTENTION, 3, {QKV(1, 77, 8, 1, 64)}, at},
        {"attention_bwd gqa 4:1 (2, 200, 8/2, 64)", STG_OP_ATTENTION_BWD, 6, {ATT_BWD_IN(2, 200, 8, 2, 64)}, at},
        {"attention_bwd gqa 8:1 (1, 300, 8/1, 128)", STG_OP_ATTENTION_BWD, 6, {ATT_BWD_IN(1, 300, 8, 1, 128)}, at},
        {"attention_bwd gqa 4:1 (1, 260, 8/2, 80)", STG_OP_ATTENTION_BWD, 6, {ATT_BWD_IN(1, 260, 8, 2, 80)}, at},
        // 3:1 (Llama 3.2-3B: 24 query heads on 8): a group that does not divide a 64-row tile
        {"attention gqa 3:1 (1, 330, 6/2, 64)", STG_OP_ATTENTION, 3, {QKV(1, 330, 6, 2, 64)}, at},
        {"attention_bwd gqa 3:1 (1, 330, 6/2, 64)", STG_OP_ATTENTION_BWD, 6, {ATT_BWD_IN(1, 330, 6, 2, 64)}, at},
        {"attention_bwd gqa 3:1 (2, 150, 3/1, 128)", STG_OP_ATTENTION_BWD, 6, {ATT_BWD_IN(2, 150, 3, 1, 128)}, at},
        {"attention_bwd docs gqa 3:1 (1, 333, 6/2, 80)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 333, 6, 2, 80), I32(G_DOCS, 30, 1, 333)}, at},
        {"attention docs (2, 300, 4, 64)", STG_OP_ATTENTION, 4, {QKV(2, 300, 4, 4, 64), I32(G_DOCS, 40, 2, 300)}, at},
        {"attention docs gqa 4:1 (1, 1024, 8/2, 128)", STG_OP_ATTENTION, 4,
         {QKV(1, 1024, 8, 2, 128), I32(G_DOCS, 100, 1, 1024)}, at},
        {"attention docs gqa 4:1 (1, 333, 8/2, 80)", STG_OP_ATTENTION, 4, {QKV(1, 333, 8, 2, 80), I32(G_DOCS, 30, 1, 333)}, at},
        {"attention_bwd docs (2, 300, 4, 64)", STG_OP_ATTENTION_BWD, 7, {ATT_BWD_IN(2, 300, 4, 4, 64), I32(G_DOCS, 40, 2, 300)}, at},
        {"attention_bwd docs gqa 4:1 (1, 1024, 8/2, 128)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 1024, 8, 2, 128), I32(G_DOCS, 100, 1, 1024)}, at},
        // many key blocks whose dQ shares meet in each row tile, in documents (sm_90a: the single pass's order)
        {"attention_bwd docs gqa 4:1 (1, 1024, 8/2, 64)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 1024, 8, 2, 64), I32(G_DOCS, 100, 1, 1024)}, at},
        {"attention_bwd docs gqa 8:1 (1, 333, 8/1, 64)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 333, 8, 1, 64), I32(G_DOCS, 30, 1, 333)}, at},
        {"attention_bwd docs gqa 4:1 (1, 333, 8/2, 80)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 333, 8, 2, 80), I32(G_DOCS, 30, 1, 333)}, at},
        {"repeat_kv (2, 200, 2, 64) n 4", STG_OP_REPEAT_KV, 1, {ACT(G_NORMAL, 1, 2, 200, 2, 64)}, rk},
        {"repeat_kv_bwd (2, 200, 8, 80) n 4", STG_OP_REPEAT_KV_BWD, 1, {ACT(G_NORMAL, 1, 2, 200, 8, 80)}, rk},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

// Cross-entropy with ignored targets (-1: --doc-loss-mask), also every row ignored (loss 0).
static void test_loss_ignore(void **state) {
    (void)state;
    const op_case cases[] = {
        {"cross_entropy ignore (2, 100, 10000)", STG_OP_CROSS_ENTROPY, 2,
         {ACT(G_NORMAL, 3, 2, 100, 10000), I32(G_TOK_IGN, 10000, 2, 100)}, attrs0()},
        {"cross_entropy_bwd ignore (2, 100, 10000)", STG_OP_CROSS_ENTROPY_BWD, 3,
         {ACT(G_NORMAL, 3, 2, 100, 10000), I32(G_TOK_IGN, 10000, 2, 100), GRD(G_LSE, 0, 2, 100)}, attrs0()},
        {"cross_entropy all ignored (7, 333)", STG_OP_CROSS_ENTROPY, 2, {ACT(G_NORMAL, 3, 7, 333), I32(G_TOK_IGN, -1, 7)}, attrs0()},
        {"cross_entropy_bwd all ignored (7, 333)", STG_OP_CROSS_ENTROPY_BWD, 3,
         {ACT(G_NORMAL, 3, 7, 333), I32(G_TOK_IGN, -1, 7), GRD(G_LSE, 0, 7)}, attrs0()},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

// One small case of each new kernel path, for compute-sanitizer (racecheck is slow).
static void test_attention_gqa_small(void **state) {
    (void)state;
    stg_attrs at = attrs0();
    const op_case cases[] = {
        {"attention docs gqa 4:1 (1, 130, 4/1, 64)", STG_OP_ATTENTION, 4, {QKV(1, 130, 4, 1, 64), I32(G_DOCS, 20, 1, 130)}, at},
        {"attention_bwd docs gqa 4:1 (1, 130, 4/1, 64)", STG_OP_ATTENTION_BWD, 7,
         {ATT_BWD_IN(1, 130, 4, 1, 64), I32(G_DOCS, 20, 1, 130)}, at},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

// ---- the optimizer: lr_schedule, global_norm and multi-tensor AdamW together -------------------

#define NP 5
static const int64_t opt_sizes[NP] = {1600, 1600 * 64 + 3, 10000 * 4 + 1, 5, 2560 * 7};

typedef struct {
    stg_graph *g;
    int sched, norm, p[NP], gr[NP], m[NP], v[NP], master[NP];
} opt_graph;

// master_form: bf16 working weights with fp32 masters (7-input adamw); else the 6-input form with
// parameters of the graph's act dtype. grad_bf16: the even parameters' gradients are bf16 (--grad-dtype
// bf16: one norm and one AdamW table over both dtypes).
static bool opt_grad_bf16(int grad_bf16, int i) { return grad_bf16 && i % 2 == 0; }

static void build_opt(opt_graph *o, stg_precision prec, int master_form, int grad_bf16) {
    stg_err err = {{0}};
    o->g = graph_new(prec, &err);
    stg_graph *g = o->g;
    int64_t two = 2;
    o->sched = graph_add_tensor(g, "sched", 1, &two, g->grad_dtype, STG_CLASS_WORKSPACE, (stg_loc){0}, &err);
    stg_attrs la = attrs0();
    la.lr.lr = 3e-3;
    la.lr.min_lr = 3e-4;
    la.lr.warmup = 2;
    la.lr.cosine_steps = 50;
    assert_true(graph_add_op(g, STG_OP_LR_SCHEDULE, &o->sched, 1, &la, STG_PHASE_OPTIMIZER, "lr", (stg_loc){0}, NULL, &err) >= 0);
    for (int i = 0; i < NP; i++) {
        char nm[32];
        int64_t n = opt_sizes[i];
        snprintf(nm, sizeof nm, "p%d", i);
        o->p[i] = graph_add_tensor(g, nm, 1, &n, master_form ? STG_BF16 : g->act_dtype, STG_CLASS_PARAM, (stg_loc){0}, &err);
        snprintf(nm, sizeof nm, "g%d", i);
        // INPUT, not GRAD: here nothing writes the gradients, and the scheduler accepts unwritten
        // tensors only of the persistent classes.
        o->gr[i] = graph_add_tensor(g, nm, 1, &n, opt_grad_bf16(grad_bf16, i) ? STG_BF16 : g->grad_dtype, STG_CLASS_INPUT,
                                    (stg_loc){0}, &err);
        snprintf(nm, sizeof nm, "m%d", i);
        o->m[i] = graph_add_tensor(g, nm, 1, &n, g->grad_dtype, STG_CLASS_OPTIMIZER, (stg_loc){0}, &err);
        snprintf(nm, sizeof nm, "v%d", i);
        o->v[i] = graph_add_tensor(g, nm, 1, &n, g->grad_dtype, STG_CLASS_OPTIMIZER, (stg_loc){0}, &err);
        o->master[i] = -1;
        if (master_form) {
            snprintf(nm, sizeof nm, "master%d", i);
            o->master[i] = graph_add_tensor(g, nm, 1, &n, g->grad_dtype, STG_CLASS_OPTIMIZER, (stg_loc){0}, &err);
        }
    }
    int outs[STG_MAX_OUT];
    assert_true(graph_add_op(g, STG_OP_GLOBAL_NORM, o->gr, NP, NULL, STG_PHASE_OPTIMIZER, "norm", (stg_loc){0}, outs, &err) >= 0);
    o->norm = outs[0];
    for (int i = 0; i < NP; i++) {
        stg_attrs a = attrs0();
        a.adamw.beta1 = 0.9;
        a.adamw.beta2 = 0.95;
        a.adamw.eps = 1e-8;
        a.adamw.weight_decay = i % 2 ? 0.0 : 0.1;
        a.adamw.max_norm = i == 3 ? 0.0 : 1.0;
        int in[7] = {o->p[i], o->gr[i], o->m[i], o->v[i], o->norm, o->sched, o->master[i]};
        if (graph_add_op(g, STG_OP_ADAMW, in, master_form ? 7 : 6, &a, STG_PHASE_OPTIMIZER, "adamw", (stg_loc){0}, NULL, &err) < 0)
            fail_msg("adamw: %s", err.msg);
    }
    if (graph_schedule(g, &err)) fail_msg("schedule: %s", err.msg);
}

static void run_optim(stg_precision prec, int grad_bf16) {
    int mf = prec == STG_PREC_BF16;
    opt_graph od, orf;
    build_opt(&od, prec, mf, grad_bf16);
    build_opt(&orf, STG_PREC_FP32, 0, 0);
    stg_graph *gd = od.g, *gr = orf.g;

    gk_dev d;
    gk_dev_alloc(gd, 0, -1, &d);
    float **ref = gk_ref_alloc(gr, NULL); // every value poisoned; the inputs are set below
    d.host[od.sched][0] = 2.0f; // two steps done: this is step 3
    d.host[od.sched][1] = 0.5f;
    ref[orf.sched][0] = 2.0f;
    ref[orf.sched][1] = 0.5f;
    for (int i = 0; i < NP; i++) {
        for (int64_t k = 0; k < opt_sizes[i]; k++) {
            float w = 0.05f * nrand(), gg = 0.3f * nrand(), m = 0.01f * nrand(), v = 1e-3f * (float)urand() + 1e-6f;
            if (opt_grad_bf16(grad_bf16, i)) gg = round_bf(gg); // the reference reads the values the device holds
            if (mf) {
                d.host[od.master[i]][k] = w;
                d.host[od.p[i]][k] = round_bf(w);
            } else {
                d.host[od.p[i]][k] = gd->t[od.p[i]].dtype == STG_BF16 ? round_bf(w) : w;
            }
            d.host[od.gr[i]][k] = gg;
            d.host[od.m[i]][k] = m;
            d.host[od.v[i]][k] = v;
            ref[orf.p[i]][k] = mf ? w : d.host[od.p[i]][k];
            ref[orf.gr[i]][k] = gg;
            ref[orf.m[i]][k] = m;
            ref[orf.v[i]][k] = v;
        }
    }
    stg_err err = {{0}};
    for (int s = 0; s < gr->nsched; s++)
        if (gk_cpu_run(gr, gr->schedule[s], (void *const *)ref, &err)) fail_msg("cpu: %s", err.msg);

    // The reference by device tensor id: masters are the fp32 params; bf16 params their rounding.
    float **dref = calloc((size_t)gd->nt, sizeof(float *));
    float *scratch_round[NP];
    dref[od.sched] = ref[orf.sched];
    dref[od.norm] = ref[orf.norm];
    for (int i = 0; i < NP; i++) {
        dref[od.gr[i]] = ref[orf.gr[i]];
        dref[od.m[i]] = ref[orf.m[i]];
        dref[od.v[i]] = ref[orf.v[i]];
        scratch_round[i] = NULL;
        if (mf) {
            dref[od.master[i]] = ref[orf.p[i]];
            scratch_round[i] = malloc(sizeof(float) * (size_t)opt_sizes[i]);
            for (int64_t k = 0; k < opt_sizes[i]; k++) scratch_round[i][k] = round_bf(ref[orf.p[i]][k]);
            dref[od.p[i]] = scratch_round[i];
        } else {
            dref[od.p[i]] = ref[orf.p[i]];
        }
    }

    if (cuda_prepare(ctx, gd, d.dptr, &err)) fail_msg("cuda_prepare: %s", err.msg);
    gk_upload_and_poison(gd, &d);
    gk_run(gd, d.dptr, 0);
    // fp32 tensors (masters, m, v, norm, schedule) to 1e-5 in both forms; bf16 weights to 2e-2.
    for (int t = 0; t < gd->nt; t++) {
        if (!gk_written(gd, t)) continue;
        const stg_tensor *tt = &gd->t[t];
        int64_t n = stg_numel(tt);
        float *got = malloc(sizeof(float) * (size_t)n);
        void *raw = gk_read(tt, d.dptr[t], got);
        int64_t bad;
        double e = rel_err_f32(got, dref[t], n, true, &bad);
        double tol = tt->dtype == STG_BF16 ? 2e-2 : 1e-5;
        printf("  optimizer %-6s %-10s rel err %.3e%s\n", mf ? "bf16" : "fp32", tt->name, e, e < tol ? "" : "  FAIL");
        if (!(e < tol))
            fail_msg("optimizer (%s): %s rel err %g (at %lld: gpu %g, cpu %g)", mf ? "bf16" : "fp32", tt->name, e,
                     (long long)bad, bad >= 0 ? got[bad] : 0.0, bad >= 0 ? dref[t][bad] : 0.0);
        free(raw);
        free(got);
    }
    gk_expect_repeatable(gd, &d, "optimizer");
    for (int i = 0; i < NP; i++) free(scratch_round[i]);
    free(dref);
    gk_ref_free(gr, ref);
    gk_dev_free(&d);
    graph_free(gd);
    graph_free(gr);
}

static void test_optimizer_fp32(void **state) {
    (void)state;
    run_optim(STG_PREC_FP32, 0);
}

static void test_optimizer_bf16_master(void **state) {
    (void)state;
    run_optim(STG_PREC_BF16, 0);
}

static void test_optimizer_bf16_grads(void **state) {
    (void)state;
    run_optim(STG_PREC_BF16, 1);
}

// cuda_upload: pinned host memory read by its kernel (16 bytes a thread with a byte tail, and byte by byte
// when unaligned), pageable memory through the copy engine; the destination poisoned first, the bytes
// around each copy checked untouched.
static void test_upload(void **state) {
    (void)state;
    const size_t n = 100003;
    unsigned char *pin = NULL, *dev = NULL, *back = malloc(n + 64), *page = malloc(n);
    assert_non_null(back);
    assert_non_null(page);
    CK(cudaMallocHost((void **)&pin, n));
    CK(cudaMalloc((void **)&dev, n + 64));
    for (size_t i = 0; i < n; i++) pin[i] = page[i] = (unsigned char)(urand() * 256);
    const struct { size_t so, d, len; bool pinned; } cases[] = {
        {0, 0, n, true}, {16, 32, 4093, true}, {3, 5, 4093, true}, {1, 0, 17, true}, {0, 0, 1, true}, {7, 9, 50000, false}};
    stg_err err = {{0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        CK(cudaMemset(dev, 0xff, n + 64));
        const unsigned char *src = (cases[k].pinned ? pin : page) + cases[k].so;
        if (cuda_upload(ctx, dev + cases[k].d, src, cases[k].len, &err)) fail_msg("%s", err.msg);
        CK(cudaStreamSynchronize((cudaStream_t)cuda_stream(ctx)));
        CK(cudaMemcpy(back, dev, n + 64, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n + 64; i++) {
            const bool in = i >= cases[k].d && i < cases[k].d + cases[k].len;
            const unsigned char want = in ? src[i - cases[k].d] : 0xff;
            if (back[i] != want) fail_msg("upload case %zu: byte %zu is %u, not %u", k, i, back[i], want);
        }
    }
    CK(cudaFreeHost(pin));
    CK(cudaFree(dev));
    free(back), free(page);
}

// cuda_graph_memsets_to_kernels: a graph of a copy, five memset nodes (1-, 2- and 4-byte elements, one of three rows a
// pitch apart, unaligned starts, two long enough for 16-byte stores) and a copy after them, rewritten: no memset node is left, and the result is the
// memsets' bytes over the first copy's, read back by the second copy (so the order was kept), nothing else touched.
static void test_graph_memsets(void **state) {
    (void)state;
    const size_t n = 4096;
    unsigned char *src = NULL, *dst = NULL, *out = NULL, *host = malloc(n), *want = malloc(n), *back = malloc(n);
    assert_non_null(host);
    assert_non_null(want);
    assert_non_null(back);
    CK(cudaMalloc((void **)&src, n));
    CK(cudaMalloc((void **)&dst, n));
    CK(cudaMalloc((void **)&out, n));
    for (size_t i = 0; i < n; i++) host[i] = want[i] = (unsigned char)(urand() * 256);
    CK(cudaMemcpy(src, host, n, cudaMemcpyHostToDevice));
    CK(cudaMemset(dst, 0x11, n));
    CK(cudaMemset(out, 0x22, n));
    cudaGraph_t g = NULL;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t first = NULL, last = NULL, ms[5];
    CK(cudaGraphAddMemcpyNode1D(&first, g, NULL, 0, dst, src, n, cudaMemcpyDeviceToDevice));
    const struct { size_t off, pitch, width, height; unsigned es, value; } m[5] = {
        {3, 0, 37, 1, 1, 0x5cu}, {258, 64, 10, 3, 2, 0xbeefu}, {1028, 0, 5, 1, 4, 0xdeadbeefu},
        {1101, 0, 1500, 1, 1, 0xa7u}, {2702, 0, 600, 1, 2, 0x1234u}}; // the last two: 16-byte stores between a head and a tail
    for (int k = 0; k < 5; k++) {
        struct cudaMemsetParams mp;
        memset(&mp, 0, sizeof mp);
        mp.dst = dst + m[k].off;
        mp.pitch = m[k].height > 1 ? m[k].pitch : 0;
        mp.value = m[k].value;
        mp.elementSize = m[k].es;
        mp.width = m[k].width;
        mp.height = m[k].height;
        CK(cudaGraphAddMemsetNode(&ms[k], g, &first, 1, &mp));
        for (size_t r = 0; r < m[k].height; r++)
            for (size_t w = 0; w < m[k].width; w++)
                for (unsigned b = 0; b < m[k].es; b++) // little-endian: byte b of the element
                    want[m[k].off + r * m[k].pitch + w * m[k].es + b] = (unsigned char)(m[k].value >> (8 * b));
    }
    CK(cudaGraphAddMemcpyNode1D(&last, g, ms, 5, out, dst, n, cudaMemcpyDeviceToDevice));
    stg_err err = {{0}};
    int converted = -1;
    if (cuda_graph_memsets_to_kernels(g, &converted, &err)) fail_msg("%s", err.msg);
    assert_int_equal(converted, 5);
    size_t nn = 0;
    CK(cudaGraphGetNodes(g, NULL, &nn));
    cudaGraphNode_t *nodes = calloc(nn, sizeof *nodes);
    assert_non_null(nodes);
    CK(cudaGraphGetNodes(g, nodes, &nn));
    int kinds[3] = {0, 0, 0}; // memset, kernel, memcpy
    for (size_t i = 0; i < nn; i++) {
        enum cudaGraphNodeType t;
        CK(cudaGraphNodeGetType(nodes[i], &t));
        kinds[0] += t == cudaGraphNodeTypeMemset, kinds[1] += t == cudaGraphNodeTypeKernel, kinds[2] += t == cudaGraphNodeTypeMemcpy;
    }
    free(nodes);
    assert_int_equal(kinds[0], 0);
    assert_int_equal(kinds[1], 5);
    assert_int_equal(kinds[2], 2);
    size_t nd = 0;
    CK(cudaGraphNodeGetDependencies(last, NULL, NULL, &nd));
    assert_int_equal(nd, 5); // the second copy waits for the five kernels
    cudaGraphExec_t ex = NULL;
    CK(cudaGraphInstantiateWithFlags(&ex, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaGraphLaunch(ex, (cudaStream_t)cuda_stream(ctx)));
        CK(cudaStreamSynchronize((cudaStream_t)cuda_stream(ctx)));
        CK(cudaMemcpy(back, out, n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++)
            if (back[i] != want[i]) fail_msg("graph memsets, launch %d: byte %zu is %u, not %u", rep, i, back[i], want[i]);
        CK(cudaMemset(out, 0x22, n));
    }
    CK(cudaGraphExecDestroy(ex));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(src));
    CK(cudaFree(dst));
    CK(cudaFree(out));
    free(host), free(want), free(back);
}

static void test_context(void **state) {
    (void)state;
    printf("  device: %s, bf16 peak %.0f TFLOP/s, fp32 %.0f\n", cuda_device_name(ctx),
           cuda_peak_tflops(ctx, STG_PREC_BF16), cuda_peak_tflops(ctx, STG_PREC_FP32));
    for (int k = 0; k < STG_OP_COUNT; k++) assert_true(cuda_op_supported((stg_op_kind)k));
    // f64 graphs are refused with a message.
    stg_err err = {{0}};
    stg_graph *g = graph_new(STG_PREC_FP64, &err);
    int64_t n = 8;
    int x = graph_add_tensor(g, "x", 1, &n, STG_F64, STG_CLASS_INPUT, (stg_loc){0}, &err);
    assert_true(graph_add_op(g, STG_OP_SILU, &x, 1, NULL, STG_PHASE_FORWARD, "y", (stg_loc){0}, NULL, &err) >= 0);
    void *ptr[2] = {NULL, NULL};
    assert_int_equal(cuda_prepare(ctx, g, ptr, &err), -1);
    assert_non_null(strstr(err.msg, "f64"));
    graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_upload),
        cmocka_unit_test(test_graph_memsets),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope_mask_softmax),
        cmocka_unit_test(test_embedding_loss_layout),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_global_norm_single),
        cmocka_unit_test(test_optimizer_fp32),
        cmocka_unit_test(test_optimizer_bf16_master),
        cmocka_unit_test(test_optimizer_bf16_grads),
        cmocka_unit_test(test_matmul_attention),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_gqa_small),
        cmocka_unit_test(test_loss_ignore),
    };
    return GK_RUN(tests);
}

#endif
