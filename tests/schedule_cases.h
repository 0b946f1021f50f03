// The learning-rate schedules against their closed forms, shared by test_schedule (the CPU backend)
// and test_gpu_schedule (CUDA): a one-op graph holding the lr_schedule op runs on a backend for every
// iteration t of a schedule (the state written as [t, NaN] before each run), and the learning rate
// it leaves must be the closed form's, written here from the definitions (not from
// ops/optim/schedule.h), to 1e-6 of the peak (the state is f32). A few values are also checked
// against numbers worked out by hand. Header only (static): each test is its own program.
// Include after <cmocka.h>.
#ifndef STG_TEST_SCHEDULE_CASES_H
#define STG_TEST_SCHEDULE_CASES_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "tests/rig.h"

typedef struct {
    const char *name;
    stg_lr_attrs a;
    int64_t iters; // iterations run: t = 0 .. iters - 1
} sched_case;

#define SC_PI 3.14159265358979323846

// The closed forms (W warm-up, E end, P peak, M minimum; t the 0-based iteration).
static double sched_closed(const stg_lr_attrs *a, int64_t t) {
    double P = a->lr, M = a->min_lr, W = (double)a->warmup, E = (double)a->cosine_steps, x = (double)t;
    if (x < W) return P * x / W; // linear warm-up from 0
    if (a->cosine_steps == 0 || a->kind == STG_LR_CONSTANT) return P;
    switch (a->kind) {
    case STG_LR_COSINE: // CS336's get_lr_cosine_schedule
        if (x > E || E <= W) return M;
        return M + 0.5 * (1 + cos(SC_PI * (x - W) / (E - W))) * (P - M);
    case STG_LR_LINEAR:
        if (x > E || E <= W) return M;
        return P - (P - M) * (x - W) / (E - W);
    default: { // WSD: the decay takes the last round(frac * E) iterations before E, never the warm-up's
        double D = floor(a->wsd_decay_frac * E + 0.5), S = fmax(W, E - D);
        if (x < S) return P;
        if (x >= E) return M;
        double p = (x - S) / (E - S);
        double keep = a->wsd_shape == STG_WSD_COSINE ? 0.5 * (1 + cos(SC_PI * p)) : a->wsd_shape == STG_WSD_SQRT ? 1 - sqrt(p) : 1 - p;
        return M + (P - M) * keep;
    }
    }
}

static stg_lr_attrs sc_attrs(int kind, double lr, double min_lr, int64_t warmup, int64_t end, double frac, int shape) {
    stg_lr_attrs a;
    memset(&a, 0, sizeof a);
    a.lr = lr;
    a.min_lr = min_lr;
    a.warmup = warmup;
    a.cosine_steps = end;
    a.kind = kind;
    a.wsd_decay_frac = frac;
    a.wsd_shape = shape;
    return a;
}

// Every schedule, with and without warm-up, past its end, and the WSD fractions' edges.
static const sched_case *sched_cases(int *n) {
    static sched_case c[32];
    int k = 0;
    c[k++] = (sched_case){"constant", sc_attrs(STG_LR_CONSTANT, 3e-3, 3e-4, 0, 50, 0, 0), 60};
    c[k++] = (sched_case){"constant, warm-up 7", sc_attrs(STG_LR_CONSTANT, 3e-3, 3e-4, 7, 50, 0, 0), 60};
    c[k++] = (sched_case){"cosine", sc_attrs(STG_LR_COSINE, 3e-3, 3e-4, 0, 50, 0, 0), 60};
    c[k++] = (sched_case){"cosine, warm-up 10", sc_attrs(STG_LR_COSINE, 1e-3, 1e-4, 10, 100, 0, 0), 130};
    c[k++] = (sched_case){"cosine, end 0 (constant)", sc_attrs(STG_LR_COSINE, 1e-3, 1e-4, 5, 0, 0, 0), 20};
    c[k++] = (sched_case){"linear", sc_attrs(STG_LR_LINEAR, 3e-3, 0, 0, 40, 0, 0), 50};
    c[k++] = (sched_case){"linear, warm-up 8", sc_attrs(STG_LR_LINEAR, 2e-2, 2e-3, 8, 64, 0, 0), 80};
    c[k++] = (sched_case){"wsd linear 0.2", sc_attrs(STG_LR_WSD, 1e-2, 1e-3, 5, 100, 0.2, STG_WSD_LINEAR), 110};
    c[k++] = (sched_case){"wsd cosine 0.3", sc_attrs(STG_LR_WSD, 1e-2, 1e-3, 5, 100, 0.3, STG_WSD_COSINE), 110};
    c[k++] = (sched_case){"wsd sqrt 0.25", sc_attrs(STG_LR_WSD, 1e-2, 0, 0, 77, 0.25, STG_WSD_SQRT), 90};
    c[k++] = (sched_case){"wsd 0 (no decay)", sc_attrs(STG_LR_WSD, 1e-2, 1e-3, 3, 30, 0, STG_WSD_LINEAR), 40};
    c[k++] = (sched_case){"wsd 1 (decay from the warm-up's end)", sc_attrs(STG_LR_WSD, 1e-2, 1e-3, 6, 30, 1, STG_WSD_SQRT), 40};
    *n = k;
    return c;
}

// Values worked out by hand: (kind, t) -> lr.
static inline void sched_anchors(double (*lr_at)(const stg_lr_attrs *, int64_t)) {
    stg_lr_attrs wsd = sc_attrs(STG_LR_WSD, 1, 0, 0, 10, 0.5, STG_WSD_LINEAR); // stable for t < 5, then 1 - (t - 5) / 5
    assert_true(fabs(lr_at(&wsd, 4) - 1.0) < 1e-6);
    assert_true(fabs(lr_at(&wsd, 7) - 0.6) < 1e-6);
    assert_true(fabs(lr_at(&wsd, 10) - 0.0) < 1e-6);
    wsd.wsd_shape = STG_WSD_SQRT; // 1 - sqrt(4 / 5) at t = 9
    assert_true(fabs(lr_at(&wsd, 9) - (1 - sqrt(0.8))) < 1e-6);
    wsd.wsd_shape = STG_WSD_COSINE; // halfway through the decay: (1 + cos(pi / 2)) / 2 = 0.5
    assert_true(fabs(lr_at(&wsd, 7) - 0.5 * (1 + cos(SC_PI * 0.4))) < 1e-6);
    stg_lr_attrs lin = sc_attrs(STG_LR_LINEAR, 2, 1, 2, 6, 0, 0); // warm-up: 0, 1; then 2 - (t - 2) / 4
    assert_true(fabs(lr_at(&lin, 1) - 1.0) < 1e-6);
    assert_true(fabs(lr_at(&lin, 4) - 1.5) < 1e-6);
    assert_true(fabs(lr_at(&lin, 9) - 1.0) < 1e-6);
    stg_lr_attrs cosv = sc_attrs(STG_LR_COSINE, 2, 0, 0, 4, 0, 0); // 1 + cos(pi t / 4): t = 2 -> 1
    assert_true(fabs(lr_at(&cosv, 2) - 1.0) < 1e-6);
    stg_lr_attrs cst = sc_attrs(STG_LR_CONSTANT, 0.5, 0.1, 4, 10, 0, 0);
    assert_true(fabs(lr_at(&cst, 2) - 0.25) < 1e-6 && fabs(lr_at(&cst, 20) - 0.5) < 1e-6);
}

// Runs case c's op on backend b for every iteration; returns the largest |lr - closed form| / peak.
static double sched_run_case(rt_backend *b, const sched_case *c, stg_precision prec) {
    stg_err err;
    stg_graph *g = graph_new(prec, &err);
    if (!g) fail_msg("%s", err.msg);
    int64_t two = 2;
    stg_loc none = {0};
    int st = graph_add_tensor(g, "sched", 1, &two, g->grad_dtype, STG_CLASS_WORKSPACE, none, &err);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.lr = c->a;
    if (st < 0 || graph_add_op(g, STG_OP_LR_SCHEDULE, &st, 1, &a, STG_PHASE_OPTIMIZER, "lr", none, NULL, &err) < 0 ||
        graph_schedule(g, &err))
        fail_msg("%s: %s", c->name, err.msg);
    rig r;
    if (rig_try_open(&r, rig_step_of(g), &(rig_cfg){.b = b, .init_seed = -1, .feed_seed = -1}, &err)) fail_msg("%s: %s", c->name, err.msg);
    rt_exec *e = r.e;
    double worst = 0;
    for (int64_t t = 0; t < c->iters; t++) {
        double s[2] = {(double)t, NAN}, out[2];
        if (rt_exec_write_f64(e, st, s, &err) || rt_exec_run(e, RT_PHASE_OPTIMIZER, &err) || rt_exec_read_f64(e, st, out, &err))
            fail_msg("%s, t %lld: %s", c->name, (long long)t, err.msg);
        double want = sched_closed(&c->a, t), d = fabs(out[1] - want) / c->a.lr;
        if (out[0] != (double)(t + 1) || !(d <= 1e-6))
            fail_msg("%s, t %lld: steps done %g (want %lld), lr %.9g (closed form %.9g)", c->name, (long long)t, out[0], (long long)t + 1,
                     out[1], want);
        if (d > worst) worst = d;
    }
    rig_close(&r);
    return worst;
}

static void sched_run_all(rt_backend *b, stg_precision prec, const char *what) {
    int n;
    const sched_case *c = sched_cases(&n);
    for (int i = 0; i < n; i++) {
        double w = sched_run_case(b, &c[i], prec);
        print_message("%s %-40s %3lld iterations, max |lr - closed form| / peak %.2e\n", what, c[i].name, (long long)c[i].iters, w);
    }
}

#endif
