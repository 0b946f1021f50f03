// Data parallelism on GPUs through NCCL, the allreduce ops captured in the step's CUDA Graph:
//   - one rank (an NCCL communicator of one GPU) is bitwise the plain step, graph and eager;
//   - with two GPUs: 5 steps of 2 ranks equal 5 steps of one GPU with the global batch (fp32,
//     relative error under 1e-5), also with NCCL forced onto its socket transport (a stand-in for
//     two nodes). Skipped with fewer GPUs.
// Ranks are separate processes (this program started again with --child), as under stg launch.
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include "ops/cuda/cuda.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p
#define STEPS 5
#define MAXOUT (1 << 20)

static const char *self_path;
static int zero_stage; // ZeRO stage of the data-parallel runs (children: from STG_TEST_ZERO)

// STEPS steps on device `dev`; dp: 0 plain, else data parallel over the launcher's environment
// (world from it). Losses then parameters into out.
static int run(int dev, int dp, int batch, bool graph, stg_precision prec, double *out, int64_t *nout, stg_err *err) {
    char b[32];
    snprintf(b, sizeof b, "batch=%d", batch);
    const char *sets[] = {"d_model=64", "d_ff=160", "n_layers=2", "n_heads=2", "vocab=256", b, "ctx=40"};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), prec, sets, 7);
    o.optim = rig_optim(1e-2, graph_optim_defaults().min_lr, 1, STEPS);
    o.optim.dp_bucket_bytes = 64 << 10; // several buckets
    o.optim.dp_first_bucket_bytes = 16 << 10;
    rt_dist d;
    memset(&d, 0, sizeof d);
    if (dp && rt_dist_from_env(&d, err)) return -1;
    o.optim.dp_world = dp ? d.world : 0;
    o.optim.dp_zero = dp ? zero_stage : 0;
    o.optim.dp_rank = dp ? d.rank : 0;
    stg_step *st = NULL;
    rt_backend *bk = NULL;
    if (stg_step_build(&o, &st, err)) return -1;
    if (rt_backend_cuda_new(dev, false, &bk, err)) return stg_step_free(st), -1;
    rt_exec_opts eo = {.graph = graph};
    return rig_try_rank_train(st, (rig_cfg){.b = bk, .eo = &eo, .init_seed = 3, .feed_seed = 9, .rng_seed = 8}, rt_backend_cuda_join,
                              dp ? d.world : 0, d.rank, STEPS, out, nout, err);
}

static void set_env1(const char *port) {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
}

// One rank through NCCL == the plain step, bitwise, in graph and eager mode, fp32 and bf16.
static void world1(stg_precision prec) {
    double *a = malloc(sizeof(double) * MAXOUT), *b = malloc(sizeof(double) * MAXOUT), *c = malloc(sizeof(double) * MAXOUT);
    int64_t na = 0, nb = 0, nc = 0;
    stg_err err;
    if (run(0, 0, 4, true, prec, a, &na, &err)) fail_msg("plain: %s", err.msg);
    set_env1("29611");
    if (run(0, 1, 4, true, prec, b, &nb, &err)) fail_msg("one rank, graph: %s", err.msg);
    if (run(0, 1, 4, false, prec, c, &nc, &err)) fail_msg("one rank, eager: %s", err.msg);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    assert_memory_equal(a, b, sizeof(double) * (size_t)na);
    assert_memory_equal(a, c, sizeof(double) * (size_t)na);
    assert_true(a[STEPS - 1] < a[0]);
    free(a);
    free(b);
    free(c);
}

static void test_one_rank_fp32(void **s) { world1(STG_PREC_FP32); }
static void test_one_rank_bf16(void **s) { world1(STG_PREC_BF16); }
static void test_one_rank_zero1(void **s) {
    zero_stage = 1; // one owner of everything; broadcasts from rank 0 to itself
    world1(STG_PREC_FP32);
    world1(STG_PREC_BF16);
    zero_stage = 0;
}

// Two ranks (processes, GPUs 0 and 1) == one GPU with the global batch.
static void two_gpus(bool sockets, int zero) {
    if (cuda_device_count() < 2) {
        print_message("skipped: %d GPU(s); two are needed\n", cuda_device_count());
        skip();
    }
    double *one = malloc(sizeof(double) * MAXOUT);
    int64_t n1 = 0;
    stg_err err;
    if (run(0, 0, 4, true, STG_PREC_FP32, one, &n1, &err)) fail_msg("%s", err.msg);
    char out[2][64];
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        snprintf(out[r], sizeof out[r], "/tmp/stg_gpu_dist_%d_%d.bin", (int)getpid(), r);
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) { // a fresh process: CUDA state is not inherited across exec
            char rs[8];
            snprintf(rs, sizeof rs, "%d", r);
            setenv("RANK", rs, 1);
            setenv("LOCAL_RANK", rs, 1);
            setenv("WORLD_SIZE", "2", 1);
            setenv("MASTER_PORT", sockets ? "29613" : "29612", 1);
            setenv("NCCL_NVLS_ENABLE", "0", 1);
            setenv("STG_DIST_TIMEOUT", "60", 1);
            setenv("STG_TEST_ZERO", zero ? "1" : "0", 1);
            if (sockets) {
                setenv("NCCL_P2P_DISABLE", "1", 1);
                setenv("NCCL_SHM_DISABLE", "1", 1);
            }
            execl(self_path, self_path, "--child", out[r], (char *)NULL);
            _exit(127);
        }
    }
    double *res[2];
    for (int r = 0; r < 2; r++) {
        int status;
        waitpid(pid[r], &status, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        FILE *fp = fopen(out[r], "rb");
        assert_non_null(fp);
        res[r] = malloc(sizeof(double) * MAXOUT);
        size_t k = fread(res[r], sizeof(double), MAXOUT, fp);
        fclose(fp);
        remove(out[r]);
        assert_int_equal((int64_t)k, n1);
    }
    assert_memory_equal(res[0], res[1], sizeof(double) * (size_t)n1);
    double el = rel_err(res[0], one, STEPS), ep = rel_err(res[0] + STEPS, one + STEPS, n1 - STEPS);
    print_message("2 GPUs%s%s: rel err losses %.2e params %.2e\n", sockets ? " (socket transport)" : "", zero ? ", ZeRO-1" : "", el,
                  ep);
    assert_true(el < 1e-5);
    assert_true(ep < 1e-5);
    free(res[0]);
    free(res[1]);
    free(one);
}

static void test_two_gpus(void **s) { two_gpus(false, 0); }
static void test_two_gpus_sockets(void **s) { two_gpus(true, 0); }
static void test_two_gpus_zero1(void **s) { two_gpus(false, 1); }
static void test_two_gpus_zero1_sockets(void **s) { two_gpus(true, 1); }

// --child OUT: one rank of two_gpus (batch 2 per rank), results written to OUT.
static int child(const char *path) {
    double *out = malloc(sizeof(double) * MAXOUT);
    int64_t n = 0;
    stg_err err;
    const char *lr = getenv("LOCAL_RANK"), *z = getenv("STG_TEST_ZERO");
    zero_stage = z && strcmp(z, "1") == 0;
    if (!out || run(lr ? atoi(lr) : 0, 1, 2, true, STG_PREC_FP32, out, &n, &err)) {
        fprintf(stderr, "rank %s: %s\n", getenv("RANK"), out ? err.msg : "out of memory");
        return 1;
    }
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(out, sizeof(double), (size_t)n, fp) != (size_t)n || fclose(fp) != 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child(argv[2]);
    if (!cuda_have_nccl()) return gpu_skipped("built without NCCL");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank_fp32),
        cmocka_unit_test(test_one_rank_bf16),
        cmocka_unit_test(test_two_gpus),
        cmocka_unit_test(test_two_gpus_sockets),
        cmocka_unit_test(test_one_rank_zero1),
        cmocka_unit_test(test_two_gpus_zero1),
        cmocka_unit_test(test_two_gpus_zero1_sockets),
    };
    return GPU_RUN(tests);
}

#endif
