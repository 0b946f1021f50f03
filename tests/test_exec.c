// The executor on the CPU reference backend: plan soundness end to end (planned arena vs one
// allocation per tensor, with and without NaN poisoning), finite differences through the whole
// tiny LM in fp64, training to the synthetic source's entropy, bitwise resume, bad input.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/ckpt.h"
#include "runtime/exec.h"
#include "runtime/npy.h"
#include "runtime/safetensors.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p

// The optimizer and learning-rate schedule of the next open_exec (lr 0: the default below).
static stg_optim_config next_oc;
static bool next_group; // the next open_exec groups products (graph_group_matmuls), as `stg` does

// A rig with the executor only: parameters, step count and batches are the test's.
static void open_exec(rig *r, const char *model, stg_precision prec, const char *const *sets, int nsets, const rt_exec_opts *eo) {
    stg_step_opts o = rig_opts(model, prec, sets, nsets);
    o.optim = next_oc.lr > 0 ? next_oc : rig_optim(1e-2, 1e-3, 2, 10);
    o.ungrouped = !next_group;
    rig_open(r, rig_step(&o), &(rig_cfg){.eo = eo, .init_seed = -1, .feed_seed = -1});
}

static char tmpdir[256];

static int setup_dir(void **state) { return tu_mkdtemp(tmpdir, sizeof tmpdir, "test_exec"); }
static int teardown_dir(void **state) { return tu_rmtree(tmpdir); }

static const char *small_lm[] = {"d_model=32", "d_ff=48", "n_layers=2", "n_heads=2", "vocab=64", "batch=2", "ctx=16"};
#define NSMALL ((int)(sizeof small_lm / sizeof *small_lm))

// Parameters and losses of `steps` training steps, as raw bytes, for a given executor mode.
static void run_steps(const char *model, const char *const *sets, int nsets, const rt_exec_opts *eo, int steps,
                      double *losses, float **params_out, size_t *nbytes_out) {
    rig r;
    open_exec(&r, model, STG_PREC_FP32, sets, nsets, eo);
    stg_err err;
    rt_feed *f;
    if (rt_exec_init_params(r.e, 7, &err) || rt_exec_set_steps_done(r.e, 0, &err) || rt_feed_new(r.g, NULL, 4, 11, &f, &err))
        fail_msg("%s", err.msg);
    rt_rng rng;
    rt_rng_seed(&rng, 3);
    for (int s = 1; s <= steps; s++) {
        if (rt_feed_next(f, r.e, &rng, &err) || rt_exec_run(r.e, RT_PHASE_ALL, &err) ||
            rt_exec_read_f64(r.e, r.g->loss, &losses[s - 1], &err))
            fail_msg("%s", err.msg);
    }
    *params_out = (float *)rig_state(&r, nbytes_out);
    rt_feed_free(f);
    rig_close(&r);
}

// 3 steps in the planned arena == 3 steps with every tensor in its own allocation, bitwise; and
// again with all non-persistent memory poisoned with NaN before every step.
static void check_plan_soundness(const char *model, const char *const *sets, int nsets) {
    rt_exec_opts modes[3] = {{.separate = false}, {.separate = true}, {.poison = true}};
    double loss[3][3];
    float *params[3];
    size_t nb[3];
    for (int m = 0; m < 3; m++) run_steps(model, sets, nsets, &modes[m], 3, loss[m], &params[m], &nb[m]);
    for (int m = 1; m < 3; m++) {
        assert_int_equal(nb[m], nb[0]);
        for (int s = 0; s < 3; s++) {
            assert_true(isfinite(loss[0][s]));
            assert_memory_equal(&loss[m][s], &loss[0][s], sizeof(double));
        }
        assert_memory_equal(params[m], params[0], nb[0]);
    }
    for (int m = 0; m < 3; m++) free(params[m]);
}

static void test_plan_soundness_flash(void **state) { check_plan_soundness(MODEL("tiny.yaml"), small_lm, NSMALL); }

// Grouped products (matmul_group) change nothing but the ops: 3 steps with and without them are
// bitwise equal, and the grouped graph's plan is sound (own allocations, a NaN-poisoned arena).
static void test_grouped_products(void **state) {
    double loss[2][3];
    float *params[2];
    size_t nb[2];
    rt_exec_opts eo = {.separate = false};
    for (int grouped = 0; grouped < 2; grouped++) {
        next_group = grouped;
        run_steps(MODEL("tiny.yaml"), small_lm, NSMALL, &eo, 3, loss[grouped], &params[grouped], &nb[grouped]);
    }
    assert_int_equal(nb[1], nb[0]);
    assert_memory_equal(loss[1], loss[0], sizeof loss[0]);
    assert_memory_equal(params[1], params[0], nb[0]);
    for (int m = 0; m < 2; m++) free(params[m]);
    next_group = true;
    check_plan_soundness(MODEL("tiny.yaml"), small_lm, NSMALL);
    next_group = false;
}

static void test_plan_soundness_naive(void **state) {
    const char *sets[NSMALL + 1];
    memcpy(sets, small_lm, sizeof small_lm);
    sets[NSMALL] = "attention=naive";
    check_plan_soundness(MODEL("tiny.yaml"), sets, NSMALL + 1);
}

static void test_plan_soundness_toy(void **state) {
    rt_exec_opts modes[2] = {{.poison = true}, {.separate = true}};
    double loss[2][3];
    float *params[2];
    size_t nb[2];
    for (int m = 0; m < 2; m++) run_steps(MODEL("toy.yaml"), NULL, 0, &modes[m], 3, loss[m], &params[m], &nb[m]);
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    assert_memory_equal(params[0], params[1], nb[0]);
    free(params[0]);
    free(params[1]);
}

// Central differences of the loss through the whole LM in fp64 against the backward pass, for a
// sample of entries of every parameter.
static void test_whole_model_gradcheck(void **state) {
    const char *att[2] = {"attention=flash", "attention=naive"};
    for (int a = 0; a < 2; a++) {
        const char *sets[NSMALL + 1];
        memcpy(sets, small_lm, sizeof small_lm);
        sets[NSMALL] = att[a];
        rig r;
        open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP64, sets, NSMALL + 1, NULL);
        stg_err err;
        rt_feed *f;
        rt_rng rng;
        rt_rng_seed(&rng, 5);
        if (rt_exec_init_params(r.e, 1, &err) || rt_feed_new(r.g, NULL, 4, 2, &f, &err) || rt_feed_next(f, r.e, &rng, &err) ||
            rt_exec_run(r.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err))
            fail_msg("%s", err.msg);
        int checked = 0;
        for (int p = 0; p < r.g->nt; p++) {
            if (r.g->t[p].cls != STG_CLASS_PARAM) continue;
            int64_t n = stg_numel(&r.g->t[p]);
            double *w = malloc(sizeof(double) * (size_t)n), *gr = malloc(sizeof(double) * (size_t)n);
            // forward-only runs reuse the arena bytes of gradients: take them from a fresh backward
            if (rt_exec_run(r.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err) || rt_exec_read_f64(r.e, p, w, &err) ||
                rt_exec_read_f64(r.e, r.g->t[p].grad, gr, &err))
                fail_msg("%s", err.msg);
            for (int k = 0; k < 3; k++) {
                int64_t i = (int64_t)rt_rng_below(&rng, (uint64_t)n);
                double h = 1e-5, orig = w[i], lp, lm;
                w[i] = orig + h;
                if (rt_exec_write_f64(r.e, p, w, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err) ||
                    rt_exec_read_f64(r.e, r.g->loss, &lp, &err))
                    fail_msg("%s", err.msg);
                w[i] = orig - h;
                if (rt_exec_write_f64(r.e, p, w, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err) ||
                    rt_exec_read_f64(r.e, r.g->loss, &lm, &err))
                    fail_msg("%s", err.msg);
                w[i] = orig;
                if (rt_exec_write_f64(r.e, p, w, &err)) fail_msg("%s", err.msg);
                double fd = (lp - lm) / (2 * h), an = gr[i];
                double rel = fabs(fd - an) / fmax(1e-6, fmax(fabs(fd), fabs(an)));
                if (rel > 1e-5) fail_msg("%s: d loss / d %s[%lld]: finite difference %.10g, backward %.10g", att[a], r.g->t[p].name, (long long)i, fd, an);
                checked++;
            }
            free(w);
            free(gr);
        }
        assert_true(checked >= 3 * 21);
        rt_feed_free(f);
        rig_close(&r);
    }
}

// The main job's promise: the tiny LM on the synthetic source gets within 10% of its entropy.
static void test_train_to_entropy(void **state) {
    const char *sets[] = {"ctx=32", "batch=16"};
    rig r;
    next_oc = rig_optim(1e-2, 1e-3, 10, 150);
    open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP32, sets, 2, NULL);
    next_oc.lr = 0;
    rt_train_cfg c = rt_train_defaults();
    c.steps = 150;
    c.val_every = 150;
    c.val_batches = 8;
    rt_train_result res;
    stg_err err;
    if (rt_train(r.e, &c, NULL, NULL, &res, &err)) fail_msg("%s", err.msg);
    print_message("loss %.4f -> %.4f, validation %.4f, entropy %.4f\n", res.first_loss, res.last_loss, res.last_val_loss, res.floor);
    assert_true(res.first_loss > 1.5 * res.floor);
    assert_true(res.last_val_loss < 1.10 * res.floor);
    assert_true(res.last_val_loss > 0.95 * res.floor); // nothing beats the entropy
    rig_close(&r);
}

// 10 steps straight == 5 steps, checkpoint, a fresh process-equivalent resume, 5 more: bitwise.
static void test_resume_bitwise(void **state) {
    char d1[300], d2[300], p1[400], p2[400];
    snprintf(d1, sizeof d1, "%s/straight", tmpdir);
    snprintf(d2, sizeof d2, "%s/resumed", tmpdir);
    rt_train_cfg c = rt_train_defaults();
    c.steps = 10;
    c.ckpt_dir = d1;
    rt_train_result res;
    stg_err err;
    rig r;
    open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP32, small_lm, NSMALL, NULL);
    if (rt_train(r.e, &c, NULL, NULL, &res, &err)) fail_msg("%s", err.msg);
    rig_close(&r);
    c.ckpt_dir = d2;
    c.steps = 5;
    open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP32, small_lm, NSMALL, NULL);
    if (rt_train(r.e, &c, NULL, NULL, &res, &err)) fail_msg("%s", err.msg);
    rig_close(&r);
    c.steps = 10;
    c.resume = true;
    open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP32, small_lm, NSMALL, NULL);
    if (rt_train(r.e, &c, NULL, NULL, &res, &err)) fail_msg("%s", err.msg);
    assert_int_equal(res.steps_done, 10);
    rig_close(&r);
    snprintf(p1, sizeof p1, "%s/ckpt.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/ckpt.safetensors", d2);
    rt_st *a, *b;
    if (rt_st_open(p1, &a, &err) || rt_st_open(p2, &b, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_st_count(a), rt_st_count(b));
    for (size_t i = 0; i < rt_st_count(a); i++) {
        const rt_st_tensor *x = rt_st_at(a, i), *y = rt_st_find(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    assert_string_equal(rt_st_meta_get(a, "step"), "10");
    assert_string_equal(rt_st_meta_get(a, "data_rng"), rt_st_meta_get(b, "data_rng"));
    rt_st_free(a);
    rt_st_free(b);
}

static void expect_train_error(const char *const *sets, int nsets, rt_train_cfg *c, const char *needle) {
    rig r;
    open_exec(&r, MODEL("tiny.yaml"), STG_PREC_FP32, sets, nsets, NULL);
    rt_train_result res;
    stg_err err;
    err.msg[0] = 0;
    int rc = rt_train(r.e, c, NULL, NULL, &res, &err);
    rig_close(&r);
    if (rc == 0) fail_msg("accepted; expected an error containing '%s'", needle);
    if (!strstr(err.msg, needle)) fail_msg("message\n  %s\nlacks\n  %s", err.msg, needle);
}

static void test_bad_data(void **state) {
    char path[400];
    rt_train_cfg c = rt_train_defaults();
    c.steps = 2;
    // too short for one batch row (ctx 16 needs 17 tokens)
    uint16_t few[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    snprintf(path, sizeof path, "%s/short.bin", tmpdir);
    tu_write(path, few, sizeof few);
    c.data = path;
    expect_train_error(small_lm, NSMALL, &c, "has 10 tokens");
    // a token id >= vocab (64)
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i % 64);
    toks[57] = 300;
    tu_write(path, toks, sizeof toks);
    expect_train_error(small_lm, NSMALL, &c, "300");
    // a truncated .npy
    snprintf(path, sizeof path, "%s/bad.npy", tmpdir);
    tu_write(path, "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
    c.data = path;
    expect_train_error(small_lm, NSMALL, &c, "bad.npy");
}

// Two training steps of the small LM with a checkpoint into tmpdir/<sub> (its path into dir, 300
// bytes); the rig stays open. Returns the configuration they ran with.
static rt_train_cfg train_two_steps(rig *r, const char *sub, char *dir) {
    snprintf(dir, 300, "%s/%s", tmpdir, sub);
    rt_train_cfg c = rt_train_defaults();
    c.steps = 2;
    c.ckpt_dir = dir;
    rt_train_result res;
    stg_err err;
    open_exec(r, MODEL("tiny.yaml"), STG_PREC_FP32, small_lm, NSMALL, NULL);
    if (rt_train(r->e, &c, NULL, NULL, &res, &err)) fail_msg("%s", err.msg);
    return c;
}

static void test_bad_checkpoint(void **state) {
    char dir[300], path[400];
    stg_err err;
    rig r;
    rt_train_cfg c = train_two_steps(&r, "ck", dir);
    rig_close(&r);
    // resuming with other dims
    const char *other[NSMALL];
    memcpy(other, small_lm, sizeof small_lm);
    other[0] = "d_model=48";
    c.resume = true;
    c.steps = 4;
    expect_train_error(other, NSMALL, &c, "checkpoint is for a different model or dims");
    // a corrupt checkpoint: the old one must survive a failed resume untouched
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(path, len / 2), 0);
    expect_train_error(small_lm, NSMALL, &c, "ckpt.safetensors");
    // --init from a file with a parameter of the wrong shape
    rt_st_writer *w = rt_st_writer_new(&err);
    float z[6] = {0};
    int64_t shape[2] = {2, 3};
    assert_int_equal(rt_st_writer_add(w, "tok_emb", RT_DT_F32, 2, shape, z, &err), 0);
    snprintf(path, sizeof path, "%s/init.safetensors", tmpdir);
    assert_int_equal(rt_st_writer_write(w, path, &err), 0);
    rt_st_writer_free(w);
    rt_train_cfg c2 = rt_train_defaults();
    c2.steps = 1;
    c2.init_path = path;
    expect_train_error(small_lm, NSMALL, &c2, "'tok_emb' has shape [2, 3]; the model's is [64, 32]");
}

// A non-finite loss stops the run with a message, and the last good checkpoint stays.
static void test_nonfinite_loss(void **state) {
    char dir[300], path[400];
    stg_err err;
    rig r;
    train_two_steps(&r, "nan", dir);
    // poison one parameter through a parameter file: the next loss is NaN
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    rt_st *st;
    if (rt_st_open(path, &st, &err)) fail_msg("%s", err.msg);
    rt_st_writer *w = rt_st_writer_new(&err);
    float *bufs[64];
    int nb = 0;
    for (size_t i = 0; i < rt_st_count(st); i++) {
        const rt_st_tensor *x = rt_st_at(st, i);
        if (strstr(x->name, ".adam_")) continue;
        float *v = malloc(x->nbytes);
        memcpy(v, x->data, x->nbytes);
        if (strcmp(x->name, "ln_f") == 0) v[0] = NAN;
        bufs[nb++] = v;
        assert_int_equal(rt_st_writer_add(w, x->name, x->dtype, x->ndim, x->shape, v, &err), 0);
    }
    char ipath[400];
    snprintf(ipath, sizeof ipath, "%s/nan_init.safetensors", tmpdir);
    assert_int_equal(rt_st_writer_write(w, ipath, &err), 0);
    rt_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    rt_st_free(st);
    rig_close(&r);
    rt_train_cfg c2 = rt_train_defaults();
    c2.steps = 3;
    c2.init_path = ipath;
    c2.ckpt_dir = dir;
    c2.ckpt_every = 1;
    expect_train_error(small_lm, NSMALL, &c2, "parameter 'ln_f' holds a NaN or infinity"); // refused at load (issue 29)
    // the checkpoint from the first run is intact
    if (rt_st_open(path, &st, &err)) fail_msg("%s", err.msg);
    assert_string_equal(rt_st_meta_get(st, "step"), "2");
    rt_st_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_soundness_flash), cmocka_unit_test(test_plan_soundness_naive),
        cmocka_unit_test(test_plan_soundness_toy),   cmocka_unit_test(test_whole_model_gradcheck),
        cmocka_unit_test(test_grouped_products),
        cmocka_unit_test(test_train_to_entropy),     cmocka_unit_test(test_resume_bitwise),
        cmocka_unit_test(test_bad_data),             cmocka_unit_test(test_bad_checkpoint),
        cmocka_unit_test(test_nonfinite_loss),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
