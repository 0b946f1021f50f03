// The comm family's rules (allreduce, broadcast): shape rules, gradient rules, FLOPs and each op's row
// (ops/registry.h), read by the registry through stg_rule_<name>.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// Data parallel: allreduce: the tensors (one contiguous bucket of the planner's, or one scalar)
// become their mean over the ranks, in place; broadcast: the tensor becomes rank `root`'s. Float.
static int infer_allreduce(stg_graph *g, int id, stg_err *err) {
    for (int i = 0; i < OPS_OP(g, id)->n_in; i++) {
        if (ops_need_float(g, id, i, err)) return -1;
        if (OPS_IN(g, id, i)->dtype != OPS_IN(g, id, 0)->dtype)
            return ops_bad(g, id, err, "'%s' and '%s' must have one dtype", OPS_IN(g, id, i)->name, OPS_IN(g, id, 0)->name);
    }
    return 0;
}

// ---- attributes and rows ---------------------------------------------------------------------

static const stg_attr_def attrs_comm[] = {ATTR(comm, root, STG_ATTR_I64, 0, 1)};

const stg_op_def stg_rule_allreduce = {"allreduce", 1, -1, 0, NULL, 0, infer_allreduce, NULL, ops_flops_zero, .mutates_in = 0xffffffffu,
                          .inplace_in = -1};

const stg_op_def stg_rule_broadcast = {"broadcast", 1, 1, 0, ATTRS(attrs_comm), infer_allreduce, NULL, ops_flops_zero, .mutates_in = OPS_BIT(0),
                          .inplace_in = -1};
