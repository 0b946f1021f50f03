// The softmax family's rules (causal_mask, softmax, softmax_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_causal_mask(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 2, STG_MAX_DIMS, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (x->shape[x->ndim - 2] > x->shape[x->ndim - 1])
        return ops_bad(g, id, err, "'%s': a causal mask needs at least as many keys (last dim) as queries%s", x->name, NULL);
    return ops_infer_same_as_in0(g, id, err);
}

static int infer_softmax(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err)) return -1;
    return ops_infer_same_as_in0(g, id, err);
}

static int grad_causal_mask(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = ops_no_attrs();
    a.mask.fill = 0.0;
    return (din[0] = ops_emit1(e, g, id, STG_OP_CAUSAL_MASK, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_softmax(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    int in[2] = {g->ops[id].out[0], dout[0]};
    stg_attrs a = ops_no_attrs();
    return (din[0] = ops_emit1(e, g, id, STG_OP_SOFTMAX_BWD, in, 2, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_mask[] = {ATTR(mask, fill, STG_ATTR_FLOAT, -INFINITY, 0)};

// The sweep's model for causal_mask (tests/test_ops.c).
static const char sample_causal_mask[] =
    "inputs: {t: [2, 5, i32]}\n"
    "graph:\n"
    "  - param s [2, 5, 5] init=embedding\n"
    "  - loss = cross_entropy(softmax(causal_mask(s)), t)\n";

const stg_op_def stg_rule_causal_mask = {"causal_mask", 1, 1, 1, ATTRS(attrs_mask), infer_causal_mask, grad_causal_mask, ops_flops_zero,
                            .inplace_in = 0,
    .sample = sample_causal_mask,
    .doc = "scores (…, Sq, Sk) → masked",
    .doc_attrs = "`fill` (-inf)"};

// The sweep's model for softmax (tests/test_ops.c).
static const char sample_softmax[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 7] init=embedding\n"
    "  - loss = cross_entropy(softmax(x), t)\n";

const stg_op_def stg_rule_softmax = {"softmax", 1, 1, 1, NULL, 0, infer_softmax, grad_softmax, ops_flops_softmax, .saves_out = OPS_BIT(0),
                        .inplace_in = 0,
    .sample = sample_softmax,
    .doc = "x (…, N) → over the last dim"};

const stg_op_def stg_rule_softmax_bwd = {"softmax_bwd", 2, 2, 1, NULL, 0, ops_infer_binary_same, NULL, ops_flops_elem4, .inplace_in = 1};
