// The layout family on the CPU backend: runners for reshape, transpose, reading the op's tensors and
// attributes and calling the float or double kernels (ops/layout/real.c), and one record per kind.
#include <math.h>
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

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_reshape = {run_reshape, NULL, 0};
const stg_cpu_rec stg_cpu_transpose = {run_transpose, NULL, 0};
