// The embedding family on the CPU backend: runners for embedding, embedding_bwd, reading the op's tensors and
// attributes and calling the float or double kernels (ops/embedding/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/registry.h"
#include "ops/embedding/kernels.h"

// tokens (...) i32, W (V, D) -> y (..., D)
static int run_embedding(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *tok = IN(g, op, 0), *W = IN(g, op, 1);
    if (cpu_need_i32(tok, err) || cpu_need_ndim(W, 2, err)) return -1;
    return KCALL(f64, cpu_embedding_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 stg_numel(tok), W->shape[0], W->shape[1], err);
}

// tokens (...), dy (..., D)[, addend (V, D)] -> dW (V, D) (+ the addend), or dW += that (gradient
// accumulation: op->accum). The addend is copied into dW first unless dW took its buffer.
static int run_embedding_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *tok = IN(g, op, 0), *dW = OUT(g, op, 0);
    if (cpu_need_i32(tok, err) || cpu_need_ndim(dW, 2, err)) return -1;
    int k = ops_addend_of(op);
    if (k > 0 && DIN(data, op, k) != DOUT(data, op, 0)) {
        if (cpu_need_numel(IN(g, op, k), stg_numel(dW), err)) return -1;
        memcpy(DOUT(data, op, 0), DIN(data, op, k), (size_t)stg_numel(dW) * (f64 ? sizeof(double) : sizeof(float)));
    }
    return KCALL(f64, cpu_embedding_bwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 stg_numel(tok), dW->shape[0], dW->shape[1], k > 0 || (op->accum & 1u), scratch, scratch_bytes, err);
}

static size_t scratch_embedding_bwd(const stg_graph *g, const stg_op *op, int f64) {
    const stg_tensor *tok = IN(g, op, 0), *dW = OUT(g, op, 0);
    if (dW->ndim < 2) return 0;
    return KCALL(f64, cpu_embedding_bwd_scratch, stg_numel(tok), dW->shape[0], dW->shape[1]);
}

// x (..., S, D), W (P, D) -> y (..., S, D)
static int run_pos_embedding(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0), *W = IN(g, op, 1);
    if (cpu_need_ndim(x, 2, err) || cpu_need_ndim(W, 2, err)) return -1;
    int64_t S = x->shape[x->ndim - 2], D = stg_last(x);
    if (W->shape[1] != D || W->shape[0] < S)
        return stg_errf(err, "position table %s does not fit %s", W->name, x->name);
    KCALL(f64, cpu_pos_embedding_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
          stg_numel(x) / (S * D), S, D);
    return 0;
}

// dy (..., S, D) -> dW (P, D)
static int run_pos_embedding_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                                 size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *dy = IN(g, op, 0), *dW = OUT(g, op, 0);
    if (cpu_need_ndim(dy, 2, err) || cpu_need_ndim(dW, 2, err)) return -1;
    int64_t S = dy->shape[dy->ndim - 2], D = stg_last(dy);
    if (dW->shape[1] != D || dW->shape[0] < S)
        return stg_errf(err, "position table gradient %s does not fit %s", dW->name, dy->name);
    KCALL(f64, cpu_pos_embedding_bwd, DIN(data, op, 0), DOUT(data, op, 0), stg_numel(dy) / (S * D), S,
          dW->shape[0], D);
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_embedding = {run_embedding, NULL, 0};
const stg_cpu_rec stg_cpu_embedding_bwd = {run_embedding_bwd, scratch_embedding_bwd, 0};
const stg_cpu_rec stg_cpu_pos_embedding = {run_pos_embedding, NULL, 0};
const stg_cpu_rec stg_cpu_pos_embedding_bwd = {run_pos_embedding_bwd, NULL, 0};
