// The loss family on the CPU backend: runners for cross_entropy, cross_entropy_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/loss/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/loss/kernels.h"

// logits (..., V), targets (...) i32 -> loss (), lse (rows)
static int run_cross_entropy(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    return KCALL(f64, cpu_cross_entropy_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 DOUT(data, op, 1), stg_rows(x), stg_last(x), err);
}

// logits, targets, lse -> dlogits (..., V)
static int run_cross_entropy_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                                 size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    return KCALL(f64, cpu_cross_entropy_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2),
                 DOUT(data, op, 0), stg_rows(x), stg_last(x), err);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_cross_entropy = {run_cross_entropy, NULL, 0};
const stg_cpu_rec stg_cpu_cross_entropy_bwd = {run_cross_entropy_bwd, NULL, 0};
