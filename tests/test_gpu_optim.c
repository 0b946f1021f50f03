// The optimizer on the GPU: the per-parameter AdamW launches with gradient-norm slots and slot_norm
// against the CPU reference; the optimizer in backward equal to the ordinary step (fp32 and bf16,
// clipping never triggered) and, with clipping by the previous step's norm, equal to the CPU
// backend's in-backward run; recomputation (an impossible memory budget) leaving losses and
// gradients unchanged. STG_BENCH_OPTIM=1 also times the AdamW and global-norm kernels' variants and
// a device copy (printed; nothing asserted on time).
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

#include "graph/loader.h"
#include "ops/optim/bench.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/rng.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p


// ---- adamw with slots and slot_norm, op by op ---------------------------------------------------

#define NP 4
static const int64_t sizes[NP] = {70001, 5, 32768 * 2 + 3, 1600 * 3};

typedef struct {
    stg_graph *g;
    int sched, norm, slots, p[NP], gr[NP], m[NP], v[NP];
} slot_graph;

static void build_slot_graph(slot_graph *o) {
    stg_err err;
    o->g = graph_new(STG_PREC_FP32, &err);
    assert_non_null(o->g);
    stg_graph *g = o->g;
    stg_loc none = {0};
    int64_t two = 2, np = NP;
    o->sched = graph_add_tensor(g, "sched", 1, &two, STG_F32, STG_CLASS_WORKSPACE, none, &err);
    o->norm = graph_add_tensor(g, "norm", 0, NULL, STG_F32, STG_CLASS_WORKSPACE, none, &err);
    o->slots = graph_add_tensor(g, "slots", 1, &np, STG_F32, STG_CLASS_WORKSPACE, none, &err);
    stg_attrs la;
    memset(&la, 0, sizeof la);
    la.lr.lr = 3e-3;
    la.lr.min_lr = 3e-4;
    la.lr.warmup = 2;
    la.lr.cosine_steps = 50;
    assert_true(graph_add_op(g, STG_OP_LR_SCHEDULE, &o->sched, 1, &la, STG_PHASE_OPTIMIZER, "lr", none, NULL, &err) >= 0);
    for (int i = 0; i < NP; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "p%d", i);
        o->p[i] = graph_add_tensor(g, nm, 1, &sizes[i], STG_F32, STG_CLASS_PARAM, none, &err);
        snprintf(nm, sizeof nm, "g%d", i); // INPUT: nothing here writes the gradients
        o->gr[i] = graph_add_tensor(g, nm, 1, &sizes[i], STG_F32, STG_CLASS_INPUT, none, &err);
        snprintf(nm, sizeof nm, "m%d", i);
        o->m[i] = graph_add_tensor(g, nm, 1, &sizes[i], STG_F32, STG_CLASS_OPTIMIZER, none, &err);
        snprintf(nm, sizeof nm, "v%d", i);
        o->v[i] = graph_add_tensor(g, nm, 1, &sizes[i], STG_F32, STG_CLASS_OPTIMIZER, none, &err);
        assert_true(o->p[i] >= 0 && o->gr[i] >= 0 && o->m[i] >= 0 && o->v[i] >= 0);
    }
    for (int i = 0; i < NP; i++) {
        stg_attrs a;
        memset(&a, 0, sizeof a);
        a.adamw.beta1 = 0.9;
        a.adamw.beta2 = 0.95;
        a.adamw.eps = 1e-8;
        a.adamw.weight_decay = i % 2 ? 0.0 : 0.1;
        a.adamw.max_norm = i == 3 ? 0.0 : 1.0;
        a.adamw.slot = NP - i; // slots in another order than the ops
        int in[7] = {o->p[i], o->gr[i], o->m[i], o->v[i], o->norm, o->sched, o->slots};
        if (graph_add_op(g, STG_OP_ADAMW, in, 7, &a, STG_PHASE_OPTIMIZER, "adamw", none, NULL, &err) < 0) fail_msg("%s", err.msg);
    }
    int in2[2] = {o->slots, o->norm};
    assert_true(graph_add_op(g, STG_OP_SLOT_NORM, in2, 2, NULL, STG_PHASE_OPTIMIZER, "slot_norm", none, NULL, &err) >= 0);
    if (graph_schedule(g, &err)) fail_msg("%s", err.msg);
}

// Random inputs (the same for both backends), NaN in the slots; one run; every tensor read back.
static double **run_slot_graph(bool cuda, double norm_before) {
    slot_graph o;
    build_slot_graph(&o);
    rig r;
    rig_open(&r, rig_step_of(o.g), &(rig_cfg){.cuda = cuda, .init_seed = -1, .feed_seed = -1});
    stg_graph *g = r.g;
    rt_exec *e = r.e;
    stg_err err;
    rt_rng rng;
    rt_rng_seed(&rng, 21);
    for (int i = 0; i < NP; i++) {
        int64_t n = sizes[i];
        double *w = malloc(sizeof(double) * (size_t)n * 4), *gg = w + n, *m = gg + n, *v = m + n;
        for (int64_t k = 0; k < n; k++) {
            w[k] = 0.05 * rt_rng_normal(&rng);
            gg[k] = 0.3 * rt_rng_normal(&rng);
            m[k] = 0.01 * rt_rng_normal(&rng);
            v[k] = 1e-3 * rt_rng_uniform(&rng) + 1e-6;
        }
        if (rt_exec_write_f64(e, o.p[i], w, &err) || rt_exec_write_f64(e, o.gr[i], gg, &err) || rt_exec_write_f64(e, o.m[i], m, &err) ||
            rt_exec_write_f64(e, o.v[i], v, &err))
            fail_msg("%s", err.msg);
        free(w);
    }
    double sched[2] = {2, 0.5}, nan4[NP];
    for (int i = 0; i < NP; i++) nan4[i] = NAN;
    if (rt_exec_write_f64(e, o.sched, sched, &err) || rt_exec_write_f64(e, o.norm, &norm_before, &err) ||
        rt_exec_write_f64(e, o.slots, nan4, &err) || rt_exec_run(e, RT_PHASE_ALL, &err))
        fail_msg("%s", err.msg);
    double **out = calloc((size_t)g->nt, sizeof *out);
    for (int t = 0; t < g->nt; t++) out[t] = rig_read(e, t);
    rig_close(&r);
    return out;
}

static void test_slot_adamw_against_cpu(void **s) {
    const double norms[2] = {2.5, 0.3}; // clipping by the previous norm, and none
    for (int k = 0; k < 2; k++) {
        slot_graph o;
        build_slot_graph(&o);
        double **c = run_slot_graph(false, norms[k]), **d = run_slot_graph(true, norms[k]);
        for (int t = 0; t < o.g->nt; t++) {
            int64_t n = stg_numel(&o.g->t[t]);
            double e = rel_err(d[t], c[t], n);
            print_message("  norm before %.1f: %-6s rel err %.3e\n", norms[k], o.g->t[t].name, e);
            if (!(e < 1e-5)) fail_msg("%s: relative error %g", o.g->t[t].name, e);
            free(c[t]);
            free(d[t]);
        }
        // the slots hold each gradient's sum of squares, the norm their root sum (from the CPU run)
        free(c);
        free(d);
        graph_free(o.g);
    }
}

// ---- training steps -------------------------------------------------------------------------------

static const char *lm_sets[] = {"d_model=64", "d_ff=160", "n_layers=2", "n_heads=2", "vocab=256", "batch=2", "ctx=40", "attention=flash"};

static stg_step_opts opts(stg_precision prec, bool in_backward, double max_norm) {
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), prec, lm_sets, 8);
    o.optim = rig_optim(1e-2, 1e-3, 1, 5);
    o.optim.max_norm = max_norm;
    o.optim.in_backward = in_backward;
    return o;
}

static stg_step *load(stg_precision prec, bool in_backward, double max_norm) {
    stg_step_opts o = opts(prec, in_backward, max_norm);
    return rig_step(&o);
}

static void open_rig(rig *r, stg_step *st, bool cuda) {
    rt_exec_opts eo = {.graph = cuda, .poison = true};
    rig_open(r, st, &(rig_cfg){.cuda = cuda, .eo = &eo, .init_seed = 3, .feed_seed = 9, .rng_seed = 17});
}

static void steps(rig *r, int n, unsigned mask, double *loss, double *norm) {
    stg_err err;
    for (int s = 0; s < n; s++) {
        rt_exec_results res;
        if (rig_try_step(r, mask, &res, &err)) fail_msg("%s", err.msg);
        loss[s] = res.loss;
        if (norm) norm[s] = res.grad_norm;
    }
}

// a: reference run, b: run under test; 3 steps; losses, norms and parameters within tol.
static void compare(rig *a, rig *b, double tol, const char *what) {
    double la[3], lb[3], na[3], nb[3];
    steps(a, 3, RT_PHASE_ALL, la, na);
    steps(b, 3, RT_PHASE_ALL, lb, nb);
    int64_t pa, pb;
    double *wa = rig_params(a, &pa), *wb = rig_params(b, &pb);
    assert_int_equal(pa, pb);
    double el = rel_err(lb, la, 3), en = rel_err(nb, na, 3), ew = rel_err(wb, wa, pa);
    print_message("%s: losses %.6f %.6f %.6f / %.6f %.6f %.6f, norms %.4f %.4f %.4f; rel err losses %.2e, norms %.2e, params %.2e\n",
                  what, la[0], la[1], la[2], lb[0], lb[1], lb[2], nb[0], nb[1], nb[2], el, en, ew);
    assert_true(el < tol);
    assert_true(en < tol);
    assert_true(ew < tol);
    free(wa);
    free(wb);
}

static void in_backward_equal(stg_precision prec) {
    rig a, b;
    open_rig(&a, load(prec, false, 1e30), true);
    open_rig(&b, load(prec, true, 1e30), true);
    compare(&a, &b, 1e-5, prec == STG_PREC_BF16 ? "bf16 in backward vs ordinary (gpu)" : "fp32 in backward vs ordinary (gpu)");
    assert_true(b.p->peak_bytes <= a.p->peak_bytes + (1 << 16));
    rig_close(&a);
    rig_close(&b);
}

static void test_in_backward_equal_fp32(void **s) { in_backward_equal(STG_PREC_FP32); }
static void test_in_backward_equal_bf16(void **s) { in_backward_equal(STG_PREC_BF16); }

// Clipping by the previous step's norm (it triggers every step) on the GPU against the CPU backend.
static void test_in_backward_clipping_against_cpu(void **s) {
    rig c, d;
    open_rig(&c, load(STG_PREC_FP32, true, 0.05), false);
    open_rig(&d, load(STG_PREC_FP32, true, 0.05), true);
    compare(&c, &d, 1e-4, "fp32 in backward, clipping, gpu vs cpu");
    rig_close(&c);
    rig_close(&d);
}

// The updates on their own stream beside the backward (graph replay over the context's streams)
// against eager launch on one stream, bf16 with clipping (it triggers from the second step): the same
// losses, norms, parameters and AdamW state, bit for bit (the slots and partials are added in a fixed
// order either way).
static void test_in_backward_graph_equals_eager(void **s) {
    rig a, b;
    rt_exec_opts ea = {.graph = false, .poison = true}, eb = {.graph = true, .poison = true};
    rig_open(&a, load(STG_PREC_BF16, true, 0.05), &(rig_cfg){.cuda = true, .eo = &ea, .init_seed = 3, .feed_seed = 9, .rng_seed = 17});
    rig_open(&b, load(STG_PREC_BF16, true, 0.05), &(rig_cfg){.cuda = true, .eo = &eb, .init_seed = 3, .feed_seed = 9, .rng_seed = 17});
    double la[4], lb[4], na[4], nb[4];
    steps(&a, 4, RT_PHASE_ALL, la, na);
    steps(&b, 4, RT_PHASE_ALL, lb, nb);
    print_message("bf16 in backward, clipping: eager losses %.6f %.6f %.6f %.6f, norms %.4f %.4f %.4f %.4f; graph %.6f .. %.6f\n", la[0],
                  la[1], la[2], la[3], na[0], na[1], na[2], na[3], lb[0], lb[3]);
    assert_true(na[1] > 0.05); // clipping took part in the later steps
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(na, nb, sizeof na);
    rig_state_equal(&a, &b);
    rig_close(&a);
    rig_close(&b);
}

// Recomputation on the GPU: everything recomputable recomputed (an impossible budget) gives the
// losses and gradients of the plain plan, and the same parameters after steps.
static void test_recompute_equal(void **s) {
    stg_step_opts o = opts(STG_PREC_FP32, false, 1.0);
    stg_budget_report rep;
    stg_step *s1 = rig_recomputed(&o, &rep);
    assert_true(rep.n_recomputed > 5);
    rig a, b;
    open_rig(&a, load(STG_PREC_FP32, false, 1.0), true);
    open_rig(&b, s1, true);
    assert_true(b.p->peak_bytes < a.p->peak_bytes);
    double la, lb;
    int ng;
    double worst = rig_grads_against(&a, &b, 17, 1e-5, 1e-5, "with recomputation", &la, &lb, &ng);
    print_message("recomputation (%d activations): loss %.6f / %.6f, worst gradient rel err %.2e\n", rep.n_recomputed, la, lb, worst);
    compare(&a, &b, 1e-5, "fp32 recomputed vs plain (gpu)");
    rig_close(&a);
    rig_close(&b);
}

// ---- the kernels' bandwidth (STG_BENCH_OPTIM=1) -----------------------------------------------------

static void bench(void) {
    stg_err err;
    rt_backend *b;
    if (rt_backend_cuda_new(0, false, &b, &err)) fail_msg("%s", err.msg);
    cuda_optim_bench_row rows[32];
    int n = 0;
    if (cuda_optim_bench(rt_backend_cuda_context(b), (int64_t)1 << 28, 10, rows, 32, &n, &err)) fail_msg("%s", err.msg);
    printf("optimizer kernels on %s (median of 10, bytes read + written):\n", cuda_device_name(rt_backend_cuda_context(b)));
    for (int i = 0; i < n; i++)
        printf("  %-40s %9.3f ms %8.2f GB %7.3f TB/s\n", rows[i].name, rows[i].ms, rows[i].bytes / 1e9, rows[i].bytes / (rows[i].ms * 1e-3) / 1e12);
    b->ops->destroy(b);
}

int main(void) {
    if (!rt_cuda_available()) return gpu_skipped("no GPU");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_adamw_against_cpu),
        cmocka_unit_test(test_in_backward_equal_fp32),
        cmocka_unit_test(test_in_backward_equal_bf16),
        cmocka_unit_test(test_in_backward_clipping_against_cpu),
        cmocka_unit_test(test_in_backward_graph_equals_eager),
        cmocka_unit_test(test_recompute_equal),
    };
    GPU_FILTER();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *bm = getenv("STG_BENCH_OPTIM");
    if (bm && strcmp(bm, "1") == 0) bench();
    return rc;
}

#endif
