// The rope family on the CPU backend: runners for rope, reading the op's tensors and
// attributes and calling the float or double kernels (ops/rope/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/rope/kernels.h"

// x (..., S, H, Dh) -> y, same shape
static int run_rope(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                    size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_ndim(x, 3, err)) return -1;
    int nd = x->ndim;
    int64_t S = x->shape[nd - 3], H = x->shape[nd - 2], Dh = x->shape[nd - 1];
    if (Dh % 2 != 0)
        return stg_errf(err, "%s has an odd head dim %lld", x->name, (long long)Dh);
    KCALL(f64, cpu_rope, DIN(data, op, 0), DOUT(data, op, 0), stg_numel(x) / (S * H * Dh), S, H, Dh,
          op->a.rope.theta, op->a.rope.inverse);
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_rope = {run_rope, NULL, 0};
