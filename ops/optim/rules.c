// The optim family's rules (global_norm, lr_schedule, adamw, slot_norm): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"
#include "ops/optim/schedule.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int infer_global_norm(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < OPS_OP(g, id)->n_in; i++)
        if (ops_need_float(g, id, i, err)) return -1;
    ops_set_shape(OPS_OUT(g, id, 0), 0, NULL, g->grad_dtype);
    return 0;
}

// slots (k), norm (): norm = sqrt(slots[0] + ... + slots[k-1]), in place (optimizer in backward).
static int infer_slot_norm(stg_graph *g, int id, stg_err *err) {
    const stg_tensor *sl = OPS_IN(g, id, 0), *n = OPS_IN(g, id, 1);
    if (sl->ndim != 1 || !ops_is_float(sl->dtype)) return ops_bad(g, id, err, "slots '%s' must be a float vector%s", sl->name, NULL);
    if (stg_numel(n) != 1 || !ops_is_float(n->dtype)) return ops_bad(g, id, err, "norm '%s' must be a float scalar%s", n->name, NULL);
    return 0;
}

static int infer_lr_schedule(stg_graph *g, int id, stg_err *err) {
    if (stg_numel(OPS_IN(g, id, 0)) != 2 || !ops_is_float(OPS_IN(g, id, 0)->dtype))
        return ops_bad(g, id, err, "schedule state '%s' must hold [steps done, lr]%s", OPS_IN(g, id, 0)->name, NULL);
    const stg_lr_attrs *a = &OPS_OP(g, id)->a.lr;
    if (!(a->lr >= 0 && a->min_lr >= 0 && a->warmup >= 0 && a->cosine_steps >= 0))
        return ops_bad(g, id, err, "learning-rate schedule out of range (lr, min_lr, warmup, cosine_steps >= 0)%s%s", NULL, NULL);
    if (!(a->kind >= 0 && a->kind < STG_LR_KINDS && a->wsd_shape >= 0 && a->wsd_shape < STG_WSD_SHAPES && a->wsd_decay_frac >= 0 &&
          a->wsd_decay_frac <= 1))
        return ops_bad(g, id, err, "learning-rate schedule: unknown kind or WSD shape, or a WSD decay fraction outside [0, 1]%s%s", NULL,
                       NULL);
    return 0;
}

static int infer_adamw(stg_graph *g, int id, stg_err *err) {
    const stg_op *op = OPS_OP(g, id);
    const stg_tensor *p = OPS_IN(g, id, 0);
    int n = op->n_in;
    if (op->a.adamw.slot < 0) return ops_bad(g, id, err, "slot must be >= 0 (0: no slot)%s%s", NULL, NULL);
    if (op->a.adamw.slot > 0) { // the optimizer-in-backward form: the last input holds the slots
        const stg_tensor *sl = OPS_IN(g, id, n - 1);
        if (n < 7 || sl->ndim != 1 || !ops_is_float(sl->dtype) || op->a.adamw.slot > sl->shape[0])
            return ops_bad(g, id, err, "the slot must index the slots vector '%s' (the last input)%s", sl->name, NULL);
        n--;
    } else if (n > 7) {
        return ops_bad(g, id, err, "at most 7 inputs without a slot (param, grad, m, v, norm, sched, master)%s%s", NULL, NULL);
    }
    for (int i = 1; i < n; i++) {
        if (i == 4 || i == 5) continue;
        const stg_tensor *t = OPS_IN(g, id, i);
        if (!stg_same_shape(p, t)) return ops_bad(g, id, err, "'%s' must have the shape of parameter '%s'", t->name, p->name);
    }
    if (stg_numel(OPS_IN(g, id, 4)) != 1) return ops_bad(g, id, err, "norm '%s' must be a scalar%s", OPS_IN(g, id, 4)->name, NULL);
    if (stg_numel(OPS_IN(g, id, 5)) != 2) return ops_bad(g, id, err, "schedule state '%s' must hold [step, lr]%s", OPS_IN(g, id, 5)->name, NULL);
    const stg_adamw_attrs *a = &op->a.adamw;
    if (!(a->beta1 >= 0 && a->beta1 < 1 && a->beta2 >= 0 && a->beta2 < 1 && a->eps > 0 && a->weight_decay >= 0 && a->max_norm >= 0))
        return ops_bad(g, id, err, "hyperparameters out of range (0 <= beta < 1, eps > 0, weight decay >= 0, clip >= 0)%s%s", NULL, NULL);
    return 0;
}

static double flops_global_norm(const stg_graph *g, const stg_op *op) {
    double f = 0;
    for (int i = 0; i < op->n_in; i++) f += 2.0 * ops_numel_in(g, op, i);
    return f;
}

static double flops_adamw(const stg_graph *g, const stg_op *op) { return (op->a.adamw.slot > 0 ? 16.0 : 14.0) * ops_numel_in(g, op, 0); }

static double flops_slot_norm(const stg_graph *g, const stg_op *op) { return ops_numel_in(g, op, 0); }

double ops_lr_at(const stg_lr_attrs *a, int64_t t) { return stg_lr_schedule_at(a, t); }

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_adamw[] = {
    ATTR(adamw, beta1, STG_ATTR_FLOAT, 0.9, 0),        ATTR(adamw, beta2, STG_ATTR_FLOAT, 0.95, 0),
    ATTR(adamw, eps, STG_ATTR_FLOAT, 1e-8, 0),         ATTR(adamw, weight_decay, STG_ATTR_FLOAT, 0.1, 0),
    ATTR(adamw, max_norm, STG_ATTR_FLOAT, 1.0, 0),     ATTR(adamw, slot, STG_ATTR_INT, 0, 0),
};

const stg_op_def stg_rule_global_norm = {"global_norm", 1, -1, 1, NULL, 0, infer_global_norm, NULL, flops_global_norm, .inplace_in = -1};

const stg_op_def stg_rule_lr_schedule = {"lr_schedule", 1, 1, 0, NULL, 0, infer_lr_schedule, NULL, ops_flops_zero, .mutates_in = OPS_BIT(0),
                             .inplace_in = -1};

const stg_op_def stg_rule_adamw = {"adamw", 6, 8, 0, ATTRS(attrs_adamw), infer_adamw, NULL, flops_adamw,
                      .mutates_in = OPS_BIT(0) | OPS_BIT(2) | OPS_BIT(3) | OPS_BIT(6) | OPS_BIT(7), .inplace_in = -1};

const stg_op_def stg_rule_slot_norm = {"slot_norm", 2, 2, 0, NULL, 0, infer_slot_norm, NULL, flops_slot_norm, .mutates_in = OPS_BIT(1),
                          .inplace_in = -1};
