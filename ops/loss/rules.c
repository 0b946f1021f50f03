// The loss family's rules (cross_entropy, cross_entropy_bwd): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
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

static int infer_cross_entropy(stg_graph *g, int id, stg_err *err) {
    if (check_targets(g, id, err)) return -1;
    const stg_tensor *x = OPS_IN(g, id, 0);
    ops_set_shape(OPS_OUT(g, id, 0), 0, NULL, g->grad_dtype);
    int nd;
    int64_t s[STG_MAX_DIMS];
    ops_rows_shape(x, &nd, s);
    ops_set_shape(OPS_OUT(g, id, 1), nd, s, g->grad_dtype);
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
    .sample = sample_cross_entropy};

const stg_op_def stg_rule_cross_entropy_bwd = {"cross_entropy_bwd", 3, 3, 1, NULL, 0, infer_cross_entropy_bwd, NULL, ops_flops_softmax,
                                  .inplace_in = 0};
