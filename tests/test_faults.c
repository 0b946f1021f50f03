// Fault injection (issue 29): 50 CPU training runs with a checkpoint every step, each killed with
// SIGKILL at a random moment (seeded: the same moments every time the test runs), then resumed.
// After every kill each checkpoint in the directory loads, verifies its checksums and holds only
// finite values; the resumed run finishes with exactly the bytes of an uninterrupted run; and no
// temporary file is left.
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/rig.h"
#include "tests/testutil.h"

#include "runtime/ckpt.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"

#define RUNS 50
#define STEPS 8

static char dir[256];

static int setup(void **s) {
    // one thread: the runs are small, and 50 of them start faster without a thread pool
    setenv("OMP_NUM_THREADS", "1", 1);
    return tu_mkdtemp(dir, sizeof dir, "test_faults");
}

static int teardown(void **s) { return tu_rmtree(dir); }

// stg train on a very small model into checkpoint directory ck, with a checkpoint every step.
static pid_t start_train(const char *ck, bool resume, const char *log) {
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        if (!freopen(log, "a", stdout) || dup2(fileno(stdout), 2) < 0 || chdir(STG_SOURCE_DIR) != 0) _exit(126);
        char steps[16];
        snprintf(steps, sizeof steps, "%d", STEPS);
        char *argv[] = {(char *)STG_BINARY, "train", "models/tiny.yaml", "--device", "cpu", "--set", "n_layers=1", "--set", "d_model=32",
                        "--set", "d_ff=64", "--set", "n_heads=2", "--set", "ctx=8", "--set", "batch=2", "--steps", steps,
                        "--ckpt", (char *)ck, "--ckpt-every", "1", resume ? "--resume" : NULL, NULL};
        execv(STG_BINARY, argv);
        _exit(127);
    }
    return p;
}

// Still running (an exited child stays unreaped: WNOWAIT).
static bool alive(pid_t p) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)p, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

static int wait_exit(pid_t p) {
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

// Every numbered checkpoint in ck verifies and holds only finite values; returns how many there
// are; fails on a temporary file when `no_tmp`.
static int check_dir(const char *ck, bool no_tmp) {
    DIR *d = opendir(ck);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (no_tmp && strstr(de->d_name, ".tmp.")) fail_msg("%s/%s: a temporary file is left", ck, de->d_name);
        if (strncmp(de->d_name, "ckpt-", 5) != 0 || strstr(de->d_name, ".tmp.")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", ck, de->d_name);
        stg_err err;
        if (rt_ckpt_verify(path, &err)) fail_msg("after a kill: %s", err.msg);
        rt_st *st;
        if (rt_st_open(path, &st, &err)) fail_msg("%s", err.msg);
        for (size_t i = 0; i < rt_st_count(st); i++) {
            const rt_st_tensor *t = rt_st_at(st, i);
            for (int64_t k = 0; k < t->numel; k++) {
                float v;
                memcpy(&v, (const char *)t->data + 4 * k, 4);
                if (!isfinite(v)) fail_msg("%s: '%s' is not finite", path, t->name);
            }
        }
        rt_st_free(st);
        n++;
    }
    closedir(d);
    return n;
}

static void test_kill_and_resume(void **s) {
    char ref[400], log[400], want[600];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    // the uninterrupted run; its duration bounds where the kills land (the moments are drawn from a
    // seeded generator, so the kills are the same on every run of the test, up to the machine's speed)
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (wait_exit(start_train(ref, false, log)) != 0) fail_msg("the uninterrupted run failed (see %s)", log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long span = (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000);
    snprintf(want, sizeof want, "%s/ckpt-%d.safetensors", ref, STEPS);
    rt_rng r;
    rt_rng_seed(&r, 29);
    int resumed = 0, finished_before_kill = 0;
    for (int run = 0; run < RUNS; run++) {
        char ck[400], got[600];
        snprintf(ck, sizeof ck, "%s/run%d", dir, run);
        pid_t p = start_train(ck, false, log);
        // the moment: after checkpoint k appears (k random in [0, STEPS)), then up to one step's time
        // more, so the kills spread over every phase of a step and of a checkpoint write
        int k = (int)rt_rng_below(&r, STEPS);
        long jitter = (long)rt_rng_below(&r, (uint64_t)(span / STEPS + 1));
        char mark[600];
        snprintf(mark, sizeof mark, "%s/ckpt-%d.safetensors", ck, k);
        for (int spin = 0; k > 0 && access(mark, F_OK) != 0 && spin < 60000 && alive(p); spin++) sleep_us(1000);
        sleep_us(jitter);
        kill(p, SIGKILL);
        int rc = wait_exit(p);
        if (rc == 0) finished_before_kill++;
        else assert_int_equal(rc, 128 + SIGKILL);
        int n = check_dir(ck, false);
        // resume (a run killed before its first checkpoint has nothing to resume: it starts afresh)
        rc = wait_exit(start_train(ck, n > 0, log));
        if (rc != 0) fail_msg("run %d: the resumed run failed (see %s)", run, log);
        resumed += n > 0;
        check_dir(ck, true);
        snprintf(got, sizeof got, "%s/ckpt-%d.safetensors", ck, STEPS);
        rig_same_tensors(want, got, true); // the same tensors, step and data RNG state
    }
    char *text = NULL;
    size_t cap = 0;
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    int stale = 0;
    while (getline(&text, &cap, f) > 0) stale += strncmp(text, "removed ", 8) == 0; // a kill inside a checkpoint write
    free(text);
    fclose(f);
    printf("%d runs killed and resumed: %d from a checkpoint, %d afresh, %d had finished before the kill; %d kills left a "
           "temporary file, removed by the resumed run\n", RUNS, resumed, RUNS - resumed - finished_before_kill, finished_before_kill, stale);
    // most kills must land inside a run for the test to mean anything
    if (resumed < RUNS / 2) fail_msg("only %d of %d runs had a checkpoint to resume from (%d finished before the kill)", resumed, RUNS,
                                     finished_before_kill);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kill_and_resume)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
