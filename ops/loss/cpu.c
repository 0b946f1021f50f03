// The loss family on the CPU backend: runners for cross_entropy, cross_entropy_bwd,
// linear_cross_entropy, linear_cross_entropy_bwd, reading the op's tensors and attributes and
// calling the float or double kernels (ops/loss/real.c), and one record per kind.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/rec.h"
#include "ops/elementwise/kernels.h" // cpu_scale: the loss gradient's factor
#include "ops/loss/kernels.h"
#include "ops/registry.h"

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

// The sizes of a linear_cross_entropy(_bwd) op: x (rows, d), w (V, d), its chunk (the rows of its
// last output, the chunk scratch).
typedef struct {
    int64_t rows, d, V, chunk;
} lce_dims;

static int lce_dims_of(const stg_graph *g, const stg_op *op, lce_dims *s, stg_err *err) {
    const stg_tensor *x = IN(g, op, 0), *w = IN(g, op, 1), *c = OUT(g, op, ops_lce_scratch_out(op->kind));
    if (cpu_need_i32(IN(g, op, 2), err) || cpu_need_ndim(x, 1, err) || cpu_need_ndim(w, 2, err)) return -1;
    *s = (lce_dims){stg_rows(x), stg_last(x), w->shape[0], ops_lce_chunk(stg_rows(x), w->shape[0], op->a.lce.chunk)};
    if (w->ndim != 2 || w->shape[1] != s->d)
        return stg_errf(err, "%s has %lld features, head weight %s must be [vocab, %lld]", x->name, (long long)s->d, w->name,
                        (long long)s->d);
    if (cpu_need_numel(IN(g, op, 2), s->rows, err) || cpu_need_numel(c, s->chunk * s->V, err)) return -1;
    return 0;
}

static size_t scratch_lce(const stg_graph *g, const stg_op *op, int f64) {
    lce_dims s;
    if (lce_dims_of(g, op, &s, NULL)) return 0;
    return f64 ? cpu_lce_scratch_f64(s.d, s.chunk) : cpu_lce_scratch_f32(s.d, s.chunk);
}

// x (..., d), w (V, d), targets (...) -> loss (), lse (rows), logits chunk (chunk, V)
static int run_lce(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                   stg_err *err) {
    lce_dims s;
    if (lce_dims_of(g, op, &s, err) || cpu_need_numel(OUT(g, op, 1), s.rows, err)) return -1;
    return KCALL(f64, cpu_lce_fwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DOUT(data, op, 0), DOUT(data, op, 1),
                 DOUT(data, op, 2), s.rows, s.d, s.V, s.chunk, scratch, scratch_bytes, err);
}

// x, w, targets, lse -> dx (..., d), dw (V, d), dlogits chunk (chunk, V)
static int run_lce_bwd(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                       stg_err *err) {
    lce_dims s;
    if (lce_dims_of(g, op, &s, err) || cpu_need_numel(IN(g, op, 3), s.rows, err) ||
        cpu_need_numel(OUT(g, op, 0), s.rows * s.d, err) || cpu_need_numel(OUT(g, op, 1), s.V * s.d, err))
        return -1;
    return KCALL(f64, cpu_lce_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), DOUT(data, op, 0),
                 DOUT(data, op, 1), DOUT(data, op, 2), s.rows, s.d, s.V, s.chunk, op->a.lce.grad_scale, scratch, scratch_bytes, err);
}

// The _dx form: x, w, targets, lse -> dx, dlogits chunk; the _dw form: -> dw, dlogits chunk.
static int run_lce_half(const stg_graph *g, const stg_op *op, void *const *data, void *scratch, size_t scratch_bytes, int f64,
                        stg_err *err) {
    lce_dims s;
    bool dw = op->kind == STG_OP_LINEAR_CROSS_ENTROPY_DW;
    if (lce_dims_of(g, op, &s, err) || cpu_need_numel(IN(g, op, 3), s.rows, err) ||
        cpu_need_numel(OUT(g, op, 0), dw ? s.V * s.d : s.rows * s.d, err))
        return -1;
    void *out = DOUT(data, op, 0);
    return KCALL(f64, cpu_lce_bwd, DIN(data, op, 0), DIN(data, op, 1), DIN(data, op, 2), DIN(data, op, 3), dw ? NULL : out,
                 dw ? out : NULL, DOUT(data, op, 1), s.rows, s.d, s.V, s.chunk, op->a.lce.grad_scale, scratch, scratch_bytes, err);
}

// ---- records ---------------------------------------------------------------------------------

const stg_cpu_rec stg_cpu_cross_entropy = {run_cross_entropy, NULL, 0};
const stg_cpu_rec stg_cpu_cross_entropy_bwd = {run_cross_entropy_bwd, NULL, 0};
const stg_cpu_rec stg_cpu_linear_cross_entropy = {run_lce, scratch_lce, 0};
const stg_cpu_rec stg_cpu_linear_cross_entropy_bwd = {run_lce_bwd, scratch_lce, 0};
const stg_cpu_rec stg_cpu_linear_cross_entropy_dx = {run_lce_half, scratch_lce, 0};
const stg_cpu_rec stg_cpu_linear_cross_entropy_dw = {run_lce_half, scratch_lce, 0};
