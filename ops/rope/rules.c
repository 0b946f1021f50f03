// The rope family's rules (rope): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_rope(stg_graph *g, int id, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 3, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    if (x->shape[x->ndim - 1] % 2) return ops_bad(g, id, err, "'%s': head_dim (the last dim) must be even for RoPE", x->name, NULL);
    if (!(OPS_OP(g, id)->a.rope.theta > 0)) return ops_bad(g, id, err, "theta must be positive%s%s", NULL, NULL);
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    return 0;
}

static int grad_rope(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    stg_attrs a = g->ops[id].a;
    a.rope.inverse = !a.rope.inverse;
    return (din[0] = ops_emit1(e, g, id, STG_OP_ROPE, &dout[0], 1, &a, g->ops[id].in[0], err)) < 0 ? -1 : 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_rope[] = {ATTR(rope, theta, STG_ATTR_FLOAT, 10000.0, 0), ATTR(rope, inverse, STG_ATTR_INT, 0, 0)};

// The sweep's model for rope (tests/test_ops.c).
static const char sample_rope[] =
    "inputs: {t: [2, 3, 2, i32]}\n"
    "graph:\n"
    "  - param x [2, 3, 2, 6] init=embedding\n"
    "  - loss = cross_entropy(rope(x, theta=10000), t)\n";

const stg_op_def stg_rule_rope = {"rope", 1, 1, 1, ATTRS(attrs_rope), infer_rope, grad_rope, ops_flops_elem4, .inplace_in = 0,
    .sample = sample_rope,
    .doc = "x (…, S, H, Dh) → rotated pairs (x[2k], x[2k+1]) by position along S",
    .doc_attrs = "`theta` (10000), `inverse` (0; 1 rotates by the negative angle, as the backward does)"};
