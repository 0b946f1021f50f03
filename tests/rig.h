// The test rig: a step built by the library's pipeline (planner/step.h), a backend (CPU or CUDA),
// an executor and a synthetic feed, opened and closed in one call each, so test programs do not
// rebuild the step by hand; also a graph alone (the passes, no plan), a model from YAML text, a
// graph a test built itself run through a plan and an executor, a recomputed step, one rig's
// gradients against another's, data-parallel ranks, checkpoint files compared, and the sampler.
// Header only (static inline): CMake builds each tests/test_*.c as its own program.
// Include after <cmocka.h>.
#ifndef STG_TEST_RIG_H
#define STG_TEST_RIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "planner/budget.h"
#include "planner/infer.h"
#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/safetensors.h"
#include "runtime/sample.h"
#include "runtime/train.h"
#include "tests/testutil.h"
#ifdef STG_HAVE_CUDA
#include "runtime/cuda/backend_cuda.h"
#endif

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

// The same for a model given as YAML text (`name` names it in messages).
static inline stg_step_opts rig_opts_text(const char *name, const char *text, stg_precision prec, const char *const *sets, int nsets) {
    stg_step_opts o = rig_opts(name, prec, sets, nsets);
    o.text = text;
    o.text_len = strlen(text);
    return o;
}

// A tiny LM whose LM head is its token embedding (tied: the embedding's gradient is the sum of two
// ops' results, an add op that accumulates itself), as YAML text in buf (n bytes) with these dims.
static inline const char *rig_tied_yaml(char *buf, size_t n, int vocab, int d_model, int ctx) {
    int k = snprintf(buf, n,
                     "name: tied\n"
                     "dims: {vocab: %d, d_model: %d, batch: 2, ctx: %d}\n"
                     "inputs:\n  tokens: [batch, ctx, i32]\n  targets: [batch, ctx, i32]\n"
                     "graph:\n"
                     "  - param emb [vocab, d_model] init=embedding\n"
                     "  - param g [d_model] init=ones\n"
                     "  - param w [d_model, d_model] init=linear\n"
                     "  - x = embedding(tokens, emb)\n"
                     "  - h = rmsnorm(add(x, linear(x, w)), g, eps=1e-5)\n"
                     "  - logits = linear(h, emb)\n"
                     "  - loss = cross_entropy(logits, targets)\n"
                     "loss: loss\n",
                     vocab, d_model, ctx);
    assert_true(k > 0 && (size_t)k < n);
    return buf;
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

// The graph of the step o describes after its passes (autodiff or the forward's classes, grouping
// unless o->ungrouped, schedule, validation), without a plan: for tests of the graph and the
// planner. The caller frees it with graph_free.
static inline stg_graph *rig_graph(const stg_step_opts *o) {
    stg_step_opts q = *o;
    q.no_plan = true;
    stg_step *s = rig_step(&q);
    stg_graph *g = s->g;
    s->g = NULL;
    stg_step_free(s);
    return g;
}

// A step of a graph the test built and scheduled itself (no pass runs; rig_open plans it).
static inline stg_step *rig_step_of(stg_graph *g) {
    stg_step *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->g = g;
    return s;
}

// The step of o with every recomputable activation recomputed (plan_recompute_all), planned and
// verified; rep (when non-NULL) gets its report.
static inline stg_step *rig_recomputed(const stg_step_opts *o, stg_budget_report *rep) {
    stg_err err;
    stg_step *s = NULL;
    stg_budget_report r;
    if (plan_recompute_all(o, &s, &r, &err)) fail_msg("%s", err.msg);
    if (plan_verify(s->g, s->p, &err)) fail_msg("%s", err.msg);
    if (rep) *rep = r;
    return s;
}

// A new backend: CUDA device 0 (RT_CUDA_* flags) or the CPU's. Returns -1 with err.
static inline int rig_try_backend(bool cuda, unsigned flags, rt_backend **b, stg_err *err) {
    *b = NULL;
    if (!cuda) return rt_backend_cpu_new(b, err);
#ifdef STG_HAVE_CUDA
    return rt_backend_cuda_new(0, flags, b, err);
#else
    (void)flags;
    return stg_errf(err, "a CUDA backend in a test built without CUDA");
#endif
}

static inline rt_backend *rig_backend(bool cuda) {
    rt_backend *b;
    stg_err err;
    if (rig_try_backend(cuda, 0, &b, &err)) fail_msg("%s", err.msg);
    return b;
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
    rt_backend *b;          // NULL: a new backend (CUDA device 0 when cuda), destroyed with the rig
    bool cuda;
    bool own_b;             // b is handed over: rig_close destroys it (even when opening fails)
    const rt_exec_opts *eo; // may be NULL
    int init_seed;          // rt_exec_init_params's seed (and steps done 0); < 0: neither
    int64_t feed_seed;      // the synthetic feed's data seed (markov order 4); < 0: no feed
    uint64_t rng_seed;      // the batch sampler's
    int micro;              // > 0: opening fails unless the executor makes this many passes a step
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
        if (rig_try_backend(c->cuda, 0, &r->b, err)) return -1;
        r->own_b = true;
    }
    rt_rng_seed(&r->rng, c->rng_seed);
    if (!r->p && plan_build(r->g, NULL, &r->p, err)) return -1;
    s->p = r->p;
    if (rt_exec_new(r->g, r->p, r->b, c->eo, &r->e, err)) return -1;
    if (c->init_seed >= 0 && (rt_exec_init_params(r->e, (uint64_t)c->init_seed, err) || rt_exec_set_steps_done(r->e, 0, err))) return -1;
    if (c->feed_seed >= 0 && rt_feed_new(r->g, NULL, 4, (uint64_t)c->feed_seed, &r->f, err)) return -1;
    if (c->micro > 0 && rt_exec_micro(r->e) != c->micro)
        return stg_errf(err, "the executor makes %d passes, not %d", rt_exec_micro(r->e), c->micro);
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

// Both rigs' parameters and optimizer state (rig_state) equal, byte for byte.
static inline void rig_state_equal(rig *a, rig *b) {
    size_t na, nb;
    char *sa = rig_state(a, &na), *sb = rig_state(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na);
    free(sa);
    free(sb);
}

// Tensor t's values as doubles (malloc'ed).
static inline double *rig_read(rt_exec *e, int t) {
    stg_err err;
    const stg_graph *g = rt_exec_graph(e);
    double *v = malloc(sizeof(double) * (size_t)(stg_numel(&g->t[t]) + 1));
    assert_non_null(v);
    if (rt_exec_read_f64(e, t, v, &err)) fail_msg("%s", err.msg);
    return v;
}

// The elements of every parameter together.
static inline int64_t rig_param_count(const stg_graph *g) {
    int64_t n = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM) n += stg_numel(&g->t[t]);
    return n;
}

// Every parameter's fp32 truth (the master weight in bf16) as doubles, in tensor order, into out.
static inline int rig_try_params(rig *r, double *out, stg_err *err) {
    for (int t = 0; t < r->g->nt; t++) {
        if (r->g->t[t].cls != STG_CLASS_PARAM) continue;
        if (rt_exec_read_f64(r->e, rt_exec_param_truth(r->e, t), out, err)) return -1;
        out += stg_numel(&r->g->t[t]);
    }
    return 0;
}

// The same, malloc'ed; *n gets the count.
static inline double *rig_params(rig *r, int64_t *n) {
    stg_err err;
    *n = rig_param_count(r->g);
    double *v = malloc(sizeof(double) * (size_t)(*n + 1));
    assert_non_null(v);
    if (rig_try_params(r, v, &err)) fail_msg("%s", err.msg);
    return v;
}

// n training steps, their losses into out[0..n), then every parameter's fp32 truth (rig_params);
// *nout gets the count, losses included. out must hold them all.
static inline int rig_try_train(rig *r, int n, double *out, int64_t *nout, stg_err *err) {
    for (int i = 0; i < n; i++) {
        rt_exec_results res;
        if (rig_try_step(r, RT_PHASE_ALL, &res, err)) return -1;
        out[i] = res.loss;
    }
    if (rig_try_params(r, out + n, err)) return -1;
    *nout = n + rig_param_count(r->g);
    return 0;
}

// One forward and backward of rig a (the reference) and rig b on the same batch (each drawn by a
// batch sampler seeded `seed`): the losses within loss_tol (relative) and every parameter's gradient
// of b (matched by name) within tol of a's (rel_err), or the test fails naming `what` and the
// parameter. Returns the worst gradient error; the losses into *la and *lb, the number of gradients
// compared into *ng.
static inline double rig_grads_against(rig *a, rig *b, uint64_t seed, double loss_tol, double tol, const char *what, double *la,
                                       double *lb, int *ng) {
    stg_err err;
    rt_rng r1, r2;
    rt_rng_seed(&r1, seed);
    rt_rng_seed(&r2, seed);
    rt_exec_results ra, rb;
    if (rt_feed_next(a->f, a->e, &r1, &err) || rt_feed_next(b->f, b->e, &r2, &err) ||
        rt_exec_run_results(a->e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &ra, &err) ||
        rt_exec_run_results(b->e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &rb, &err))
        fail_msg("%s: %s", what, err.msg);
    *la = ra.loss;
    *lb = rb.loss;
    if (!(fabs(rb.loss - ra.loss) / fabs(ra.loss) < loss_tol)) fail_msg("%s: loss %.9g, reference %.9g", what, rb.loss, ra.loss);
    double worst = 0;
    *ng = 0;
    for (int t = 0; t < a->g->nt; t++) {
        if (a->g->t[t].cls != STG_CLASS_PARAM) continue;
        int tb = graph_find_tensor(b->g, a->g->t[t].name);
        assert_true(tb >= 0);
        double *x = rig_read(a->e, a->g->t[t].grad), *y = rig_read(b->e, b->g->t[tb].grad);
        double e = rel_err(y, x, stg_numel(&a->g->t[t]));
        if (!(e < tol)) fail_msg("%s: gradient of %s: relative error %.3g", what, a->g->t[t].name, e);
        worst = fmax(worst, e);
        ++*ng;
        free(x);
        free(y);
    }
    return worst;
}

// Two safetensors files hold the same tensors (names, shapes, bytes), whatever their order; with
// meta, also the same step and data RNG state (checkpoints).
static inline void rig_same_tensors(const char *a, const char *b, bool meta) {
    rt_st *x, *y;
    stg_err err;
    if (rt_st_open(a, &x, &err) || rt_st_open(b, &y, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_st_count(x), rt_st_count(y));
    for (size_t i = 0; i < rt_st_count(x); i++) {
        const rt_st_tensor *s = rt_st_at(x, i), *t = rt_st_find(y, s->name);
        if (!t) fail_msg("%s lacks %s", b, s->name);
        assert_int_equal(s->nbytes, t->nbytes);
        if (s->nbytes && memcmp(s->data, t->data, s->nbytes) != 0) fail_msg("%s and %s differ in '%s'", a, b, s->name);
    }
    if (meta) {
        const char *keys[2] = {"step", "data_rng"};
        for (int k = 0; k < 2; k++) {
            const char *u = rt_st_meta_get(x, keys[k]), *v = rt_st_meta_get(y, keys[k]);
            if (!u || !v || strcmp(u, v) != 0) fail_msg("%s and %s differ in their %s", a, b, keys[k]);
        }
    }
    rt_st_free(x);
    rt_st_free(y);
}

// ---- data parallelism ---------------------------------------------------------------------------

// How a backend joins the data-parallel group (rt_backend_cpu_join, rt_backend_cuda_join).
typedef int (*rig_join_fn)(rt_backend *b, rt_dist *d, stg_err *err);

// rig_try_train as one rank of `world` (>= 1: data parallel over the launcher's environment, which
// must say this rank and world; 0: one process alone): backend c->b (handed over; NULL: the
// CPU's) joins the group through join, the rig opens on step s (handed over), the feed is sharded
// by rank when world > 1, and n steps train. Everything is closed before it returns.
static inline int rig_try_rank_train(stg_step *s, rig_cfg c, rig_join_fn join, int world, int rank, int n, double *out,
                                     int64_t *nout, stg_err *err) {
    rig r;
    memset(&r, 0, sizeof r);
    rt_dist d;
    memset(&d, 0, sizeof d);
    int rc = -1;
    if (!c.b && rt_backend_cpu_new(&c.b, err)) {
        stg_step_free(s);
        goto out;
    }
    if (world >= 1 &&
        (rt_dist_from_env(&d, err) || rt_dist_connect(&d, err) || join(c.b, &d, err) ||
         (d.rank != rank || d.world != world ? stg_errf(err, "environment says rank %d of %d", d.rank, d.world) : 0))) {
        stg_step_free(s);
        goto out;
    }
    c.own_b = false;
    if (rig_try_open(&r, s, &c, err) || (world > 1 && rt_feed_shard(r.f, rank, world, err))) goto out;
    if (rig_try_train(&r, n, out, nout, err)) goto out;
    rc = 0;
out:
    if (r.s) rig_close(&r);
    if (c.b) c.b->ops->destroy(c.b);
    rt_dist_close(&d);
    return rc;
}

// One rank's work for rig_fork_ranks: its doubles into out (room for cap), their count into *n.
typedef int (*rig_rank_fn)(int rank, void *ctx, double *out, int64_t *n, stg_err *err);

// Forks `world` processes on this machine, rank r with RANK=r, WORLD_SIZE, MASTER_PORT (from the
// process id), STG_DIST_TIMEOUT=30 and no mpirun variables; each runs fn and sends its doubles back
// through a pipe. res[r] (malloc'ed, cap doubles) and n[r] get them; a rank that fails (its message
// on stderr), or sends nothing, fails the test.
static inline void rig_fork_ranks(int world, rig_rank_fn fn, void *ctx, int64_t cap, double **res, int64_t *n) {
    char port[16];
    snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000)); // the rendezvous retries connecting
    int fds[8][2];
    pid_t pid[8];
    assert_true(world >= 1 && world <= 8);
    for (int r = 0; r < world; r++) {
        assert_int_equal(pipe(fds[r]), 0);
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) {
            char rs[16], ws[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ws, sizeof ws, "%d", world);
            setenv("RANK", rs, 1);
            setenv("WORLD_SIZE", ws, 1);
            setenv("MASTER_PORT", port, 1);
            setenv("STG_DIST_TIMEOUT", "30", 1);
            unsetenv("OMPI_COMM_WORLD_RANK");
            unsetenv("OMPI_COMM_WORLD_SIZE");
            unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
            double *out = malloc(sizeof(double) * (size_t)cap);
            int64_t k = 0;
            stg_err err;
            int rc = out ? fn(r, ctx, out, &k, &err) : -1;
            if (rc) fprintf(stderr, "rank %d: %s\n", r, out ? err.msg : "out of memory");
            int64_t hdr = rc ? -1 : k;
            if (write(fds[r][1], &hdr, sizeof hdr) != sizeof hdr) _exit(3);
            if (!rc && write(fds[r][1], out, sizeof(double) * (size_t)k) != (ssize_t)(sizeof(double) * (size_t)k)) _exit(3);
            _exit(rc ? 1 : 0);
        }
        close(fds[r][1]);
    }
    for (int r = 0; r < world; r++) {
        int64_t k = -1;
        res[r] = malloc(sizeof(double) * (size_t)cap);
        assert_non_null(res[r]);
        size_t got = 0;
        if (read(fds[r][0], &k, sizeof k) == sizeof k && k > 0 && k <= cap)
            while (got < sizeof(double) * (size_t)k) {
                ssize_t m = read(fds[r][0], (char *)res[r] + got, sizeof(double) * (size_t)k - got);
                if (m <= 0) break;
                got += (size_t)m;
            }
        close(fds[r][0]);
        int status;
        waitpid(pid[r], &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_true(k > 0 && got == sizeof(double) * (size_t)k);
        n[r] = k;
    }
}

// ---- sampling -----------------------------------------------------------------------------------

// The sampler of a model (planner/infer.h) on a prefill and a decode backend of one kind.
typedef struct rig_smp {
    stg_infer *inf;
    rt_backend *bp, *bd;
    rt_sampler *s;
} rig_smp;

// Batch B, prompt length P, sampling attributes sa, parameters from init seed `seed`; every tensor
// readable after a run and NaN wherever nothing was written (so options `graph` and `separate`
// as given, `poison` always).
static inline void rig_smp_open(rig_smp *x, const char *model, const char *const *sets, int nsets, stg_precision prec, int64_t B,
                                int64_t P, stg_sample_attrs sa, uint64_t seed, bool cuda, rt_sampler_opts so) {
    stg_infer_opts o = stg_infer_defaults();
    o.model_path = model;
    o.sets = sets;
    o.nsets = nsets;
    o.precision = prec;
    o.batch = B;
    o.prompt = P;
    o.sample = sa;
    stg_err err;
    if (stg_infer_build(&o, &x->inf, &err)) fail_msg("%s", err.msg);
    x->bp = rig_backend(cuda);
    x->bd = rig_backend(cuda);
    so.poison = true;
    if (rt_sampler_new(x->inf, x->bp, x->bd, &so, &x->s, &err) || rt_sampler_init(x->s, seed, false, &err)) fail_msg("%s", err.msg);
}

static inline void rig_smp_close(rig_smp *x) {
    rt_sampler_free(x->s);
    stg_infer_free(x->inf);
    x->bp->ops->destroy(x->bp);
    x->bd->ops->destroy(x->bd);
}

// The logits (B, L, V) of the full forward pass of tokens (B, L) through the training model's
// forward graph (malloc'ed; *V gets the vocabulary), parameters from init seed `seed`.
static inline double *rig_full_forward(const char *model, const char *const *sets, int nsets, stg_precision prec, int64_t B,
                                       int64_t L, const int32_t *tokens, uint64_t seed, bool cuda, int64_t *V) {
    const char *all[32];
    char bset[32], cset[32];
    int n = 0;
    assert_true(nsets <= 30);
    for (int i = 0; i < nsets; i++) all[n++] = sets[i];
    snprintf(bset, sizeof bset, "batch=%lld", (long long)B);
    snprintf(cset, sizeof cset, "ctx=%lld", (long long)L);
    all[n++] = bset;
    all[n++] = cset;
    stg_step_opts o = rig_opts(model, prec, all, n);
    o.train = false;
    o.ungrouped = false; // grouped products, as `stg` builds the forward
    rig r;
    rt_exec_opts eo = {.separate = true};
    rig_open(&r, rig_step(&o), &(rig_cfg){.cuda = cuda, .eo = &eo, .init_seed = -1, .feed_seed = -1});
    stg_err err;
    if (rt_exec_init_params(r.e, seed, &err)) fail_msg("%s", err.msg);
    int tok = graph_find_tensor(r.g, "tokens"), tgt = graph_find_tensor(r.g, "targets"), lg = graph_find_tensor(r.g, "logits");
    int32_t *zero = calloc((size_t)(B * L), sizeof *zero);
    assert_true(tok >= 0 && tgt >= 0 && lg >= 0 && zero);
    if (rt_exec_write(r.e, tok, tokens, sizeof(int32_t) * (size_t)(B * L), &err) ||
        rt_exec_write(r.e, tgt, zero, sizeof(int32_t) * (size_t)(B * L), &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err))
        fail_msg("%s", err.msg);
    *V = r.g->t[lg].shape[2];
    double *out = rig_read(r.e, lg);
    free(zero);
    rig_close(&r);
    return out;
}

#endif
