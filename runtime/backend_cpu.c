// The CPU reference backend: host memory, ops/cpu kernels.
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "runtime/backend.h"

static int cpu_alloc(rt_backend *b, size_t n, void **out, stg_err *err) {
    void *p = NULL;
    int r = posix_memalign(&p, 256, n ? n : 256);
    if (r != 0 || !p) return stg_errf(err, "cpu backend: out of host memory allocating %zu bytes", n);
    *out = p;
    return 0;
}

static void cpu_release(rt_backend *b, void *p) { free(p); }

static int cpu_copy(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err) {
    if (n) memmove(dst, src, n);
    return 0;
}

static int cpu_fill(rt_backend *b, void *dst, int v, size_t n, stg_err *err) {
    memset(dst, v, n);
    return 0;
}

static int cpu_run(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cpu_op_run(g, op, ptr, err);
}

static int cpu_sync(rt_backend *b, stg_err *err) { return 0; }

static void cpu_destroy(rt_backend *b) { free(b); }

static const rt_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .fill = cpu_fill,
    .run_op = cpu_run,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};

int rt_backend_cpu_new(rt_backend **out, stg_err *err) {
    rt_backend *b = stg_calloc(1, sizeof *b, err);
    if (!b) return -1;
    b->ops = &cpu_ops;
    *out = b;
    return 0;
}
