// Slurm's launch variables (runtime/dist.c) on the CPU backend: SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, the first host of SLURM_JOB_NODELIST (its compressed form expanded) or
// MASTER_ADDR, a port from SLURM_JOB_ID; Slurm beside torchrun's or OpenMPI's variables (the same
// process, or a launcher inside each task) and the disagreements refused (exit 2 from stg train);
// two `stg train` processes started the way srun starts them, logging the losses `stg launch -n 2`
// logs.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/dist.h"
#include "tests/testutil.h"

static void clear_env(void) {
    const char *v[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                       "MASTER_ADDR", "MASTER_PORT", "STG_DIST_TIMEOUT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                       "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_ID"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) unsetenv(v[i]);
}

static void test_first_host(void **s) {
    const char *ok[][2] = {
        {"node[03-05,07],gpu1", "node03"}, {"gpu1", "gpu1"}, {"gpu1,gpu2", "gpu1"}, {"n[7]", "n7"}, {"n[10,02-03]", "n10"},
        {"rack[1-2]-n[08-09],x", "rack1-n08"}, {"a[1-2]b[3]", "a1b3"}, {"127.0.0.[1-4]", "127.0.0.1"}, {"node-[001-128]x", "node-001x"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char h[64];
        stg_err err;
        if (rt_dist_first_host(ok[i][0], h, sizeof h, &err)) fail_msg("%s: %s", ok[i][0], err.msg);
        assert_string_equal(h, ok[i][1]);
    }
    const char *bad[][2] = {
        {"", "empty"}, {"node[", "'[' must open"}, {"node[03", "without ']'"}, {"node]", "without '['"}, {"node[a-b]", "'[' must open"},
        {"node[1-x]", "'x' inside brackets"}, {",x", "no host"}, {"n[1[2]]", "'[' must open"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char h[64];
        stg_err err;
        assert_int_equal(rt_dist_first_host(bad[i][0], h, sizeof h, &err), -1);
        if (!strstr(err.msg, bad[i][1])) fail_msg("%s: '%s' not in '%s'", bad[i][0], bad[i][1], err.msg);
    }
    char tiny[4];
    stg_err err;
    assert_int_equal(rt_dist_first_host("node[1-2]", tiny, sizeof tiny, &err), -1);
    assert_non_null(strstr(err.msg, "too long"));
}

static void test_env(void **s) {
    rt_dist d;
    stg_err err;
    clear_env();
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_JOB_NODELIST", "node[03-05,07],gpu1", 1);
    setenv("SLURM_JOB_ID", "123456", 1);
    assert_true(rt_dist_launched());
    if (rt_dist_from_env(&d, &err)) fail_msg("%s", err.msg);
    assert_int_equal(d.rank, 1);
    assert_int_equal(d.world, 3);
    assert_int_equal(d.local_rank, 1);
    assert_string_equal(d.addr, "node03");
    assert_int_equal(d.port, 20000 + 123456 % 20000);
    assert_string_equal(d.source, "SLURM_*");
    setenv("SLURM_STEP_NODELIST", "gpu[7-8]", 1); // the step's own list comes first
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_string_equal(d.addr, "gpu7");
    setenv("MASTER_ADDR", "head", 1); // explicit variables win
    setenv("MASTER_PORT", "31000", 1);
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_string_equal(d.addr, "head");
    assert_int_equal(d.port, 31000);
    unsetenv("SLURM_LOCALID"); // without it: one node
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.local_rank, 1);
    setenv("SLURM_JOB_NODELIST", "node[03", 1);
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("MASTER_ADDR");
    assert_int_equal(rt_dist_from_env(&d, &err), -1);
    assert_non_null(strstr(err.msg, "SLURM_JOB_NODELIST"));
    assert_non_null(strstr(err.msg, "without ']'"));
    // a one-task job is a plain run; a salloc shell (SLURM_NTASKS without SLURM_PROCID) is no task
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    assert_false(rt_dist_launched());
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.world, 1);
    unsetenv("SLURM_PROCID");
    setenv("SLURM_NTASKS", "4", 1);
    assert_false(rt_dist_launched());
    assert_int_equal(rt_dist_from_env(&d, &err), 0);
    assert_int_equal(d.world, 1);
    clear_env();
}

// Slurm beside another launcher's variables: accepted when they agree, refused otherwise.
static void test_agreement(void **s) {
    struct {
        const char *procid, *ntasks, *localid, *rank, *world, *local, *ompi; // NULL: unset
        int rank_want, world_want;                                          // -1: an error
        const char *msg;
    } rows[] = {
        {"3", "3", NULL, NULL, NULL, NULL, NULL, -1, 0, "SLURM_PROCID=3 is not below SLURM_NTASKS=3"},
        {"x", "3", NULL, NULL, NULL, NULL, NULL, -1, 0, "SLURM_PROCID='x'"},
        {"0", "0", NULL, NULL, NULL, NULL, NULL, -1, 0, "SLURM_NTASKS='0'"},
        {"1", "2", NULL, "1", "2", NULL, NULL, 1, 2, NULL},              // exported from Slurm's
        {"0", "2", NULL, "1", "2", NULL, NULL, -1, 0, "Slurm says task 0 of 2 (SLURM_PROCID, SLURM_NTASKS) but RANK=1, WORLD_SIZE=2"},
        {"0", "2", NULL, "0", "4", NULL, NULL, 0, 4, NULL},              // 2 processes inside each task
        {"1", "2", NULL, "3", "4", NULL, NULL, 1 * 0 + 3, 4, NULL},      // task 1 holds ranks 2 and 3
        {"1", "2", NULL, "1", "4", NULL, NULL, -1, 0, "RANK=1, WORLD_SIZE=4"}, // rank 1 is task 0's
        {"0", "3", NULL, "0", "4", NULL, NULL, -1, 0, "WORLD_SIZE=4"},   // 4 is no multiple of 3
        {"0", "1", NULL, "5", "8", NULL, NULL, 5, 8, NULL},              // stg launch -n 8 in a one-task job
        {"1", "2", "1", "1", "2", "0", NULL, -1, 0, "LOCAL_RANK=0 but SLURM_LOCALID=1"},
        {"1", "2", NULL, NULL, NULL, NULL, "4", -1, 0, "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4"},
        {"1", "2", NULL, NULL, NULL, NULL, "2", 1, 2, NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        clear_env();
        const char *names[] = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "RANK", "WORLD_SIZE", "LOCAL_RANK"};
        const char *vals[] = {rows[i].procid, rows[i].ntasks, rows[i].localid, rows[i].rank, rows[i].world, rows[i].local};
        for (int k = 0; k < 6; k++)
            if (vals[k]) setenv(names[k], vals[k], 1);
        if (rows[i].ompi) { // mpirun: rank = SLURM_PROCID's value, size as given
            setenv("OMPI_COMM_WORLD_SIZE", rows[i].ompi, 1);
            setenv("OMPI_COMM_WORLD_RANK", rows[i].procid, 1);
        }
        rt_dist d;
        stg_err err;
        int r = rt_dist_from_env(&d, &err);
        if (rows[i].rank_want < 0) {
            if (r != -1) fail_msg("row %zu: accepted (rank %d of %d)", i, d.rank, d.world);
            if (!strstr(err.msg, rows[i].msg)) fail_msg("row %zu: '%s' not in '%s'", i, rows[i].msg, err.msg);
        } else {
            if (r) fail_msg("row %zu: %s", i, err.msg);
            assert_int_equal(d.rank, rows[i].rank_want);
            assert_int_equal(d.world, rows[i].world_want);
        }
    }
    clear_env();
}

#define STG "'" STG_BINARY "'"
#define TRAIN " train '" STG_SOURCE_DIR "/models/tiny.yaml' --device cpu --steps 4 --set n_layers=1 --set ctx=16 --set batch=2 --lr 1e-2"
#define CLEAN "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK "

// The losses of a log, one per line, as written (compared as text: bitwise).
static int read_losses(const char *path, char out[][32], int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"loss\": ");
        if (!p) break;
        sscanf(p + 8, "%31[^,]", out[n++]);
    }
    fclose(f);
    return n;
}

// Two stg train processes with srun's variables (no RANK, no WORLD_SIZE) log what stg launch -n 2
// logs; the rendezvous address comes from the node list ("127.0.0.[1-2]" -> 127.0.0.1).
static void test_two_tasks(void **s) {
    clear_env();
    char dir[] = "/tmp/stg_slurm_XXXXXX";
    assert_non_null(mkdtemp(dir));
    int port = 20000 + (int)(getpid() % 20000);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && (" CLEAN "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_JOB_NODELIST='127.0.0.[1-2]' MASTER_PORT=%d "
             "STG_DIST_TIMEOUT=60 " STG TRAIN " >/dev/null 2>&1 & " CLEAN "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 "
             "SLURM_JOB_NODELIST='127.0.0.[1-2]' MASTER_PORT=%d STG_DIST_TIMEOUT=60 " STG TRAIN " --log %s/slurm.jsonl 2>&1; a=$?; wait $!; "
             "b=$?; exit $((a + b)))",
             dir, port, port, dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    assert_non_null(strstr(out, "data parallel: 2 ranks"));
    snprintf(cmd, sizeof cmd, "cd '%s' && " CLEAN STG " launch -n 2 -- " STG TRAIN " --log %s/launch.jsonl 2>&1", dir, dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    char a[8][32], b[8][32], p[512];
    snprintf(p, sizeof p, "%s/slurm.jsonl", dir);
    int na = read_losses(p, a, 8);
    unlink(p);
    snprintf(p, sizeof p, "%s/launch.jsonl", dir);
    int nb = read_losses(p, b, 8);
    unlink(p);
    rmdir(dir);
    assert_int_equal(na, 4);
    assert_int_equal(nb, 4);
    for (int i = 0; i < 4; i++) assert_string_equal(a[i], b[i]);
}

// stg train refuses disagreeing variables before anything starts: exit 2, the message.
static void test_refused_by_train(void **s) {
    const char *rows[][2] = {
        {"SLURM_PROCID=2 SLURM_NTASKS=2", "SLURM_PROCID=2 is not below SLURM_NTASKS=2"},
        {"SLURM_PROCID=1 SLURM_NTASKS=2 RANK=0 WORLD_SIZE=2", "Slurm says task 1 of 2"},
        {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_NODELIST='node[1-'", "SLURM_JOB_NODELIST: node list 'node[1-': a '[' without ']'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char cmd[4096], out[8192];
        snprintf(cmd, sizeof cmd, CLEAN "%s " STG TRAIN " 2>&1", rows[i][0]);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc != 2 || !strstr(out, rows[i][1])) fail_msg("%s: exit %d (want 2), '%s' not in\n%s", cmd, rc, rows[i][1], out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_host), cmocka_unit_test(test_env),        cmocka_unit_test(test_agreement),
        cmocka_unit_test(test_two_tasks),  cmocka_unit_test(test_refused_by_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
