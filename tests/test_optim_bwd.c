// The optimizer in backward on the CPU backend: with clipping that never triggers, steps equal the
// ordinary step bitwise (fp32); with clipping, step k clips by step k-1's global norm (checked
// against a hand computation from the ordinary path's gradients); each adamw op sits right after
// the last op that needs it to wait; the plan's peak drops; recomputation composes with it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "tests/rig.h"

// The tiny LM, in two shapes: "act" (activations dominate the peak) and "param" (batch 1, ctx 8:
// the gradients dominate, so the ordinary plan peaks with all of them live at the end).
static const char *act_sets[] = {RIG_TINY, "batch=2", "ctx=16", "attention=flash"};
static const char *par_sets[] = {"d_model=64", "d_ff=128", "n_layers=2", "n_heads=2", "vocab=256", "batch=1", "ctx=8", "attention=flash"};

static stg_step_opts opts(bool in_backward, double max_norm, bool param_heavy) {
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, param_heavy ? par_sets : act_sets, 8);
    o.optim = rig_optim(1e-2, 1e-3, 1, 6);
    o.optim.max_norm = max_norm;
    o.optim.in_backward = in_backward;
    return o;
}

static stg_step *load(bool in_backward, double max_norm, bool param_heavy) {
    stg_step_opts o = opts(in_backward, max_norm, param_heavy);
    return rig_step(&o);
}

static void open_rig(rig *r, stg_step *st) {
    stg_err err;
    if (plan_verify(st->g, st->p, &err)) fail_msg("%s", err.msg);
    rt_exec_opts eo = {.poison = true}; // NaN-poisoned arena: nothing may read what it did not write
    rig_open(r, st, &(rig_cfg){.eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 8});
}

static void step(rig *r, unsigned mask, rt_exec_results *res) {
    stg_err err;
    if (rig_try_step(r, mask, res, &err)) fail_msg("%s", err.msg);
}

static void equal_to_ordinary(stg_step *(*step_b)(void)) {
    rig a, b;
    open_rig(&a, load(false, 1e30, false));
    open_rig(&b, step_b ? step_b() : load(true, 1e30, false));
    for (int s = 0; s < 4; s++) {
        rt_exec_results ra, rb;
        step(&a, RT_PHASE_ALL, &ra);
        step(&b, RT_PHASE_ALL, &rb);
        assert_memory_equal(&ra.loss, &rb.loss, sizeof ra.loss);
        assert_memory_equal(&ra.lr, &rb.lr, sizeof ra.lr);
        // the same norm, from per-parameter slots added in order
        assert_true(fabs(rb.grad_norm - ra.grad_norm) <= 1e-6 * ra.grad_norm);
        assert_true(ra.grad_norm > 0);
    }
    rig_state_equal(&a, &b);
    rig_close(&a);
    rig_close(&b);
}

static void test_equal_without_clipping(void **s) { equal_to_ordinary(NULL); }

// Everything recomputable recomputed (an impossible budget), then planned plainly.
static stg_step *recomputed_step(void) {
    stg_budget_report rep;
    stg_step_opts o = opts(true, 1e30, false);
    stg_step *st = rig_recomputed(&o, &rep);
    assert_true(rep.n_recomputed > 5);
    return st;
}

static void test_equal_with_recomputation(void **s) { equal_to_ordinary(recomputed_step); }

static int tensor_named(const stg_graph *g, int param, const char *suffix) {
    char nm[STG_NAME_MAX + 16];
    snprintf(nm, sizeof nm, "%s.%s", g->t[param].name, suffix);
    int t = graph_find_tensor(g, nm);
    if (t < 0) fail_msg("no tensor %s", nm);
    return t;
}

static double *read_all(rig *r, int t) { return rig_read(r->e, t); }

// Step k of the in-backward run clips by step k-1's norm: the gradients come from the ordinary
// graph's forward+backward at the same parameters and batch, the norm and the AdamW update are
// computed here in double, and m, v and the weights must agree to float rounding. The same check
// with this step's norm instead must fail (the test can tell the two apart).
static void test_clips_by_previous_norm(void **s) {
    const double max_norm = 0.05, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    rig b, c;
    open_rig(&b, load(true, max_norm, false));
    open_rig(&c, load(false, 1e30, false));
    stg_graph *gb = b.g, *gc = c.g;
    double prev_norm = -1; // none before the first step
    int distinguished = 0;
    for (int k = 1; k <= 4; k++) {
        stg_err err;
        // the ordinary graph's gradients at the in-backward run's current parameters
        for (int t = 0; t < gb->nt; t++) {
            if (gb->t[t].cls != STG_CLASS_PARAM) continue;
            int tc = graph_find_tensor(gc, gb->t[t].name);
            assert_true(tc >= 0);
            double *w = read_all(&b, t);
            if (rt_exec_write_f64(c.e, tc, w, &err)) fail_msg("%s", err.msg);
            free(w);
        }
        rt_exec_results rc, rb;
        step(&c, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &rc);
        double ss = 0;
        for (int t = 0; t < gc->nt; t++) {
            if (gc->t[t].cls != STG_CLASS_PARAM) continue;
            double *gr = read_all(&c, gc->t[t].grad);
            for (int64_t i = 0; i < stg_numel(&gc->t[t]); i++) ss += gr[i] * gr[i];
            free(gr);
        }
        double norm = sqrt(ss);
        // state before the step
        int np = 0;
        for (int t = 0; t < gb->nt; t++) np += gb->t[t].cls == STG_CLASS_PARAM;
        double **w0 = calloc((size_t)np, sizeof *w0), **m0 = calloc((size_t)np, sizeof *m0), **v0 = calloc((size_t)np, sizeof *v0);
        for (int t = 0, i = 0; t < gb->nt; t++)
            if (gb->t[t].cls == STG_CLASS_PARAM) {
                w0[i] = read_all(&b, t);
                m0[i] = read_all(&b, tensor_named(gb, t, "adam_m"));
                v0[i] = read_all(&b, tensor_named(gb, t, "adam_v"));
                i++;
            }
        step(&b, RT_PHASE_ALL, &rb);
        assert_memory_equal(&rb.loss, &rc.loss, sizeof rb.loss); // same weights, same batch
        assert_true(fabs(rb.grad_norm - norm) <= 1e-5 * norm);   // this step's norm, reported
        double clip = prev_norm >= 0 && prev_norm > max_norm ? max_norm / (prev_norm + 1e-6) : 1.0;
        double clip_now = norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
        double at = rb.lr * sqrt(1.0 - pow(b2, k)) / (1.0 - pow(b1, k)), decay = rb.lr * wd;
        double err_m = 0, err_v = 0, err_w = 0, err_now = 0, scale_m = 0, scale_w = 0;
        for (int t = 0, i = 0; t < gb->nt; t++) {
            if (gb->t[t].cls != STG_CLASS_PARAM) continue;
            int tc = graph_find_tensor(gc, gb->t[t].name);
            double *gr = read_all(&c, gc->t[tc].grad), *w1 = read_all(&b, t), *m1 = read_all(&b, tensor_named(gb, t, "adam_m")),
                   *v1 = read_all(&b, tensor_named(gb, t, "adam_v"));
            for (int64_t j = 0; j < stg_numel(&gb->t[t]); j++) {
                double g = clip * gr[j];
                double m = b1 * m0[i][j] + (1 - b1) * g, v = b2 * v0[i][j] + (1 - b2) * g * g;
                double w = w0[i][j] - at * m / (sqrt(v) + eps);
                w -= decay * w;
                double m_now = b1 * m0[i][j] + (1 - b1) * clip_now * gr[j];
                err_m = fmax(err_m, fabs(m1[j] - m));
                err_v = fmax(err_v, fabs(v1[j] - v) / (v + 1e-30));
                err_w = fmax(err_w, fabs(w1[j] - w));
                err_now = fmax(err_now, fabs(m1[j] - m_now));
                scale_m = fmax(scale_m, fabs(m));
                scale_w = fmax(scale_w, fabs(w));
            }
            free(gr);
            free(w1);
            free(m1);
            free(v1);
            free(w0[i]);
            free(m0[i]);
            free(v0[i]);
            i++;
        }
        free(w0);
        free(m0);
        free(v0);
        print_message("step %d: norm %.6f (previous %.6f), clip %.5f (this step's would be %.5f): rel err m %.2e v %.2e w %.2e; "
                      "with this step's norm m would be off by %.2e\n",
                      k, norm, prev_norm, clip, clip_now, err_m / scale_m, err_v, err_w / scale_w, err_now / scale_m);
        assert_true(err_m <= 1e-5 * scale_m);
        assert_true(err_v <= 1e-5);
        assert_true(err_w <= 1e-6 * scale_w);
        if (err_now > 1e-3 * scale_m) distinguished++;
        assert_true(k > 1 || clip == 1.0); // the first step does not clip
        prev_norm = norm;
    }
    assert_true(distinguished >= 2); // the norms change between steps, so the two rules differ
    rig_close(&b);
    rig_close(&c);
}

// Each adamw op comes right after the last op it must wait for (the last writer of its gradient or
// reader of its parameter), nothing after it reads the parameter, lr_schedule comes just before the
// first adamw op and slot_norm is last.
static void test_schedule(void **s) {
    stg_step *st = load(true, 1.0, false);
    stg_graph *g = st->g;
    int *pos = malloc(sizeof(int) * (size_t)g->nops);
    for (int i = 0; i < g->nsched; i++) pos[g->schedule[i]] = i;
    int first_adam = -1, nadam = 0, nparams = 0;
    for (int t = 0; t < g->nt; t++) nparams += g->t[t].cls == STG_CLASS_PARAM;
    char *seen = calloc((size_t)nparams + 1, 1);
    for (int i = 0; i < g->nsched; i++) {
        const stg_op *op = &g->ops[g->schedule[i]];
        if (op->kind != STG_OP_ADAMW) continue;
        nadam++;
        int sl = op->a.adamw.slot; // one slot per parameter
        assert_true(sl >= 1 && sl <= nparams && !seen[sl]);
        seen[sl] = 1;
        if (first_adam < 0) first_adam = i;
        int p = op->in[0], gr = op->in[1];
        assert_int_equal(g->t[p].grad, gr);
        int wait = pos[g->t[gr].producer];
        for (int j = 0; j < g->nsched; j++) {
            const stg_op *o2 = &g->ops[g->schedule[j]];
            if (o2->kind == STG_OP_ADAMW) continue;
            for (int k = 0; k < o2->n_in; k++) {
                int r = o2->in[k];
                while (g->t[r].base >= 0) r = g->t[r].base;
                if (r == p && j > wait) wait = j;
            }
        }
        assert_true(wait < i); // nothing after it reads p
        for (int j = wait + 1; j < i; j++) { // only optimizer ops between what it waits for and it
            stg_op_kind k = g->ops[g->schedule[j]].kind;
            assert_true(k == STG_OP_ADAMW || k == STG_OP_LR_SCHEDULE);
        }
        assert_int_equal(g->ops[g->t[gr].producer].phase, STG_PHASE_BACKWARD);
    }
    assert_int_equal(nadam, nparams);
    free(seen);
    assert_true(first_adam > 0 && g->ops[g->schedule[first_adam - 1]].kind == STG_OP_LR_SCHEDULE);
    assert_int_equal(g->ops[g->schedule[g->nsched - 1]].kind, STG_OP_SLOT_NORM);
    // most updates run before the backward pass ends
    int last_bwd = -1, before = 0;
    for (int i = 0; i < g->nsched; i++)
        if (g->ops[g->schedule[i]].phase == STG_PHASE_BACKWARD) last_bwd = i;
    for (int i = 0; i < last_bwd; i++) before += g->ops[g->schedule[i]].kind == STG_OP_ADAMW;
    assert_true(before * 2 > nadam);
    free(pos);
    stg_step_free(st);
}

// Gradients die at their adamw op: the plan's peak is lower where the gradients dominate it, and
// gradients never hold more than the largest few at once.
static void test_peak(void **s) {
    stg_err err;
    stg_step *sa = load(false, 1.0, true), *sb = load(true, 1.0, true);
    stg_graph *ga = sa->g, *gb = sb->g;
    stg_plan *pa = sa->p, *pb = sb->p;
    if (plan_verify(gb, pb, &err)) fail_msg("%s", err.msg);
    int64_t grad_max_a = 0, grad_max_b = 0;
    for (int st = 0; st < pa->nsched; st++)
        if (plan_live_at(pa, st, STG_CLASS_GRAD) > grad_max_a) grad_max_a = plan_live_at(pa, st, STG_CLASS_GRAD);
    for (int st = 0; st < pb->nsched; st++)
        if (plan_live_at(pb, st, STG_CLASS_GRAD) > grad_max_b) grad_max_b = plan_live_at(pb, st, STG_CLASS_GRAD);
    print_message("peak %lld -> %lld bytes; live gradients at most %lld -> %lld bytes\n", (long long)pa->peak_bytes,
                  (long long)pb->peak_bytes, (long long)grad_max_a, (long long)grad_max_b);
    assert_true(pb->peak_bytes < pa->peak_bytes);
    assert_true(grad_max_b * 2 < grad_max_a);
    assert_true(graph_optim_in_backward(gb) && !graph_optim_in_backward(ga));
    stg_step_free(sa);
    stg_step_free(sb);
}

// Each updated gradient is held (its bytes not reused) until the updates after it have read a 16th of
// all the updated gradients' bytes, or to the end of the schedule (planner/plan.c, so that the backward
// does not wait for the updates' stream): its lifetime ends exactly there, recomputed here the plain way.
static void hold_in(bool param_heavy) {
    stg_err err;
    stg_step *st = load(true, 1.0, param_heavy);
    stg_graph *g = st->g;
    stg_plan *p = st->p;
    if (plan_verify(g, p, &err)) fail_msg("%s", err.msg);
    int n = 0, *pos = malloc(sizeof(int) * (size_t)g->nsched);
    int64_t total = 0;
    assert_non_null(pos);
    for (int i = 0; i < g->nsched; i++) {
        const stg_op *op = &g->ops[g->schedule[i]];
        if (op->kind != STG_OP_ADAMW) continue;
        pos[n++] = i;
        total += stg_bytes(&g->t[op->in[1]]);
    }
    assert_true(n > 4 && total / 16 > 0);
    int held_to_end = 0, held_short = 0;
    for (int k = 0; k < n; k++) {
        int64_t after = 0;
        int to = g->nsched - 1;
        for (int j = k + 1; j < n; j++)
            if ((after += stg_bytes(&g->t[g->ops[g->schedule[pos[j]]].in[1]])) >= total / 16) {
                to = pos[j];
                break;
            }
        int gr = g->ops[g->schedule[pos[k]]].in[1];
        while (g->t[gr].base >= 0) gr = g->t[gr].base;
        assert_int_equal(p->last[gr], to);
        if (to == g->nsched - 1) held_to_end++;
        else held_short++;
    }
    print_message("%s: %d updates, %d gradients held a 16th of the bytes, %d to the end\n", param_heavy ? "param" : "act", n, held_short,
                  held_to_end);
    assert_true(held_short > 0 && held_to_end > 0);
    free(pos);
    stg_step_free(st);
}

static void test_hold(void **s) {
    hold_in(false);
    hold_in(true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_without_clipping),
        cmocka_unit_test(test_equal_with_recomputation),
        cmocka_unit_test(test_clips_by_previous_norm),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_peak),
        cmocka_unit_test(test_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
