// The CPU reference backend: host memory, ops/cpu kernels; everything runs when enqueued.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/cpu/cpu.h"
#include "runtime/backend.h"
#include "runtime/dist.h"

static int cpu_alloc(rt_backend *b, size_t n, void **out, stg_err *err) {
    void *p = NULL;
    int r = posix_memalign(&p, 256, n ? n : 256);
    if (r != 0 || !p) return stg_errf(err, "cpu backend: out of host memory allocating %zu bytes", n);
    *out = p;
    return 0;
}

static void cpu_release(rt_backend *b, void *p) { free(p); }

static int cpu_copy(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    if (n && dst != src) memmove(dst, src, n);
    return 0;
}

static int cpu_fill(rt_backend *b, void *dst, int v, size_t n, stg_err *err) {
    memset(dst, v, n);
    return 0;
}

static int cpu_nothing(rt_backend *b, stg_err *err) { return 0; }
static int cpu_slot(rt_backend *b, int slot, stg_err *err) { return 0; }
static int64_t cpu_unknown(rt_backend *b) { return -1; }

// The host memory a plan may take: MemAvailable of /proc/meminfo (what the kernel can hand out
// without swapping, page cache included), -1 where there is no such file. Compared with the plan
// before anything is allocated (tools/stg/cli.c: cli_check_fit), as the CUDA backend's free
// device memory is: a CPU run that cannot fit is refused instead of growing into the OOM killer.
static int64_t cpu_mem_available(rt_backend *b) {
    const char *over = getenv("STG_HOST_MEM_AVAILABLE"); // bytes: tests and what-if runs
    if (over && *over) {
        char *end;
        long long v = strtoll(over, &end, 10);
        if (!*end && v >= 0) return v;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    int64_t kb = -1;
    while (fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    if (fclose(f) != 0) return -1;
    return kb < 0 ? -1 : kb * 1024;
}

typedef struct {
    double t[2];          // timer marks 0 and 1 (ms)
    double *prof;         // profiling marks (ms; prof_begin)
    int nprof;
    void *scratch;        // kernel scratch for the prepared graph: one allocation, made by prepare
    size_t scratch_bytes;
    rt_dist *dist;        // the data-parallel group (rt_backend_cpu_join), NULL when none
    bool accumulate;      // set_accumulate: marked ops add into their outputs
} cpu_impl;

// Allocates the scratch every op of g may need (the max of cpu_op_scratch_bytes), once, before the
// first step: kernels never allocate during a step. The scratch only grows, so a backend shared
// by several prepared graphs keeps enough for each of them.
static int cpu_prepare(rt_backend *b, const stg_graph *g, void *const *ptr, stg_err *err) {
    cpu_impl *im = b->impl;
    size_t need = 0;
    for (int op = 0; op < g->nops; op++) {
        size_t n = cpu_op_scratch_bytes(g, op);
        if (n > need) need = n;
    }
    if (need <= im->scratch_bytes) return 0;
    void *p = NULL;
    int r = posix_memalign(&p, 64, (need + 63) / 64 * 64);
    if (r != 0 || !p)
        return stg_errf(err, "cpu backend: out of host memory allocating %zu bytes of kernel scratch", need);
    free(im->scratch);
    im->scratch = p;
    im->scratch_bytes = need;
    return 0;
}

static int cpu_run(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    cpu_impl *im = b->impl;
    const stg_op *o = &g->ops[op];
    if (o->kind == STG_OP_ALLREDUCE) { // tensor by tensor (test modes give each its own buffer)
        if (!im->dist) return stg_errf(err, "allreduce: the cpu backend has no data-parallel group (rt_backend_cpu_join)");
        for (int i = 0; i < o->n_in; i++) {
            const stg_tensor *t = &g->t[o->in[i]];
            if (rt_dist_allreduce_mean(im->dist, ptr[o->in[i]], stg_numel(t), t->dtype, err))
                return stg_err_prefix(err, "allreduce of %s", t->name);
        }
        return 0;
    }
    if (o->kind == STG_OP_BROADCAST) {
        if (!im->dist) return stg_errf(err, "broadcast: the cpu backend has no data-parallel group (rt_backend_cpu_join)");
        const stg_tensor *t = &g->t[o->in[0]];
        if (rt_dist_bcast_root(im->dist, ptr[o->in[0]], (size_t)stg_bytes(t), (int)o->a.comm.root, err))
            return stg_err_prefix(err, "broadcast of %s", t->name);
        return 0;
    }
    return cpu_op_run_accum(g, op, ptr, im->scratch, im->scratch_bytes, im->accumulate, err);
}

static void cpu_set_accumulate(rt_backend *b, bool on) { ((cpu_impl *)b->impl)->accumulate = on; }

int rt_backend_cpu_join(rt_backend *b, rt_dist *d, stg_err *err) {
    if (b->ops->run_op != cpu_run) return stg_errf(err, "rt_backend_cpu_join: not a cpu backend");
    if (!d->connected) return stg_errf(err, "rt_backend_cpu_join: the group is not connected");
    ((cpu_impl *)b->impl)->dist = d;
    return 0;
}

static double cpu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cpu_timer_mark(rt_backend *b, int which, stg_err *err) {
    ((cpu_impl *)b->impl)->t[which & 1] = cpu_now_ms();
    return 0;
}

static int cpu_elapsed(rt_backend *b, double *ms, stg_err *err) {
    cpu_impl *im = b->impl;
    *ms = im->t[1] - im->t[0];
    return 0;
}

// Profiling marks: ops run synchronously, so a mark is the time it is made.
static int cpu_prof_begin(rt_backend *b, int n, stg_err *err) {
    cpu_impl *im = b->impl;
    if (n <= im->nprof) return 0;
    double *p = stg_realloc(im->prof, sizeof *p * (size_t)n, err);
    if (!p) return -1;
    im->prof = p;
    im->nprof = n;
    return 0;
}

static int cpu_prof_mark(rt_backend *b, int i, stg_err *err) {
    cpu_impl *im = b->impl;
    if (i < 0 || i >= im->nprof) return stg_errf(err, "cpu backend: profiling mark %d of %d", i, im->nprof);
    im->prof[i] = cpu_now_ms();
    return 0;
}

static int cpu_prof_elapsed(rt_backend *b, int i, int j, double *ms, stg_err *err) {
    cpu_impl *im = b->impl;
    if (i < 0 || j < 0 || i >= im->nprof || j >= im->nprof) return stg_errf(err, "cpu backend: profiling marks %d, %d of %d", i, j, im->nprof);
    *ms = im->prof[j] - im->prof[i];
    return 0;
}

static void cpu_destroy(rt_backend *b) {
    cpu_impl *im = b->impl;
    if (im) free(im->scratch), free(im->prof);
    free(b->impl);
    free(b);
}

static const rt_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .alloc_host = cpu_alloc,
    .release_host = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .fill = cpu_fill,
    .prepare = cpu_prepare,
    .run_op = cpu_run,
    .set_accumulate = cpu_set_accumulate,
    .record = cpu_slot,
    .wait = cpu_slot,
    .sync = cpu_nothing,
    .timer_mark = cpu_timer_mark,
    .elapsed_ms = cpu_elapsed,
    .prof_begin = cpu_prof_begin,
    .prof_mark = cpu_prof_mark,
    .prof_elapsed = cpu_prof_elapsed,
    .mem_used = cpu_unknown, // host memory: not measured (-1)
    .mem_free = cpu_mem_available,
    .destroy = cpu_destroy,
};

int rt_backend_cpu_new(rt_backend **out, stg_err *err) {
    rt_backend *b = stg_calloc(1, sizeof *b, err);
    if (!b) return -1;
    if (!(b->impl = stg_calloc(1, sizeof(cpu_impl), err))) {
        free(b);
        return -1;
    }
    b->ops = &cpu_ops;
    *out = b;
    return 0;
}
