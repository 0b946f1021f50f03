// The attention family's rules (attention, attention_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_attention(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 3; i++)
        if (ops_need_ndim(g, id, i, 4, 4, err) || ops_need_float(g, id, i, err)) return -1;
    if (ops_need_same(g, id, 0, 1, err) || ops_need_same(g, id, 0, 2, err)) return -1;
    const stg_tensor *q = OPS_IN(g, id, 0);
    ops_copy_shape(OPS_OUT(g, id, 0), q, q->dtype);
    int64_t s[3] = {q->shape[0], q->shape[2], q->shape[1]}; // (B, H, S)
    ops_set_shape(OPS_OUT(g, id, 1), 3, s, g->grad_dtype);
    return 0;
}

static int infer_attention_bwd(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < 6; i++)
        if (i != 4 && (ops_need_ndim(g, id, i, 4, 4, err) || ops_need_same(g, id, 0, i, err))) return -1;
    const stg_tensor *q = OPS_IN(g, id, 0), *lse = OPS_IN(g, id, 4);
    if (lse->ndim != 3 || lse->shape[0] != q->shape[0] || lse->shape[1] != q->shape[2] || lse->shape[2] != q->shape[1])
        return ops_bad(g, id, err, "log-sum-exp '%s' must be (B, H, S) for '%s'", lse->name, q->name);
    for (int o = 0; o < 3; o++) ops_copy_shape(OPS_OUT(g, id, o), q, q->dtype);
    return 0;
}

// Attention: QKᵀ and PV, 4·B·H·S²·Dh forward and 8 backward (no causal discount, as the peers
// count; see ../shared/peers/NUMBERS.md).
static double flops_attention(const stg_graph *g, const stg_op *op) {
    const stg_tensor *q = &g->t[op->in[0]];
    return 4.0 * (double)q->shape[0] * (double)q->shape[2] * (double)q->shape[1] * (double)q->shape[1] * (double)q->shape[3];
}

static double flops_attention_bwd(const stg_graph *g, const stg_op *op) { return 2.0 * flops_attention(g, op); }

static int grad_attention(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int in[6] = {f.in[0], f.in[1], f.in[2], f.out[0], f.out[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    if (ops_emit(e, g, id, STG_OP_ATTENTION_BWD, in, 6, &f.a, ops_dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        ops_name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_attention[] = {ATTR(attention, scale, STG_ATTR_FLOAT, 0.0, 0)};

// The sweep's model for attention (tests/test_ops.c).
static const char sample_attention[] =
    "inputs: {t: [2, 5, 2, i32]}\n"
    "graph:\n"
    "  - param q [2, 5, 2, 8] init=embedding\n"
    "  - param k [2, 5, 2, 8] init=embedding\n"
    "  - param v [2, 5, 2, 8] init=embedding\n"
    "  - o, lse = attention(q, k, v)\n"
    "  - loss = cross_entropy(o, t)\n";

const stg_op_def stg_rule_attention = {"attention", 3, 3, 2, ATTRS(attrs_attention), infer_attention, grad_attention, flops_attention,
                          .saves_in = OPS_BIT(0) | OPS_BIT(1) | OPS_BIT(2), .saves_out = OPS_BIT(0) | OPS_BIT(1), .inplace_in = -1,
    .sample = sample_attention};

const stg_op_def stg_rule_attention_bwd = {"attention_bwd", 6, 6, 3, ATTRS(attrs_attention), infer_attention_bwd, NULL,
                              flops_attention_bwd, .inplace_in = -1};
