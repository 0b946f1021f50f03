// The attention family on the CPU backend: runners for attention, attention_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/attention/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/attention/kernels.h"

// dims: B, S, H (q's heads), Hkv (k's heads), Dh
static int cpu_attention_dims(const stg_tensor *q, const stg_tensor *k, int64_t *dims, stg_err *err) {
    if (q->ndim != 4 || k->ndim != 4)
        return stg_errf(err, "%s and %s must be (B, S, H, Dh)", q->name, k->name);
    for (int i = 0; i < 3; i++) dims[i] = q->shape[i];
    dims[3] = k->shape[2];
    dims[4] = q->shape[3];
    return 0;
}

// The optional docs input (i32 (B, S)) at index i, or NULL.
static const int32_t *cpu_attention_docs(const stg_graph *g, const stg_op *op, void *const *data, int i, stg_err *err,
                                         int *bad) {
    *bad = 0;
    if (op->n_in <= i) return NULL;
    if (cpu_need_i32(IN(g, op, i), err)) {
        *bad = 1;
        return NULL;
    }
    return DIN(data, op, i);
}

// q, k, v [, docs] -> o (B, S, H, Dh), lse (B, H, S)
static int run_attention(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    int64_t d[5] = {0};
    int bad;
    if (cpu_attention_dims(IN(g, op, 0), IN(g, op, 1), d, err)) return -1;
    const int32_t *docs = cpu_attention_docs(g, op, data, 3, err, &bad);
    if (bad) return -1;
    return KCALL(f64, cpu_attention_fwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), docs,
                 DOUT(data, op, 0), DOUT(data, op, 1), d[0], d[1], d[2], d[3], d[4], op->a.attention.scale,
                 scratch, scratch_bytes, err);
}

static size_t scratch_attention(const stg_graph *g, const stg_op *op, int f64) {
    int64_t d[5] = {0};
    if (cpu_attention_dims(IN(g, op, 0), IN(g, op, 1), d, NULL)) return 0;
    return KCALL(f64, cpu_attention_fwd_scratch, d[0], d[1], d[2], d[4]);
}

// q, k, v, o, lse, do [, docs] -> dq, dk, dv
static int run_attention_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    int64_t d[5] = {0};
    int bad;
    if (cpu_attention_dims(IN(g, op, 0), IN(g, op, 1), d, err)) return -1;
    const int32_t *docs = cpu_attention_docs(g, op, data, 6, err, &bad);
    if (bad) return -1;
    return KCALL(f64, cpu_attention_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), docs,
                 DIN(data, op, 3), DIN(data, op, 4), DIN(data, op, 5), DOUT(data, op, 0), DOUT(data, op, 1),
                 DOUT(data, op, 2), d[0], d[1], d[2], d[3], d[4], op->a.attention.scale, scratch, scratch_bytes,
                 err);
}

static size_t scratch_attention_bwd(const stg_graph *g, const stg_op *op, int f64) {
    int64_t d[5] = {0};
    if (cpu_attention_dims(IN(g, op, 0), IN(g, op, 1), d, NULL)) return 0;
    return KCALL(f64, cpu_attention_bwd_scratch, d[0], d[1], d[2], d[4]);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_attention = {run_attention, scratch_attention, 0};
const stg_cpu_rec stg_cpu_attention_bwd = {run_attention_bwd, scratch_attention_bwd, 0};
