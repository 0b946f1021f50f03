// The loss family's rules (cross_entropy, cross_entropy_bwd, linear_cross_entropy,
// linear_cross_entropy_bwd): shape rules, gradient rules, FLOPs and each op's row (ops/registry.h),
// read by the registry through stg_rule_<name>.
//
// linear_cross_entropy(x, w, targets) is cross_entropy(linear(x, w), targets) with the LM head
// fused in: the (rows, V) logits are never kept. Both ops walk the rows in chunks of
// ops_lce_chunk rows; each chunk's logits go to a (chunk, V) scratch that is the op's last output
// (a temporary the planner lays out like any other, so the memory report names it and counts it;
// nothing reads it). The forward keeps one log-sum-exp per row; the backward recomputes the
// logits piece by piece in a scratch of the same chunk x V elements, turns them into dlogits =
// (softmax - onehot) / rows in place, and writes dx = dlogits w and dw = dlogitsᵀ x. How the
// backward cuts the logits is the backend's: the CPU walks row chunks (dx rows written, dw added
// chunk after chunk); CUDA walks blocks of vocabulary columns over all rows (dw rows written once,
// dx added block after block: in fp32, so a bf16 dx has an fp32 accumulator in the scratch too,
// ops_lce_bwd_scratch), since adding into the whole (V, d) fp32 dw once per row chunk moved more
// bytes than the products themselves at a 128k vocabulary.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int check_targets(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *t = OPS_IN(g, id, 1);
    if (t->dtype != STG_I32) return ops_bad(g, id, err, "targets '%s' must be i32", t->name, NULL);
    bool ok = t->ndim == x->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) {
        char a[128], b[128], what[400];
        snprintf(what, sizeof what, "targets '%s' %s must have the shape of logits '%s' %s without the last dim", t->name,
                 ops_sh(t, a), x->name, ops_sh(x, b));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

// Outputs 0 and 1 of a loss over x's rows: the loss (a scalar) and each row's log-sum-exp.
static void set_loss_lse(stg_graph *g, int id) {
    int nd;
    int64_t s[STG_MAX_DIMS];
    ops_set_shape(OPS_OUT(g, id, 0), 0, NULL, g->grad_dtype);
    ops_rows_shape(OPS_IN(g, id, 0), &nd, s);
    ops_set_shape(OPS_OUT(g, id, 1), nd, s, g->grad_dtype);
}

static int infer_cross_entropy(stg_graph *g, int id, stg_err *err) {
    if (check_targets(g, id, err)) return -1;
    set_loss_lse(g, id);
    return 0;
}

static int infer_cross_entropy_bwd(stg_graph *g, int id, stg_err *err) {
    if (check_targets(g, id, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (stg_numel(OPS_IN(g, id, 2)) != stg_rows(x)) return ops_bad(g, id, err, "log-sum-exp '%s' must have one value per row%s", OPS_IN(g, id, 2)->name, NULL);
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    return 0;
}

static int grad_cross_entropy(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    if (dout[0] != STG_GRAD_SEED)
        return stg_errf_at(err, f.loc, "cross_entropy: its loss must be the model's loss itself (scaling or summing losses is not supported)");
    int in[3] = {f.in[0], f.in[1], f.out[1]};
    stg_attrs a = ops_no_attrs();
    a.scale.factor = ops_loss_grad(g); // the mean over micro-batches when the step accumulates
    return (din[0] = ops_emit1(e, g, id, STG_OP_CROSS_ENTROPY_BWD, in, 3, &a, f.in[0], err)) < 0 ? -1 : 0;
}

// ---- rows ------------------------------------------------------------------------------------

// The sweep's model for cross_entropy (tests/test_ops.c).
static const char sample_cross_entropy[] =
    "inputs: {t: [4, i32]}\n"
    "graph:\n"
    "  - param x [4, 6] init=embedding\n"
    "  - loss = cross_entropy(x, t)\n";

const stg_op_def stg_rule_cross_entropy = {"cross_entropy", 2, 2, 2, NULL, 0, infer_cross_entropy, grad_cross_entropy, ops_flops_softmax,
                              .saves_in = OPS_BIT(0) | OPS_BIT(1), .saves_out = OPS_BIT(1), .no_grad_in = OPS_BIT(1), .inplace_in = -1,
    .sample = sample_cross_entropy, .loss = true,
    .doc = "logits (…, V), targets (…) i32 → mean loss (scalar), lse (rows)"};

const stg_op_def stg_rule_cross_entropy_bwd = {"cross_entropy_bwd", 3, 3, 1, NULL, 0, infer_cross_entropy_bwd, NULL, ops_flops_softmax,
                                  .inplace_in = 0};

// ---- linear_cross_entropy --------------------------------------------------------------------

int64_t ops_lce_chunk(int64_t rows, int64_t V, int64_t chunk) {
    if (rows <= 0) return 0;
    int64_t c = chunk;
    if (c <= 0) {
        c = V > 0 ? OPS_LCE_CHUNK_ELEMS / V / 64 * 64 : rows;
        if (c < 64) c = 64;
    }
    return c < rows ? c : rows;
}

int64_t ops_lce_bwd_scratch(int64_t rows, int64_t d, int64_t V, int64_t chunk, bool dx_acc) {
    int64_t cv = ops_lce_chunk(rows, V, chunk) * V;
    return dx_acc ? OPS_LCE_ACC_AT(cv) + 2 * rows * d : cv;
}

// x (..., d) float, w (V, d) of x's dtype, targets (...) i32 with x's leading shape, chunk >= 0.
static int check_lce(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_ndim(g, id, 1, 2, 2, err)) return -1;
    if (ops_need_float(g, id, 0, err) || ops_need_float(g, id, 1, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1), *t = OPS_IN(g, id, 2);
    char a[128], b[128], what[400];
    if (x->dtype != w->dtype) return ops_bad(g, id, err, "'%s' and '%s' must have the same dtype", x->name, w->name);
    if (x->shape[x->ndim - 1] != w->shape[1]) {
        snprintf(what, sizeof what, "'%s' %s has %lld features but the head weight '%s' %s expects %lld (it is [vocab, d])",
                 x->name, ops_sh(x, a), (long long)x->shape[x->ndim - 1], w->name, ops_sh(w, b), (long long)w->shape[1]);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    if (t->dtype != STG_I32) return ops_bad(g, id, err, "targets '%s' must be i32", t->name, NULL);
    bool ok = t->ndim == x->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) {
        snprintf(what, sizeof what, "targets '%s' %s must have the shape of '%s' %s without the last dim", t->name, ops_sh(t, a),
                 x->name, ops_sh(x, b));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    if (OPS_OP(g, id)->a.lce.late_dw != 0 && OPS_OP(g, id)->a.lce.late_dw != 1) {
        snprintf(what, sizeof what, "late_dw=%lld must be 0 (the weight's gradient with dx) or 1 (made late, by an op of its own)",
                 (long long)OPS_OP(g, id)->a.lce.late_dw);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    if (OPS_OP(g, id)->a.lce.chunk < 0) {
        snprintf(what, sizeof what, "chunk=%lld must be 0 (chosen by the op) or a positive number of rows",
                 (long long)OPS_OP(g, id)->a.lce.chunk);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

// The last output, the scratch of x's dtype, named "<base>.<what>": forward (chunk, V) logits;
// backward ops_lce_bwd_scratch elements (with an fp32 dx accumulator when dx, output 0, is bf16; none
// for the _dw form, which makes no dx).
static void set_chunk_out(stg_graph *g, int id, const char *base, const char *what) {
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1);
    int64_t rows = stg_rows(x), ch = OPS_OP(g, id)->a.lce.chunk;
    stg_op_kind k = OPS_OP(g, id)->kind;
    stg_tensor *c = OPS_OUT(g, id, ops_lce_scratch_out(k));
    if (k == STG_OP_LINEAR_CROSS_ENTROPY) {
        int64_t s[2] = {ops_lce_chunk(rows, w->shape[0], ch), w->shape[0]};
        ops_set_shape(c, 2, s, x->dtype);
    } else {
        bool acc = k != STG_OP_LINEAR_CROSS_ENTROPY_DW && OPS_OUT(g, id, 0)->dtype == STG_BF16;
        int64_t n = ops_lce_bwd_scratch(rows, w->shape[1], w->shape[0], ch, acc);
        ops_set_shape(c, 1, &n, x->dtype);
    }
    char nm[STG_NAME_MAX];
    int keep = (int)(STG_NAME_MAX - 2 - strlen(what)); // room for ".<what>" and the terminator
    snprintf(nm, sizeof nm, "%.*s.%s", keep, base, what);
    memcpy(c->name, nm, sizeof nm);
}

// -> loss (), lse (rows), chunk logits (chunk, V)
static int infer_lce(stg_graph *g, int id, stg_err *err) {
    if (check_lce(g, id, err)) return -1;
    set_loss_lse(g, id);
    set_chunk_out(g, id, OPS_OUT(g, id, 0)->name, "logits_chunk");
    return 0;
}

// x, w, targets, lse -> dx (x's shape), dw (w's shape), scratch (ops_lce_bwd_scratch); the _dx
// and _dw forms make one of the two (and the scratch, output 1).
static int infer_lce_bwd(stg_graph *g, int id, stg_err *err) {
    if (check_lce(g, id, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1), *l = OPS_IN(g, id, 3);
    if (stg_numel(l) != stg_rows(x)) return ops_bad(g, id, err, "log-sum-exp '%s' must have one value per row%s", l->name, NULL);
    stg_op_kind k = OPS_OP(g, id)->kind;
    if (k != STG_OP_LINEAR_CROSS_ENTROPY_DW) ops_copy_shape(OPS_OUT(g, id, 0), x, ops_grad_dtype_for(g, x));
    if (k != STG_OP_LINEAR_CROSS_ENTROPY_DX) ops_copy_shape(OPS_OUT(g, id, ops_lce_dw_out(k)), w, ops_grad_dtype_for(g, w));
    set_chunk_out(g, id, OPS_OUT(g, id, 0)->name, "dlogits_chunk");
    return 0;
}

static int grad_lce(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    if (dout[0] != STG_GRAD_SEED)
        return stg_errf_at(err, f.loc, "linear_cross_entropy: its loss must be the model's loss itself (scaling or summing losses is not supported)");
    if (dout[1] != -1 || dout[2] != -1)
        return stg_errf_at(err, f.loc, "linear_cross_entropy: only its loss (output 0) is differentiable; the loss may not depend on its other outputs");
    int in[4] = {f.in[0], f.in[1], f.in[2], f.out[1]};
    char hint[STG_NAME_MAX];
    int outs[STG_MAX_OUT];
    stg_attrs a = f.a;
    a.lce.grad_scale = ops_loss_grad(g); // the mean over micro-batches when the step accumulates
    if (f.a.lce.late_dw) {
        // dx now; dW by an op of its own that the scheduler places just before dW's first reader
        // (stg_op_def.late), the logits recomputed once more, so the (V, d) gradient is not held
        // through the backward (at a tied embedding: until the embedding's backward adds to it)
        int dws[STG_MAX_OUT];
        if (want[0]) {
            if (ops_emit(e, g, id, STG_OP_LINEAR_CROSS_ENTROPY_DX, in, 4, &a, ops_dname(g, f.in[0], hint), outs, err) < 0)
                return -1;
            set_chunk_out(g, g->t[outs[1]].producer, g->t[f.out[0]].name, "dlogits_chunk");
            din[0] = outs[0];
        }
        if (want[1]) {
            if (ops_emit(e, g, id, STG_OP_LINEAR_CROSS_ENTROPY_DW, in, 4, &a, ops_dname(g, f.in[1], hint), dws, err) < 0)
                return -1;
            ops_name_out(g, dws[0], f.in[1]);
            set_chunk_out(g, g->t[dws[1]].producer, g->t[f.out[0]].name, "dlogits_chunk_dw");
            din[1] = dws[0];
        }
        return 0;
    }
    if (ops_emit(e, g, id, STG_OP_LINEAR_CROSS_ENTROPY_BWD, in, 4, &a, ops_dname(g, f.in[0], hint), outs, err) < 0) return -1;
    ops_name_out(g, outs[1], f.in[1]);
    set_chunk_out(g, g->t[outs[2]].producer, g->t[f.out[0]].name, "dlogits_chunk");
    din[0] = outs[0];
    din[1] = outs[1];
    return 0;
}

// rows x V x d multiply-adds per product (forward: the logits; backward: the logits again, dx and
// dw), and the softmax's 5 per logit. The backward's recomputation is counted: these are the
// FLOPs the device executes.
static double lce_products(const stg_graph *g, const stg_op *op) {
    const stg_tensor *x = &g->t[op->in[0]], *w = &g->t[op->in[1]];
    return 2.0 * (double)stg_rows(x) * (double)w->shape[0] * (double)w->shape[1];
}

static double flops_lce(const stg_graph *g, const stg_op *op) {
    return lce_products(g, op) + 5.0 * (double)stg_rows(&g->t[op->in[0]]) * (double)g->t[op->in[1]].shape[0];
}

static double flops_lce_bwd(const stg_graph *g, const stg_op *op) {
    return 3.0 * lce_products(g, op) + 5.0 * (double)stg_rows(&g->t[op->in[0]]) * (double)g->t[op->in[1]].shape[0];
}

// The _dx and _dw forms: the logits and one more product each.
static double flops_lce_half(const stg_graph *g, const stg_op *op) {
    return 2.0 * lce_products(g, op) + 5.0 * (double)stg_rows(&g->t[op->in[0]]) * (double)g->t[op->in[1]].shape[0];
}

static const stg_attr_def attrs_lce[] = {ATTR(lce, chunk, STG_ATTR_I64, 0, 0), ATTR(lce, late_dw, STG_ATTR_I64, 0, 0)};

// The sweep's model for linear_cross_entropy (tests/test_ops.c): chunks of 4 rows over 6 rows.
static const char sample_linear_cross_entropy[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 4] init=embedding\n"
    "  - param w [7, 4] init=embedding\n"
    "  - loss = linear_cross_entropy(x, w, t, chunk=4)\n";

const stg_op_def stg_rule_linear_cross_entropy = {"linear_cross_entropy", 3, 3, 3, ATTRS(attrs_lce), infer_lce, grad_lce, flops_lce,
                                                  .saves_in = OPS_BIT(0) | OPS_BIT(1) | OPS_BIT(2), .saves_out = OPS_BIT(1),
                                                  .no_grad_in = OPS_BIT(2), .inplace_in = -1, .sample = sample_linear_cross_entropy, .loss = true,
    .doc = "x (…, D), W (V, D), targets (…) i32 → the mean loss of `cross_entropy(linear(x, W), targets)` (scalar), lse (rows), the chunk scratch (chunk, V): the LM head fused with the loss, the rows in chunks, no (rows, V) logits kept for backward (W may be the tied embedding)",
    .doc_attrs = "`chunk` (rows per chunk; 0: chosen by the op, the largest multiple of 64 with at most 2^25 logits, at least 64); "
                 "`late_dw` (0; 1: the backward makes W's gradient late, just before its first reader, recomputing the logits once "
                 "more, so that the (V, D) gradient is not held through the backward)"};

const stg_op_def stg_rule_linear_cross_entropy_bwd = {"linear_cross_entropy_bwd", 4, 4, 3, ATTRS(attrs_lce), infer_lce_bwd, NULL,
                                                      flops_lce_bwd, .inplace_in = -1};
const stg_op_def stg_rule_linear_cross_entropy_dx = {"linear_cross_entropy_dx", 4, 4, 2, ATTRS(attrs_lce), infer_lce_bwd, NULL,
                                                     flops_lce_half, .inplace_in = -1};
const stg_op_def stg_rule_linear_cross_entropy_dw = {"linear_cross_entropy_dw", 4, 4, 2, ATTRS(attrs_lce), infer_lce_bwd, NULL,
                                                     flops_lce_half, .inplace_in = -1, .late = true};
