// Gradient accumulation on the CUDA backend (issue 27, item 1): the accumulated gradients of N
// micro-batches against the CPU reference (every kernel that adds into a gradient: cuBLASLt with
// beta 1, matmul_group, embedding backward, the copy and add of the gradients that accumulate
// through them), N micro-batches of B rows against one batch of N·B rows after 5 optimizer steps in
// graph mode (fp32 to 1e-5, bf16 to 2e-2), and graph replay of the N-pass step equal to eager
// launch, bitwise.
#ifdef STG_HAVE_CUDA
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p
#define STEPS 5

// A tied LM head (the embedding's gradient is an add op that accumulates itself).
static const char *tied_yaml = "name: tied\n"
                               "dims: {vocab: 96, d_model: 64, batch: 2, ctx: 24}\n"
                               "inputs:\n  tokens: [batch, ctx, i32]\n  targets: [batch, ctx, i32]\n"
                               "graph:\n"
                               "  - param emb [vocab, d_model] init=embedding\n"
                               "  - param g [d_model] init=ones\n"
                               "  - param w [d_model, d_model] init=linear\n"
                               "  - x = embedding(tokens, emb)\n"
                               "  - h = rmsnorm(add(x, linear(x, w)), g, eps=1e-5)\n"
                               "  - logits = linear(h, emb)\n"
                               "  - loss = cross_entropy(logits, targets)\n"
                               "loss: loss\n";

typedef struct {
    bool tied;
    bool cuda;
    stg_precision prec;
    int batch, accum;
    rt_exec_opts eo;
} gcfg;

static void open_cfg(rig *r, const gcfg *c) {
    char b[32];
    snprintf(b, sizeof b, "batch=%d", c->batch);
    const char *lm[] = {"d_model=64", "d_ff=160", "n_layers=2", "n_heads=2", "vocab=256", "ctx=40", "attention=flash", b};
    const char *tied[] = {b};
    stg_step_opts o = rig_opts(c->tied ? "tied.yaml" : MODEL("tiny.yaml"), c->prec, c->tied ? tied : lm, c->tied ? 1 : 8);
    if (c->tied) {
        o.text = tied_yaml;
        o.text_len = strlen(tied_yaml);
    }
    o.optim = rig_optim(1e-2, 1e-3, 1, STEPS);
    o.optim.max_norm = 0.05; // clipping active: the norm is of the accumulated mean gradient
    o.optim.grad_accum = c->accum;
    o.ungrouped = !c->cuda; // the GPU graph with grouped products, as `stg` builds it
    stg_step *st = rig_step(&o);
    rt_backend *be;
    stg_err err;
    int rc = c->cuda ? rt_backend_cuda_new(0, false, &be, &err) : rt_backend_cpu_new(&be, &err);
    if (rc) {
        stg_step_free(st);
        fail_msg("%s", err.msg);
    }
    rig_open(r, st, &(rig_cfg){.b = be, .own_b = true, .eo = &c->eo, .init_seed = 3, .feed_seed = 9});
}

// NaN in every parameter gradient: the first micro-batch must write them without reading.
static void poison_grads(rig *r) {
    stg_err err;
    for (int t = 0; t < r->g->nt; t++) {
        if (r->g->t[t].cls != STG_CLASS_GRAD) continue;
        size_t n = (size_t)stg_bytes(&r->g->t[t]);
        void *nan = malloc(n);
        assert_non_null(nan);
        memset(nan, 0xff, n);
        if (rt_exec_write(r->e, t, nan, n, &err)) fail_msg("%s", err.msg);
        free(nan);
    }
}

// One forward and backward over N micro-batches (fresh random data), CUDA against the CPU: every
// parameter's accumulated gradient to 1e-4 (fp32).
static void grads_against_cpu(bool tied) {
    rig c, g;
    gcfg cc = {.tied = tied, .cuda = false, .prec = STG_PREC_FP32, .batch = 2, .accum = 3};
    gcfg gc = cc;
    gc.cuda = true;
    gc.eo.graph = true;
    open_cfg(&c, &cc);
    open_cfg(&g, &gc);
    poison_grads(&c);
    poison_grads(&g);
    stg_err err;
    rt_rng r1, r2;
    rt_rng_seed(&r1, 5);
    rt_rng_seed(&r2, 5);
    rt_exec_results rc, rg;
    if (rt_feed_next(c.f, c.e, &r1, &err) || rt_feed_next(g.f, g.e, &r2, &err) ||
        rt_exec_run_results(c.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &rc, &err) ||
        rt_exec_run_results(g.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &rg, &err))
        fail_msg("%s", err.msg);
    assert_true(fabs(rg.loss - rc.loss) / fabs(rc.loss) < 1e-5);
    double worst = 0;
    for (int t = 0; t < c.g->nt; t++) {
        if (c.g->t[t].cls != STG_CLASS_PARAM) continue;
        int pg = graph_find_tensor(g.g, c.g->t[t].name);
        assert_true(pg >= 0);
        int64_t n = stg_numel(&c.g->t[t]);
        double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
        assert_non_null(a);
        assert_non_null(b);
        if (rt_exec_read_f64(c.e, c.g->t[t].grad, a, &err) || rt_exec_read_f64(g.e, g.g->t[pg].grad, b, &err)) fail_msg("%s", err.msg);
        double e = rel_err(b, a, n);
        if (!(e < 1e-4)) fail_msg("accumulated gradient of %s: relative error %.3g", c.g->t[t].name, e);
        if (e > worst) worst = e;
        free(a);
        free(b);
    }
    print_message("%s, 3 micro-batches: loss %.6f (cpu %.6f); worst gradient rel err %.2e\n", tied ? "tied" : "tiny LM", rg.loss, rc.loss,
                  worst);
    rig_close(&c);
    rig_close(&g);
}

static void test_grads_lm(void **s) { grads_against_cpu(false); }
static void test_grads_tied(void **s) { grads_against_cpu(true); }

// STEPS optimizer steps: losses then the fp32 truth of every parameter into out.
static double *train(const gcfg *c, int64_t *n) {
    rig r;
    open_cfg(&r, c);
    stg_err err;
    int64_t total = STEPS;
    for (int t = 0; t < r.g->nt; t++)
        if (r.g->t[t].cls == STG_CLASS_PARAM) total += stg_numel(&r.g->t[t]);
    double *out = malloc(sizeof(double) * (size_t)total);
    assert_non_null(out);
    if (rig_try_train(&r, STEPS, out, n, &err)) fail_msg("%s", err.msg);
    assert_int_equal(*n, total);
    rig_close(&r);
    return out;
}

// N micro-batches of B rows against one batch of N·B rows, both on the GPU in graph mode.
static void same_as_one_batch(stg_precision prec, double tol) {
    gcfg acc = {.cuda = true, .prec = prec, .batch = 2, .accum = 4, .eo = {.graph = true}};
    gcfg one = acc;
    one.batch = 8;
    one.accum = 1;
    int64_t na, n1;
    double *a = train(&acc, &na), *b = train(&one, &n1);
    assert_int_equal(na, n1);
    double el = rel_err(a, b, STEPS), ep = rel_err(a + STEPS, b + STEPS, n1 - STEPS);
    print_message("%s graph mode, 4 x 2 rows vs 8: losses %.6f .. %.6f (one batch %.6f .. %.6f); rel err losses %.2e params %.2e\n",
                  prec == STG_PREC_BF16 ? "bf16" : "fp32", a[0], a[STEPS - 1], b[0], b[STEPS - 1], el, ep);
    assert_true(b[STEPS - 1] < b[0]);
    assert_true(el <= tol);
    assert_true(ep <= tol);
    free(a);
    free(b);
}

static void test_fp32_one_batch(void **s) { same_as_one_batch(STG_PREC_FP32, 1e-5); }
static void test_bf16_one_batch(void **s) { same_as_one_batch(STG_PREC_BF16, 2e-2); }

// The captured step (4 passes and the optimizer, ops over concurrent streams) == eager launch ==
// eager with a NaN-poisoned arena before every pass == graph on one stream, bitwise.
static void test_graph_equals_eager(void **s) {
    rt_exec_opts modes[4] = {{.graph = true}, {.graph = false}, {.poison = true}, {.graph = true, .streams = 1}};
    double *p[4];
    int64_t n[4];
    for (int m = 0; m < 4; m++) {
        gcfg c = {.cuda = true, .prec = STG_PREC_BF16, .batch = 2, .accum = 4, .eo = modes[m]};
        p[m] = train(&c, &n[m]);
    }
    for (int m = 1; m < 4; m++) {
        assert_int_equal(n[m], n[0]);
        assert_memory_equal(p[m], p[0], sizeof(double) * (size_t)n[0]);
    }
    for (int m = 0; m < 4; m++) free(p[m]);
}

int main(void) {
    if (!rt_cuda_available()) {
        printf("skipped: no GPU\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grads_lm),       cmocka_unit_test(test_grads_tied),     cmocka_unit_test(test_fp32_one_batch),
        cmocka_unit_test(test_bf16_one_batch), cmocka_unit_test(test_graph_equals_eager),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
#include <stdio.h>
int main(void) {
    printf("skipped: built without CUDA\n");
    return 77;
}
#endif
