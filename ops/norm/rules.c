// The norm family's rules (rmsnorm, rmsnorm_bwd, layernorm, layernorm_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_norm_common(stg_graph *g, int id, int n_params, stg_err *err) {
    if (ops_need_ndim(g, id, 0, 1, STG_MAX_DIMS, err) || ops_need_float(g, id, 0, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    for (int p = 1; p <= n_params; p++) {
        if (ops_need_ndim(g, id, p, 1, 1, err) || ops_need_float(g, id, p, err)) return -1;
        const stg_tensor *w = OPS_IN(g, id, p);
        if (w->shape[0] != x->shape[x->ndim - 1]) {
            char what[300];
            snprintf(what, sizeof what, "gain '%s' has %lld elements but '%s' has %lld features", w->name,
                     (long long)w->shape[0], x->name, (long long)x->shape[x->ndim - 1]);
            return ops_bad(g, id, err, "%s%s", what, NULL);
        }
    }
    if (!(OPS_OP(g, id)->a.norm.eps > 0)) return ops_bad(g, id, err, "eps must be positive%s%s", NULL, NULL);
    return 0;
}

static int infer_rmsnorm(stg_graph *g, int id, stg_err *err) {
    if (infer_norm_common(g, id, 1, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    ops_rows_shape(x, &nd, s);
    ops_set_shape(OPS_OUT(g, id, 1), nd, s, g->grad_dtype);
    return 0;
}

static int infer_layernorm(stg_graph *g, int id, stg_err *err) {
    if (infer_norm_common(g, id, 2, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    ops_rows_shape(x, &nd, s);
    s[nd++] = 2;
    ops_set_shape(OPS_OUT(g, id, 1), nd, s, g->grad_dtype);
    return 0;
}

// (x, w, stats, dy) -> dx, dw[, db]
static int infer_norm_bwd(stg_graph *g, int id, stg_err *err) {
    if (ops_need_same(g, id, 0, 3, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0), *w = OPS_IN(g, id, 1);
    if (w->ndim != 1 || w->shape[0] != x->shape[x->ndim - 1]) return ops_bad(g, id, err, "gain '%s' does not match '%s'", w->name, x->name);
    ops_copy_shape(OPS_OUT(g, id, 0), x, x->dtype);
    for (int o = 1; o < OPS_OP(g, id)->n_out; o++) ops_copy_shape(OPS_OUT(g, id, o), w, ops_grad_dtype_for(g, w));
    return ops_check_addend(g, id, err);
}

// Norms: (x, w[, b]) -> (y, stats); backward (x, w, stats, dy) -> (dx, dw[, db]).
static int grad_norm(const stg_grad_emit *e, stg_graph *g, int id, const int *dout, const bool *want, int *din, stg_err *err) {
    const stg_op f = g->ops[id];
    stg_op_kind k = f.kind == STG_OP_RMSNORM ? STG_OP_RMSNORM_BWD : STG_OP_LAYERNORM_BWD;
    int in[4] = {f.in[0], f.in[1], f.out[1], dout[0]};
    int out[STG_MAX_OUT];
    char b[STG_NAME_MAX];
    if (ops_emit(e, g, id, k, in, 4, &f.a, ops_dname(g, f.in[0], b), out, err) < 0) return -1;
    for (int i = 0; i < f.n_in; i++) {
        ops_name_out(g, out[i], f.in[i]);
        if (want[i]) din[i] = out[i];
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_norm[] = {ATTR(norm, eps, STG_ATTR_FLOAT, 1e-5, 0)};

// The sweep's model for rmsnorm (tests/test_ops.c).
static const char sample_rmsnorm[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 6] init=embedding\n"
    "  - param w [6] init=embedding\n"
    "  - loss = cross_entropy(rmsnorm(x, w, eps=1e-5), t)\n";

const stg_op_def stg_rule_rmsnorm = {"rmsnorm", 2, 2, 2, ATTRS(attrs_norm), infer_rmsnorm, grad_norm, ops_flops_elem4,
                        .saves_in = OPS_BIT(0) | OPS_BIT(1), .saves_out = OPS_BIT(1), .no_decay_in = OPS_BIT(1), .inplace_in = -1,
    .sample = sample_rmsnorm,
    .doc = "x (…, D), w (D) → y, rstd (rows)",
    .doc_attrs = "`eps` (1e-5)"};

const stg_op_def stg_rule_rmsnorm_bwd = {"rmsnorm_bwd", 4, 5, 2, ATTRS(attrs_norm), infer_norm_bwd, NULL, ops_flops_elem8, .inplace_in = 3,
                            .addend_in = 4};

// The sweep's model for layernorm (tests/test_ops.c).
static const char sample_layernorm[] =
    "inputs: {t: [3, i32]}\n"
    "graph:\n"
    "  - param x [3, 6] init=embedding\n"
    "  - param w [6] init=embedding\n"
    "  - param b [6] init=embedding\n"
    "  - loss = cross_entropy(layernorm(x, w, b, eps=1e-5), t)\n";

const stg_op_def stg_rule_layernorm = {"layernorm", 3, 3, 2, ATTRS(attrs_norm), infer_layernorm, grad_norm, ops_flops_elem8,
                          .saves_in = OPS_BIT(0) | OPS_BIT(1), .saves_out = OPS_BIT(1), .no_decay_in = OPS_BIT(1) | OPS_BIT(2),
                          .inplace_in = -1,
    .sample = sample_layernorm,
    .doc = "x (…, D), w (D), b (D) → y, stats (rows, 2)",
    .doc_attrs = "`eps` (1e-5)"};

const stg_op_def stg_rule_layernorm_bwd = {"layernorm_bwd", 4, 5, 3, ATTRS(attrs_norm), infer_norm_bwd, NULL, ops_flops_elem8, .inplace_in = 3,
                              .addend_in = 4};
