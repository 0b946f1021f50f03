// The matmul family's rules (linear, matmul, matmul_group): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// linear (x, w[, b][, addend]): a bias when the op says so (stg_linear_attrs), then the addend.
static int linear_addend_at(const stg_op *op) { return op->a.linear.bias ? 3 : 2; }

// A model file's linear(x, w, b): its third input is the bias (a folded addend comes later).
static void linear_from_call(stg_attrs *a, int n_in) { a->linear.bias = n_in == 3; }

static int infer_linear(stg_graph *g, int id, stg_err *err) {
    const stg_op *op = OPS_OP(g, id);
    if (op->a.linear.bias && op->n_in < 3) return ops_bad(g, id, err, "a bias is declared but not given%s%s", NULL, NULL);
    if (op->n_in > linear_addend_at(op) + 1) return ops_bad(g, id, err, "takes x, w and an optional bias b%s%s", NULL, NULL);
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_ndim(g, id, 1, 2, 2, err)) return -1;
    if (ops_need_float(g, id, 0, err) || ops_need_float(g, id, 1, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1);
    if (x->dtype != w->dtype) return ops_bad(g, id, err, "'%s' and '%s' must have the same dtype", x->name, w->name);
    if (x->shape[x->ndim - 1] != w->shape[1]) {
        char a[128], b[128], what[400];
        snprintf(what, sizeof what, "'%s' %s has %lld features but weight '%s' %s expects %lld (weights are [d_out, d_in])",
                 x->name, ops_sh(x, a), (long long)x->shape[x->ndim - 1], w->name, ops_sh(w, b), (long long)w->shape[1]);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[x->ndim - 1] = w->shape[0];
    if (op->a.linear.bias) {
        const stg_tensor *b = OPS_IN(g, id, 2);
        if (b->ndim != 1 || b->shape[0] != w->shape[0] || b->dtype != w->dtype) {
            char a[128], c[128], what[400];
            snprintf(what, sizeof what, "the bias '%s' %s %s must be [%lld] %s, one value per row of the weight '%s' %s", b->name,
                     ops_sh(b, a), stg_dtype_name(b->dtype), (long long)w->shape[0], stg_dtype_name(w->dtype), w->name, ops_sh(w, c));
            return ops_bad(g, id, err, "%s%s", what, NULL);
        }
    }
    ops_set_shape(OPS_OUT(g, id, 0), x->ndim, s, x->dtype);
    return ops_check_addend(g, id, err);
}

// sum_rows: x (..., n) -> (n), the sum over every leading dim (a bias gradient).
static int infer_sum_rows(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    int64_t n = x->shape[x->ndim - 1];
    ops_set_shape(OPS_OUT(g, id, 0), 1, &n, OPS_OP(g, id)->a.sum_rows.grad_out ? g->grad_dtype : x->dtype);
    return 0;
}

// The product of inputs ia and ib of op id (matmul's rule: A (..., a0, a1), B 2-D or with A's batch
// dims, op = transpose of the last two dims when ta / tb is set) into output o.
static int infer_product(stg_graph *g, int id, int ia, int ib, int o, const stg_matmul_attrs *a, stg_err *err) {
    if (ops_need_ndim(g, id, ia, 2, STG_MAX_DIMS, err) || ops_need_ndim(g, id, ib, 2, STG_MAX_DIMS, err)) return -1;
    if (ops_need_float(g, id, ia, err) || ops_need_float(g, id, ib, err)) return -1;
    const stg_tensor *A = OPS_IN(g, id, ia), *B = OPS_IN(g, id, ib);
    if (A->dtype != B->dtype) return ops_bad(g, id, err, "'%s' and '%s' must have the same dtype", A->name, B->name);
    if (B->ndim != 2 && B->ndim != A->ndim)
        return ops_bad(g, id, err, "'%s' must be 2-D or have the same number of dims as '%s'", B->name, A->name);
    if (B->ndim == A->ndim)
        for (int i = 0; i + 2 < A->ndim; i++)
            if (A->shape[i] != B->shape[i]) return ops_bad(g, id, err, "batch dims of '%s' and '%s' differ", A->name, B->name);
    int64_t a0 = A->shape[A->ndim - 2], a1 = A->shape[A->ndim - 1];
    int64_t b0 = B->shape[B->ndim - 2], b1 = B->shape[B->ndim - 1];
    int64_t m = a->ta ? a1 : a0, k = a->ta ? a0 : a1, kb = a->tb ? b1 : b0, n = a->tb ? b0 : b1;
    if (k != kb) {
        char x[128], y[128], what[400];
        snprintf(what, sizeof what, "inner dims differ: op('%s' %s) has %lld columns, op('%s' %s) has %lld rows", A->name,
                 ops_sh(A, x), (long long)k, B->name, ops_sh(B, y), (long long)kb);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i + 2 < A->ndim; i++) s[i] = A->shape[i];
    s[A->ndim - 2] = m;
    s[A->ndim - 1] = n;
    ops_set_shape(OPS_OUT(g, id, o), A->ndim, s, a->grad_out && a->grad_out != 2 ? g->grad_dtype : A->dtype);
    return 0;
}

static int infer_matmul(stg_graph *g, int id, stg_err *err) {
    if (infer_product(g, id, 0, 1, 0, &OPS_OP(g, id)->a.matmul, err)) return -1;
    return ops_check_addend(g, id, err);
}

// Products of equal shapes in one launch: inputs (A1, B1, A2, B2, ...), output i = op(Ai) op(Bi).
static int infer_matmul_group(stg_graph *g, int id, stg_err *err) {
    const stg_op *op = OPS_OP(g, id);
    if (op->n_in % 2 || op->n_in / 2 != op->n_out)
        return ops_bad(g, id, err, "takes pairs of operands, one pair per output%s%s", NULL, NULL);
    for (int p = 0; p < op->n_out; p++) {
        if (infer_product(g, id, 2 * p, 2 * p + 1, p, &OPS_OP(g, id)->a.matmul, err)) return -1;
        if (p > 0 && (ops_need_same(g, id, 0, 2 * p, err) || ops_need_same(g, id, 1, 2 * p + 1, err))) return -1;
    }
    return 0;
}

static double flops_linear(const stg_graph *g, const stg_op *op) {
    const stg_tensor *w = &g->t[op->in[1]];
    return 2.0 * ops_numel_out(g, op, 0) * (double)w->shape[1] + (op->a.linear.bias ? ops_numel_out(g, op, 0) : 0.0);
}

static double flops_matmul(const stg_graph *g, const stg_op *op) {
    double f = 0; // matmul_group: the sum over its pairs
    for (int p = 0; p < (op->kind == STG_OP_MATMUL_GROUP ? op->n_out : 1); p++) {
        const stg_tensor *A = &g->t[op->in[2 * p]];
        int64_t k = op->a.matmul.ta ? A->shape[A->ndim - 2] : A->shape[A->ndim - 1];
        f += 2.0 * ops_numel_out(g, op, p) * (double)k;
    }
    return f;
}

static int reshape_to(const stg_grad_emit *e, stg_graph *g, int fwd, int t, int ndim, const int64_t *shape, stg_err *err) {
    stg_attrs a = ops_no_attrs();
    a.reshape.ndim = ndim;
    for (int i = 0; i < ndim; i++) a.reshape.shape[i] = shape[i];
    char b[STG_NAME_MAX + 8];
    snprintf(b, sizeof b, "%s.flat", g->t[t].name);
    b[STG_NAME_MAX - 1] = 0;
    int out[STG_MAX_OUT];
    if (ops_emit(e, g, fwd, STG_OP_RESHAPE, &t, 1, &a, b, out, err) < 0) return -1;
    return out[0];
}

// Flattens t to 2-D (rows, last dim).
static int flatten2(const stg_grad_emit *e, stg_graph *g, int fwd, int t, stg_err *err) {
    const stg_tensor *x = &g->t[t];
    if (x->ndim == 2) return t;
    int64_t s[2] = {stg_rows(x), x->shape[x->ndim - 1]};
    return reshape_to(e, g, fwd, t, 2, s, err);
}

static int grad_linear(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int x = g->ops[id].in[0], w = g->ops[id].in[1], dy = dout[0];
    if (want[0]) {
        stg_attrs a = ops_no_attrs(); // dx (..., in) = dy (..., out) · W (out, in)
        a.matmul.grad_out = g->t[x].cls == STG_CLASS_PARAM;
        int in[2] = {dy, w};
        if ((din[0] = ops_emit1(e, g, id, STG_OP_MATMUL, in, 2, &a, x, err)) < 0) return -1;
    }
    if (want[1]) {
        int dyf = flatten2(e, g, id, dy, err), xf = dyf < 0 ? -1 : flatten2(e, g, id, x, err);
        if (xf < 0) return -1;
        stg_attrs a = ops_no_attrs(); // dW (out, in) = dyᵀ (out, N) · x (N, in)
        a.matmul.ta = 1;
        a.matmul.grad_out = g->t[w].cls == STG_CLASS_PARAM;
        int in[2] = {dyf, xf};
        if ((din[1] = ops_emit1(e, g, id, STG_OP_MATMUL, in, 2, &a, w, err)) < 0) return -1;
    }
    const stg_op *op = &g->ops[id];
    if (op->a.linear.bias && want[2]) { // db (out) = the sum of dy's rows
        stg_attrs a = ops_no_attrs();
        a.sum_rows.grad_out = g->t[op->in[2]].cls == STG_CLASS_PARAM;
        int in = dy;
        if ((din[2] = ops_emit1(e, g, id, STG_OP_SUM_ROWS, &in, 1, &a, op->in[2], err)) < 0) return -1;
    }
    int k = ops_addend_of(&g->ops[id]);
    if (k > 0 && want[k]) din[k] = dy; // the addend's gradient is the output's
    return 0;
}

static int transpose_last2(const stg_grad_emit *e, stg_graph *g, int fwd, int t, int like, stg_err *err) {
    stg_attrs a = ops_no_attrs();
    a.transpose.d0 = g->t[t].ndim - 2;
    a.transpose.d1 = g->t[t].ndim - 1;
    return ops_emit1(e, g, fwd, STG_OP_TRANSPOSE, &t, 1, &a, like, err);
}

static int grad_matmul(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int A = f.in[0], B = f.in[1], dC = dout[0], ta = f.a.matmul.ta, tb = f.a.matmul.tb;
    bool b_bcast = g->t[B].ndim == 2 && g->t[A].ndim > 2;
    if (want[0]) {
        // dop(A) = dC · op(B)ᵀ; with ta the stored A is its transpose.
        stg_attrs a = ops_no_attrs();
        a.matmul.tb = !tb;
        a.matmul.grad_out = g->t[A].cls == STG_CLASS_PARAM;
        int in[2] = {dC, B};
        int t = ops_emit1(e, g, id, STG_OP_MATMUL, in, 2, &a, A, err);
        if (t < 0) return -1;
        if (ta && (t = transpose_last2(e, g, id, t, A, err)) < 0) return -1;
        din[0] = t;
    }
    if (want[1]) {
        int a_op = A; // A laid out as op(A): (..., m, k)
        if (ta && b_bcast && (a_op = transpose_last2(e, g, id, A, A, err)) < 0) return -1;
        int lhs = a_op, rhs = dC;
        int ta2 = ta && !b_bcast;
        if (b_bcast) { // sum over A's batch: flatten both to rows
            if ((lhs = flatten2(e, g, id, a_op, err)) < 0 || (rhs = flatten2(e, g, id, dC, err)) < 0) return -1;
        }
        stg_attrs a = ops_no_attrs();
        a.matmul.grad_out = g->t[B].cls == STG_CLASS_PARAM;
        int in[2];
        if (!tb) { // dB (k, n) = op(A)ᵀ · dC
            in[0] = lhs;
            in[1] = rhs;
            a.matmul.ta = !ta2;
        } else { // dB (n, k) = dCᵀ · op(A)
            in[0] = rhs;
            in[1] = lhs;
            a.matmul.ta = 1;
            a.matmul.tb = ta2;
        }
        if ((din[1] = ops_emit1(e, g, id, STG_OP_MATMUL, in, 2, &a, B, err)) < 0) return -1;
    }
    if (f.n_in == 3 && want[2]) din[2] = dC; // the addend's gradient is the product's
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_matmul[] = {ATTR(matmul, ta, STG_ATTR_INT, 0, 0), ATTR(matmul, tb, STG_ATTR_INT, 0, 0)};

static const stg_attr_def attrs_matmul_group[] = {ATTR(matmul, ta, STG_ATTR_INT, 0, 0), ATTR(matmul, tb, STG_ATTR_INT, 0, 0),
                                                  ATTR(matmul, grad_out, STG_ATTR_INT, 0, 0)};

// The sweep's model for linear with a bias (tests/test_ops.c).
static const char sample_linear_bias[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 4] init=embedding\n"
    "  - param w [6, 4] init=embedding\n"
    "  - param b [6] init=embedding\n"
    "  - loss = cross_entropy(linear(x, w, b), t)\n";

// no_decay_in: a bias is not decayed (with --decay-exempt, as norm gains and embeddings)
const stg_op_def stg_rule_linear = {"linear", 2, 4, 1, NULL, 0, infer_linear, grad_linear, flops_linear, .saves_in = OPS_BIT(0) | OPS_BIT(1),
                       .no_decay_in = OPS_BIT(2), .inplace_in = -1, .addend_in = 2, .addend_at = linear_addend_at,
                       .from_call = linear_from_call, .accum_out = OPS_BIT(0), .sample = sample_linear_bias,
    .doc = "x (…, in), W (out, in) [, b (out)] → x·Wᵀ (+ b on every row) (…, out)"};


// The sweep's model for matmul (tests/test_ops.c).
static const char sample_matmul[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param a [2, 3, 4] init=embedding\n"
    "  - param b [2, 6, 4] init=embedding\n"
    "  - loss = cross_entropy(matmul(a, b, tb=1), t)\n";

const stg_op_def stg_rule_matmul = {"matmul", 2, 3, 1, ATTRS(attrs_matmul), infer_matmul, grad_matmul, flops_matmul,
                       .saves_in = OPS_BIT(0) | OPS_BIT(1), .inplace_in = -1, .addend_in = 2, .accum_out = OPS_BIT(0),
    .sample = sample_matmul,
    .doc = "A (…, m, k), B (…, k, n) or 2-D [, addend (…, m, n)] → (…, m, n) (+ addend)",
    .doc_attrs = "`ta`, `tb` (transpose the last two dims)"};

static const stg_attr_def attrs_sum_rows[] = {ATTR(sum_rows, grad_out, STG_ATTR_INT, 0, 0)};

// linear's bias gradient (no gradient rule: a backward op)
const stg_op_def stg_rule_sum_rows = {"sum_rows", 1, 1, 1, ATTRS(attrs_sum_rows), infer_sum_rows, NULL, ops_flops_elem1,
                                      .inplace_in = -1};

// made by graph_group_matmuls from independent matmuls of equal shapes (no gradient rule: it
    // runs after autodiff); one output per pair of inputs
const stg_op_def stg_rule_matmul_group = {"matmul_group", 4, 2 * STG_MAX_OUT, -1, ATTRS(attrs_matmul_group), infer_matmul_group, NULL,
                             flops_matmul, .inplace_in = -1, .accum_out = OPS_BIT(0) | OPS_BIT(1) | OPS_BIT(2)};
