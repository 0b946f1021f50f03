// The layout family's rules (reshape, transpose, repeat_kv, repeat_kv_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_reshape(stg_graph *g, int id, stg_err *err) {
    stg_reshape_attrs *r = &OPS_OP(g, id)->a.reshape;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (r->ndim < 0 || r->ndim > STG_MAX_DIMS) return ops_bad(g, id, err, "shape has too many dims%s%s", NULL, NULL);
    int64_t known = 1;
    int infer_at = -1;
    for (int i = 0; i < r->ndim; i++) {
        if (r->shape[i] == -1 && infer_at < 0) infer_at = i;
        else if (r->shape[i] <= 0) return ops_bad(g, id, err, "shape sizes must be positive (one may be -1)%s%s", NULL, NULL);
        else known *= r->shape[i];
    }
    int64_t n = stg_numel(x);
    if (infer_at >= 0) {
        if (known == 0 || n % known) return ops_bad(g, id, err, "cannot infer the -1 dim for '%s'%s", x->name, NULL);
        r->shape[infer_at] = n / known;
        known *= r->shape[infer_at];
    }
    if (known != n) {
        char b[128], what[300];
        snprintf(what, sizeof what, "'%s' %s has %lld elements; the new shape has %lld", x->name, ops_sh(x, b), (long long)n,
                 (long long)known);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    ops_set_shape(OPS_OUT(g, id, 0), r->ndim, r->shape, x->dtype);
    return 0;
}

static int infer_transpose(stg_graph *g, int id, stg_err *err) {
    stg_transpose_attrs *t = &OPS_OP(g, id)->a.transpose;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (t->d0 < 0) t->d0 += x->ndim;
    if (t->d1 < 0) t->d1 += x->ndim;
    if (t->d0 < 0 || t->d0 >= x->ndim || t->d1 < 0 || t->d1 >= x->ndim)
        return ops_bad(g, id, err, "dims to swap are out of range for '%s'%s", x->name, NULL);
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[t->d0] = x->shape[t->d1];
    s[t->d1] = x->shape[t->d0];
    ops_set_shape(OPS_OUT(g, id, 0), x->ndim, s, x->dtype);
    return 0;
}

// x (B, S, H, Dh) -> (B, S, H n, Dh): output head h is input head h / n.
static int infer_repeat_kv(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 4, 4, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    int64_t n = OPS_OP(g, id)->a.repeat_kv.n;
    if (n < 1 || n > 65535) return ops_bad(g, id, err, "n must be at least 1 (and at most 65535)%s%s", NULL, NULL);
    int64_t s[4] = {x->shape[0], x->shape[1], x->shape[2] * n, x->shape[3]};
    ops_set_shape(OPS_OUT(g, id, 0), 4, s, x->dtype);
    return 0;
}

// dy (B, S, H n, Dh) -> dx (B, S, H, Dh): each input head's gradient is the sum over its n copies.
static int infer_repeat_kv_bwd(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 4, 4, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *dy = OPS_IN(g, id, 0);
    int64_t n = OPS_OP(g, id)->a.repeat_kv.n;
    if (n < 1 || dy->shape[2] % n) {
        char hb[32], nb[32];
        snprintf(hb, sizeof hb, "%lld", (long long)dy->shape[2]);
        snprintf(nb, sizeof nb, "%lld", (long long)n);
        return ops_bad(g, id, err, "heads (%s) must be a multiple of n (%s)", hb, nb);
    }
    int64_t s[4] = {dy->shape[0], dy->shape[1], dy->shape[2] / n, dy->shape[3]};
    ops_set_shape(OPS_OUT(g, id, 0), 4, s, dy->dtype);
    return 0;
}

static int grad_repeat_kv(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    return (din[0] = ops_emit1(e, g, id, STG_OP_REPEAT_KV_BWD, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_reshape(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_tensor *x = &g->t[g->ops[id].in[0]];
    int64_t s[STG_MAX_DIMS];
    int nd = x->ndim;
    for (int i = 0; i < nd; i++) s[i] = x->shape[i];
    stg_attrs a = ops_no_attrs();
    a.reshape.ndim = nd;
    for (int i = 0; i < nd; i++) a.reshape.shape[i] = s[i];
    return (din[0] = ops_emit1(e, g, id, STG_OP_RESHAPE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_transpose(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    return (din[0] = ops_emit1(e, g, id, STG_OP_TRANSPOSE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

// split: x (..., 3 m) -> three (..., m), the last dim cut in equal consecutive parts (GPT-2's
// fused q, k, v). concat: the inverse, three (..., m) of one shape -> (..., 3 m).
#define SPLIT_PARTS 3

static int infer_split(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (x->shape[x->ndim - 1] % SPLIT_PARTS) {
        char b[128], what[300];
        snprintf(what, sizeof what, "'%s' %s: the last dim must be a multiple of %d", x->name, ops_sh(x, b), SPLIT_PARTS);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[x->ndim - 1] /= SPLIT_PARTS;
    for (int o = 0; o < SPLIT_PARTS; o++) ops_set_shape(OPS_OUT(g, id, o), x->ndim, s, x->dtype);
    return 0;
}

static int infer_concat(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    for (int i = 1; i < OPS_OP(g, id)->n_in; i++)
        if (ops_need_same(g, id, 0, i, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    int64_t s[STG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[x->ndim - 1] *= OPS_OP(g, id)->n_in;
    ops_set_shape(OPS_OUT(g, id, 0), x->ndim, s, x->dtype);
    return 0;
}

// d x = concat(d parts); a part without a gradient contributes zeros (0 times another part's).
static int grad_split(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int parts[SPLIT_PARTS], any = -1, zero = -1;
    for (int o = 0; o < SPLIT_PARTS; o++)
        if (dout[o] >= 0) any = dout[o];
    if (any < 0) return 0;
    for (int o = 0; o < SPLIT_PARTS; o++) {
        if (dout[o] >= 0) {
            parts[o] = dout[o];
            continue;
        }
        if (zero < 0) {
            stg_attrs a = ops_no_attrs();
            a.scale.factor = 0.0;
            if ((zero = ops_emit1(e, g, id, STG_OP_SCALE, &any, 1, &a, g->ops[id].out[o], err)) < 0) return -1;
        }
        parts[o] = zero;
    }
    return (din[0] = ops_emit1(e, g, id, STG_OP_CONCAT, parts, SPLIT_PARTS, NULL, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_concat(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int outs[STG_MAX_OUT];
    char hint[STG_NAME_MAX];
    if (ops_emit(e, g, id, STG_OP_SPLIT, &dout[0], 1, NULL, ops_dname(g, g->ops[id].out[0], hint), outs, err) < 0) return -1;
    for (int i = 0; i < SPLIT_PARTS; i++) {
        if (!want[i]) continue;
        ops_name_out(g, outs[i], g->ops[id].in[i]);
        din[i] = outs[i];
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_reshape[] = {{"shape", STG_ATTR_SHAPE, offsetof(stg_attrs, reshape), 0, 1}};

static const stg_attr_def attrs_repeat_kv[] = {ATTR(repeat_kv, n, STG_ATTR_I64, 1, 1)};

static const stg_attr_def attrs_transpose[] = {ATTR(transpose, d0, STG_ATTR_INT, 0, 1), ATTR(transpose, d1, STG_ATTR_INT, 0, 1)};

// The sweep's model for reshape (tests/test_ops.c).
static const char sample_reshape[] =
    "inputs: {t: [6, i32]}\n"
    "graph:\n"
    "  - param x [3, 2, 6] init=embedding\n"
    "  - loss = cross_entropy(reshape(x, shape=[6, 6]), t)\n";

const stg_op_def stg_rule_reshape = {"reshape", 1, 1, 1, ATTRS(attrs_reshape), infer_reshape, grad_reshape, ops_flops_zero, .inplace_in = -1,
                        .view = 1,
    .sample = sample_reshape,
    .doc = "x → a view with a new shape",
    .doc_attrs = "`shape`"};

// The sweep's model for transpose (tests/test_ops.c).
static const char sample_transpose[] =
    "inputs: {t: [3, 2, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 6] init=embedding\n"
    "  - loss = cross_entropy(transpose(x, d0=0, d1=1), t)\n";

const stg_op_def stg_rule_transpose = {"transpose", 1, 1, 1, ATTRS(attrs_transpose), infer_transpose, grad_transpose, ops_flops_zero,
                          .inplace_in = -1,
    .sample = sample_transpose,
    .doc = "x → a copy with two dims swapped",
    .doc_attrs = "`d0`, `d1`"};

// The sweep's model for repeat_kv (tests/test_ops.c).
static const char sample_repeat_kv[] =
    "inputs: {t: [2, 3, 4, i32]}\n"
    "graph:\n"
    "  - param k [2, 3, 2, 6] init=embedding\n"
    "  - loss = cross_entropy(repeat_kv(k, n=2), t)\n";

// The sweep's model for split (tests/test_ops.c): every part reaches the loss.
static const char sample_split[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 18] init=embedding\n"
    "  - a, b, c = split(x)\n"
    "  - loss = cross_entropy(add(a, mul(b, c)), t)\n";

const stg_op_def stg_rule_split = {"split", 1, 1, SPLIT_PARTS, NULL, 0, infer_split, grad_split, ops_flops_zero, .inplace_in = -1,
                                   .sample = sample_split,
    .doc = "x (…, 3m) → three (…, m): the last dim cut in three consecutive parts (GPT-2's fused q, k, v)"};

// The sweep's model for concat (tests/test_ops.c): three parts along the last dim.
static const char sample_concat[] =
    "inputs: {t: [2, 3, i32]}\n"
    "graph:\n"
    "  - param a [2, 3, 2] init=embedding\n"
    "  - param b [2, 3, 2] init=embedding\n"
    "  - param c [2, 3, 2] init=embedding\n"
    "  - loss = cross_entropy(concat(a, b, c), t)\n";

const stg_op_def stg_rule_concat = {"concat", SPLIT_PARTS, SPLIT_PARTS, 1, NULL, 0, infer_concat, grad_concat, ops_flops_zero,
                                    .inplace_in = -1, .sample = sample_concat,
    .doc = "three (…, m) of one shape → (…, 3m), the inverse of `split`"};

const stg_op_def stg_rule_repeat_kv = {"repeat_kv", 1, 1, 1, ATTRS(attrs_repeat_kv), infer_repeat_kv, grad_repeat_kv, ops_flops_zero,
                          .inplace_in = -1, .sample = sample_repeat_kv,
    .doc = "x (B, S, H, Dh) → (B, S, H·n, Dh), head h of the output = head h / n of x (grouped-query attention written out)",
    .doc_attrs = "`n`"};

const stg_op_def stg_rule_repeat_kv_bwd = {"repeat_kv_bwd", 1, 1, 1, ATTRS(attrs_repeat_kv), infer_repeat_kv_bwd, NULL,
                              ops_flops_elem1, .inplace_in = -1};
