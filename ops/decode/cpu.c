// The decode family on the CPU backend: runners for attention_cached, kv_write and sample, reading
// the op's tensors (the position from its i32 tensor) and calling the float or double kernels
// (ops/decode/real.c), and one record per kind.
#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/rec.h"
#include "ops/decode/kernels.h"

// q, k, v, kc, vc, pos -> o
static int run_attention_cached(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                                stg_err *err) {
    const stg_tensor *q = IN(g, op, 0), *k = IN(g, op, 1), *kc = IN(g, op, 3);
    if (q->ndim != 4 || k->ndim != 4 || kc->ndim != 4) return stg_errf(err, "%s, %s and %s must be 4-D", q->name, k->name, kc->name);
    if (cpu_need_i32(IN(g, op, 5), err)) return -1;
    int64_t pos = *(const int32_t *)DIN(data, op, 5);
    return KCALL(f64, cpu_attention_cached, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), DIN(data, op, 4), pos,
                 DOUT(data, op, 0), q->shape[0], kc->shape[2], q->shape[2], k->shape[2], q->shape[3], op->a.attention_cached.scale,
                 op->a.attention_cached.rope_theta, scratch, scratch_bytes, err);
}

static size_t scratch_attention_cached(const stg_graph *g, const stg_op *op, int f64) {
    const stg_tensor *q = IN(g, op, 0), *kc = IN(g, op, 3);
    if (q->ndim != 4 || kc->ndim != 4) return 0;
    return KCALL(f64, cpu_attention_cached_scratch, kc->shape[2], q->shape[3]);
}

// k, v, kc, vc, pos
static int run_kv_write(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                        stg_err *err) {
    const stg_tensor *k = IN(g, op, 0), *kc = IN(g, op, 2);
    if (k->ndim != 4 || kc->ndim != 4) return stg_errf(err, "%s and %s must be 4-D", k->name, kc->name);
    if (cpu_need_i32(IN(g, op, 4), err)) return -1;
    int64_t pos = *(const int32_t *)DIN(data, op, 4);
    return KCALL(f64, cpu_kv_write, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), pos, k->shape[0], k->shape[1],
                 kc->shape[2], k->shape[2], k->shape[3], err);
}

// logits, token, pos, ids
static int run_sample(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                      stg_err *err) {
    const stg_tensor *lg = IN(g, op, 0), *ids = IN(g, op, 3);
    for (int i = 1; i < 4; i++)
        if (cpu_need_i32(IN(g, op, i), err)) return -1;
    if (lg->ndim < 2 || ids->ndim != 2) return stg_errf(err, "%s must be (B, [S,] V) and %s (B, C)", lg->name, ids->name);
    int64_t B = lg->shape[0], V = lg->shape[lg->ndim - 1];
    return KCALL(f64, cpu_sample, DIN(data, op, 0), B, stg_numel(lg) / (B * V), V, DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3),
                 ids->shape[1], &op->a.sample, scratch, scratch_bytes, err);
}

static size_t scratch_sample(const stg_graph *g, const stg_op *op, int f64) {
    const stg_tensor *lg = IN(g, op, 0);
    return KCALL(f64, cpu_sample_scratch, lg->shape[lg->ndim - 1]);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_attention_cached = {run_attention_cached, scratch_attention_cached, 0};
const stg_cpu_rec stg_cpu_kv_write = {run_kv_write, NULL, 0};
const stg_cpu_rec stg_cpu_sample = {run_sample, scratch_sample, 0};
