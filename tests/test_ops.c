// The op sweep on the CPU (tests/sweep.h): for every differentiable op kind's sample model, the
// backward against central finite differences of the loss in fp64, fp32 against fp64, and the
// planned buffer sharing (in place, reused bytes) against every tensor in its own buffer, with
// non-persistent memory poisoned with NaN before each run.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/sweep.h"

static rt_backend *cpu;

static const stg_op_def *row(int k) { return ops_def((stg_op_kind)k); }

static void test_every_differentiable_op_has_a_sample(void **state) {
    (void)state;
    sweep_expect_samples();
    int n = 0;
    for (int k = 0; k < STG_OP_COUNT; k++) n += row(k)->sample != NULL;
    assert_true(n >= 19);
}

// d loss / d p for up to 24 entries of every parameter: the backward against central differences.
static void fd_one(const stg_op_def *d) {
    stg_err err;
    sweep w;
    if (sweep_open(&w, d, STG_PREC_FP64, cpu, NULL, &err) || sweep_feed(&w, 11, NULL, &err)) fail_msg("%s: %s", d->name, err.msg);
    sweep_run r;
    if (sweep_collect(&w, &r, &err)) fail_msg("%s: %s", d->name, err.msg);
    if (!isfinite(r.loss)) fail_msg("%s: loss %g", d->name, r.loss);
    const stg_graph *g = w.s->g;
    rt_rng rng;
    rt_rng_seed(&rng, 3);
    int64_t k = 0;
    int checked = 0;
    double *p = malloc(sizeof(double) * (size_t)(r.n + 1));
    assert_non_null(p);
    memcpy(p, r.params, sizeof(double) * (size_t)r.n);
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM) continue;
        int64_t n = stg_numel(&g->t[t]);
        for (int s = 0; s < 24 && s < n; s++) {
            int64_t i = n <= 24 ? s : (int64_t)rt_rng_below(&rng, (uint64_t)n);
            double h = 1e-6, o = p[k + i], lp, lm;
            p[k + i] = o + h;
            if (rt_exec_write_f64(w.e, t, p + k, &err) || rt_exec_run(w.e, RT_PHASE_FORWARD, &err) || rt_exec_read_f64(w.e, g->loss, &lp, &err))
                fail_msg("%s: %s", d->name, err.msg);
            p[k + i] = o - h;
            if (rt_exec_write_f64(w.e, t, p + k, &err) || rt_exec_run(w.e, RT_PHASE_FORWARD, &err) || rt_exec_read_f64(w.e, g->loss, &lm, &err))
                fail_msg("%s: %s", d->name, err.msg);
            p[k + i] = o;
            if (rt_exec_write_f64(w.e, t, p + k, &err)) fail_msg("%s: %s", d->name, err.msg);
            double fd = (lp - lm) / (2 * h), an = r.grads[k + i];
            if (!(fabs(fd - an) <= 1e-6 * fmax(1.0, fabs(an))))
                fail_msg("%s: d loss / d %s[%lld]: finite difference %.12g, backward %.12g", d->name, g->t[t].name, (long long)i, fd, an);
            checked++;
        }
        k += n;
    }
    assert_true(checked > 0);
    free(p);
    sweep_run_free(&r);
    sweep_close(&w);
}

static void test_finite_differences_fp64(void **state) {
    (void)state;
    for (int k = 0; k < STG_OP_COUNT; k++)
        if (row(k)->sample) fd_one(row(k));
}

// fp32 from the fp64 run's parameters and inputs: the loss to 1e-5, the gradients to 1e-4.
static void test_fp32_against_fp64(void **state) {
    (void)state;
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = row(k);
        if (!d->sample) continue;
        stg_err err;
        sweep_run r64, r32;
        if (sweep_once(d, STG_PREC_FP64, cpu, NULL, 21, NULL, &r64, &err) || sweep_once(d, STG_PREC_FP32, cpu, NULL, 21, r64.params, &r32, &err))
            fail_msg("%s: %s", d->name, err.msg);
        sweep_expect_close(d->name, "fp32 against fp64", &r32, &r64, 1e-5, 1e-4);
        sweep_run_free(&r64);
        sweep_run_free(&r32);
    }
}

// The plan's sharing (outputs in their input's buffer, bytes reused after a tensor dies) changes no
// bit: the same run with every tensor in its own buffer, and with NaN poisoning, gives the same
// loss and gradients exactly.
static void test_planned_sharing_changes_nothing(void **state) {
    (void)state;
    rt_exec_opts modes[2] = {{.separate = true}, {.poison = true}};
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = row(k);
        if (!d->sample) continue;
        stg_err err;
        sweep_run base, other;
        if (sweep_once(d, STG_PREC_FP32, cpu, NULL, 31, NULL, &base, &err)) fail_msg("%s: %s", d->name, err.msg);
        for (int m = 0; m < 2; m++) {
            if (sweep_once(d, STG_PREC_FP32, cpu, &modes[m], 31, base.params, &other, &err)) fail_msg("%s: %s", d->name, err.msg);
            assert_int_equal(other.n, base.n);
            if (memcmp(&other.loss, &base.loss, sizeof base.loss) || memcmp(other.grads, base.grads, sizeof(double) * (size_t)base.n))
                fail_msg("%s: %s changes the result", d->name, m ? "NaN poisoning" : "separate buffers");
            sweep_run_free(&other);
        }
        sweep_run_free(&base);
    }
}

// In bf16 a parameter that an op reads as an activation would get a bf16 gradient: refused where
// the parameter is declared, naming the op (the samples of rmsnorm and add do that).
static void test_bf16_parameter_as_activation_refused(void **state) {
    (void)state;
    const char *names[] = {"rmsnorm", "add"};
    for (int i = 0; i < 2; i++) {
        const stg_op_def *d = ops_def((stg_op_kind)ops_lookup(names[i]));
        char *text = sweep_text(d);
        stg_step_opts o = rig_opts_text("sample.yaml", text, STG_PREC_BF16, NULL, 0);
        o.ungrouped = false;
        stg_step *st = NULL;
        stg_err err;
        assert_int_equal(stg_step_build(&o, &st, &err), -1);
        char want[96];
        snprintf(want, sizeof want, "is an activation input of %s", names[i]);
        if (!strstr(err.msg, want) || !strstr(err.msg, "sample.yaml:")) fail_msg("%s: %s", names[i], err.msg);
        free(text);
    }
}

int main(void) {
    stg_err err;
    if (rt_backend_cpu_new(&cpu, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_differentiable_op_has_a_sample),
        cmocka_unit_test(test_finite_differences_fp64),
        cmocka_unit_test(test_fp32_against_fp64),
        cmocka_unit_test(test_planned_sharing_changes_nothing),
        cmocka_unit_test(test_bf16_parameter_as_activation_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cpu->ops->destroy(cpu);
    return rc;
}
