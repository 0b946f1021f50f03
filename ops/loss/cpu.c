// The loss family on the CPU backend: runners for cross_entropy, cross_entropy_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/loss/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/elementwise/kernels.h" // cpu_scale: the loss gradient's factor
#include "ops/loss/kernels.h"

// logits (..., V), targets (...) i32 -> loss (), lse (rows)
static int run_cross_entropy(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    return KCALL(f64, cpu_cross_entropy_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 DOUT(data, op, 1), stg_rows(x), stg_last(x), err);
}

// logits, targets, lse -> dlogits (..., V), times the loss gradient (attribute factor, 0 meaning 1:
// 1 / micro-batches under gradient accumulation)
static int run_cross_entropy_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                                 size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    if (KCALL(f64, cpu_cross_entropy_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0),
              stg_rows(x), stg_last(x), err))
        return -1;
    double f = op->a.scale.factor;
    if (f != 0 && f != 1) KCALL(f64, cpu_scale, DOUT(data, op, 0), DOUT(data, op, 0), stg_numel(x), f);
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_cross_entropy = {run_cross_entropy, NULL, 0};
const stg_cpu_rec stg_cpu_cross_entropy_bwd = {run_cross_entropy_bwd, NULL, 0};
