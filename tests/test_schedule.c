// The learning-rate schedules (--schedule constant|linear|cosine|wsd) on the CPU backend: the
// lr_schedule op against each schedule's closed form at every iteration (tests/schedule_cases.h),
// the host formula against hand-worked values, `stg train`'s log carrying the same learning rates,
// the schedule printed at the start, and the refusals (exit 2) of an unknown schedule, a WSD
// fraction outside [0, 1] and options the schedule would ignore. test_gpu_schedule runs the same
// cases on CUDA.
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

#include "ops/registry.h"
#include "tests/schedule_cases.h"
#include "tests/testutil.h"

static void test_anchors(void **s) {
    sched_anchors(sched_closed);
    sched_anchors(ops_lr_at);
}

// The host formula (the start-of-run summary's) equals the closed form everywhere.
static void test_host_formula(void **s) {
    int n;
    const sched_case *c = sched_cases(&n);
    for (int i = 0; i < n; i++)
        for (int64_t t = 0; t < c[i].iters; t++) {
            double d = fabs(ops_lr_at(&c[i].a, t) - sched_closed(&c[i].a, t));
            if (!(d <= 1e-12 * c[i].a.lr)) fail_msg("%s, t %lld: %.17g vs %.17g", c[i].name, (long long)t, ops_lr_at(&c[i].a, t), sched_closed(&c[i].a, t));
        }
}

static void test_cpu_op(void **s) {
    rt_backend *b = rig_backend(false);
    sched_run_all(b, STG_PREC_FP32, "cpu fp32");
    sched_run_all(b, STG_PREC_FP64, "cpu fp64");
    b->ops->destroy(b);
}

#define STG "'" STG_BINARY "'"
#define TINY " train '" STG_SOURCE_DIR "/models/tiny.yaml' --device cpu --set n_layers=1 --set d_model=16 --set d_ff=32 --set ctx=8 --set batch=2"

// stg train with each schedule: the log's learning rate at step s is the closed form at t = s - 1.
static void test_train_log(void **s) {
    struct {
        const char *opts;
        stg_lr_attrs a;
    } runs[] = {
        {"--schedule constant --warmup 2", sc_attrs(STG_LR_CONSTANT, 1e-2, 0, 2, 12, 0, 0)},
        {"--schedule linear --warmup 2 --min-lr 1e-3", sc_attrs(STG_LR_LINEAR, 1e-2, 1e-3, 2, 12, 0, 0)},
        {"--warmup 2 --min-lr 1e-3", sc_attrs(STG_LR_COSINE, 1e-2, 1e-3, 2, 12, 0, 0)},
        {"--schedule wsd --warmup 2 --min-lr 1e-3 --wsd-decay-frac 0.5 --wsd-shape sqrt", sc_attrs(STG_LR_WSD, 1e-2, 1e-3, 2, 12, 0.5, STG_WSD_SQRT)},
        {"--schedule wsd --min-lr 0 --cosine-steps 10 --wsd-shape cosine", sc_attrs(STG_LR_WSD, 1e-2, 0, 0, 10, 0.2, STG_WSD_COSINE)},
    };
    char dir[] = "/tmp/stg_sched_XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        char cmd[2048], out[8192], log[512];
        snprintf(log, sizeof log, "%s/run%zu.jsonl", dir, r);
        snprintf(cmd, sizeof cmd, STG TINY " --steps 12 --lr 1e-2 %s --log %s 2>&1", runs[r].opts, log);
        if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
        FILE *f = fopen(log, "r");
        assert_non_null(f);
        char line[1024];
        int steps = 0;
        while (fgets(line, sizeof line, f)) {
            long long step;
            double lr;
            const char *p = strstr(line, "\"lr\": ");
            assert_true(sscanf(line, "{\"step\": %lld", &step) == 1 && p && sscanf(p, "\"lr\": %lf", &lr) == 1);
            double want = sched_closed(&runs[r].a, step - 1);
            if (!(fabs(lr - want) <= 1e-6 * 1e-2)) fail_msg("%s: step %lld lr %.9g, closed form %.9g", runs[r].opts, step, lr, want);
            steps++;
        }
        fclose(f);
        assert_int_equal(steps, 12);
        unlink(log);
    }
    rmdir(dir);
}

// The summary printed at the start names the schedule and its endpoints.
static void test_printed(void **s) {
    struct {
        const char *opts, *want;
    } rows[] = {
        {"--schedule constant --warmup 2", "lr schedule: 0 at step 1, 0.01 at step 3 (after 2 warm-up steps), then constant; 0.01 at the last step, 12"},
        {"--schedule linear --min-lr 1e-3", "lr schedule: 0.01 at step 1, linear down to --min-lr 0.001; 0.00175 at the last step, 12"},
        {"", "lr schedule: 0.01 at step 1, cosine down to --min-lr 0.001 (0.1 x --lr, the default); "},
        {"--schedule wsd --wsd-decay-frac 0.5 --wsd-shape sqrt",
         "lr schedule: 0.01 at step 1, stable through step 6, then a sqrt decay (--wsd-shape) over 6 steps (--wsd-decay-frac 0.5) down to "
         "--min-lr 0.001 (0.1 x --lr, the default); 0.001784 at the last step, 12"},
        {"--schedule linear --cosine-steps 6", "reached at step 7 (--cosine-steps); 0.001 at the last step, 12"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof cmd, STG TINY " --steps 12 --lr 1e-2 %s 2>&1", rows[r].opts);
        if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
        if (!strstr(out, rows[r].want)) fail_msg("%s: expected\n  %s\nin\n%s", cmd, rows[r].want, out);
    }
}

// Bad schedules: a message naming the problem, exit 2, before anything runs.
static void test_refusals(void **s) {
    struct {
        const char *opts, *want;
    } rows[] = {
        {"--schedule cosin", "--schedule 'cosin': expected constant, linear, cosine or wsd"},
        {"--schedule wsd --wsd-decay-frac 1.5", "--wsd-decay-frac '1.5' is not a number in [0, 1]"},
        {"--schedule wsd --wsd-decay-frac -0.1", "--wsd-decay-frac '-0.1' is not a number in [0, 1]"},
        {"--schedule wsd --wsd-decay-frac nan", "--wsd-decay-frac 'nan' is not a number in [0, 1]"},
        {"--schedule wsd --wsd-shape exp", "--wsd-shape 'exp': expected linear, cosine or sqrt"},
        {"--wsd-decay-frac 0.3", "--wsd-decay-frac shapes the decay of --schedule wsd; this run's schedule is cosine"},
        {"--schedule linear --wsd-shape sqrt", "--wsd-shape shapes the decay of --schedule wsd; this run's schedule is linear"},
        {"--schedule constant --min-lr 1e-4", "--min-lr: --schedule constant keeps --lr after the warm-up and never decays"},
        {"--schedule constant --cosine-steps 5", "--cosine-steps: --schedule constant keeps --lr after the warm-up and never decays"},
        {"--schedule wsd --min-lr 1", "--min-lr 1 is above --lr 0.01: the schedule would climb"},
        {"--schedule", "--schedule needs a value"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof cmd, STG TINY " --steps 3 --lr 1e-2 %s 2>&1", rows[r].opts);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc != 2 || !strstr(out, rows[r].want)) fail_msg("%s: exit %d (want 2), expected '%s' in\n%s", cmd, rc, rows[r].want, out);
        assert_null(strstr(out, "step 1/"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anchors), cmocka_unit_test(test_host_formula), cmocka_unit_test(test_cpu_op),
        cmocka_unit_test(test_train_log), cmocka_unit_test(test_printed), cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
