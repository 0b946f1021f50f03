// The attention family on the CPU backend: runners for attention, attention_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/attention/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/attention/kernels.h"

static int cpu_attention_dims(const stg_tensor *q, int64_t *dims, stg_err *err) {
    if (q->ndim != 4)
        return stg_errf(err, "%s must be (B, S, H, Dh), has %d dims", q->name, q->ndim);
    for (int i = 0; i < 4; i++) dims[i] = q->shape[i];
    return 0;
}

// q, k, v (B, S, H, Dh) -> o (B, S, H, Dh), lse (B, H, S)
static int run_attention(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    int64_t d[4];
    if (cpu_attention_dims(IN(g, op, 0), d, err)) return -1;
    return KCALL(f64, cpu_attention_fwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2),
                 DOUT(data, op, 0), DOUT(data, op, 1), d[0], d[1], d[2], d[3], op->a.attention.scale,
                 scratch, scratch_bytes, err);
}

static size_t scratch_attention(const stg_graph *g, const stg_op *op, int f64) {
    int64_t d[4];
    if (cpu_attention_dims(IN(g, op, 0), d, NULL)) return 0;
    return KCALL(f64, cpu_attention_fwd_scratch, d[0], d[1], d[2], d[3]);
}

// q, k, v, o, lse, do -> dq, dk, dv
static int run_attention_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    int64_t d[4];
    if (cpu_attention_dims(IN(g, op, 0), d, err)) return -1;
    return KCALL(f64, cpu_attention_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2),
                 DIN(data, op, 3), DIN(data, op, 4), DIN(data, op, 5), DOUT(data, op, 0), DOUT(data, op, 1),
                 DOUT(data, op, 2), d[0], d[1], d[2], d[3], op->a.attention.scale, scratch, scratch_bytes,
                 err);
}

static size_t scratch_attention_bwd(const stg_graph *g, const stg_op *op, int f64) {
    int64_t d[4];
    if (cpu_attention_dims(IN(g, op, 0), d, NULL)) return 0;
    return KCALL(f64, cpu_attention_bwd_scratch, d[0], d[1], d[2], d[3]);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_attention = {run_attention, scratch_attention, 0};
const stg_cpu_rec stg_cpu_attention_bwd = {run_attention_bwd, scratch_attention_bwd, 0};
