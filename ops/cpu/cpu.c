// The CPU backend's op entry point: reads an op's tensors and typed attributes from the graph,
// picks the float or double kernels (ops/cpu/kernels.h) by the dtype of its float tensors, and
// calls them. One runner per op kind, in a table generated from ops/base/oplist.h: an op kind without
// a runner here does not compile.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "ops/cpu/kernels.h"
#include "ops/registry.h"

// A runner gets the op's tensors (data), the float type (f64) and the caller's scratch, which
// holds at least the op's cpu_op_scratch_bytes (checked by the kernels that use it).
typedef int (*cpu_run_fn)(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                          size_t scratch_bytes, int f64, stg_err *err);

// The scratch bytes an op's kernel needs, from its shapes (0 when they are invalid: running the
// op then fails on them).
typedef size_t (*cpu_scratch_fn)(const stg_graph *g, const stg_op *op, int f64);

// Calls the f64 or the f32 variant of kernel `name` with the same arguments (tensor pointers
// are void * and convert to either).
#define KCALL(f64, name, ...) ((f64) ? name##_f64(__VA_ARGS__) : name##_f32(__VA_ARGS__))

static const char *const cpu_op_names[STG_OP_COUNT] = {
#define STG_X_NAME(e, n, f, a) [STG_OP_##e] = #n,
    STG_OP_LIST(STG_X_NAME)
#undef STG_X_NAME
};

static const char *cpu_op_name(stg_op_kind k) {
    return ((int)k >= 0 && k < STG_OP_COUNT) ? cpu_op_names[k] : "?";
}

static const char *cpu_dtype_name(stg_dtype d) {
    switch (d) {
    case STG_F32: return "f32";
    case STG_BF16: return "bf16";
    case STG_F64: return "f64";
    case STG_I32: return "i32";
    case STG_DTYPE_COUNT: break;
    }
    return "?";
}

static int64_t cpu_numel(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

// Size of the last dim (1 for a scalar).
static int64_t cpu_last(const stg_tensor *t) { return t->ndim > 0 ? t->shape[t->ndim - 1] : 1; }

// Product of all dims but the last.
static int64_t cpu_rows(const stg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++) n *= t->shape[i];
    return n;
}

static const stg_tensor *IN(const stg_graph *g, const stg_op *op, int i) { return &g->t[op->in[i]]; }
static const stg_tensor *OUT(const stg_graph *g, const stg_op *op, int i) { return &g->t[op->out[i]]; }
static void *DIN(void *const *data, const stg_op *op, int i) { return data[op->in[i]]; }
static void *DOUT(void *const *data, const stg_op *op, int i) { return data[op->out[i]]; }

// The float type of the op's tensors: 0 for f32, 1 for f64, -1 with a message for bf16 or a
// mix. Integer tensors, and inputs whose bit is set in skip_in (scalars read by dtype), are not
// looked at.
static int cpu_real_of(const stg_graph *g, const stg_op *op, uint32_t skip_in, stg_err *err) {
    int first = -1;
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        int id;
        if (i < op->n_in) {
            if (i < 32 && (skip_in >> i & 1u)) continue;
            id = op->in[i];
        } else {
            id = op->out[i - op->n_in];
        }
        const stg_tensor *t = &g->t[id];
        if (t->dtype == STG_I32) continue;
        if (t->dtype == STG_BF16)
            return stg_errf(err, "cpu backend: op %s (tensor %s) is bf16; the CPU backend runs fp32 and fp64",
                            cpu_op_name(op->kind), t->name);
        if (t->dtype != STG_F32 && t->dtype != STG_F64)
            return stg_errf(err, "cpu backend: op %s (tensor %s) has dtype %s", cpu_op_name(op->kind),
                            t->name, cpu_dtype_name(t->dtype));
        if (first < 0) {
            first = id;
        } else if (g->t[first].dtype != t->dtype) {
            return stg_errf(err, "cpu backend: op %s mixes %s (tensor %s) and %s (tensor %s)",
                            cpu_op_name(op->kind), cpu_dtype_name(g->t[first].dtype), g->t[first].name,
                            cpu_dtype_name(t->dtype), t->name);
        }
    }
    if (first < 0) return stg_errf(err, "cpu backend: op %s has no float tensor", cpu_op_name(op->kind));
    return g->t[first].dtype == STG_F64 ? 1 : 0;
}

static int cpu_need_i32(const stg_tensor *t, stg_err *err) {
    if (t->dtype == STG_I32) return 0;
    return stg_errf(err, "tensor %s must be i32, not %s", t->name, cpu_dtype_name(t->dtype));
}

// Elementwise ops: every input and output must have n elements.
static int cpu_same_numel(const stg_graph *g, const stg_op *op, int64_t n, stg_err *err) {
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        const stg_tensor *t = i < op->n_in ? IN(g, op, i) : OUT(g, op, i - op->n_in);
        if (cpu_numel(t) != n)
            return stg_errf(err, "tensor %s has %lld elements, expected %lld", t->name,
                            (long long)cpu_numel(t), (long long)n);
    }
    return 0;
}

static int cpu_need_numel(const stg_tensor *t, int64_t n, stg_err *err) {
    if (cpu_numel(t) == n) return 0;
    return stg_errf(err, "tensor %s has %lld elements, expected %lld", t->name, (long long)cpu_numel(t),
                    (long long)n);
}

static int cpu_need_ndim(const stg_tensor *t, int min_ndim, stg_err *err) {
    if (t->ndim >= min_ndim) return 0;
    return stg_errf(err, "tensor %s has %d dims, needs at least %d", t->name, t->ndim, min_ndim);
}

static double cpu_read_scalar(const stg_tensor *t, const void *p, int64_t i) {
    switch (t->dtype) {
    case STG_F32: return (double)((const float *)p)[i];
    case STG_F64: return ((const double *)p)[i];
    case STG_I32: return (double)((const int32_t *)p)[i];
    case STG_BF16:
    case STG_DTYPE_COUNT: break;
    }
    return NAN;
}

// ---- runners, one per op kind -----------------------------------------------------------------

// tokens (...) i32, W (V, D) -> y (..., D)
static int run_embedding(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *tok = IN(g, op, 0), *W = IN(g, op, 1);
    if (cpu_need_i32(tok, err) || cpu_need_ndim(W, 2, err)) return -1;
    return KCALL(f64, cpu_embedding_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 cpu_numel(tok), W->shape[0], W->shape[1], err);
}

// tokens (...), dy (..., D) -> dW (V, D)
static int run_embedding_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *tok = IN(g, op, 0), *dW = OUT(g, op, 0);
    if (cpu_need_i32(tok, err) || cpu_need_ndim(dW, 2, err)) return -1;
    return KCALL(f64, cpu_embedding_bwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 cpu_numel(tok), dW->shape[0], dW->shape[1], scratch, scratch_bytes, err);
}

static size_t scratch_embedding_bwd(const stg_graph *g, const stg_op *op, int f64) {
    const stg_tensor *tok = IN(g, op, 0), *dW = OUT(g, op, 0);
    if (dW->ndim < 2) return 0;
    return KCALL(f64, cpu_embedding_bwd_scratch, cpu_numel(tok), dW->shape[0], dW->shape[1]);
}

// The kernel arguments of a linear or matmul op.
typedef struct {
    int64_t batch, m, n, k;
    int ta, tb, b_batched;
} cpu_mm_dims;

// x (..., in), W (out, in) -> y (..., out) = x W^T
static int cpu_linear_dims(const stg_graph *g, const stg_op *op, cpu_mm_dims *d, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0), *W = IN(g, op, 1);
    if (cpu_need_ndim(W, 2, err)) return -1;
    if (W->shape[1] != cpu_last(x))
        return stg_errf(err, "%s has %lld features, weight %s expects %lld", x->name,
                        (long long)cpu_last(x), W->name, (long long)W->shape[1]);
    *d = (cpu_mm_dims){.batch = 1, .m = cpu_rows(x), .n = W->shape[0], .k = W->shape[1], .tb = 1};
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
    int64_t batch = cpu_numel(A) / (a0 * a1);
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

// The product of pair p (inputs 2p, 2p + 1) into output p.
static int cpu_mm_call_pair(const cpu_mm_dims *d, const stg_op *op, int p, void *const *data, void *scratch,
                            size_t scratch_bytes, int f64, stg_err *err) {
    return KCALL(f64, cpu_matmul, DIN(data, op, 2 * p), DIN(data, op, 2 * p + 1), DOUT(data, op, p), d->batch, d->m,
                 d->n, d->k, d->ta, d->tb, d->b_batched, scratch, scratch_bytes, err);
}

static int cpu_mm_call(const cpu_mm_dims *d, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    return cpu_mm_call_pair(d, op, 0, data, scratch, scratch_bytes, f64, err);
}

static size_t cpu_mm_scratch(const cpu_mm_dims *d, int f64) {
    return KCALL(f64, cpu_matmul_scratch, d->batch, d->m, d->n, d->k, d->ta, d->tb, d->b_batched);
}

// The optional addend (stg_op_def.addend_in), added to output 0 after the op has written it (never
// the addend's buffer: the planner gives an output at most the buffer of input inplace_in).
static void add_addend(const stg_graph *g, const stg_op *op, void *const *data, int f64) {
    int k = ops_def(op->kind)->addend_in;
    if (k > 0 && op->n_in == k + 1)
        KCALL(f64, cpu_add, DOUT(data, op, 0), DIN(data, op, k), DOUT(data, op, 0), cpu_numel(OUT(g, op, 0)));
}

static int run_linear(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                      size_t scratch_bytes, int f64, stg_err *err) {
    cpu_mm_dims d = {0};
    if (cpu_linear_dims(g, op, &d, err) || cpu_mm_call(&d, op, data, scratch, scratch_bytes, f64, err)) return -1;
    add_addend(g, op, data, f64);
    return 0;
}

static size_t scratch_linear(const stg_graph *g, const stg_op *op, int f64) {
    cpu_mm_dims d = {0};
    return cpu_linear_dims(g, op, &d, NULL) ? 0 : cpu_mm_scratch(&d, f64);
}

static int run_matmul(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                      size_t scratch_bytes, int f64, stg_err *err) {
    cpu_mm_dims d = {0};
    if (cpu_matmul_dims(g, op, &d, err) || cpu_mm_call(&d, op, data, scratch, scratch_bytes, f64, err)) return -1;
    add_addend(g, op, data, f64);
    return 0;
}

static size_t scratch_matmul(const stg_graph *g, const stg_op *op, int f64) {
    cpu_mm_dims d = {0};
    return cpu_matmul_dims(g, op, &d, NULL) ? 0 : cpu_mm_scratch(&d, f64);
}

// matmul_group: each pair's product, one after another (the pairs have equal shapes).
static int run_matmul_group(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                            size_t scratch_bytes, int f64, stg_err *err) {
    for (int p = 0; p < op->n_out; p++) {
        cpu_mm_dims d = {0};
        if (cpu_pair_dims(g, op, p, &d, err) || cpu_mm_call_pair(&d, op, p, data, scratch, scratch_bytes, f64, err))
            return -1;
    }
    return 0;
}

// x (..., D), w (D) -> y (..., D), rstd (rows)
static int run_rmsnorm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), cpu_last(x), err) || cpu_need_numel(OUT(g, op, 0), cpu_numel(x), err))
        return -1;
    KCALL(f64, cpu_rmsnorm_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), DOUT(data, op, 1),
          cpu_rows(x), cpu_last(x), op->a.norm.eps);
    return 0;
}

// x, w, rstd, dy -> dx (..., D), dw (D)
static int run_rmsnorm_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), cpu_last(x), err) || cpu_need_numel(IN(g, op, 3), cpu_numel(x), err))
        return -1;
    KCALL(f64, cpu_rmsnorm_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3),
          DOUT(data, op, 0), DOUT(data, op, 1), cpu_rows(x), cpu_last(x));
    add_addend(g, op, data, f64);
    return 0;
}

// x (..., D), w (D), b (D) -> y (..., D), stats (rows, 2)
static int run_layernorm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), cpu_last(x), err) || cpu_need_numel(IN(g, op, 2), cpu_last(x), err) ||
        cpu_need_numel(OUT(g, op, 1), 2 * cpu_rows(x), err))
        return -1;
    KCALL(f64, cpu_layernorm_fwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0),
          DOUT(data, op, 1), cpu_rows(x), cpu_last(x), op->a.norm.eps);
    return 0;
}

// x, w, stats, dy -> dx, dw, db
static int run_layernorm_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_numel(IN(g, op, 1), cpu_last(x), err) || cpu_need_numel(IN(g, op, 2), 2 * cpu_rows(x), err))
        return -1;
    KCALL(f64, cpu_layernorm_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3),
          DOUT(data, op, 0), DOUT(data, op, 1), DOUT(data, op, 2), cpu_rows(x), cpu_last(x));
    add_addend(g, op, data, f64);
    return 0;
}

// x (..., S, H, Dh) -> y, same shape
static int run_rope(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                    size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_ndim(x, 3, err)) return -1;
    int nd = x->ndim;
    int64_t S = x->shape[nd - 3], H = x->shape[nd - 2], Dh = x->shape[nd - 1];
    if (Dh % 2 != 0)
        return stg_errf(err, "%s has an odd head dim %lld", x->name, (long long)Dh);
    KCALL(f64, cpu_rope, DIN(data, op, 0), DOUT(data, op, 0), cpu_numel(x) / (S * H * Dh), S, H, Dh,
          op->a.rope.theta, op->a.rope.inverse);
    return 0;
}

// x (..., Sq, Sk) -> y
static int run_causal_mask(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_ndim(x, 2, err)) return -1;
    int64_t Sq = x->shape[x->ndim - 2], Sk = x->shape[x->ndim - 1];
    KCALL(f64, cpu_causal_mask, DIN(data, op, 0), DOUT(data, op, 0), cpu_numel(x) / (Sq * Sk), Sq, Sk,
          op->a.mask.fill);
    return 0;
}

// x (..., N) -> y
static int run_softmax(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_same_numel(g, op, cpu_numel(x), err)) return -1;
    KCALL(f64, cpu_softmax_fwd, DIN(data, op, 0), DOUT(data, op, 0), cpu_rows(x), cpu_last(x));
    return 0;
}

// y, dy (..., N) -> dx
static int run_softmax_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *y = IN(g, op, 0);
    if (cpu_same_numel(g, op, cpu_numel(y), err)) return -1;
    KCALL(f64, cpu_softmax_bwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), cpu_rows(y),
          cpu_last(y));
    return 0;
}

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

// The elementwise ops: all inputs and outputs have n = numel(input 0) elements.
#define CPU_ELEMENTWISE_1_1(runner, kernel)                                                           \
    static int runner(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,         \
                      size_t scratch_bytes, int f64, stg_err *err) {                                  \
        int64_t n = cpu_numel(IN(g, op, 0));                                                          \
        if (cpu_same_numel(g, op, n, err)) return -1;                                                 \
        KCALL(f64, kernel, DIN(data, op, 0), DOUT(data, op, 0), n);                                   \
        return 0;                                                                                     \
    }
#define CPU_ELEMENTWISE_2_1(runner, kernel)                                                           \
    static int runner(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,         \
                      size_t scratch_bytes, int f64, stg_err *err) {                                  \
        int64_t n = cpu_numel(IN(g, op, 0));                                                          \
        if (cpu_same_numel(g, op, n, err)) return -1;                                                 \
        KCALL(f64, kernel, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0), n);                 \
        return 0;                                                                                     \
    }

CPU_ELEMENTWISE_1_1(run_silu, cpu_silu_fwd)       // x -> y
CPU_ELEMENTWISE_2_1(run_silu_bwd, cpu_silu_bwd)   // x, dy -> dx
CPU_ELEMENTWISE_1_1(run_relu, cpu_relu_fwd)       // x -> y
CPU_ELEMENTWISE_2_1(run_relu_bwd, cpu_relu_bwd)   // y, dy -> dx
CPU_ELEMENTWISE_2_1(run_swiglu, cpu_swiglu_fwd)   // a, b -> y
CPU_ELEMENTWISE_2_1(run_mul, cpu_mul)             // a, b -> y
CPU_ELEMENTWISE_2_1(run_add, cpu_add)             // a, b -> y

// a, b, dy -> da, db
static int run_swiglu_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                          size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = cpu_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    KCALL(f64, cpu_swiglu_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0),
          DOUT(data, op, 1), n);
    return 0;
}

// x -> y = factor x
static int run_scale(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                     size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = cpu_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    KCALL(f64, cpu_scale, DIN(data, op, 0), DOUT(data, op, 0), n, op->a.scale.factor);
    return 0;
}

// x -> y, same elements (a view: nothing to do when the runtime aliased them)
static int run_reshape(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                       size_t scratch_bytes, int f64, stg_err *err) {
    int64_t n = cpu_numel(IN(g, op, 0));
    if (cpu_same_numel(g, op, n, err)) return -1;
    KCALL(f64, cpu_copy, DIN(data, op, 0), DOUT(data, op, 0), n);
    return 0;
}

// x -> y with dims d0 and d1 swapped (negative dims count from the end)
static int run_transpose(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    int d0 = op->a.transpose.d0, d1 = op->a.transpose.d1;
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim)
        return stg_errf(err, "dims %d and %d out of range for %s (%d dims)",
                        op->a.transpose.d0, op->a.transpose.d1, x->name, x->ndim);
    if (cpu_same_numel(g, op, cpu_numel(x), err)) return -1;
    KCALL(f64, cpu_transpose, DIN(data, op, 0), DOUT(data, op, 0), x->ndim, x->shape, d0, d1);
    return 0;
}

// logits (..., V), targets (...) i32 -> loss (), lse (rows)
static int run_cross_entropy(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                             size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    return KCALL(f64, cpu_cross_entropy_fwd, DIN(data, op, 0), DIN(data, op, 1), DOUT(data, op, 0),
                 DOUT(data, op, 1), cpu_rows(x), cpu_last(x), err);
}

// logits, targets, lse -> dlogits (..., V)
static int run_cross_entropy_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                                 size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0);
    if (cpu_need_i32(IN(g, op, 1), err)) return -1;
    return KCALL(f64, cpu_cross_entropy_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2),
                 DOUT(data, op, 0), cpu_rows(x), cpu_last(x), err);
}

// g1, ..., gn -> norm () = sqrt(sum of all squares)
static int run_global_norm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    if (op->n_out < 1) return stg_errf(err, "global_norm has no output");
    if (cpu_need_numel(OUT(g, op, 0), 1, err)) return -1;
    double ss = 0.0;
    for (int i = 0; i < op->n_in; i++)
        ss += KCALL(f64, cpu_sumsq, DIN(data, op, i), cpu_numel(IN(g, op, i)));
    if (f64)
        *(double *)DOUT(data, op, 0) = sqrt(ss);
    else
        *(float *)DOUT(data, op, 0) = (float)sqrt(ss);
    return 0;
}

// Writes element i of a float tensor by its dtype.
static void cpu_write_scalar(const stg_tensor *t, void *p, int64_t i, double v) {
    if (t->dtype == STG_F64)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

// param, grad, m, v, norm (), sched (2) = [step, lr] [, slots (k) when attribute slot > 0]: param,
// m, v updated in place; with a slot, slots[slot - 1] = the sum of squares of grad (before the update).
static int run_adamw(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                     size_t scratch_bytes, int f64, stg_err *err) {
    int slot = op->a.adamw.slot;
    if (op->n_in != 6 + (slot > 0))
        return stg_errf(err, "%s has %d inputs; the form with master weights (bf16 "
                        "training) is CUDA-only, the CPU backend takes param, grad, m, v, norm, sched%s",
                        IN(g, op, 0)->name, op->n_in, slot > 0 ? ", slots" : "");
    int64_t n = cpu_numel(IN(g, op, 0));
    for (int i = 1; i < 4; i++)
        if (cpu_numel(IN(g, op, i)) != n)
            return stg_errf(err, "%s has %lld elements, its parameter %s has %lld",
                            IN(g, op, i)->name, (long long)cpu_numel(IN(g, op, i)), IN(g, op, 0)->name,
                            (long long)n);
    const stg_tensor *tn = IN(g, op, 4), *ts = IN(g, op, 5);
    if (cpu_numel(ts) < 2)
        return stg_errf(err, "schedule state %s must hold [step, lr]", ts->name);
    double norm = cpu_read_scalar(tn, DIN(data, op, 4), 0);
    double step = cpu_read_scalar(ts, DIN(data, op, 5), 0);
    double lr = cpu_read_scalar(ts, DIN(data, op, 5), 1);
    if (!(step >= 1.0))
        return stg_errf(err, "step %g in %s must be >= 1", step, ts->name);
    if (slot > 0) {
        const stg_tensor *sl = IN(g, op, 6);
        if (sl->dtype != STG_F32 && sl->dtype != STG_F64) return stg_errf(err, "slots %s must be f32 or f64", sl->name);
        if (slot > cpu_numel(sl)) return stg_errf(err, "slot %d is past the %lld slots of %s", slot, (long long)cpu_numel(sl), sl->name);
        cpu_write_scalar(sl, DIN(data, op, 6), slot - 1, KCALL(f64, cpu_sumsq, DIN(data, op, 1), n));
    }
    KCALL(f64, cpu_adamw, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), n, norm,
          step, lr, &op->a.adamw);
    return 0;
}

// sched (2) = [steps done, lr]: steps done += 1, lr = the schedule at the new step - 1
static int run_lr_schedule(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                           size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *ts = IN(g, op, 0);
    if (cpu_numel(ts) != 2) return stg_errf(err, "schedule state %s must hold [steps done, lr]", ts->name);
    double done = cpu_read_scalar(ts, DIN(data, op, 0), 0) + 1.0;
    double lr = ops_lr_at(&op->a.lr, (int64_t)done - 1);
    if (ts->dtype == STG_F64) {
        ((double *)DIN(data, op, 0))[0] = done;
        ((double *)DIN(data, op, 0))[1] = lr;
    } else {
        ((float *)DIN(data, op, 0))[0] = (float)done;
        ((float *)DIN(data, op, 0))[1] = (float)lr;
    }
    return 0;
}

// slots (k), norm (): norm = sqrt(slots[0] + ... + slots[k-1]) summed in order, in place
static int run_slot_norm(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                         size_t scratch_bytes, int f64, stg_err *err) {
    const stg_tensor *sl = IN(g, op, 0), *tn = IN(g, op, 1);
    if (cpu_need_numel(tn, 1, err)) return -1;
    if (tn->dtype != STG_F32 && tn->dtype != STG_F64) return stg_errf(err, "norm %s must be f32 or f64", tn->name);
    double ss = 0.0;
    for (int64_t i = 0; i < cpu_numel(sl); i++) ss += cpu_read_scalar(sl, DIN(data, op, 0), i);
    cpu_write_scalar(tn, DIN(data, op, 1), 0, sqrt(ss));
    return 0;
}

// Data-parallel all-reduce: the kernel table has no way to reach other processes; the CPU backend
// (runtime/backend_cpu.c) runs this op with its communicator before it would get here.
static int run_allreduce(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                         int f64, stg_err *err) {
    return stg_errf(err, "allreduce needs a communicator: run it through a backend made for data parallelism");
}

static int run_broadcast(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes,
                         int f64, stg_err *err) {
    return run_allreduce(g, op, data, scratch, scratch_bytes, f64, err);
}

// ---- the table and the entry points -----------------------------------------------------------

static const cpu_run_fn cpu_runners[STG_OP_COUNT] = {
#define STG_X_RUNNER(e, n, f, a) [STG_OP_##e] = run_##n,
    STG_OP_LIST(STG_X_RUNNER)
#undef STG_X_RUNNER
};

// The op kinds whose kernels need scratch; every other kind needs none.
static const cpu_scratch_fn cpu_scratchers[STG_OP_COUNT] = {
    [STG_OP_EMBEDDING_BWD] = scratch_embedding_bwd,
    [STG_OP_LINEAR] = scratch_linear,
    [STG_OP_MATMUL] = scratch_matmul,
    [STG_OP_MATMUL_GROUP] = scratch_matmul, // pair 0's: every pair has its shapes
    [STG_OP_ATTENTION] = scratch_attention,
    [STG_OP_ATTENTION_BWD] = scratch_attention_bwd,
};

// Inputs whose float type is not checked against the rest: adamw's norm and schedule scalars
// are read by their own dtype.
static const uint32_t cpu_skip_in[STG_OP_COUNT] = {
    [STG_OP_ADAMW] = (1u << 4) | (1u << 5) | (1u << 6),
};

int cpu_op_supported(stg_op_kind k) { return (int)k >= 0 && k < STG_OP_COUNT && cpu_runners[k] != NULL; }

size_t cpu_op_scratch_bytes(const stg_graph *g, int op) {
    if (!g || op < 0 || op >= g->nops) return 0;
    const stg_op *o = &g->ops[op];
    if (!cpu_op_supported(o->kind) || !cpu_scratchers[o->kind]) return 0;
    int f64 = cpu_real_of(g, o, cpu_skip_in[o->kind], NULL);
    if (f64 < 0) return 0;
    return cpu_scratchers[o->kind](g, o, f64);
}

int cpu_op_run(const stg_graph *g, int op, void *const *data, void *scratch, size_t scratch_bytes,
               stg_err *err) {
    if (!g || op < 0 || op >= g->nops) return stg_errf(err, "cpu backend: no op %d", op);
    const stg_op *o = &g->ops[op];
    if (!cpu_op_supported(o->kind)) return stg_errf(err, "cpu backend: op kind %d has no kernel", (int)o->kind);
    for (int i = 0; i < o->n_in + o->n_out; i++) {
        int id = i < o->n_in ? o->in[i] : o->out[i - o->n_in];
        if (id < 0 || id >= g->nt || !data[id])
            return stg_errf(err, "cpu backend: op %s: tensor %d has no memory", cpu_op_name(o->kind), id);
    }
    int f64 = cpu_real_of(g, o, cpu_skip_in[o->kind], err);
    if (f64 < 0) return -1;
    if (cpu_runners[o->kind](g, o, data, scratch, scratch_bytes, f64, err)) {
        const char *what = o->n_out > 0 ? g->t[o->out[0]].name : g->t[o->in[0]].name;
        return stg_err_prefix(err, "cpu backend: op %s (%s)", cpu_op_name(o->kind), what);
    }
    return 0;
}
