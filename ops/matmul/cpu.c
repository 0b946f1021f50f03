// The matmul family on the CPU backend: runners for linear, matmul, matmul_group, reading the op's tensors and
// attributes and calling the float or double kernels (ops/matmul/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/matmul/kernels.h"
#include "ops/registry.h"

// The kernel arguments of a linear or matmul op.
typedef struct {
    int64_t batch, m, n, k;
    int ta, tb, b_batched;
} cpu_mm_dims;

// x (..., in), W (out, in) -> y (..., out) = x W^T
static int cpu_linear_dims(const stg_graph *g, const stg_op *op, cpu_mm_dims *d, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0), *W = IN(g, op, 1);
    if (cpu_need_ndim(W, 2, err)) return -1;
    if (W->shape[1] != stg_last(x))
        return stg_errf(err, "%s has %lld features, weight %s expects %lld", x->name,
                        (long long)stg_last(x), W->name, (long long)W->shape[1]);
    *d = (cpu_mm_dims){.batch = 1, .m = stg_rows(x), .n = W->shape[0], .k = W->shape[1], .tb = 1};
    return 0;
}

// A (..., a0, a1), B (..., b0, b1) or (b0, b1) -> C (..., m, n) = op(A) op(B); A and B are inputs
// 2p and 2p + 1 (p > 0: a pair of a matmul_group)
static int cpu_pair_dims(const stg_graph *g, const stg_op *op, int p, cpu_mm_dims *d, stg_err *err) {
    const stg_tensor *A = IN(g, op, 2 * p), *B = IN(g, op, 2 * p + 1);
    if (cpu_need_ndim(A, 2, err) || cpu_need_ndim(B, 2, err)) return -1;
    int ta = op->a.matmul.ta != 0, tb = op->a.matmul.tb != 0;
    int64_t a0 = A->shape[A->ndim - 2], a1 = A->shape[A->ndim - 1];
    int64_t b0 = B->shape[B->ndim - 2], b1 = B->shape[B->ndim - 1];
    int64_t m = ta ? a1 : a0, k = ta ? a0 : a1;
    int64_t kb = tb ? b1 : b0, n = tb ? b0 : b1;
    if (a0 <= 0 || a1 <= 0) return stg_errf(err, "%s has an empty matrix dim", A->name);
    int64_t batch = stg_numel(A) / (a0 * a1);
    int b_batched;
    if (B->ndim == A->ndim) {
        b_batched = 1;
        for (int i = 0; i < A->ndim - 2; i++)
            if (A->shape[i] != B->shape[i])
                return stg_errf(err, "batch dim %d of %s (%lld) and %s (%lld) differ", i,
                                A->name, (long long)A->shape[i], B->name, (long long)B->shape[i]);
    } else if (B->ndim == 2) {
        b_batched = 0;
    } else {
        return stg_errf(err, "%s has %d dims; it must have %d, or 2", B->name, B->ndim,
                        A->ndim);
    }
    if (k != kb)
        return stg_errf(err, "inner dims of %s (%lld) and %s (%lld) differ", A->name,
                        (long long)k, B->name, (long long)kb);
    *d = (cpu_mm_dims){.batch = batch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .b_batched = b_batched};
    return 0;
}

static int cpu_matmul_dims(const stg_graph *g, const stg_op *op, cpu_mm_dims *d, stg_err *err) {
    return cpu_pair_dims(g, op, 0, d, err);
}

// The product of pair p (inputs 2p, 2p + 1) into output p (added to it when acc).
static int cpu_mm_call_pair(const cpu_mm_dims *d, const stg_op *op, int p, void *const *data, void *scratch,
                            size_t scratch_bytes, int f64, int acc, stg_err *err) {
    return KCALL(f64, cpu_matmul, DIN(data, op, 2 * p), DIN(data, op, 2 * p + 1), DOUT(data, op, p), d->batch, d->m,
                 d->n, d->k, d->ta, d->tb, d->b_batched, acc, scratch, scratch_bytes, err);
}

static int cpu_mm_call(const cpu_mm_dims *d, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, int acc, stg_err *err) {
    return cpu_mm_call_pair(d, op, 0, data, scratch, scratch_bytes, f64, acc, err);
}

static size_t cpu_mm_scratch(const cpu_mm_dims *d, int f64) {
    return KCALL(f64, cpu_matmul_scratch, d->batch, d->m, d->n, d->k, d->ta, d->tb, d->b_batched);
}

// The optional addend (stg_op_def.addend_in), added to output 0 after the op has written it (never
// the addend's buffer: the planner gives an output at most the buffer of input inplace_in).
// With a bias (stg_linear_attrs), b is added to every row before the addend.
static int linear_into(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                       int f64, int acc, stg_err *err) {
    cpu_mm_dims d = {0};
    if (cpu_linear_dims(g, op, &d, err)) return -1;
    if (op->a.linear.bias && (op->n_in < 3 || cpu_need_numel(IN(g, op, 2), d.n, err))) return -1;
    if (cpu_mm_call(&d, op, data, scratch, scratch_bytes, f64, acc, err)) return -1;
    if (op->a.linear.bias) KCALL(f64, cpu_add_bias, DOUT(data, op, 0), DIN(data, op, 2), d.m, d.n);
    cpu_add_addend(g, op, data, f64);
    return 0;
}

// Gradient accumulation (op->accum): y += x W^T (an op with an addend never accumulates).
static int run_linear(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                      size_t scratch_bytes, int f64, stg_err *err) {
    return linear_into(g, op, data, scratch, scratch_bytes, f64, op->accum & 1u, err);
}

// x (..., n) -> y (n): the sum of x's rows
static int run_sum_rows(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                        size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_ndim(x, 1, err) || cpu_need_numel(OUT(g, op, 0), stg_last(x), err)) return -1;
    KCALL(f64, cpu_sum_rows, DIN(data, op, 0), DOUT(data, op, 0), stg_rows(x), stg_last(x));
    return 0;
}

static size_t scratch_linear(const stg_graph *g, const stg_op *op, int f64) {
    cpu_mm_dims d = {0};
    return cpu_linear_dims(g, op, &d, NULL) ? 0 : cpu_mm_scratch(&d, f64);
}

static int matmul_into(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                       int f64, int acc, stg_err *err) {
    cpu_mm_dims d = {0};
    if (cpu_matmul_dims(g, op, &d, err) || cpu_mm_call(&d, op, data, scratch, scratch_bytes, f64, acc, err)) return -1;
    cpu_add_addend(g, op, data, f64);
    return 0;
}

static int run_matmul(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                      size_t scratch_bytes, int f64, stg_err *err) {
    return matmul_into(g, op, data, scratch, scratch_bytes, f64, op->accum & 1u, err);
}

static size_t scratch_matmul(const stg_graph *g, const stg_op *op, int f64) {
    cpu_mm_dims d = {0};
    return cpu_matmul_dims(g, op, &d, NULL) ? 0 : cpu_mm_scratch(&d, f64);
}

// matmul_group: each pair's product, one after another (the pairs have equal shapes); added to
// the outputs marked in op->accum.
static int run_matmul_group(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                            size_t scratch_bytes, int f64, stg_err *err) {
    for (int p = 0; p < op->n_out; p++) {
        cpu_mm_dims d = {0};
        if (cpu_pair_dims(g, op, p, &d, err) ||
            cpu_mm_call_pair(&d, op, p, data, scratch, scratch_bytes, f64, (op->accum >> p) & 1u, err))
            return -1;
    }
    return 0;
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_linear = {run_linear, scratch_linear, 0};
const stg_cpu_rec stg_cpu_matmul = {run_matmul, scratch_matmul, 0};
const stg_cpu_rec stg_cpu_matmul_group = {run_matmul_group, scratch_matmul, 0};
const stg_cpu_rec stg_cpu_sum_rows = {run_sum_rows, NULL, 0};
