// Issue 29: stg never loses a user's data and never states what is not so. Each test runs the
// program (or the library) the way a user hit the problem: outputs pointed at inputs, existing
// logs, learning-rate schedules, checkpoints that diverged or were damaged, inputs that are FIFOs,
// YAML that nests or repeats keys, ranks launched with different options, and messages.
#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#include <cmocka.h>

#define TU_STG_TIMEOUT 60
#include "tests/testutil.h"

#include "graph/graph.h"
#include "graph/loader.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/ckpt.h"
#include "runtime/exec.h"
#include "runtime/fsutil.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "tests/rig.h"

static char dir[256];

static int setup(void **s) { return tu_mkdtemp(dir, sizeof dir, "test_safety"); }
static int teardown(void **s) { return tu_rmtree(dir); }

// A small, fast model for every training run here.
#define TINY "models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 --set batch=4"

static void expect_refused(char *out, size_t n, const char *needle, const char *fmt, ...) {
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = tu_stg(out, n, "%s", args);
    if (rc == 124) fail_msg("stg %s hung (killed after 60 s)", args);
    if (rc == 0 || rc > 2) fail_msg("stg %s exited %d; expected a refusal with '%s':\n%s", args, rc, needle, out);
    if (!strstr(out, needle)) fail_msg("stg %s:\n%s\nlacks '%s'", args, out, needle);
}

static void write_file(const char *path, const char *text) { tu_write(path, text, strlen(text)); }

static void copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *b = tu_slurp(from, &n);
    assert_non_null(b);
    tu_write(to, b, n);
    free(b);
}

// A parameter file of the tiny model: one short training run's checkpoint, copied out.
static void make_params(const char *path) {
    char out[16384], ck[400], src[600];
    snprintf(ck, sizeof ck, "%s/mkparams", dir);
    int rc = tu_stg(out, sizeof out, "train " TINY " --steps 1 --ckpt %s", ck);
    if (rc) fail_msg("%s", out);
    snprintf(src, sizeof src, "%s/ckpt.safetensors", ck); // the newest checkpoint, in every stg
    copy_file(src, path);
}

// ---- 1. no option destroys an input -------------------------------------------------------------

static void test_outputs_are_not_inputs(void **s) {
    char out[16384], data[400], init[400], model[400], link[400], batch[400];
    snprintf(data, sizeof data, "%s/data.bin", dir);
    snprintf(init, sizeof init, "%s/init.safetensors", dir);
    snprintf(model, sizeof model, "%s/model.yaml", dir);
    snprintf(link, sizeof link, "%s/link.jsonl", dir);
    copy_file(STG_SOURCE_DIR "/models/tiny.yaml", model);
    // the model includes cs336/lm.yaml relative to itself
    char inc[400];
    snprintf(inc, sizeof inc, "%s/cs336", dir);
    assert_int_equal(mkdir(inc, 0777), 0);
    snprintf(inc, sizeof inc, "%s/cs336/lm.yaml", dir);
    copy_file(STG_SOURCE_DIR "/models/cs336/lm.yaml", inc);
    uint16_t toks[4096];
    for (int i = 0; i < 4096; i++) toks[i] = (uint16_t)(i * 7 % 256);
    FILE *f = fopen(data, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(toks, 2, 4096, f), 4096);
    assert_int_equal(fclose(f), 0);
    make_params(init);
    size_t n0, n1, n2;
    char *d0 = tu_slurp(data, &n0), *i0 = tu_slurp(init, &n1), *m0 = tu_slurp(model, &n2);
    assert_int_equal(symlink(data, link), 0);

    expect_refused(out, sizeof out, "is the same file as the --data file", "train " TINY " --steps 1 --data %s --log %s", data, data);
    expect_refused(out, sizeof out, "is the same file as the --data file", "train " TINY " --steps 1 --data %s --log %s", data, link);
    expect_refused(out, sizeof out, "is the same file as the --init file", "train " TINY " --steps 1 --init %s --log %s", init, init);
    expect_refused(out, sizeof out, "is the same file as the model file",
                   "train %s --device cpu --set n_layers=1 --set ctx=16 --steps 1 --log %s", model, model);
    expect_refused(out, sizeof out, "--ckpt", "train " TINY " --steps 1 --data %s --ckpt %s", data, data);
    expect_refused(out, sizeof out, "is the same file as the --val file", "train " TINY " --steps 1 --val %s --log %s", data, data);
    // an --init that is a checkpoint in the --ckpt directory would be rotated away
    char ck[400], ckfile[600];
    snprintf(ck, sizeof ck, "%s/ckin", dir);
    assert_int_equal(mkdir(ck, 0777), 0);
    snprintf(ckfile, sizeof ckfile, "%s/ckpt-1.safetensors", ck);
    copy_file(init, ckfile);
    expect_refused(out, sizeof out, "which this run replaces and removes", "train " TINY " --steps 3 --init %s --ckpt %s --ckpt-every 1 --keep 1",
                   ckfile, ck);
    // stg step --dump, stg graph -o, stg memreport -o, stg tokens -o
    snprintf(batch, sizeof batch, "%s/batch.npy", dir);
    expect_refused(out, sizeof out, "is the same file as the --init file", "step " TINY " --init %s --batch %s --dump %s", init, batch, init);
    expect_refused(out, sizeof out, "is the same file as the model file", "graph %s --dot -o %s", model, model);
    expect_refused(out, sizeof out, "is the same file as the model file", "memreport %s -o %s", model, model);
    expect_refused(out, sizeof out, "is the same file as the input", "tokens %s -o %s", data, link);
    // the file the model includes is an input as much as the model file itself
    expect_refused(out, sizeof out, "is the same file as the file the model includes", "memreport %s -o %s", model, inc);
    expect_refused(out, sizeof out, "is the same file as the file the model includes", "graph %s --dot -o %s", model, inc);
    expect_refused(out, sizeof out, "is the same file as the file the model includes",
                   "train %s --device cpu --set n_layers=1 --set ctx=16 --steps 1 --log %s", model, inc);
    size_t n3;
    char *inc0 = tu_slurp(STG_SOURCE_DIR "/models/cs336/lm.yaml", &n3), *inc1 = tu_slurp(inc, &n3);
    assert_non_null(inc0);
    assert_non_null(inc1);
    assert_memory_equal(inc0, inc1, n3);
    free(inc0);
    free(inc1);

    char *d1 = tu_slurp(data, &n0), *i1 = tu_slurp(init, &n1), *m1 = tu_slurp(model, &n2);
    assert_non_null(d1);
    assert_non_null(i1);
    assert_non_null(m1);
    assert_memory_equal(d0, d1, n0);
    assert_memory_equal(i0, i1, n1);
    assert_string_equal(m0, m1);
    free(d0), free(d1), free(i0), free(i1), free(m0), free(m1);
}

static int count_lines(const char *path) {
    char *b = tu_slurp(path, NULL);
    if (!b) return -1;
    int n = 0;
    for (char *p = b; *p; p++) n += *p == '\n';
    free(b);
    return n;
}

static void test_log_not_truncated(void **s) {
    char out[16384], log[400], ck[400];
    snprintf(log, sizeof log, "%s/run.jsonl", dir);
    snprintf(ck, sizeof ck, "%s/logck", dir);
    write_file(log, "{\"a previous run\": 1}\n");
    expect_refused(out, sizeof out, "--log-mode overwrite or --log-mode append", "train " TINY " --steps 2 --log %s", log);
    assert_int_equal(count_lines(log), 1);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 2 --log %s --log-mode append --ckpt %s", log, ck)) fail_msg("%s", out);
    assert_int_equal(count_lines(log), 3);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 4 --log %s --ckpt %s --resume", log, ck)) fail_msg("%s", out);
    assert_int_equal(count_lines(log), 5); // a resumed run appends
    if (tu_stg(out, sizeof out, "train " TINY " --steps 2 --log %s --log-mode overwrite", log)) fail_msg("%s", out);
    assert_int_equal(count_lines(log), 2);
    expect_refused(out, sizeof out, "--log-mode 'keep'", "train " TINY " --steps 2 --log %s --log-mode keep", log);
}

// ---- 2. the learning-rate schedule ------------------------------------------------------------

// The "lr" of every line of a JSON-lines log.
static int log_lrs(const char *path, double *lr, int max) {
    char *b = tu_slurp(path, NULL);
    assert_non_null(b);
    int n = 0;
    for (char *p = strstr(b, "\"lr\": "); p && n < max; p = strstr(p + 1, "\"lr\": ")) lr[n++] = strtod(p + 6, NULL);
    free(b);
    return n;
}

static void test_lr_schedule(void **s) {
    char out[16384], log[400];
    snprintf(log, sizeof log, "%s/lr1.jsonl", dir);
    double lr[16];
    // --lr 1e-5 alone: the cosine goes down from 1e-5 to 1e-6 (not up to a fixed 1e-4)
    if (tu_stg(out, sizeof out, "train " TINY " --steps 5 --lr 1e-5 --log %s", log)) fail_msg("%s", out);
    assert_int_equal(log_lrs(log, lr, 16), 5);
    for (int i = 0; i < 5; i++) {
        if (lr[i] > 1e-5 * (1 + 1e-9) || lr[i] < 1e-6 * (1 - 1e-9)) fail_msg("step %d: lr %g outside [1e-6, 1e-5]", i + 1, lr[i]);
        if (i && lr[i] > lr[i - 1]) fail_msg("step %d: lr %g rises from %g", i + 1, lr[i], lr[i - 1]);
    }
    assert_non_null(strstr(out, "lr schedule: 1e-05 at step 1"));
    assert_non_null(strstr(out, "(0.1 x --lr, the default)"));
    // --lr 0: nothing moves
    snprintf(log, sizeof log, "%s/lr2.jsonl", dir);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 3 --lr 0 --log %s", log)) fail_msg("%s", out);
    assert_int_equal(log_lrs(log, lr, 16), 3);
    for (int i = 0; i < 3; i++) assert_true(lr[i] == 0);
    expect_refused(out, sizeof out, "--min-lr 0.005 is above --lr 0.001", "train " TINY " --steps 3 --lr 1e-3 --min-lr 5e-3");
    // with warm-up the endpoints are printed as the op computes them
    if (tu_stg(out, sizeof out, "train " TINY " --steps 4 --lr 1e-2 --min-lr 1e-3 --warmup 2")) fail_msg("%s", out);
    assert_non_null(strstr(out, "lr schedule: 0 at step 1, 0.01 at step 3 (after 2 warm-up steps), cosine down to --min-lr 0.001"));
}

// ---- 3. checkpoints ---------------------------------------------------------------------------

// Every value of every tensor of a safetensors file is finite.
static void assert_all_finite(const char *path) {
    rt_st *st;
    stg_err err;
    if (rt_st_open(path, &st, &err)) fail_msg("%s", err.msg);
    for (size_t i = 0; i < rt_st_count(st); i++) {
        const rt_st_tensor *t = rt_st_at(st, i);
        assert_int_equal(t->dtype, RT_DT_F32);
        for (int64_t k = 0; k < t->numel; k++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * k, 4);
            if (!isfinite(v)) fail_msg("%s: '%s'[%lld] is %g", path, t->name, (long long)k, v);
        }
    }
    rt_st_free(st);
}

static void test_diverged_run_keeps_a_good_checkpoint(void **s) {
    char out[16384], ck[400], path[600];
    snprintf(ck, sizeof ck, "%s/ckdiv", dir);
    // lr 10 with weight decay 10 and no clipping: the step-2 update leaves NaN parameters while the
    // step-2 loss is still finite (it was computed before the update)
    int rc = tu_stg(out, sizeof out, "train " TINY " --steps 6 --clip 0 --lr 10 --min-lr 10 --weight-decay 10 --ckpt %s --ckpt-every 1", ck);
    assert_int_equal(rc, 1);
    const char *good = strstr(out, "the last good checkpoint (verified), step ");
    if (!good) fail_msg("%s", out);
    long step = strtol(good + strlen("the last good checkpoint (verified), step "), NULL, 10);
    snprintf(path, sizeof path, "%s/ckpt-%ld.safetensors", ck, step);
    assert_non_null(strstr(out, path));
    // every checkpoint left is finite and verifies; so is the one `latest` points at
    for (int k = 1; k <= 6; k++) {
        snprintf(path, sizeof path, "%s/ckpt-%d.safetensors", ck, k);
        if (access(path, F_OK) != 0) continue;
        assert_true(k <= step);
        assert_all_finite(path);
    }
    snprintf(path, sizeof path, "%s/latest", ck);
    assert_all_finite(path);
    snprintf(path, sizeof path, "%s/ckpt.safetensors", ck);
    assert_all_finite(path);
}

// The check is on what is written: a parameter that is NaN when the checkpoint is due (whatever the
// loss and the gradient norm said) is refused, and the previous checkpoint stays where it was.
static void test_nonfinite_parameters_not_written(void **s) {
    stg_err err;
    const char *sets[] = {"n_layers=1", "ctx=16", "batch=4"};
    stg_step_opts o = rig_opts(STG_SOURCE_DIR "/models/tiny.yaml", STG_PREC_FP32, sets, 3);
    rig r;
    rig_open(&r, rig_step(&o), &(rig_cfg){.init_seed = 1, .feed_seed = -1});
    stg_graph *g = r.g;
    rt_exec *e = r.e;
    char ck[400], path[600];
    snprintf(ck, sizeof ck, "%s/cknan", dir);
    assert_int_equal(mkdir(ck, 0777), 0);
    rt_ckpt_state st;
    memset(&st, 0, sizeof st);
    rt_rng_seed(&st.data_rng, 1);
    st.step = 1;
    if (rt_ckpt_save_dir(e, ck, &st, 2, NULL, NULL, 0, &err)) fail_msg("%s", err.msg);
    int t = graph_find_tensor(g, "ln_f");
    assert_true(t >= 0);
    int64_t n = stg_numel(&g->t[t]);
    double *v = calloc((size_t)n, sizeof *v);
    assert_non_null(v);
    v[n - 1] = NAN;
    if (rt_exec_write_f64(e, rt_exec_param_truth(e, t), v, &err)) fail_msg("%s", err.msg);
    st.step = 2;
    assert_int_equal(rt_ckpt_save_dir(e, ck, &st, 2, NULL, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "'ln_f' holds nan"));
    snprintf(path, sizeof path, "%s/ckpt-2.safetensors", ck);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/latest", ck);
    char target[64];
    ssize_t k = readlink(path, target, sizeof target - 1);
    assert_true(k > 0);
    target[k] = 0;
    assert_string_equal(target, "ckpt-1.safetensors");
    // and resuming takes the good one
    rt_ckpt_state got;
    char from[4200], skipped[2048];
    if (rt_ckpt_resume(e, ck, &got, from, sizeof from, skipped, sizeof skipped, &err)) fail_msg("%s", err.msg);
    assert_int_equal(got.step, 1);
    assert_int_equal(rt_remove_stale_tmp(ck, NULL, &err), 0); // the refused write left no temporary file
    free(v);
    rig_close(&r);
}

static void test_keep_latest_and_checksums(void **s) {
    char out[16384], ck[400], path[600];
    snprintf(ck, sizeof ck, "%s/ckkeep", dir);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 5 --ckpt %s --ckpt-every 1", ck)) fail_msg("%s", out);
    assert_non_null(strstr(out, "checkpoint: "));
    for (int k = 1; k <= 5; k++) {
        snprintf(path, sizeof path, "%s/ckpt-%d.safetensors", ck, k);
        assert_int_equal(access(path, F_OK) == 0, k >= 4); // --keep 2 by default
    }
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/latest", ck);
    snprintf(b, sizeof b, "%s/ckpt-5.safetensors", ck);
    assert_true(rt_ckpt_verify(b, &(stg_err){{0}}) == 0);
    struct stat sa, sb;
    assert_int_equal(stat(a, &sa), 0);
    assert_int_equal(stat(b, &sb), 0);
    assert_true(sa.st_ino == sb.st_ino);
    snprintf(a, sizeof a, "%s/ckpt.safetensors", ck);
    assert_int_equal(stat(a, &sa), 0);
    assert_true(sa.st_ino == sb.st_ino);
    // 4 changed bytes of a weight: refused on load with a message, and --resume falls back to step 4
    rt_st *st;
    stg_err err;
    if (rt_st_open(b, &st, &err)) fail_msg("%s", err.msg);
    const rt_st_tensor *w = rt_st_find(st, "tok_emb");
    assert_non_null(w);
    size_t begin = w->begin;
    rt_st_free(st);
    char *whole = tu_slurp(b, NULL);
    assert_non_null(whole);
    uint64_t hlen;
    memcpy(&hlen, whole, 8); // little-endian header length; the data follow it
    free(whole);
    long off = (long)(8 + hlen + begin + 40);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/damaged.safetensors", dir);
    copy_file(b, bad);
    int fd = open(b, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "\x12\x34\x56\x78", 4, off), 4);
    assert_int_equal(close(fd), 0);
    char params[400];
    snprintf(params, sizeof params, "%s/params.safetensors", dir);
    copy_file(b, params);
    expect_refused(out, sizeof out, "tensor 'tok_emb' fails its CRC-32C check", "train " TINY " --steps 6 --init %s", params);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 6 --ckpt %s --resume", ck)) fail_msg("%s", out);
    assert_non_null(strstr(out, "/ckpt-4.safetensors (step 4, verified)"));
    assert_non_null(strstr(out, "passed over newer checkpoints"));
    assert_non_null(strstr(out, "fails its CRC-32C check"));
    assert_non_null(strstr(out, "done: 2 steps"));
}

static void test_resume_and_init_conflict(void **s) {
    char out[16384], init[400];
    snprintf(init, sizeof init, "%s/ri.safetensors", dir);
    make_params(init);
    expect_refused(out, sizeof out, "--init and --resume", "train " TINY " --steps 2 --init %s --resume --ckpt %s/rick", init, dir);
}

static void test_nan_init_says_so(void **s) {
    char out[16384], init[400], nan[400];
    snprintf(init, sizeof init, "%s/ni.safetensors", dir);
    snprintf(nan, sizeof nan, "%s/nan.safetensors", dir);
    make_params(init);
    rt_st *st;
    stg_err err;
    if (rt_st_open(init, &st, &err)) fail_msg("%s", err.msg);
    rt_st_writer *w = rt_st_writer_new(&err);
    float *bufs[64];
    int nb = 0;
    for (size_t i = 0; i < rt_st_count(st) && nb < 64; i++) {
        const rt_st_tensor *x = rt_st_at(st, i);
        float *v = malloc(x->nbytes);
        memcpy(v, x->data, x->nbytes);
        if (strcmp(x->name, "lm_head") == 0) v[3] = NAN;
        bufs[nb++] = v;
        assert_int_equal(rt_st_writer_add(w, x->name, x->dtype, x->ndim, x->shape, v, &err), 0);
    }
    assert_int_equal(rt_st_writer_write(w, nan, &err), 0);
    rt_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    rt_st_free(st);
    expect_refused(out, sizeof out, "parameter 'lm_head' holds a NaN or infinity (element 3)", "train " TINY " --steps 2 --init %s", nan);
    assert_null(strstr(out, "try a lower --lr"));
}

// ---- 4. resources ---------------------------------------------------------------------------

static void test_host_memory_checked(void **s) {
    char out[16384];
    // the host's MemAvailable as 64 MiB (STG_HOST_MEM_AVAILABLE): batch 4096 of the tiny model needs more
    // the host's MemAvailable as 512 MiB (STG_HOST_MEM_AVAILABLE; 256 of them kept free): batch 4096 of
    // the tiny model plans 0.37 GiB
    setenv("STG_HOST_MEM_AVAILABLE", "536870912", 1);
    int rc = tu_stg(out, sizeof out, "train " TINY " --set batch=4096 --steps 1");
    unsetenv("STG_HOST_MEM_AVAILABLE");
    assert_int_equal(rc, 1);
    if (!strstr(out, "the largest batch that fits is")) fail_msg("%s", out);
    assert_non_null(strstr(out, "available (MemAvailable)"));
    assert_null(strstr(out, "step 1/"));
}

static void test_ckpt_dir_probed_first(void **s) {
    char out[16384], file[400];
    snprintf(file, sizeof file, "%s/plainfile", dir);
    write_file(file, "x");
    expect_refused(out, sizeof out, "cannot create the checkpoint directory", "train " TINY " --steps 3 --ckpt %s/sub", file);
    assert_null(strstr(out, "step 1/"));
}

// A pid that no process has: a child that has exited and been reaped.
static long dead_pid(void) {
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) _exit(0);
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return (long)p;
}

static void test_stale_temporary_files_removed(void **s) {
    char out[16384], ck[400], tmp[600], mine[600], text[400], tok[400];
    snprintf(ck, sizeof ck, "%s/ckstale", dir);
    assert_int_equal(mkdir(ck, 0777), 0);
    snprintf(tmp, sizeof tmp, "%s/ckpt-7.safetensors.tmp.%ld", ck, dead_pid());
    snprintf(mine, sizeof mine, "%s/ckpt-7.safetensors.tmp.%ld", ck, (long)getpid()); // a live process's: kept
    write_file(tmp, "partial");
    write_file(mine, "partial");
    if (tu_stg(out, sizeof out, "train " TINY " --steps 1 --ckpt %s", ck)) fail_msg("%s", out);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(access(mine, F_OK), 0);
    assert_non_null(strstr(out, "removed 1 temporary file"));
    write_file(tmp, "partial");
    if (tu_stg(out, sizeof out, "train " TINY " --steps 2 --ckpt %s --resume", ck)) fail_msg("%s", out);
    assert_int_equal(access(tmp, F_OK), -1);
    // stg tokens: the same rule for its output
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(tok, sizeof tok, "%s/text.bin", dir);
    write_file(text, "hello");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", tok, dead_pid());
    write_file(tmp, "partial");
    if (tu_stg(out, sizeof out, "tokens %s -o %s", text, tok)) fail_msg("%s", out);
    assert_int_equal(access(tmp, F_OK), -1);
    // killed by SIGTERM while reading an endless input, it removes its own
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "'%s' tokens /dev/zero -o '%s' & p=$!; sleep 1; kill -TERM $p; wait $p; ls '%s'.tmp.* 2>/dev/null | wc -l",
             STG_BINARY, tok, tok);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int left = -1;
    assert_int_equal(fscanf(p, "%d", &left), 1);
    pclose(p);
    assert_int_equal(left, 0);
}

// ---- 5. no hangs ------------------------------------------------------------------------------

static void test_fifos_refused(void **s) {
    char out[16384], fifo[400];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0666), 0);
    expect_refused(out, sizeof out, "not a regular file", "check %s", fifo);
    expect_refused(out, sizeof out, "not a regular file", "train " TINY " --steps 1 --data %s", fifo);
    expect_refused(out, sizeof out, "not a regular file", "train " TINY " --steps 1 --init %s", fifo);
    expect_refused(out, sizeof out, "not a regular file", "step " TINY " --init %s --batch %s --dump %s/o.safetensors", fifo, fifo, dir);
}

static void test_yaml_nesting_and_duplicates(void **s) {
    char out[16384], path[400];
    snprintf(path, sizeof path, "%s/deep.yaml", dir);
    // 200k levels: libyaml alone takes about a minute; refused at level 65, where it starts
    size_t n = 200000;
    char *t = malloc(2 * n + 16);
    assert_non_null(t);
    memcpy(t, "name: [", 7);
    memset(t + 7, '[', n);
    memset(t + 7 + n, ']', n);
    strcpy(t + 7 + 2 * n, "]\n");
    write_file(path, t);
    free(t);
    expect_refused(out, sizeof out, "deep.yaml:1:70: lists and mappings nest more than 64 deep", "check %s", path);
    snprintf(path, sizeof path, "%s/dup.yaml", dir);
    write_file(path, "include: " STG_SOURCE_DIR "/models/cs336/lm.yaml\nname: dup\n"
                     "dims: {vocab: 256, d_model: 64, d_ff: 176, n_layers: 1, n_heads: 4, batch: 8, batch: 16, ctx: 16}\n");
    expect_refused(out, sizeof out, "dup.yaml:3:79: duplicate key 'batch' (first at line 3, column 69)", "check %s", path);
}

static void test_ranks_with_different_options(void **s) {
    char out[16384];
    // STG_DIST_TIMEOUT bounds the old behaviour (waiting for a collective that never matches)
    int rc = tu_stg(out, sizeof out,
                 "launch -n 2 -- sh -c 'STG_DIST_TIMEOUT=20 exec \"%s\" train " TINY " --steps 2 --lr $((RANK + 1))e-3'", STG_BINARY);
    assert_true(rc != 0);
    if (!strstr(out, "launched with different models or options: rank 1 has --lr=0.002 but rank 0 has --lr=0.001")) fail_msg("%s", out);
    rc = tu_stg(out, sizeof out,
             "launch -n 2 -- sh -c 'STG_DIST_TIMEOUT=20 exec \"%s\" train " TINY " --steps 2 --set d_model=$((RANK * 16 + 64))'", STG_BINARY);
    assert_true(rc != 0);
    if (!strstr(out, "rank 1 has dims and options=vocab=256,d_model=80")) fail_msg("%s", out);
}

// ---- 6. nothing silently ignored ----------------------------------------------------------------

static void test_val_default(void **s) {
    char out[16384], val[400], log[400];
    snprintf(val, sizeof val, "%s/val.bin", dir);
    snprintf(log, sizeof log, "%s/val.jsonl", dir);
    uint16_t toks[2048];
    for (int i = 0; i < 2048; i++) toks[i] = (uint16_t)(i * 13 % 256);
    FILE *f = fopen(val, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(toks, 2, 2048, f), 2048);
    assert_int_equal(fclose(f), 0);
    if (tu_stg(out, sizeof out, "train " TINY " --steps 3 --val %s --log %s", val, log)) fail_msg("%s", out);
    assert_non_null(strstr(out, "every 100 steps and at the end (the default with --val"));
    char *b = tu_slurp(log, NULL);
    assert_non_null(b);
    assert_non_null(strstr(b, "\"val_loss\""));
    free(b);
    assert_non_null(strstr(out, ", validation "));
}

static void test_cpu_refuses_cuda_options(void **s) {
    char out[16384];
    expect_refused(out, sizeof out, "--exec graph chooses how CUDA launches", "train " TINY " --steps 1 --exec graph");
    expect_refused(out, sizeof out, "--exec eager chooses how CUDA launches", "bench " TINY " --exec eager --iters 1 --warmup 0");
    expect_refused(out, sizeof out, "--streams spreads a captured CUDA step", "bench " TINY " --streams 2 --iters 1 --warmup 0");
}

// ---- 7. messages that tell the truth ------------------------------------------------------------

static void test_help_exits_0(void **s) {
    char out[16384];
    static const char *const cmds[] = {"check", "graph", "memreport", "train", "step", "bench", "attn-bench", "comm-bench", "launch", "tokens"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int rc = tu_stg(out, sizeof out, "%s --help", cmds[i]);
        char want[64];
        snprintf(want, sizeof want, "usage: stg %s ", cmds[i]);
        if (rc != 0 || strncmp(out, want, strlen(want)) != 0) fail_msg("stg %s --help exited %d:\n%s", cmds[i], rc, out);
    }
    assert_int_equal(tu_stg(out, sizeof out, "train models/tiny.yaml -h"), 0);
}

static void test_steps_0_no_loss_line(void **s) {
    char out[16384];
    if (tu_stg(out, sizeof out, "train " TINY " --steps 0")) fail_msg("%s", out);
    assert_null(strstr(out, "loss"));
    assert_non_null(strstr(out, "done: no steps run"));
}

static void test_markov_k_named(void **s) {
    char out[16384];
    expect_refused(out, sizeof out, "--markov-k 4", "train " TINY " --steps 1 --set vocab=1");
}

static void test_dot_name_quoted(void **s) {
    char out[16384];
    // a model name with a quote and a backslash: a valid DOT string
    char path[400], dot[400];
    snprintf(path, sizeof path, "%s/q.yaml", dir);
    snprintf(dot, sizeof dot, "%s/q.dot", dir);
    write_file(path, "include: " STG_SOURCE_DIR "/models/tiny.yaml\nname: 'say \"hi\" \\ bye'\n");
    if (tu_stg(out, sizeof out, "graph %s --dot -o %s --set n_layers=1", path, dot)) fail_msg("%s", out);
    char *d = tu_slurp(dot, NULL);
    assert_non_null(d);
    assert_true(strncmp(d, "digraph \"", 9) == 0);
    const char *c = d + 9;
    while (*c && *c != '"' && *c != '\n') c += *c == '\\' ? 2 : 1;
    if (strncmp(c, "\" {\n", 4) != 0) fail_msg("not one DOT string:\n%.80s", d);
    assert_non_null(strstr(d, "say \\\"hi\\\" \\\\ bye"));
    free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_are_not_inputs),
        cmocka_unit_test(test_log_not_truncated),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_diverged_run_keeps_a_good_checkpoint),
        cmocka_unit_test(test_nonfinite_parameters_not_written),
        cmocka_unit_test(test_keep_latest_and_checksums),
        cmocka_unit_test(test_resume_and_init_conflict),
        cmocka_unit_test(test_nan_init_says_so),
        cmocka_unit_test(test_host_memory_checked),
        cmocka_unit_test(test_ckpt_dir_probed_first),
        cmocka_unit_test(test_stale_temporary_files_removed),
        cmocka_unit_test(test_fifos_refused),
        cmocka_unit_test(test_yaml_nesting_and_duplicates),
        cmocka_unit_test(test_ranks_with_different_options),
        cmocka_unit_test(test_val_default),
        cmocka_unit_test(test_cpu_refuses_cuda_options),
        cmocka_unit_test(test_help_exits_0),
        cmocka_unit_test(test_steps_0_no_loss_line),
        cmocka_unit_test(test_markov_k_named),
        cmocka_unit_test(test_dot_name_quoted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
