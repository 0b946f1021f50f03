// Data parallelism on the CPU backend: the launcher's environment, the rendezvous, N processes
// that together equal one process with the global batch, failures that end in messages (not
// hangs), and `stg launch`.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include "planner/plan.h"
#include "planner/shard.h"
#include "runtime/backend.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/safetensors.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p
#define STEPS 5

static void clear_env(void) {
    const char *v[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "STG_DIST_TIMEOUT"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) unsetenv(v[i]);
}

static void test_env(void **s) {
    rt_dist d;
    stg_err err;
    clear_env();
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.world, 1);
    assert_int_equal(d.rank, 0);
    assert_false(rt_dist_launched());
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_PORT", "31234", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.rank, 1);
    assert_int_equal(d.world, 3);
    assert_int_equal(d.local_rank, 1);
    assert_int_equal(d.port, 31234);
    assert_string_equal(d.addr, "127.0.0.1");
    setenv("OMPI_COMM_WORLD_RANK", "0", 1); // mpirun's variables win
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.world, 2);
    assert_int_equal(d.rank, 0);
    clear_env();
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "3", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), -1);
    assert_non_null(strstr(err.msg, "RANK=3"));
    setenv("RANK", "x", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), -1);
    assert_non_null(strstr(err.msg, "RANK='x'"));
    unsetenv("RANK");
    assert_int_equal(rt_dist_from_env(&d, &err), -1);
    assert_non_null(strstr(err.msg, "RANK is not"));
    setenv("RANK", "0", 1);
    setenv("MASTER_PORT", "70000", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), -1);
    assert_non_null(strstr(err.msg, "MASTER_PORT"));
    clear_env();
}

static const char *head_mode; // a fused_head= setting for every run (NULL: the model's)

static stg_step *load_z(int batch, int world, int64_t bucket, int zero, int rank) {
    char b[32];
    snprintf(b, sizeof b, "batch=%d", batch);
    const char *sets[] = {RIG_TINY, b, "ctx=16", head_mode};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, sets, head_mode ? 8 : 7);
    o.optim = rig_optim(1e-2, graph_optim_defaults().min_lr, 1, STEPS);
    o.optim.max_norm = 0.5; // clipping is active: the norm must be of the averaged gradient
    o.optim.dp_world = world;
    o.optim.dp_bucket_bytes = bucket;
    o.optim.dp_first_bucket_bytes = bucket / 4;
    o.optim.dp_zero = zero;
    o.optim.dp_rank = rank;
    stg_step *st = rig_step(&o);
    if (head_mode) { // the setting took: the head's weight gradient is its own op
        bool late = false;
        for (int i = 0; i < st->g->nops; i++) late = late || st->g->ops[i].kind == STG_OP_LINEAR_CROSS_ENTROPY_DW;
        assert_true(late);
    }
    return st;
}

static stg_step *load(int batch, int world, int64_t bucket) { return load_z(batch, world, bucket, 0, 0); }

// STEPS steps of rank `rank` of `world` (world 0: one process, no data parallelism) with batch
// rows per process; losses and parameters into out (STEPS + params doubles).
static int zero_stage; // ZeRO stage of the data-parallel runs (0 or 1)

static int train(int rank, int world, int batch, int64_t bucket, double *out, int64_t *nout, stg_err *err) {
    stg_step *st = load_z(batch, world, bucket, world >= 1 ? zero_stage : 0, rank);
    rt_exec_opts eo = {.poison = true};
    return rig_try_rank_train(st, (rig_cfg){.eo = &eo, .init_seed = 4, .feed_seed = 3, .rng_seed = 8}, rt_backend_cpu_join, world, rank,
                              STEPS, out, nout, err);
}

#define MAXOUT (1 << 18)

static int free_port(void) {
    // a port from the process id, away from the usual ones; the rendezvous retries connecting
    return 20000 + (int)(getpid() % 20000);
}

typedef struct {
    int world, batch;
    int64_t bucket;
} dp_cfg;

static int train_rank(int rank, void *ctx, double *out, int64_t *n, stg_err *err) {
    const dp_cfg *c = ctx;
    return train(rank, c->world, c->batch, c->bucket, out, n, err);
}

// Forks `world` ranks (rig_fork_ranks); res[r] and n[r] get rank r's results.
static void run_ranks(int world, int batch, int64_t bucket, double **res, int64_t *n) {
    dp_cfg c = {world, batch, bucket};
    rig_fork_ranks(world, train_rank, &c, MAXOUT, res, n);
}

// 2 and 3 ranks of batch 2 == one process of batch 4 / 6, in fp32 to 1e-5; every rank holds the
// same parameters, bitwise. Small buckets: several allreduce ops per step.
static void equal_global_batch(int world, int64_t bucket) {
    int per = 2;
    double *one = malloc(sizeof(double) * MAXOUT);
    int64_t n1 = 0;
    stg_err err;
    if (train(0, 0, per * world, bucket, one, &n1, &err)) fail_msg("%s", err.msg);
    double *res[8];
    int64_t n[8];
    run_ranks(world, per, bucket, res, n);
    for (int r = 0; r < world; r++) {
        assert_int_equal(n[r], n1);
        if (r > 0) assert_memory_equal(res[r], res[0], sizeof(double) * (size_t)n1);
    }
    double el = rel_err(res[0], one, STEPS), ep = rel_err(res[0] + STEPS, one + STEPS, n1 - STEPS);
    print_message("world %d: losses %.7f .. %.7f (one process %.7f .. %.7f); rel err losses %.2e params %.2e\n", world, res[0][0],
                  res[0][STEPS - 1], one[0], one[STEPS - 1], el, ep);
    assert_true(el < 1e-5);
    assert_true(ep < 1e-5);
    assert_true(one[STEPS - 1] < one[0]); // it trained
    for (int r = 0; r < world; r++) free(res[r]);
    free(one);
}

static void test_two_ranks(void **s) { equal_global_batch(2, 16 << 10); }
static void test_three_ranks_one_bucket(void **s) { equal_global_batch(3, 0); }

// The fused head with its weight gradient made late (late_dw=1): that gradient is final only just
// before the global norm, so its bucket's all-reduce comes last; the same result as one process.
static void test_two_ranks_late_head(void **s) {
    head_mode = "fused_head=late";
    equal_global_batch(2, 16 << 10);
    head_mode = NULL;
}

// ZeRO-1: each rank keeps the AdamW state of its own parameters only, and the result is the same.
static void test_zero1(void **s) {
    zero_stage = 1;
    equal_global_batch(2, 16 << 10);
    equal_global_batch(3, 16 << 10);
    zero_stage = 0;
    stg_step *s1 = load_z(2, 3, 16 << 10, 1, 1), *s0 = load_z(2, 3, 16 << 10, 0, 0);
    stg_graph *g1 = s1->g, *g0 = s0->g;
    int64_t o1 = 0, o0 = 0;
    int nb = 0;
    for (int t = 0; t < g1->nt; t++)
        if (g1->t[t].cls == STG_CLASS_OPTIMIZER) o1 += stg_numel(&g1->t[t]);
    for (int t = 0; t < g0->nt; t++)
        if (g0->t[t].cls == STG_CLASS_OPTIMIZER) o0 += stg_numel(&g0->t[t]);
    for (int o = 0; o < g1->nops; o++) nb += g1->ops[o].kind == STG_OP_BROADCAST;
    print_message("ZeRO-1, rank 1 of 3: %lld of %lld optimizer elements\n", (long long)o1, (long long)o0);
    assert_true(o1 > 0 && o1 * 3 < o0 * 12 / 10 + 1 && o1 * 3 > o0 * 8 / 10); // about a third
    int np = 0;
    for (int t = 0; t < g1->nt; t++) np += g1->t[t].cls == STG_CLASS_PARAM;
    assert_int_equal(nb, np); // every parameter comes from its owner
    stg_step_free(s1);
    stg_step_free(s0);
}

// The allreduce op groups each bucket's gradients for the planner (contiguous placement).
static void test_buckets_are_groups(void **s) {
    stg_step *st = load(2, 2, 16 << 10);
    stg_graph *g = st->g;
    int nb = 0, nloss = 0;
    for (int o = 0; o < g->nops; o++) {
        const stg_op *op = &g->ops[o];
        if (op->kind != STG_OP_ALLREDUCE) continue;
        if (op->n_in == 1 && op->in[0] == g->loss) {
            nloss++;
            continue;
        }
        nb++;
        int grp = g->t[op->in[0]].group;
        assert_true(grp >= 0);
        for (int i = 0; i < op->n_in; i++) {
            assert_int_equal(g->t[op->in[i]].cls, STG_CLASS_GRAD);
            assert_int_equal(g->t[op->in[i]].group, grp);
        }
    }
    assert_int_equal(nloss, 1);
    assert_true(nb >= 2);
    stg_err err;
    if (plan_verify(g, st->p, &err)) fail_msg("%s", err.msg);
    stg_step_free(st);
}

// A rank that never comes: rank 0 stops with a message within the timeout.
static void test_missing_rank(void **s) {
    clear_env();
    char port[16];
    snprintf(port, sizeof port, "%d", free_port() + 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("STG_DIST_TIMEOUT", "1", 1);
    rt_dist d;
    stg_err err;
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(rt_dist_connect(&d, &err), -1);
    assert_non_null(strstr(err.msg, "only 1 of 2 ranks"));
    rt_dist_close(&d);
    clear_env();
}

// A rank that dies after the rendezvous: the other's next collective fails with a message.
static void test_dead_rank(void **s) {
    clear_env();
    char port[16];
    snprintf(port, sizeof port, "%d", free_port() + 2);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("STG_DIST_TIMEOUT", "5", 1);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        setenv("RANK", "1", 1);
        rt_dist d;
        stg_err err;
        if (rt_dist_from_env(&d, &err) || rt_dist_connect(&d, &err)) _exit(1);
        _exit(0); // dies without taking part in the all-reduce
    }
    setenv("RANK", "0", 1);
    rt_dist d;
    stg_err err;
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(rt_dist_connect(&d, &err), 0);
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(rt_dist_allreduce_mean(&d, x, 4, STG_F32, &err), -1);
    assert_non_null(strstr(err.msg, "rank 1"));
    rt_dist_close(&d);
    int status;
    waitpid(p, &status, 0);
    clear_env();
}

static int sh(const char *cmd) {
    int r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

// `stg launch`: two ranks of stg train; a failing rank makes launch fail.
static void test_launch(void **s) {
    clear_env();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' launch -n 2 -- '%s' train models/tiny.yaml --device cpu --steps 3 --set n_layers=1 --set ctx=16 "
             "--set batch=2 >/dev/null 2>&1",
             STG_SOURCE_DIR, STG_BINARY, STG_BINARY);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' launch -n 2 -- sh -c 'exit $((RANK * 3))' >/dev/null 2>&1", STG_BINARY);
    assert_int_equal(sh(cmd), 3);
    snprintf(cmd, sizeof cmd, "'%s' launch -n 0 -- true >/dev/null 2>&1", STG_BINARY);
    assert_int_equal(sh(cmd), 2);
    // two "nodes" of one process each on this machine: ranks 0 and 1 of 2
    int port = free_port() + 3;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s' launch -n 1 --nnodes 2 --node-rank 1 --port %d -- sh -c 'test $RANK = 1 && test $LOCAL_RANK = 0 && test "
             "$WORLD_SIZE = 2 && exec \"$0\" \"$@\"' '%s' train models/tiny.yaml --device cpu --steps 2 --set n_layers=1 --set ctx=16 "
             "--set batch=2 >/dev/null 2>&1 & '%s' launch -n 1 --nnodes 2 --node-rank 0 --port %d -- '%s' train models/tiny.yaml "
             "--device cpu --steps 2 --set n_layers=1 --set ctx=16 --set batch=2 >/dev/null 2>&1; a=$?; wait $!; b=$?; exit $((a + b)))",
             STG_SOURCE_DIR, STG_BINARY, port, STG_BINARY, STG_BINARY, port, STG_BINARY);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' launch -n 1 --nnodes 2 --node-rank 0 -- true >/dev/null 2>&1", STG_BINARY);
    assert_int_equal(sh(cmd), 2);
}

// ZeRO accounting: what each stage takes off a device, by class, and the devices needed.
static void test_shard_accounting(void **s) {
    stg_step *st = load(2, 2, 16 << 10);
    stg_graph *g = st->g;
    stg_plan *p = st->p;
    stg_err err;
    int64_t opt = p->by_class[STG_CLASS_OPTIMIZER], gr = p->by_class[STG_CLASS_GRAD], par = p->by_class[STG_CLASS_PARAM];
    assert_true(opt == 2 * par && gr == par); // fp32: m and v; gradients like the parameters
    stg_shard_report r;
    assert_int_equal(plan_shard(g, p, 1, 1, 0, 1 << 10, &r, &err), 0);
    assert_int_equal(r.per_device, p->peak_bytes); // one device: nothing changes
    assert_int_equal(plan_shard(g, p, 4, 0, 0, 1 << 10, &r, &err), 0);
    assert_int_equal(r.per_device, p->peak_bytes);
    // stage 1 as stg runs it: whole parameters on owner ranks; never better than an even split, and
    // worse by less than the largest parameter's state
    int64_t largest = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_OPTIMIZER && p->size[t] > largest) largest = p->size[t];
    assert_int_equal(plan_shard(g, p, 4, 1, 0, 1 << 10, &r, &err), 0);
    int64_t opt_removed = r.removed;
    assert_true(opt_removed <= opt - (opt + 3) / 4);
    assert_true(opt_removed > opt - (opt + 3) / 4 - 2 * largest);
    assert_int_equal(r.per_device, p->peak_bytes - r.removed);
    assert_int_equal(plan_shard(g, p, 4, 2, 0, 1 << 10, &r, &err), 0);
    assert_int_equal(r.removed, opt_removed + gr - (gr + 3) / 4);
    assert_int_equal(r.transient, 2 << 10);
    assert_int_equal(plan_shard(g, p, 4, 3, 0, 1 << 10, &r, &err), 0);
    assert_int_equal(r.removed, opt_removed + gr - (gr + 3) / 4 + par - (par + 3) / 4);
    assert_true(r.per_device < p->peak_bytes);
    // a capacity between the stage-1 bytes on 2 and on 1 device: 2 devices
    stg_shard_report r2;
    assert_int_equal(plan_shard(g, p, 2, 1, 0, 1 << 10, &r2, &err), 0);
    assert_int_equal(plan_shard_devices_needed(g, p, 1, 1 << 10, r2.per_device, 64), 2);
    assert_int_equal(plan_shard_devices_needed(g, p, 0, 1 << 10, p->peak_bytes - 1, 64), 0);
    // the bisection gives what a scan over every device count gives: the fewest that fit, for every
    // stage and a range of capacities (and 0 where even the most devices do not fit)
    for (int z = 0; z <= 3; z++) {
        stg_shard_report r1, rmax;
        assert_int_equal(plan_shard(g, p, 1, z, 0, 1 << 10, &r1, &err), 0);
        assert_int_equal(plan_shard(g, p, 64, z, 0, 1 << 10, &rmax, &err), 0);
        for (int k = 0; k <= 16; k++) {
            int64_t cap = rmax.per_device - 1 + (r1.per_device - rmax.per_device + 1) * k / 16;
            int scan = 0;
            for (int n = 1; n <= 64 && !scan; n++) {
                stg_shard_report rn;
                assert_int_equal(plan_shard(g, p, n, z, 0, 1 << 10, &rn, &err), 0);
                if (rn.per_device <= cap) scan = n;
            }
            assert_int_equal(plan_shard_devices_needed(g, p, z, 1 << 10, cap, 64), scan);
        }
    }
    assert_int_equal(plan_shard(g, p, 0, 1, 0, 0, &r, &err), -1);
    assert_int_equal(plan_shard(g, p, 2, 4, 0, 0, &r, &err), -1);
    stg_step_free(st);
}

// Checkpoints under data parallelism: with ZeRO-1 the owners' AdamW state is gathered to rank 0,
// so the file equals plain data parallelism's, and 3 steps + resume + 3 steps == 6 steps, bitwise.
static void test_checkpoints(void **s) {
    clear_env();
    char dir[] = "/tmp/stg_dist_ckptXXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *run = "cd '%s' && '%s' launch -n 2 -- '%s' train models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 "
                      "--set batch=2 --lr 1e-2 --warmup 1 --cosine-steps 6 --steps %d --ckpt %s/%s --log %s/%s.jsonl %s >/dev/null 2>&1";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, run, STG_SOURCE_DIR, STG_BINARY, STG_BINARY, 6, dir, "plain", dir, "plain", "");
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, run, STG_SOURCE_DIR, STG_BINARY, STG_BINARY, 6, dir, "zero", dir, "zero", "--zero 1");
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, run, STG_SOURCE_DIR, STG_BINARY, STG_BINARY, 3, dir, "resumed", dir, "resumed", "--zero 1");
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, run, STG_SOURCE_DIR, STG_BINARY, STG_BINARY, 6, dir, "resumed", dir, "resumed", "--zero 1 --resume");
    assert_int_equal(sh(cmd), 0);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/plain/ckpt.safetensors", dir);
    snprintf(b, sizeof b, "%s/zero/ckpt.safetensors", dir);
    rig_same_tensors(a, b, false);
    snprintf(a, sizeof a, "%s/resumed/ckpt.safetensors", dir);
    rig_same_tensors(a, b, false);
    // the logs: steps 4..6 of the resumed run are the straight run's, loss for loss
    snprintf(cmd, sizeof cmd, "cd %s && tail -n 3 zero.jsonl | cut -d, -f1-2 > z && tail -n 3 resumed.jsonl | cut -d, -f1-2 > r && cmp -s z r", dir);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    sh(cmd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_buckets_are_groups),
        cmocka_unit_test(test_shard_accounting),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_three_ranks_one_bucket),
        cmocka_unit_test(test_two_ranks_late_head),
        cmocka_unit_test(test_zero1),
        cmocka_unit_test(test_missing_rank),
        cmocka_unit_test(test_dead_rank),
        cmocka_unit_test(test_launch),
        cmocka_unit_test(test_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
