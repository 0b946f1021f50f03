// Gradient accumulation on the CUDA backend (issue 27, item 1): the accumulated gradients of N
// micro-batches against the CPU reference (every kernel that adds into a gradient: cuBLASLt with
// beta 1, matmul_group, embedding backward, the copy and add of the gradients that accumulate
// through them), N micro-batches of B rows against one batch of N·B rows after 5 optimizer steps in
// graph mode (fp32 to 1e-5, bf16 to 2e-2), and graph replay of the N-pass step equal to eager
// launch, bitwise.
#include "tests/gpu.h"

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
    char text[1024]; // a tied LM head: the embedding's gradient is an add op that accumulates itself
    stg_step_opts o = c->tied ? rig_opts_text("tied.yaml", rig_tied_yaml(text, sizeof text, 96, 64, 24), c->prec, tied, 1)
                              : rig_opts(MODEL("tiny.yaml"), c->prec, lm, 8);
    o.optim = rig_optim(1e-2, 1e-3, 1, STEPS);
    o.optim.max_norm = 0.05; // clipping active: the norm is of the accumulated mean gradient
    o.optim.grad_accum = c->accum;
    o.ungrouped = !c->cuda; // the GPU graph with grouped products, as `stg` builds it
    rig_open(r, rig_step(&o), &(rig_cfg){.cuda = c->cuda, .eo = &c->eo, .init_seed = 3, .feed_seed = 9});
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
    double lc, lg;
    int ng;
    double worst = rig_grads_against(&c, &g, 5, 1e-5, 1e-4, tied ? "tied" : "tiny LM", &lc, &lg, &ng);
    print_message("%s, 3 micro-batches: loss %.6f (cpu %.6f); worst gradient rel err %.2e\n", tied ? "tied" : "tiny LM", lg, lc, worst);
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
    int64_t total = STEPS + rig_param_count(r.g);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grads_lm),       cmocka_unit_test(test_grads_tied),     cmocka_unit_test(test_fp32_one_batch),
        cmocka_unit_test(test_bf16_one_batch), cmocka_unit_test(test_graph_equals_eager),
    };
    return GPU_RUN(tests);
}

#endif
