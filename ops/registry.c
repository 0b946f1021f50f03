// The op registry: the table of every op kind's row (each family's ops/<family>/rules.c defines
// `stg_rule_<name>`; a kind of ops/base/oplist.h without one does not link), its lookups, and the
// helpers the families' rules share.
#include "ops/registry.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// ---- the table ------------------------------------------------------------------------------

#define STG_X_RULE_DECL(e, n, f, a) extern const stg_op_def stg_rule_##n;
STG_OP_LIST(STG_X_RULE_DECL)
#undef STG_X_RULE_DECL

static const stg_op_def *const defs[STG_OP_COUNT] = {
#define STG_X_RULE(e, n, f, a) [STG_OP_##e] = &stg_rule_##n,
    STG_OP_LIST(STG_X_RULE)
#undef STG_X_RULE
};

const stg_op_def *ops_def(stg_op_kind k) { return (unsigned)k < STG_OP_COUNT ? defs[k] : NULL; }

int ops_n_out(const stg_op_def *d, int n_in) { return d->n_out >= 0 ? d->n_out : n_in / 2; }

const char *ops_name(stg_op_kind k) {
    const stg_op_def *d = ops_def(k);
    return d ? d->name : "?";
}

int ops_lookup(const char *name) {
    for (int k = 0; k < STG_OP_COUNT; k++)
        if (strcmp(defs[k]->name, name) == 0) return k;
    return -1;
}

// ---- shared helpers -------------------------------------------------------------------------

void ops_set_shape(stg_tensor *t, int ndim, const int64_t *shape, stg_dtype dt) {
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->dtype = dt;
}

void ops_copy_shape(stg_tensor *t, const stg_tensor *src, stg_dtype dt) { ops_set_shape(t, src->ndim, src->shape, dt); }

bool ops_is_float(stg_dtype d) { return d == STG_F32 || d == STG_BF16 || d == STG_F64; }

int ops_bad(stg_graph *g, int id, stg_err *err, const char *fmt, const char *a, const char *b) {
    const stg_op *op = OPS_OP(g, id);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return stg_errf_at(err, op->loc, "%s: %s", ops_name(op->kind), msg);
}

const char *ops_sh(const stg_tensor *t, char *buf) { return stg_shape_str(t, buf, 128); }

int ops_need_float(stg_graph *g, int id, int i, stg_err *err) {
    const stg_tensor *t = OPS_IN(g, id, i);
    if (!ops_is_float(t->dtype)) return ops_bad(g, id, err, "input '%s' must be a float tensor", t->name, NULL);
    return 0;
}

int ops_need_ndim(stg_graph *g, int id, int i, int lo, int hi, stg_err *err) {
    const stg_tensor *t = OPS_IN(g, id, i);
    if (t->ndim < lo || t->ndim > hi) {
        char b[128], want[64];
        if (lo == hi) snprintf(want, sizeof want, "%d dims", lo);
        else snprintf(want, sizeof want, "%d to %d dims", lo, hi);
        char what[300];
        snprintf(what, sizeof what, "'%s' has shape %s; expected %s", t->name, ops_sh(t, b), want);
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

int ops_need_same(stg_graph *g, int id, int i, int j, stg_err *err) {
    const stg_tensor *a = OPS_IN(g, id, i), *b = OPS_IN(g, id, j);
    if (!stg_same_shape(a, b) || a->dtype != b->dtype) {
        char x[128], y[128], what[400];
        snprintf(what, sizeof what, "'%s' %s %s and '%s' %s %s must have the same shape and dtype", a->name, ops_sh(a, x),
                 stg_dtype_name(a->dtype), b->name, ops_sh(b, y), stg_dtype_name(b->dtype));
        return ops_bad(g, id, err, "%s%s", what, NULL);
    }
    return 0;
}

// rows = product of all dims but the last; as a shape.
void ops_rows_shape(const stg_tensor *x, int *nd, int64_t *s) {
    *nd = x->ndim - 1;
    for (int i = 0; i + 1 < x->ndim; i++) s[i] = x->shape[i];
}

stg_dtype ops_grad_dtype_for(const stg_graph *g, const stg_tensor *t) {
    return t->cls == STG_CLASS_PARAM ? g->grad_dtype : t->dtype;
}

// The optional addend input (stg_op_def.addend_in): of output 0's shape and dtype.
int ops_check_addend(stg_graph *g, int id, stg_err *err) {
    int k = ops_addend_of(OPS_OP(g, id));
    if (k < 0) return 0;
    const stg_tensor *acc = OPS_IN(g, id, k), *C = OPS_OUT(g, id, 0);
    bool same = acc->ndim == C->ndim && acc->dtype == C->dtype;
    for (int i = 0; same && i < C->ndim; i++) same = acc->shape[i] == C->shape[i];
    if (!same) return ops_bad(g, id, err, "the addend '%s' must have the product's shape and dtype%s", acc->name, "");
    return 0;
}

bool ops_can_accumulate(const stg_graph *g, int id, int k) {
    const stg_op *op = OPS_OP(g, id);
    const stg_op_def *d = ops_def(op->kind);
    if (!d || k < 0 || k >= op->n_out || k >= 32 || !((d->accum_out >> k) & 1u)) return false;
    return ops_addend_of(op) < 0;
}

double ops_loss_grad(const stg_graph *g) { return g->grad_accum > 1 ? 1.0 / (double)g->grad_accum : 1.0; }

int ops_addend_at(const stg_op *op) {
    const stg_op_def *d = ops_def(op->kind);
    if (!d || d->addend_in <= 0) return -1;
    return d->addend_at ? d->addend_at(op) : d->addend_in;
}

int ops_addend_of(const stg_op *op) {
    int k = ops_addend_at(op);
    return k > 0 && op->n_in == k + 1 ? k : -1;
}

int ops_infer_same_as_in0(stg_graph *g, int id, stg_err *err) {
    if (ops_need_float(g, id, 0, err)) return -1;
    ops_copy_shape(OPS_OUT(g, id, 0), OPS_IN(g, id, 0), OPS_IN(g, id, 0)->dtype);
    return 0;
}

// (a, b) same shape -> out same shape; for the *_bwd(x, dy) forms and mul/add/swiglu.
int ops_infer_binary_same(stg_graph *g, int id, stg_err *err) {
    if (ops_need_float(g, id, 0, err) || ops_need_same(g, id, 0, 1, err)) return -1;
    for (int o = 0; o < OPS_OP(g, id)->n_out; o++) ops_copy_shape(OPS_OUT(g, id, o), OPS_IN(g, id, 0), OPS_IN(g, id, 0)->dtype);
    return 0;
}

int ops_infer_ternary_same(stg_graph *g, int id, stg_err *err) {
    if (ops_need_float(g, id, 0, err) || ops_need_same(g, id, 0, 1, err) || ops_need_same(g, id, 0, 2, err)) return -1;
    for (int o = 0; o < OPS_OP(g, id)->n_out; o++) ops_copy_shape(OPS_OUT(g, id, o), OPS_IN(g, id, 0), OPS_IN(g, id, 0)->dtype);
    return 0;
}

double ops_numel_in(const stg_graph *g, const stg_op *op, int i) { return (double)stg_numel(&g->t[op->in[i]]); }

double ops_numel_out(const stg_graph *g, const stg_op *op, int o) { return (double)stg_numel(&g->t[op->out[o]]); }

double ops_flops_elem1(const stg_graph *g, const stg_op *op) { return ops_numel_out(g, op, 0); }

double ops_flops_elem4(const stg_graph *g, const stg_op *op) { return 4.0 * ops_numel_in(g, op, 0); }

double ops_flops_elem8(const stg_graph *g, const stg_op *op) { return 8.0 * ops_numel_in(g, op, 0); }

double ops_flops_softmax(const stg_graph *g, const stg_op *op) { return 5.0 * ops_numel_in(g, op, 0); }

double ops_flops_zero(const stg_graph *g, const stg_op *op) { return 0; }

// Emits one backward op for forward op `fwd`; names its outputs after `names` (may be NULL).
int ops_emit(const stg_grad_emit *e, stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a, const char *hint,
                int *outs, stg_err *err) {
    stg_loc loc = g->ops[fwd].loc;
    int id = e->add_op(g, k, in, n, a, STG_PHASE_BACKWARD, hint, loc, outs, err);
    if (id < 0) return stg_err_prefix(err, "in the gradient of %s", ops_name(g->ops[fwd].kind));
    g->ops[id].fwd = fwd;
    return id;
}

// "d.<name of tensor t>"
const char *ops_dname(const stg_graph *g, int t, char *buf) {
    snprintf(buf, STG_NAME_MAX, "d.%s", g->t[t].name);
    return buf;
}

void ops_name_out(stg_graph *g, int t, int like) {
    char b[STG_NAME_MAX];
    snprintf(g->t[t].name, STG_NAME_MAX, "%s", ops_dname(g, like, b));
}

int ops_emit1(const stg_grad_emit *e, stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a, int like, stg_err *err) {
    char b[STG_NAME_MAX];
    int out[STG_MAX_OUT];
    if (ops_emit(e, g, fwd, k, in, n, a, ops_dname(g, like, b), out, err) < 0) return -1;
    return out[0];
}

stg_attrs ops_no_attrs(void) {
    stg_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}
