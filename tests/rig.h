// The test rig: a step built by the library's pipeline (planner/step.h), a backend, an executor and
// a synthetic feed, opened and closed in one call each, so test programs do not rebuild the step
// by hand. Header only (static inline): CMake builds each tests/test_*.c as its own program.
// Include after <cmocka.h>.
#ifndef STG_TEST_RIG_H
#define STG_TEST_RIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/train.h"

#ifndef MODEL
#define MODEL(p) STG_SOURCE_DIR "/models/" p
#endif

// The tiny LM's dims most tests run at (models/tiny.yaml).
#define RIG_TINY "d_model=32", "d_ff=48", "n_layers=2", "n_heads=2", "vocab=64"

// A training step of `model` with these overrides. Ungrouped: the tests' CPU references keep every
// product its own op (set o.ungrouped = false to build as `stg` does).
static inline stg_step_opts rig_opts(const char *model, stg_precision prec, const char *const *sets, int nsets) {
    stg_step_opts o = stg_step_defaults();
    o.model_path = model;
    o.precision = prec;
    o.sets = sets;
    o.nsets = nsets;
    o.ungrouped = true;
    return o;
}

// The optimizer most tests train with: lr, min_lr, warmup steps, cosine steps.
static inline stg_optim_config rig_optim(double lr, double min_lr, int64_t warmup, int64_t cosine_steps) {
    stg_optim_config oc = graph_optim_defaults();
    oc.lr = lr;
    oc.min_lr = min_lr;
    oc.warmup = warmup;
    oc.cosine_steps = cosine_steps;
    return oc;
}

// The step o describes, failing the test when it cannot be built.
static inline stg_step *rig_step(const stg_step_opts *o) {
    stg_step *s;
    stg_err err;
    if (stg_step_build(o, &s, &err)) fail_msg("%s", err.msg);
    return s;
}

typedef struct rig {
    stg_step *s;
    stg_graph *g; // s->g
    stg_plan *p;  // s->p
    rt_backend *b;
    bool own_b; // rig_close destroys b
    rt_exec *e;
    rt_feed *f; // NULL unless asked for
    rt_rng rng;
} rig;

typedef struct rig_cfg {
    rt_backend *b;          // NULL: a new CPU backend, destroyed with the rig
    bool own_b;             // b is handed over: rig_close destroys it (even when opening fails)
    const rt_exec_opts *eo; // may be NULL
    int init_seed;          // rt_exec_init_params's seed (and steps done 0); < 0: neither
    int64_t feed_seed;      // the synthetic feed's data seed (markov order 4); < 0: no feed
    uint64_t rng_seed;      // the batch sampler's
} rig_cfg;

// Opens the rig on step s (the rig owns it from here, even on failure). Returns -1 with err for
// tests that must report rather than fail (forked ranks); r is then closable.
static inline int rig_try_open(rig *r, stg_step *s, const rig_cfg *c, stg_err *err) {
    memset(r, 0, sizeof *r);
    r->s = s;
    r->g = s->g;
    r->p = s->p;
    r->b = c->b;
    r->own_b = c->own_b;
    if (!r->b) {
        if (rt_backend_cpu_new(&r->b, err)) return -1;
        r->own_b = true;
    }
    rt_rng_seed(&r->rng, c->rng_seed);
    if (!r->p && plan_build(r->g, NULL, &r->p, err)) return -1;
    s->p = r->p;
    if (rt_exec_new(r->g, r->p, r->b, c->eo, &r->e, err)) return -1;
    if (c->init_seed >= 0 && (rt_exec_init_params(r->e, (uint64_t)c->init_seed, err) || rt_exec_set_steps_done(r->e, 0, err))) return -1;
    if (c->feed_seed >= 0 && rt_feed_new(r->g, NULL, 4, (uint64_t)c->feed_seed, &r->f, err)) return -1;
    return 0;
}

static inline void rig_open(rig *r, stg_step *s, const rig_cfg *c) {
    stg_err err;
    if (rig_try_open(r, s, c, &err)) fail_msg("%s", err.msg);
}

static inline void rig_close(rig *r) {
    rt_feed_free(r->f);
    rt_exec_free(r->e);
    if (r->own_b && r->b) r->b->ops->destroy(r->b);
    stg_step_free(r->s);
    memset(r, 0, sizeof *r);
}

// One training step on the next batch of the feed.
static inline int rig_try_step(rig *r, unsigned mask, rt_exec_results *res, stg_err *err) {
    return rt_feed_next(r->f, r->e, &r->rng, err) || rt_exec_run_results(r->e, mask, res, err) ? -1 : 0;
}

// n steps of the whole phase set; their losses into loss (when non-NULL).
static inline void rig_steps(rig *r, int n, double *loss) {
    stg_err err;
    for (int i = 0; i < n; i++) {
        rt_exec_results res;
        if (rig_try_step(r, RT_PHASE_ALL, &res, &err)) fail_msg("%s", err.msg);
        if (loss) loss[i] = res.loss;
    }
}

// Every parameter and optimizer tensor (AdamW moments, master weights) as bytes, in tensor order.
static inline char *rig_state(rig *r, size_t *n) {
    stg_err err;
    size_t total = 0;
    for (int t = 0; t < r->g->nt; t++)
        if (r->g->t[t].cls == STG_CLASS_PARAM || r->g->t[t].cls == STG_CLASS_OPTIMIZER) total += (size_t)stg_bytes(&r->g->t[t]);
    char *buf = malloc(total ? total : 1), *q = buf;
    assert_non_null(buf);
    for (int t = 0; t < r->g->nt; t++)
        if (r->g->t[t].cls == STG_CLASS_PARAM || r->g->t[t].cls == STG_CLASS_OPTIMIZER) {
            if (rt_exec_read(r->e, t, q, (size_t)stg_bytes(&r->g->t[t]), &err)) fail_msg("%s", err.msg);
            q += stg_bytes(&r->g->t[t]);
        }
    *n = total;
    return buf;
}

// n training steps, their losses into out[0..n), then every parameter's fp32 truth (the master
// weight in bf16) as doubles, in tensor order; *nout gets the count, losses included. out must
// hold them all.
static inline int rig_try_train(rig *r, int n, double *out, int64_t *nout, stg_err *err) {
    for (int i = 0; i < n; i++) {
        rt_exec_results res;
        if (rig_try_step(r, RT_PHASE_ALL, &res, err)) return -1;
        out[i] = res.loss;
    }
    int64_t k = n;
    for (int t = 0; t < r->g->nt; t++) {
        if (r->g->t[t].cls != STG_CLASS_PARAM) continue;
        if (rt_exec_read_f64(r->e, rt_exec_param_truth(r->e, t), out + k, err)) return -1;
        k += stg_numel(&r->g->t[t]);
    }
    *nout = k;
    return 0;
}

#endif
