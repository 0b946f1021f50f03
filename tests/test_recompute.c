// Recomputation under a memory budget: losses and parameters bitwise equal to the plain step on
// the CPU backend, plans that never exceed their budget, and no change when the budget is enough.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/loader.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/train.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p

static stg_graph *load(const char *attention, stg_precision prec) {
    const char *sets[] = {"d_model=32", "d_ff=48", "n_layers=2", "n_heads=2", "vocab=64", "batch=2", "ctx=16", attention};
    stg_load_opts o = {prec, sets, 8};
    stg_optim_config oc = graph_optim_defaults();
    oc.lr = 1e-2;
    oc.warmup = 1;
    oc.cosine_steps = 5;
    stg_graph *g;
    stg_err err;
    if (graph_load(MODEL("tiny.yaml"), &o, &g, &err) || graph_autodiff(g, &oc, &err) || graph_schedule(g, &err)) fail_msg("%s", err.msg);
    return g;
}

// 3 steps; losses and every parameter and AdamW moment as bytes.
static void run(stg_graph *g, stg_plan *p, double *loss, char **state, size_t *n) {
    stg_err err;
    rt_backend *b;
    rt_exec *e;
    rt_feed *f;
    rt_exec_opts eo = {.poison = true}; // NaN-poisoned arena: nothing may read what it did not write
    if (rt_backend_cpu_new(&b, &err) || rt_exec_new(g, p, b, &eo, &e, &err) || rt_exec_init_params(e, 4, &err) ||
        rt_exec_set_steps_done(e, 0, &err) || rt_feed_new(g, NULL, 4, 3, &f, &err))
        fail_msg("%s", err.msg);
    rt_rng rng;
    rt_rng_seed(&rng, 8);
    for (int s = 0; s < 3; s++) {
        rt_exec_results r;
        if (rt_feed_next(f, e, &rng, &err) || rt_exec_run_results(e, RT_PHASE_ALL, &r, &err)) fail_msg("%s", err.msg);
        loss[s] = r.loss;
    }
    size_t total = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM || g->t[t].cls == STG_CLASS_OPTIMIZER) total += (size_t)stg_bytes(&g->t[t]);
    char *buf = malloc(total), *q = buf;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM || g->t[t].cls == STG_CLASS_OPTIMIZER) {
            if (rt_exec_read(e, t, q, (size_t)stg_bytes(&g->t[t]), &err)) fail_msg("%s", err.msg);
            q += stg_bytes(&g->t[t]);
        }
    *state = buf;
    *n = total;
    rt_feed_free(f);
    rt_exec_free(e);
    b->ops->destroy(b);
}

static void bitwise(const char *attention) {
    stg_err err;
    stg_graph *g0 = load(attention, STG_PREC_FP32), *g1 = load(attention, STG_PREC_FP32);
    stg_plan *p0, *p1;
    stg_budget_report rep;
    if (plan_build(g0, NULL, &p0, &err)) fail_msg("%s", err.msg);
    // an impossible budget leaves every recomputable activation recomputed
    assert_int_equal(plan_fit_budget(g1, 1, NULL, &p1, &rep, &err), -1);
    assert_non_null(strstr(err.msg, "cannot fit"));
    assert_true(rep.n_recomputed > 10);
    if (plan_build(g1, NULL, &p1, &err) || plan_verify(g1, p1, &err)) fail_msg("%s", err.msg);
    assert_true(p1->peak_bytes < p0->peak_bytes);
    double l0[3], l1[3];
    char *s0, *s1;
    size_t n0, n1;
    run(g0, p0, l0, &s0, &n0);
    run(g1, p1, l1, &s1, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(l0, l1, sizeof l0);
    assert_memory_equal(s0, s1, n0);
    print_message("%s: %d activations recomputed, peak %lld -> %lld bytes, losses %.6f %.6f %.6f\n", attention, rep.n_recomputed,
                  (long long)p0->peak_bytes, (long long)p1->peak_bytes, l1[0], l1[1], l1[2]);
    free(s0);
    free(s1);
    plan_free(p0);
    plan_free(p1);
    graph_free(g0);
    graph_free(g1);
}

static void test_bitwise_flash(void **s) { bitwise("attention=flash"); }
static void test_bitwise_naive(void **s) { bitwise("attention=naive"); }

// For budgets from the plain peak down past the reachable minimum: a plan that is returned never
// exceeds its budget; a failure says what it reached; a budget at the plain peak changes nothing.
static void test_budgets(void **s) {
    const char *att[2] = {"attention=flash", "attention=naive"};
    for (int a = 0; a < 2; a++) {
        stg_err err;
        stg_graph *g = load(att[a], STG_PREC_FP32);
        stg_plan *p;
        if (plan_build(g, NULL, &p, &err)) fail_msg("%s", err.msg);
        int64_t plain = p->peak_bytes;
        int nops = g->nops;
        plan_free(p);
        stg_budget_report rep;
        assert_int_equal(plan_fit_budget(g, plain, NULL, &p, &rep, &err), 0);
        assert_int_equal(g->nops, nops);
        assert_int_equal(rep.n_recomputed, 0);
        plan_free(p);
        graph_free(g);
        int fits = 0, fails = 0;
        for (int k = 1; k <= 12; k++) {
            int64_t budget = plain - plain * k / 24;
            g = load(att[a], STG_PREC_FP32);
            if (plan_fit_budget(g, budget, NULL, &p, &rep, &err) == 0) {
                assert_true(p->peak_bytes <= budget);
                if (plan_verify(g, p, &err)) fail_msg("%s", err.msg);
                assert_true(rep.extra_flops > 0);
                plan_free(p);
                fits++;
            } else {
                assert_non_null(strstr(err.msg, "the smallest planned peak is"));
                fails++;
            }
            graph_free(g);
        }
        assert_true(fits > 0);
        print_message("%s: %d budgets fit, %d cannot\n", att[a], fits, fails);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_flash),
        cmocka_unit_test(test_bitwise_naive),
        cmocka_unit_test(test_budgets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
