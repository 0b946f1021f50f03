// The layout family on the CPU backend: runners for reshape, transpose, repeat_kv, repeat_kv_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/layout/real.c), and one record per kind.
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/layout/kernels.h"

// x -> y, same elements (a view: nothing to do when the runtime aliased them)
static int run_reshape(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = stg_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    KCALL(f64, cpu_copy, DIN(data, op, 0), DOUT(data, op, 0), n);
    return 0;
}

// x -> y with dims d0 and d1 swapped (negative dims count from the end)
static int run_transpose(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    int d0 = op->a.transpose.d0, d1 = op->a.transpose.d1;
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim)
        return stg_errf(err, "dims %d and %d out of range for %s (%d dims)",
                        op->a.transpose.d0, op->a.transpose.d1, x->name, x->ndim);
    if (cpu_same_numel(g, op, stg_numel(x), err)) return -1;
    KCALL(f64, cpu_transpose, DIN(data, op, 0), DOUT(data, op, 0), x->ndim, x->shape, d0, d1);
    return 0;
}

// x (..., 3 m) -> three (..., m)
static int run_split(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                     size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    int64_t m = stg_last(x) / op->n_out;
    if (stg_last(x) % op->n_out) return stg_errf(err, "%s's last dim is not a multiple of %d", x->name, op->n_out);
    void *ys[STG_MAX_OUT];
    for (int i = 0; i < op->n_out; i++) {
        if (cpu_need_numel(OUT(g, op, i), stg_rows(x) * m, err)) return -1;
        ys[i] = DOUT(data, op, i);
    }
    if (f64) cpu_split_f64(DIN(data, op, 0), (double *const *)ys, op->n_out, stg_rows(x), m);
    else cpu_split_f32(DIN(data, op, 0), (float *const *)ys, op->n_out, stg_rows(x), m);
    return 0;
}

// three (..., m) -> (..., 3 m)
static int run_concat(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                      size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    int64_t m = stg_last(x);
    const void *xs[8];
    if (op->n_in > 8) return stg_errf(err, "concat takes at most 8 inputs");
    for (int i = 0; i < op->n_in; i++) {
        if (cpu_need_numel(IN(g, op, i), stg_numel(x), err)) return -1;
        xs[i] = DIN(data, op, i);
    }
    if (cpu_need_numel(OUT(g, op, 0), stg_numel(x) * op->n_in, err)) return -1;
    if (f64) cpu_concat_f64((const double *const *)xs, DOUT(data, op, 0), op->n_in, stg_rows(x), m);
    else cpu_concat_f32((const float *const *)xs, DOUT(data, op, 0), op->n_in, stg_rows(x), m);
    return 0;
}

// x (B, S, H, Dh) -> y (B, S, H n, Dh); backward: dy (B, S, H n, Dh) -> dx (B, S, H, Dh)
static int run_repeat_kv_either(const stg_graph *g, const stg_op *op, void *const *data, int f64, bool bwd, stg_err *err) {
    const stg_tensor *x = bwd ? OUT(g, op, 0) : IN(g, op, 0), *y = bwd ? IN(g, op, 0) : OUT(g, op, 0);
    int64_t n = op->a.repeat_kv.n;
    if (x->ndim != 4 || y->ndim != 4 || n < 1 || y->shape[2] != x->shape[2] * n || stg_numel(y) != stg_numel(x) * n)
        return stg_errf(err, "repeat_kv: %s and %s do not match n=%lld", x->name, y->name, (long long)n);
    int64_t rows = x->shape[0] * x->shape[1];
    if (bwd) KCALL(f64, cpu_repeat_kv_bwd, DIN(data, op, 0), DOUT(data, op, 0), rows, x->shape[2], n, x->shape[3]);
    else KCALL(f64, cpu_repeat_kv, DIN(data, op, 0), DOUT(data, op, 0), rows, x->shape[2], n, x->shape[3]);
    return 0;
}

static int run_repeat_kv(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    return run_repeat_kv_either(g, op, data, f64, false, err);
}

static int run_repeat_kv_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    return run_repeat_kv_either(g, op, data, f64, true, err);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_reshape = {run_reshape, NULL, 0};
const stg_cpu_rec stg_cpu_transpose = {run_transpose, NULL, 0};
const stg_cpu_rec stg_cpu_split = {run_split, NULL, 0};
const stg_cpu_rec stg_cpu_concat = {run_concat, NULL, 0};
const stg_cpu_rec stg_cpu_repeat_kv = {run_repeat_kv, NULL, 0};
const stg_cpu_rec stg_cpu_repeat_kv_bwd = {run_repeat_kv_bwd, NULL, 0};
