// The elementwise family's rules (silu, silu_bwd, relu, relu_bwd, gelu, gelu_bwd, swiglu, swiglu_bwd, mul, add, scale): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_scale(stg_graph *g, int id, stg_err *err) {
    if (!isfinite(OPS_OP(g, id)->a.scale.factor)) return ops_bad(g, id, err, "factor must be finite%s%s", NULL, NULL);
    return ops_infer_same_as_in0(g, id, err);
}

static int grad_unary_in(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err, stg_op_kind k,
                         int saved) {
    int in[2] = {saved, dout[0]};
    stg_attrs a = ops_no_attrs();
    return (din[0] = ops_emit1(e, g, id, k, in, 2, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

static int grad_silu(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    return grad_unary_in(e, g, id, dout, want, din, err, STG_OP_SILU_BWD, g->ops[id].in[0]);
}

static int grad_relu(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    return grad_unary_in(e, g, id, dout, want, din, err, STG_OP_RELU_BWD, g->ops[id].out[0]);
}

static int grad_gelu(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    return grad_unary_in(e, g, id, dout, want, din, err, STG_OP_GELU_BWD, g->ops[id].in[0]);
}

static int grad_swiglu(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    int in[3] = {f.in[0], f.in[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    stg_attrs a = ops_no_attrs();
    if (ops_emit(e, g, id, STG_OP_SWIGLU_BWD, in, 3, &a, ops_dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < 2; i++) {
        ops_name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

static int grad_mul(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    stg_attrs a = ops_no_attrs();
    for (int i = 0; i < 2; i++) {
        if (!want[i]) continue;
        int in[2] = {dout[0], f.in[1 - i]};
        if ((din[i] = ops_emit1(e, g, id, STG_OP_MUL, in, 2, &a, f.in[i], err)) < 0) return -1;
    }
    return 0;
}

static int grad_add(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    for (int i = 0; i < 2; i++)
        if (want[i]) din[i] = dout[0];
    return 0;
}

static int grad_scale(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    return (din[0] = ops_emit1(e, g, id, STG_OP_SCALE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_scale[] = {ATTR(scale, factor, STG_ATTR_FLOAT, 1.0, 1)};

// The sweep's model for silu (tests/test_ops.c).
static const char sample_silu[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 7] init=embedding\n"
    "  - loss = cross_entropy(silu(x), t)\n";

const stg_op_def stg_rule_silu = {"silu", 1, 1, 1, NULL, 0, ops_infer_same_as_in0, grad_silu, ops_flops_elem4, .saves_in = OPS_BIT(0), .inplace_in = 0,
    .sample = sample_silu,
    .doc = "x → x·sigmoid(x)"};

const stg_op_def stg_rule_silu_bwd = {"silu_bwd", 2, 2, 1, NULL, 0, ops_infer_binary_same, NULL, ops_flops_elem8, .inplace_in = 1};

// The sweep's model for relu (tests/test_ops.c).
static const char sample_relu[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 7] init=embedding\n"
    "  - loss = cross_entropy(relu(x), t)\n";

const stg_op_def stg_rule_relu = {"relu", 1, 1, 1, NULL, 0, ops_infer_same_as_in0, grad_relu, ops_flops_elem1, .saves_out = OPS_BIT(0), .inplace_in = 0,
    .sample = sample_relu,
    .doc = "x → max(x, 0)"};

const stg_op_def stg_rule_relu_bwd = {"relu_bwd", 2, 2, 1, NULL, 0, ops_infer_binary_same, NULL, ops_flops_elem1, .inplace_in = 1};

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); the backward
// reads x. FLOPs counted as 8 (forward) and 12 (backward) per element, roughly the operations.
static double flops_gelu(const stg_graph *g, const stg_op *op) { return 8.0 * ops_numel_in(g, op, 0); }
static double flops_gelu_bwd(const stg_graph *g, const stg_op *op) { return 12.0 * ops_numel_in(g, op, 0); }

// The sweep's model for gelu (tests/test_ops.c).
static const char sample_gelu[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 7] init=embedding\n"
    "  - loss = cross_entropy(gelu(x), t)\n";

const stg_op_def stg_rule_gelu = {"gelu", 1, 1, 1, NULL, 0, ops_infer_same_as_in0, grad_gelu, flops_gelu, .saves_in = OPS_BIT(0),
                                  .inplace_in = 0,
    .sample = sample_gelu,
    .doc = "x → 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (GPT-2's tanh approximation)"};

const stg_op_def stg_rule_gelu_bwd = {"gelu_bwd", 2, 2, 1, NULL, 0, ops_infer_binary_same, NULL, flops_gelu_bwd, .inplace_in = 1};

// The sweep's model for swiglu (tests/test_ops.c).
static const char sample_swiglu[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param a [3, 7] init=embedding\n"
    "  - param b [3, 7] init=embedding\n"
    "  - loss = cross_entropy(swiglu(a, b), t)\n";

const stg_op_def stg_rule_swiglu = {"swiglu", 2, 2, 1, NULL, 0, ops_infer_binary_same, grad_swiglu, ops_flops_elem4, .saves_in = OPS_BIT(0) | OPS_BIT(1),
                       .inplace_in = 0,
    .sample = sample_swiglu,
    .doc = "a, b → silu(a)·b"};

const stg_op_def stg_rule_swiglu_bwd = {"swiglu_bwd", 3, 3, 2, NULL, 0, ops_infer_ternary_same, NULL, ops_flops_elem8, .inplace_in = 2};

// The sweep's model for mul (tests/test_ops.c).
static const char sample_mul[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param a [3, 7] init=embedding\n"
    "  - param b [3, 7] init=embedding\n"
    "  - loss = cross_entropy(mul(a, b), t)\n";

const stg_op_def stg_rule_mul = {"mul", 2, 2, 1, NULL, 0, ops_infer_binary_same, grad_mul, ops_flops_elem1, .saves_in = OPS_BIT(0) | OPS_BIT(1),
                    .inplace_in = 0,
    .sample = sample_mul,
    .doc = "a, b (same shape) → a·b, element by element"};

// The sweep's model for add (tests/test_ops.c).
static const char sample_add[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param a [3, 7] init=embedding\n"
    "  - param b [3, 7] init=embedding\n"
    "  - loss = cross_entropy(add(a, b), t)\n";

const stg_op_def stg_rule_add = {"add", 2, 2, 1, NULL, 0, ops_infer_binary_same, grad_add, ops_flops_elem1, .inplace_in = 0,
    .sample = sample_add, .accum_out = OPS_BIT(0),
    .doc = "a, b (same shape) → a + b"};

// The sweep's model for scale (tests/test_ops.c).
static const char sample_scale[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 7] init=embedding\n"
    "  - loss = cross_entropy(scale(x, factor=0.7), t)\n";

const stg_op_def stg_rule_scale = {"scale", 1, 1, 1, ATTRS(attrs_scale), infer_scale, grad_scale, ops_flops_elem1, .inplace_in = 0,
    .sample = sample_scale, .accum_out = OPS_BIT(0),
    .doc = "x → factor·x",
    .doc_attrs = "`factor`"};
