// Gradient accumulation (issue 27, item 1) on the CPU backend: N micro-batches of B rows give the
// parameters one batch of N·B rows gives (fp32, 5 optimizer steps, relative error <= 1e-6), with
// and without clipping, grouped and ungrouped products, a feature model, a tied parameter, the
// memory budget, and 2 data-parallel ranks (with and without ZeRO-1); the graph and the plan
// (persistent gradients, the loss gradient 1/N, what accumulates); the executor's micro-batch
// inputs; and the command line's refusals (exit 2, nothing written).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include "ops/elementwise/kernels.h"
#include "ops/embedding/kernels.h"
#include "ops/matmul/kernels.h"
#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p
#define STEPS 5
#define MAXOUT (1 << 18)

typedef struct {
    const char *model;  // a file, or NULL for a tied LM (rig_tied_yaml)
    int batch, accum;   // rows per micro-batch, micro-batches per step
    double clip;        // max_norm (0: no clipping)
    bool grouped;       // matmul_group ops (as stg builds)
    int world, zero, rank; // data parallel (world 0: one process)
    int64_t budget;     // > 0: plan within this many bytes
    bool fused;         // the LM's fused head (linear_cross_entropy)
    bool late;          // with fused: its weight gradient made late (fused_head=late)
} acfg;

static stg_step *build(const acfg *c, stg_err *err) {
    char b[32];
    snprintf(b, sizeof b, "batch=%d", c->batch);
    const char *lm[] = {RIG_TINY, b, "ctx=16", c->fused ? (c->late ? "fused_head=late" : "fused_head=on") : "fused_head=off"};
    const char *toy[] = {b};
    bool is_toy = c->model && strstr(c->model, "toy.yaml");
    char tied[1024];
    stg_step_opts o = c->model ? rig_opts(c->model, STG_PREC_FP32, is_toy ? toy : lm, is_toy ? 1 : 8)
                               : rig_opts_text("tied.yaml", rig_tied_yaml(tied, sizeof tied, 32, 16, 8), STG_PREC_FP32, toy, 1);
    o.ungrouped = !c->grouped;
    o.optim = rig_optim(1e-2, graph_optim_defaults().min_lr, 1, STEPS);
    o.optim.max_norm = c->clip;
    o.optim.grad_accum = c->accum;
    o.optim.dp_world = c->world;
    o.optim.dp_bucket_bytes = 16 << 10;
    o.optim.dp_first_bucket_bytes = 4 << 10;
    o.optim.dp_zero = c->zero;
    o.optim.dp_rank = c->rank;
    o.budget = c->budget;
    stg_step *s = NULL;
    if (stg_step_build(&o, &s, err)) return NULL;
    return s;
}

// STEPS optimizer steps of configuration c (poisoned arena: NaN in every non-persistent byte
// before every micro-batch); losses then every parameter into out.
static int train(const acfg *c, double *out, int64_t *nout, stg_err *err) {
    stg_step *st = build(c, err);
    if (!st) return -1;
    rt_exec_opts eo = {.poison = true};
    rig_cfg rc = {.eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 8, .micro = c->accum > 1 ? c->accum : 1};
    return rig_try_rank_train(st, rc, rt_backend_cpu_join, c->world, c->rank, STEPS, out, nout, err);
}

// c with accum micro-batches of c->batch rows against one batch of accum x batch rows.
static void same_as_one_batch(acfg c, double tol) {
    double *acc = malloc(sizeof(double) * MAXOUT), *one = malloc(sizeof(double) * MAXOUT);
    assert_non_null(acc);
    assert_non_null(one);
    int64_t na = 0, n1 = 0;
    stg_err err;
    if (train(&c, acc, &na, &err)) fail_msg("accumulating: %s", err.msg);
    acfg big = c;
    big.batch = c.batch * c.accum;
    big.accum = 1;
    big.budget = 0;
    if (train(&big, one, &n1, &err)) fail_msg("one batch: %s", err.msg);
    assert_int_equal(na, n1);
    double el = rel_err(acc, one, STEPS), ep = rel_err(acc + STEPS, one + STEPS, n1 - STEPS);
    print_message("%s: %d x %d rows%s%s: losses %.7f .. %.7f (one batch %.7f .. %.7f); rel err losses %.2e params %.2e\n",
                  c.model ? strrchr(c.model, '/') + 1 : "tied", c.accum, c.batch, c.clip > 0 ? ", clipped" : ", no clipping",
                  c.grouped ? ", grouped" : "", acc[0], acc[STEPS - 1], one[0], one[STEPS - 1], el, ep);
    assert_true(el <= tol);
    assert_true(ep <= tol);
    assert_true(one[STEPS - 1] < one[0]); // it trained
    free(acc);
    free(one);
}

// Clipping active (the tiny LM's gradient norm is about 1 at the start) and off.
static void test_lm_clipped(void **s) { same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0.05, .grouped = false}, 1e-6); }
static void test_lm_unclipped(void **s) { same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0, .grouped = false}, 1e-6); }
static void test_lm_grouped(void **s) { same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0.05, .grouped = true}, 1e-6); }
// 1/3 is not exact in binary: the mean still agrees to rounding
static void test_lm_three(void **s) { same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 1, .accum = 3, .clip = 0.05, .grouped = true}, 1e-6); }
// rows of features (the toy feed), LayerNorm gain and bias (their gradients accumulate through a copy)
static void test_toy(void **s) { same_as_one_batch((acfg){.model = MODEL("toy.yaml"), .batch = 4, .accum = 4, .clip = 0.05, .grouped = true}, 1e-6); }
// The fused LM head + loss: its backward takes the 1/N loss gradient too.
static void test_lm_fused_head(void **s) {
    same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0.05, .grouped = true, .fused = true}, 1e-6);
}
// The same with its weight gradient made late (linear_cross_entropy_dx now, _dw just before the global
// norm): the late op's gradient accumulates like every other.
static void test_lm_late_head(void **s) {
    same_as_one_batch((acfg){.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0.05, .grouped = true, .fused = true, .late = true},
                      1e-6);
}
static void test_tied(void **s) { same_as_one_batch((acfg){.model = NULL, .batch = 2, .accum = 4, .clip = 0.05, .grouped = true}, 1e-6); }

// The memory budget recomputes activations in every micro-batch's backward pass; the gradients stay
// persistent and the result is the same.
static void test_budget(void **s) {
    stg_err err;
    acfg c = {.model = MODEL("tiny.yaml"), .batch = 2, .accum = 4, .clip = 0.05, .grouped = true};
    stg_step *plain = build(&c, &err);
    if (!plain) fail_msg("%s", err.msg);
    int64_t peak = plain->p->peak_bytes, pers = plain->p->persistent_bytes;
    stg_step_free(plain);
    c.budget = pers + (peak - pers) * 3 / 4;
    stg_step *fit = build(&c, &err);
    if (!fit) fail_msg("budget %lld: %s", (long long)c.budget, err.msg);
    print_message("budget %lld of %lld: %d recomputed, peak %lld\n", (long long)c.budget, (long long)peak, fit->budget.n_recomputed,
                  (long long)fit->p->peak_bytes);
    assert_true(fit->budget.n_recomputed > 0);
    assert_true(fit->p->peak_bytes <= c.budget);
    for (int t = 0; t < fit->g->nt; t++)
        if (fit->g->t[t].cls == STG_CLASS_GRAD) assert_int_equal(fit->p->region[t], STG_REGION_PERSISTENT);
    if (plan_verify(fit->g, fit->p, &err)) fail_msg("%s", err.msg);
    stg_step_free(fit);
    same_as_one_batch(c, 1e-6);
}

// ---- the CPU kernels that add into a gradient ---------------------------------------------------

static void fill(double *x, int64_t n, rt_rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = 2.0 * rt_rng_uniform(r) - 1.0;
}

// Each accumulating kernel on fresh random inputs: out (random) + the result equals what the
// writing kernel gives plus out, to rounding (fp64).
static void test_kernels(void **s) {
    rt_rng r;
    rt_rng_seed(&r, 11);
    stg_err err;
    enum { M = 5, N = 7, K = 9 };
    double A[K * M], B[N * K], C0[M * N], C[M * N], W[M * N];
    fill(A, K * M, &r), fill(B, N * K, &r), fill(C0, M * N, &r);
    size_t nb = cpu_matmul_scratch_f64(1, M, N, K, 1, 1, 0);
    void *sc = malloc(nb);
    assert_non_null(sc);
    memcpy(C, C0, sizeof C);
    assert_int_equal(cpu_matmul_f64(A, B, W, 1, M, N, K, 1, 1, 0, 0, sc, nb, &err), 0); // written
    assert_int_equal(cpu_matmul_f64(A, B, C, 1, M, N, K, 1, 1, 0, 1, sc, nb, &err), 0); // added
    for (int i = 0; i < M * N; i++) assert_true(fabs(C[i] - (C0[i] + W[i])) < 1e-12);
    free(sc);
    // embedding backward: tokens 0..3 over a vocabulary of 5 (row 4 gets nothing: unchanged)
    int32_t tok[6] = {1, 3, 1, 0, 2, 1};
    double dy[6 * 3], dW0[5 * 3], dW[5 * 3], dWw[5 * 3];
    fill(dy, 18, &r), fill(dW0, 15, &r);
    nb = cpu_embedding_bwd_scratch_f64(6, 5, 3);
    sc = malloc(nb);
    assert_non_null(sc);
    memcpy(dW, dW0, sizeof dW);
    assert_int_equal(cpu_embedding_bwd_f64(tok, dy, dWw, 6, 5, 3, 0, sc, nb, &err), 0);
    assert_int_equal(cpu_embedding_bwd_f64(tok, dy, dW, 6, 5, 3, 1, sc, nb, &err), 0);
    for (int i = 0; i < 15; i++) assert_true(fabs(dW[i] - (dW0[i] + dWw[i])) < 1e-12);
    for (int i = 12; i < 15; i++) assert_true(dW[i] == dW0[i]);
    free(sc);
    double x[16], y0[16], y[16], z[16];
    fill(x, 16, &r), fill(y0, 16, &r), fill(z, 16, &r);
    memcpy(y, y0, sizeof y);
    cpu_scale_acc_f64(x, y, 16, -0.75);
    for (int i = 0; i < 16; i++) assert_true(fabs(y[i] - (y0[i] - 0.75 * x[i])) < 1e-15);
    memcpy(y, y0, sizeof y);
    cpu_add_acc_f64(x, z, y, 16);
    for (int i = 0; i < 16; i++) assert_true(fabs(y[i] - (y0[i] + x[i] + z[i])) < 1e-15);
}

// ---- the graph and the plan -------------------------------------------------------------------

static void test_graph(void **s) {
    stg_err err;
    for (int grouped = 0; grouped < 2; grouped++) {
        acfg c1 = {.model = MODEL("tiny.yaml"), .batch = 2, .accum = 1, .clip = 1.0, .grouped = grouped}, c4 = c1;
        c4.accum = 4;
        stg_step *s1 = build(&c1, &err), *s4 = s1 ? build(&c4, &err) : NULL;
        if (!s4) fail_msg("%s", err.msg);
        const stg_graph *g = s4->g;
        assert_int_equal(g->grad_accum, 4);
        assert_int_equal(s1->g->grad_accum, 0);
        int ng = 0, nce = 0;
        for (int o = 0; o < g->nops; o++) {
            const stg_op *op = &g->ops[o];
            if (op->kind == STG_OP_CROSS_ENTROPY_BWD) {
                nce++;
                assert_true(op->a.scale.factor == 0.25);
            }
            for (int k = 0; k < op->n_out; k++) {
                bool grad = g->t[op->out[k]].cls == STG_CLASS_GRAD, acc = (op->accum >> k) & 1u;
                assert_true(grad == acc); // exactly the parameter gradients accumulate
                if (acc) assert_true((ops_def(op->kind)->accum_out >> k) & 1u);
            }
        }
        for (int t = 0; t < g->nt; t++) {
            if (g->t[t].cls != STG_CLASS_GRAD) continue;
            ng++;
            assert_int_equal(s4->p->region[t], STG_REGION_PERSISTENT); // live across the micro-batches
        }
        for (int t = 0; t < s1->g->nt; t++)
            if (s1->g->t[t].cls == STG_CLASS_GRAD) assert_int_equal(s1->p->region[t], STG_REGION_ARENA);
        assert_int_equal(nce, 1);
        assert_true(ng > 0);
        assert_int_equal(s4->p->by_class[STG_CLASS_GRAD], s1->p->by_class[STG_CLASS_GRAD]);
        assert_true(s4->p->persistent_bytes == s1->p->persistent_bytes + s1->p->by_class[STG_CLASS_GRAD]);
        for (int o = 0; o < s1->g->nops; o++) assert_int_equal(s1->g->ops[o].accum, 0);
        if (plan_verify(g, s4->p, &err)) fail_msg("%s", err.msg);
        stg_step_free(s1);
        stg_step_free(s4);
    }
}

// The optimizer in backward updates each parameter as soon as its gradient is final: it cannot
// wait for N micro-batches.
static void test_in_backward_refused(void **s) {
    const char *sets[] = {RIG_TINY, "batch=2", "ctx=16"};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, sets, 7);
    o.optim.grad_accum = 2;
    o.optim.in_backward = true;
    stg_step *st = NULL;
    stg_err err;
    assert_int_equal(stg_step_build(&o, &st, &err), -1);
    assert_null(st);
    assert_non_null(strstr(err.msg, "cannot combine"));
    o.optim.grad_accum = -1;
    o.optim.in_backward = false;
    assert_int_equal(stg_step_build(&o, &st, &err), -1);
}

// ---- the executor's micro-batch inputs ----------------------------------------------------------

static void test_exec_inputs(void **s) {
    stg_err err;
    acfg c = {.model = MODEL("tiny.yaml"), .batch = 2, .accum = 3, .clip = 1.0, .grouped = false};
    stg_step *st = build(&c, &err);
    if (!st) fail_msg("%s", err.msg);
    rig r;
    rig_open(&r, st, &(rig_cfg){.init_seed = 1, .feed_seed = -1});
    int tok = graph_find_tensor(r.g, "tokens"), tgt = graph_find_tensor(r.g, "targets");
    size_t n = (size_t)stg_numel(&r.g->t[tok]);
    int32_t *v = calloc(n, sizeof *v);
    assert_non_null(v);
    assert_int_equal(rt_exec_micro(r.e), 3);
    assert_int_equal(rt_exec_write_micro(r.e, tok, 3, v, n * 4, &err), -1); // micro-batches 0..2
    assert_non_null(strstr(err.msg, "micro-batch 3"));
    assert_int_equal(rt_exec_write_micro(r.e, r.g->loss, 0, v, 4, &err), -1); // not an input
    assert_int_equal(rt_exec_write_micro(r.e, tok, 0, v, n * 4 - 4, &err), -1);
    assert_int_equal(rt_exec_write_micro(r.e, tok, 0, v, n * 4, &err), 0);
    assert_int_equal(rt_exec_write(r.e, tgt, v, n * 4, &err), 0); // every micro-batch
    assert_int_equal(rt_exec_write_micro(r.e, tok, 2, v, n * 4, &err), 0);
    assert_int_equal(rt_exec_run(r.e, RT_PHASE_ALL, &err), -1); // micro-batch 2 of 3 of tokens never written
    assert_non_null(strstr(err.msg, "micro-batch 2 of 3"));
    assert_int_equal(rt_exec_write_micro(r.e, tok, 1, v, n * 4, &err), 0);
    rt_exec_results res;
    assert_int_equal(rt_exec_run_results(r.e, RT_PHASE_ALL, &res, &err), 0);
    assert_true(isfinite(res.loss) && isfinite(res.grad_norm));
    // a forward run after another step (the first has learning rate 0: warm-up): the parameters moved
    double loss1 = res.loss;
    assert_int_equal(rt_exec_write(r.e, tok, v, n * 4, &err), 0);
    if (rt_exec_run(r.e, RT_PHASE_ALL, &err)) fail_msg("%s", err.msg);
    if (rt_exec_run_results(r.e, RT_PHASE_FORWARD, &res, &err)) fail_msg("%s", err.msg);
    assert_true(isfinite(res.loss) && res.loss != loss1); // the parameters moved
    free(v);
    rig_close(&r);
}

// ---- data parallelism ---------------------------------------------------------------------------

static int train_rank(int rank, void *ctx, double *out, int64_t *n, stg_err *err) {
    acfg c = *(const acfg *)ctx;
    c.rank = rank;
    return train(&c, out, n, err);
}

// `world` ranks of c (each forked); every rank's results must be the same: rank 0's into res0.
static void run_ranks(acfg c, double *res0, int64_t *n0) {
    double *res[8];
    int64_t n[8];
    rig_fork_ranks(c.world, train_rank, &c, MAXOUT, res, n);
    for (int r = 0; r < c.world; r++) {
        assert_int_equal(n[r], n[0]);
        if (r > 0) assert_memory_equal(res[r], res[0], sizeof(double) * (size_t)n[0]); // every rank holds the same parameters
    }
    memcpy(res0, res[0], sizeof(double) * (size_t)n[0]);
    *n0 = n[0];
    for (int r = 0; r < c.world; r++) free(res[r]);
}

// 2 ranks x 2 micro-batches x 2 rows == one process with one batch of 8 rows.
static void dp_case(int zero) {
    acfg c = {.model = MODEL("tiny.yaml"), .batch = 2, .accum = 2, .clip = 0.05, .grouped = true, .world = 2, .zero = zero, .rank = 0};
    double *dp = malloc(sizeof(double) * MAXOUT), *one = malloc(sizeof(double) * MAXOUT);
    assert_non_null(dp);
    assert_non_null(one);
    int64_t nd = 0, n1 = 0;
    run_ranks(c, dp, &nd);
    acfg big = {.model = MODEL("tiny.yaml"), .batch = 8, .accum = 1, .clip = 0.05, .grouped = true};
    stg_err err;
    if (train(&big, one, &n1, &err)) fail_msg("%s", err.msg);
    assert_int_equal(nd, n1);
    double el = rel_err(dp, one, STEPS), ep = rel_err(dp + STEPS, one + STEPS, n1 - STEPS);
    print_message("2 ranks x 2 micro-batches x 2 rows, ZeRO-%d: rel err losses %.2e params %.2e\n", zero, el, ep);
    assert_true(el <= 1e-6);
    assert_true(ep <= 1e-6);
    free(dp);
    free(one);
}

static void test_two_ranks(void **s) { dp_case(0); }
static void test_two_ranks_zero1(void **s) { dp_case(1); }

// The all-reduce of the gradient buckets reads gradients: it runs once per optimizer step, after the
// last micro-batch (the loss's all-reduce runs in every pass).
static void test_dp_graph(void **s) {
    stg_err err;
    acfg c = {.model = MODEL("tiny.yaml"), .batch = 2, .accum = 2, .clip = 0.05, .grouped = true, .world = 2, .zero = 0, .rank = 0};
    stg_step *st = build(&c, &err);
    if (!st) fail_msg("%s", err.msg);
    int nb = 0;
    for (int o = 0; o < st->g->nops; o++) {
        const stg_op *op = &st->g->ops[o];
        if (op->kind != STG_OP_ALLREDUCE || op->in[0] == st->g->loss) continue;
        nb++;
        for (int i = 0; i < op->n_in; i++) {
            assert_int_equal(st->g->t[op->in[i]].cls, STG_CLASS_GRAD);
            assert_int_equal(st->p->region[op->in[i]], STG_REGION_PERSISTENT);
        }
    }
    assert_true(nb >= 2);
    if (plan_verify(st->g, st->p, &err)) fail_msg("%s", err.msg);
    stg_step_free(st);
}

// ---- the command line ---------------------------------------------------------------------------

static int run(const char *args, char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", STG_SOURCE_DIR, STG_BINARY, args);
    return tu_run(cmd, out, n);
}

#define LM "models/tiny.yaml --set n_layers=1 --set ctx=16 --set batch=2"

static void test_cli_refusals(void **s) {
    char out[8192], log[512], args[2048];
    snprintf(log, sizeof log, "%s/accum-cli-%ld.jsonl", P_tmpdir, (long)getpid());
    unlink(log);
    struct {
        const char *args, *want;
    } bad[] = {
        {"train " LM " --device cpu" " --grad-accum 0", "--grad-accum 0: an optimizer step needs at least one micro-batch"},
        {"train " LM " --device cpu" " --grad-accum -3", "--grad-accum '-3'"},
        {"train " LM " --device cpu" " --grad-accum x", "--grad-accum 'x'"},
        {"train " LM " --device cpu" " --total-batch-tokens 100", "not a multiple of the 32 tokens of one micro-batch (batch 2 x ctx 16): 96 or 128"},
        {"train " LM " --device cpu" " --total-batch-tokens 16", "less than one micro-batch of 32 tokens"},
        {"train " LM " --device cpu" " --total-batch-tokens 0", "--total-batch-tokens '0'"},
        {"train " LM " --device cpu" " --total-batch-tokens 64 --grad-accum 2", "give one"},
        {"train " LM " --device cpu" " --grad-accum 2 --optimizer-in-backward", "--optimizer-in-backward cannot combine with gradient accumulation"},
        {"bench " LM " --device cpu" " --grad-accum 0", "--grad-accum 0"},
        {"bench " LM " --device cpu" " --total-batch-tokens 33", "not a multiple"},
        {"memreport " LM " --total-batch-tokens 96 --world 2", "not a multiple of the 64 tokens of one micro-batch (batch 2 x ctx 16 x 2 ranks)"},
        {"memreport " LM " --mode forward --grad-accum 2", "the forward mode has no gradients to accumulate"},
        {"step " LM " --init a --batch b --dump c --grad-accum 2", "runs one batch"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s --log %s", bad[i].args, log);
        if (strncmp(bad[i].args, "train", 5) != 0) snprintf(args, sizeof args, "%s", bad[i].args);
        int rc = run(args, out, sizeof out);
        if (rc != 2 || !strstr(out, bad[i].want)) fail_msg("stg %s: exit %d, output:\n%s\n(wanted '%s')", args, rc, out, bad[i].want);
        struct stat st;
        assert_int_equal(stat(log, &st), -1); // nothing written
    }
}

static void test_cli_runs(void **s) {
    char out[16384], args[2048], log[512];
    snprintf(log, sizeof log, "%s/accum-cli-ok-%ld.jsonl", P_tmpdir, (long)getpid());
    unlink(log);
    snprintf(args, sizeof args, "train " LM " --device cpu --steps 2 --total-batch-tokens 128 --log %s", log);
    int rc = run(args, out, sizeof out);
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "gradient accumulation: 4 micro-batches of 32 tokens per optimizer step: 128 tokens per step"));
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char *text = tu_read_all(f, NULL);
    fclose(f);
    unlink(log);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"step\": 2,"));
    assert_non_null(strstr(text, "\"tokens_per_step\": 128"));
    free(text);
    rc = run("memreport " LM " --grad-accum 4 --format json", out, sizeof out);
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "\"grad_accum\": 4"));
    rc = run("memreport " LM " --grad-accum 4", out, sizeof out);
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "accumulation: 4 micro-batches per optimizer step"));
    rc = run("bench " LM " --device cpu" " --grad-accum 3 --warmup 0 --iters 1", out, sizeof out);
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "3 micro-batches per run (gradient accumulation): 96 tokens"));
    rc = run("bench " LM " --device cpu" " --grad-accum 2 --warmup 0 --iters 1 --json", out, sizeof out);
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "\"grad_accum\": 2, \"tokens_per_run\": 64"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_graph),
        cmocka_unit_test(test_in_backward_refused),
        cmocka_unit_test(test_exec_inputs),
        cmocka_unit_test(test_lm_clipped),
        cmocka_unit_test(test_lm_unclipped),
        cmocka_unit_test(test_lm_grouped),
        cmocka_unit_test(test_lm_three),
        cmocka_unit_test(test_toy),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_lm_fused_head),
        cmocka_unit_test(test_lm_late_head),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_dp_graph),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_two_ranks_zero1),
        cmocka_unit_test(test_cli_refusals),
        cmocka_unit_test(test_cli_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
