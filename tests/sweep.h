// The op sweep: every differentiable op kind's sample model (its rules row's `sample`, ops/registry.h)
// built by the library's step pipeline and run forward and backward, so one table drives the
// checks every op kind gets: tests/test_ops.c (CPU: finite differences in fp64, fp32 against fp64,
// planned buffer sharing against separate buffers) and tests/test_gpu_sweep.c (CUDA against the
// CPU, graph replay against eager). A new op kind with a gradient rule and no sample fails the sweep.
// Header only (static inline); include after <cmocka.h>.
#ifndef STG_TEST_SWEEP_H
#define STG_TEST_SWEEP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/rng.h"
#include "tests/rig.h"
#include "tests/testutil.h"

#define SWEEP_IBOUND 5 // i32 inputs get values in [0, SWEEP_IBOUND)

// One run of a sample: the loss, then every parameter's values and gradient, in tensor order.
typedef struct sweep_run {
    double loss;
    int64_t n;      // parameter elements in all
    double *params; // n values
    double *grads;  // n values
} sweep_run;

static inline void sweep_run_free(sweep_run *r) {
    free(r->params);
    free(r->grads);
    memset(r, 0, sizeof *r);
}

// The sample's model text: "name:" + the row's sample + "loss: loss".
static inline char *sweep_text(const stg_op_def *d) {
    size_t n = strlen(d->sample) + 128;
    char *t = malloc(n);
    assert_non_null(t);
    snprintf(t, n, "name: sweep-%s\n%sloss: loss\n", d->name, d->sample);
    return t;
}

// A sample's training step on a backend the caller keeps (w->s->g its graph, w->e its executor).
typedef rig sweep;

// Builds the sample's training step at `prec` (grouped products, as `stg` builds it) on backend b.
// Returns -1 with err; w is closable either way.
static inline int sweep_open(sweep *w, const stg_op_def *d, stg_precision prec, rt_backend *b, const rt_exec_opts *eo, stg_err *err) {
    memset(w, 0, sizeof *w);
    char *text = sweep_text(d);
    char name[96];
    snprintf(name, sizeof name, "<sample of %s>", d->name);
    stg_step_opts o = rig_opts_text(name, text, prec, NULL, 0);
    o.ungrouped = false;
    stg_step *s;
    int rc = stg_step_build(&o, &s, err);
    free(text);
    if (rc) return -1;
    return rig_try_open(w, s, &(rig_cfg){.b = b, .eo = eo, .init_seed = -1, .feed_seed = -1}, err);
}

static inline void sweep_close(sweep *w) { rig_close(w); }

// Writes the inputs (i32: values in [0, SWEEP_IBOUND) from seed) and the parameters: from `params`
// when non-NULL (n values in tensor order), else rt_exec_init_params(seed).
static inline int sweep_feed(sweep *w, uint64_t seed, const double *params, stg_err *err) {
    const stg_graph *g = w->s->g;
    rt_rng rng;
    rt_rng_seed(&rng, seed);
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_INPUT) continue;
        int64_t n = stg_numel(&g->t[t]);
        if (g->t[t].dtype == STG_I32) {
            int32_t *v = malloc(sizeof *v * (size_t)n);
            assert_non_null(v);
            for (int64_t i = 0; i < n; i++) v[i] = (int32_t)rt_rng_below(&rng, SWEEP_IBOUND);
            int rc = rt_exec_write(w->e, t, v, sizeof *v * (size_t)n, err);
            free(v);
            if (rc) return -1;
        } else {
            double *v = malloc(sizeof *v * (size_t)n);
            assert_non_null(v);
            for (int64_t i = 0; i < n; i++) v[i] = 2.0 * rt_rng_uniform(&rng) - 1.0;
            int rc = rt_exec_write_f64(w->e, t, v, err);
            free(v);
            if (rc) return -1;
        }
    }
    if (!params) return rt_exec_init_params(w->e, seed, err);
    int64_t k = 0;
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM) continue;
        if (rt_exec_write_f64(w->e, t, params + k, err)) return -1;
        k += stg_numel(&g->t[t]);
    }
    return 0;
}

// Runs forward and backward and reads the loss, the parameters and their gradients into r.
static inline int sweep_collect(sweep *w, sweep_run *r, stg_err *err) {
    const stg_graph *g = w->s->g;
    memset(r, 0, sizeof *r);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM) r->n += stg_numel(&g->t[t]);
    r->params = calloc((size_t)r->n + 1, sizeof(double));
    r->grads = calloc((size_t)r->n + 1, sizeof(double));
    assert_non_null(r->params);
    assert_non_null(r->grads);
    if (rt_exec_run(w->e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, err) || rt_exec_read_f64(w->e, g->loss, &r->loss, err)) return -1;
    int64_t k = 0;
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM) continue;
        if (g->t[t].grad < 0) return stg_errf(err, "parameter '%s' has no gradient", g->t[t].name);
        if (rt_exec_read_f64(w->e, t, r->params + k, err) || rt_exec_read_f64(w->e, g->t[t].grad, r->grads + k, err)) return -1;
        k += stg_numel(&g->t[t]);
    }
    return 0;
}

// One sample at one precision on one backend: open, feed, run, collect, close.
static inline int sweep_once(const stg_op_def *d, stg_precision prec, rt_backend *b, const rt_exec_opts *eo, uint64_t seed,
                             const double *params, sweep_run *r, stg_err *err) {
    sweep w;
    int rc = sweep_open(&w, d, prec, b, eo, err) || sweep_feed(&w, seed, params, err) || sweep_collect(&w, r, err) ? -1 : 0;
    sweep_close(&w);
    return rc;
}

// got against want: loss to tol_loss (relative), gradients to tol (rel_err); fails with the op's name.
static inline void sweep_expect_close(const char *op, const char *what, const sweep_run *got, const sweep_run *want, double tol_loss, double tol) {
    assert_int_equal(got->n, want->n);
    double dl = fabs(got->loss - want->loss) / fmax(1e-12, fabs(want->loss));
    if (!(dl <= tol_loss)) fail_msg("%s, %s: loss %.10g, reference %.10g (relative %.3g > %.1g)", op, what, got->loss, want->loss, dl, tol_loss);
    double dg = rel_err(got->grads, want->grads, want->n);
    if (!(dg <= tol)) fail_msg("%s, %s: gradients differ by %.3g relative (> %.1g)", op, what, dg, tol);
}

// Every op kind with a gradient rule (the kinds a model file writes) has a sample.
static inline void sweep_expect_samples(void) {
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = ops_def((stg_op_kind)k);
        if (d->grad && !d->sample) fail_msg("op '%s' has a gradient rule but no sample (its rules row's .sample)", d->name);
        if (!d->grad && d->sample) fail_msg("op '%s' has a sample but no gradient rule", d->name);
    }
}

#endif
