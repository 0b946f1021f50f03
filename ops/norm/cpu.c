// The norm family on the CPU backend: runners for rmsnorm, rmsnorm_bwd, layernorm, layernorm_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/norm/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/norm/kernels.h"

// x (..., D), w (D) -> y (..., D), rstd (rows)
static int run_rmsnorm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), stg_last(x), err) || cpu_need_numel(OUT(g, op, 0), stg_numel(x), err))
        return -1;
    KCALL(f64, cpu_rmsnorm_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), DOUT(data, op, 1),
          stg_rows(x), stg_last(x), op->a.norm.eps);
    return 0;
}

// x, w, rstd, dy -> dx (..., D), dw (D)
static int run_rmsnorm_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), stg_last(x), err) || cpu_need_numel(IN(g, op, 3), stg_numel(x), err))
        return -1;
    KCALL(f64, cpu_rmsnorm_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3),
          DOUT(data, op, 0), DOUT(data, op, 1), stg_rows(x), stg_last(x));
    cpu_add_addend(g, op, data, f64);
    return 0;
}

// x (..., D), w (D), b (D) -> y (..., D), stats (rows, 2)
static int run_layernorm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), stg_last(x), err) || cpu_need_numel(IN(g, op, 2), stg_last(x), err) ||
        cpu_need_numel(OUT(g, op, 1), 2 * stg_rows(x), err))
        return -1;
    KCALL(f64, cpu_layernorm_fwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0),
          DOUT(data, op, 1), stg_rows(x), stg_last(x), op->a.norm.eps);
    return 0;
}

// x, w, stats, dy -> dx, dw, db
static int run_layernorm_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), stg_last(x), err) || cpu_need_numel(IN(g, op, 2), 2 * stg_rows(x), err))
        return -1;
    KCALL(f64, cpu_layernorm_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3),
          DOUT(data, op, 0), DOUT(data, op, 1), DOUT(data, op, 2), stg_rows(x), stg_last(x));
    cpu_add_addend(g, op, data, f64);
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_rmsnorm = {run_rmsnorm, NULL, 0};
const stg_cpu_rec stg_cpu_rmsnorm_bwd = {run_rmsnorm_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_layernorm = {run_layernorm, NULL, 0};
const stg_cpu_rec stg_cpu_layernorm_bwd = {run_layernorm_bwd, NULL, 0};
