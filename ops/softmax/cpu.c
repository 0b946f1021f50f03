// The softmax family on the CPU backend: runners for causal_mask, softmax, softmax_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/softmax/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/softmax/kernels.h"

// x (..., Sq, Sk) -> y
static int run_causal_mask(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_ndim(x, 2, err)) return -1;
    int64_t Sq = x->shape[x->ndim - 2], Sk = x->shape[x->ndim - 1];
    KCALL(f64, cpu_causal_mask, DIN(data, op, 0), DOUT(data, op, 0), stg_numel(x) / (Sq * Sk), Sq, Sk,
          op->a.mask.fill);
    return 0;
}

// x (..., N) -> y
static int run_softmax(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_same_numel(g, op, stg_numel(x), err)) return -1;
    KCALL(f64, cpu_softmax_fwd, DIN(data, op, 0), DOUT(data, op, 0), stg_rows(x), stg_last(x));
    return 0;
}

// y, dy (..., N) -> dx
static int run_softmax_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *y = IN(g, op, 0);
    if (cpu_same_numel(g, op, stg_numel(y), err)) return -1;
    KCALL(f64, cpu_softmax_bwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), stg_rows(y),
          stg_last(y));
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_causal_mask = {run_causal_mask, NULL, 0};
const stg_cpu_rec stg_cpu_softmax = {run_softmax, NULL, 0};
const stg_cpu_rec stg_cpu_softmax_bwd = {run_softmax_bwd, NULL, 0};
