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

#include "planner/budget.h"
#include "planner/plan.h"
#include "tests/rig.h"

static stg_step_opts opts(const char *const *sets) {
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, sets, 8);
    o.optim = rig_optim(1e-2, graph_optim_defaults().min_lr, 1, 5);
    return o;
}

#define SETS(attention) const char *sets[] = {RIG_TINY, "batch=2", "ctx=16", attention}

// 3 steps; losses and every parameter and AdamW moment as bytes.
static void run(stg_step *st, double *loss, char **state, size_t *n) {
    rig r;
    rt_exec_opts eo = {.poison = true}; // NaN-poisoned arena: nothing may read what it did not write
    rig_open(&r, st, &(rig_cfg){.eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 8});
    rig_steps(&r, 3, loss);
    *state = rig_state(&r, n);
    rig_close(&r);
}

static void bitwise(const char *attention) {
    SETS(attention);
    stg_step_opts o = opts(sets);
    stg_step *s0 = rig_step(&o);
    stg_plan *p0 = s0->p, *p1;
    stg_budget_report rep;
    // an impossible budget leaves every recomputable activation recomputed
    stg_step *s1 = rig_recomputed(&o, &rep);
    assert_true(rep.n_recomputed > 10);
    p1 = s1->p;
    assert_true(p1->peak_bytes < p0->peak_bytes);
    int64_t peak0 = p0->peak_bytes, peak1 = p1->peak_bytes;
    double l0[3], l1[3];
    char *st0, *st1;
    size_t n0, n1;
    run(s0, l0, &st0, &n0);
    run(s1, l1, &st1, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(l0, l1, sizeof l0);
    assert_memory_equal(st0, st1, n0);
    print_message("%s: %d activations recomputed, peak %lld -> %lld bytes, losses %.6f %.6f %.6f\n", attention, rep.n_recomputed,
                  (long long)peak0, (long long)peak1, l1[0], l1[1], l1[2]);
    free(st0);
    free(st1);
}

static void test_bitwise_flash(void **s) { bitwise("attention=flash"); }
static void test_bitwise_naive(void **s) { bitwise("attention=naive"); }

// For budgets from the plain peak down past the reachable minimum: a plan that is returned never
// exceeds its budget; a failure says what it reached; a budget at the plain peak changes nothing.
static void test_budgets(void **s) {
    const char *att[2] = {"attention=flash", "attention=naive"};
    for (int a = 0; a < 2; a++) {
        stg_err err;
        SETS(att[a]);
        stg_step_opts o = opts(sets);
        stg_step *st = rig_step(&o);
        int64_t plain = st->p->peak_bytes;
        int nops = st->g->nops;
        stg_step_free(st);
        stg_budget_report rep;
        assert_int_equal(plan_fit_budget(&o, plain, &st, &rep, NULL, &err), 0);
        assert_int_equal(st->g->nops, nops);
        assert_int_equal(rep.n_recomputed, 0);
        stg_step_free(st);
        int fits = 0, fails = 0;
        for (int k = 1; k <= 12; k++) {
            int64_t budget = plain - plain * k / 24;
            if (plan_fit_budget(&o, budget, &st, &rep, NULL, &err) == 0) {
                assert_true(st->p->peak_bytes <= budget);
                if (plan_verify(st->g, st->p, &err)) fail_msg("%s", err.msg);
                assert_true(rep.extra_flops > 0);
                stg_step_free(st);
                fits++;
            } else {
                assert_non_null(strstr(err.msg, "the smallest planned peak the search found is"));
                assert_null(st);
                fails++;
            }
        }
        assert_true(fits > 0);
        print_message("%s: %d budgets fit, %d cannot\n", att[a], fits, fails);
    }
}

// The fused head's late weight gradient as a way to fit (Llama 3.2-1B, ctx 4096, bf16, planned only):
// at 21.0 GiB it is what fits with the fewest added FLOPs (the plain peak is 21.91, the late one
// 20.96), nothing recomputed; at 21.5 GiB recomputing cheap activations costs less than the logits'
// pass and is kept; either way the plan is within its budget and verifies, and the report's added
// FLOPs are what the returned step adds.
static void test_budget_late_head(void **s) {
    (void)s;
    const char *sets[] = {"ctx=4096"};
    const double gib = 1073741824.0;
    const int64_t budgets[2] = {(int64_t)(21.0 * gib), (int64_t)(21.5 * gib)};
    for (int k = 0; k < 2; k++) {
        stg_step_opts o = rig_opts(MODEL("llama3/1B.yaml"), STG_PREC_BF16, sets, 1);
        o.ungrouped = false;
        stg_step *st = NULL;
        stg_budget_report rep;
        stg_err err;
        if (plan_fit_budget(&o, budgets[k], &st, &rep, NULL, &err)) fail_msg("%s", err.msg);
        assert_true(st->p->peak_bytes <= budgets[k]);
        if (plan_verify(st->g, st->p, &err)) fail_msg("%s", err.msg);
        int dw = 0, bwd = 0;
        for (int i = 0; i < st->g->nops; i++) {
            dw += st->g->ops[i].kind == STG_OP_LINEAR_CROSS_ENTROPY_DW;
            bwd += st->g->ops[i].kind == STG_OP_LINEAR_CROSS_ENTROPY_BWD;
        }
        assert_true(rep.peak_before > budgets[k]);
        if (k == 0) {
            assert_true(rep.late_head_dw);
            assert_int_equal(dw, 1);
            assert_int_equal(bwd, 0);
            assert_int_equal(rep.n_recomputed, 0);
            assert_true(rep.peak_late <= budgets[k] && rep.peak_late < rep.peak_before);
            assert_true(rep.late_flops > 0);
        } else {
            assert_false(rep.late_head_dw);
            assert_int_equal(dw, 0);
            assert_int_equal(bwd, 1);
            assert_true(rep.n_recomputed > 0);
            // cheaper than the late gradient's pass: 2 x 4096 x 128256 x 2048 FLOPs
            assert_true(rep.extra_flops < 2.0 * 4096 * 128256 * 2048);
        }
        stg_step_free(st);
    }
}

// Whether a budget fits must not depend on the path the search takes: a budget above one that fits
// fits too. Tiny LMs at budgets from their plain peak down in steps of 1/64 of the arena. The search
// that sized its rounds by the overshoot and kept every round fitted the first model at 443,648 bytes
// and refused 450,000 (sweep "11111111110000111...": steps 10-13 refused, 14-16 fitted), the second
// "1111111111110011..."; both fail this test on it.
static void sweep(stg_step_opts *o, const char *what, int64_t must_fit) {
    stg_step *st = rig_step(o);
    const int64_t plain = st->p->peak_bytes, pers = st->p->persistent_bytes;
    stg_step_free(st);
    char pat[42] = "";
    int last_fit = -1, first_fail = -1;
    for (int k = 0; k <= 40; k++) {
        const int64_t budget = plain - (plain - pers) * k / 64;
        stg_budget_report rep;
        stg_err err;
        if (plan_fit_budget(o, budget, &st, &rep, NULL, &err) == 0) {
            assert_true(st->p->peak_bytes <= budget);
            if (plan_verify(st->g, st->p, &err)) fail_msg("%s", err.msg);
            stg_step_free(st);
            pat[k] = '1';
            last_fit = k;
        } else {
            assert_non_null(strstr(err.msg, "cannot fit"));
            pat[k] = '0';
            if (first_fail < 0) first_fail = k;
        }
    }
    print_message("%s: plain peak %lld, persistent %lld: %s\n", what, (long long)plain, (long long)pers, pat);
    assert_true(last_fit >= 10);
    if (first_fail >= 0 && last_fit > first_fail) fail_msg("%s: budget step %d fits but the larger step %d did not", what, last_fit, first_fail);
    if (must_fit > 0) {
        stg_budget_report rep;
        stg_err err;
        if (plan_fit_budget(o, must_fit, &st, &rep, NULL, &err)) fail_msg("%s: %lld: %s", what, (long long)must_fit, err.msg);
        stg_step_free(st);
    }
}

static void test_budget_monotone(void **s) {
    (void)s;
    const char *sets[] = {RIG_TINY, "batch=2", "ctx=16", "fused_head=off"};
    stg_step_opts o = opts(sets);
    o.optim.max_norm = 0.05;
    o.optim.grad_accum = 4;
    o.ungrouped = false; // as stg builds it (matmul_group ops)
    sweep(&o, "4 micro-batches", 450000);
    const char *sets2[] = {RIG_TINY, "batch=4", "ctx=16", "attention=naive"};
    stg_step_opts o2 = opts(sets2);
    o2.optim.grad_accum = 2;
    o2.ungrouped = false;
    sweep(&o2, "naive attention, 2 micro-batches", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_flash),
        cmocka_unit_test(test_bitwise_naive),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_budget_late_head),
        cmocka_unit_test(test_budget_monotone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
