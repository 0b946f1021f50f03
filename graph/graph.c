#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"

stg_graph *graph_new(stg_precision prec, stg_err *err) {
    stg_graph *g = stg_calloc(1, sizeof *g, err);
    if (!g) return NULL;
    g->precision = prec;
    switch (prec) {
    case STG_PREC_FP32: g->act_dtype = STG_F32; g->grad_dtype = STG_F32; break;
    case STG_PREC_BF16: g->act_dtype = STG_BF16; g->grad_dtype = STG_F32; break;
    case STG_PREC_FP64: g->act_dtype = STG_F64; g->grad_dtype = STG_F64; break;
    }
    g->loss = -1;
    g->grad_norm = -1;
    g->sched_state = -1;
    for (int r = 0; r < STG_DIM_ROLES; r++) g->role_dim[r] = -1;
    return g;
}

void graph_free(stg_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->nops; i++) free(g->ops[i].in);
    free(g->ops);
    free(g->t);
    free(g->dims);
    free(g->opt_names);
    free(g->opt_values);
    free(g->schedule);
    for (int i = 0; i < g->nstrings; i++) free(g->strings[i]);
    free(g->strings);
    free(g);
}

const char *graph_intern(stg_graph *g, const char *s, stg_err *err) {
    if (!s) return NULL;
    for (int i = 0; i < g->nstrings; i++)
        if (strcmp(g->strings[i], s) == 0) return g->strings[i];
    char **ns = stg_realloc(g->strings, sizeof *ns * (size_t)(g->nstrings + 1), err);
    if (!ns) return NULL;
    g->strings = ns;
    char *c = stg_strdup(s, err);
    if (!c) return NULL;
    g->strings[g->nstrings++] = c;
    return c;
}

int graph_shape_check(const char *name, int ndim, const int64_t *shape, stg_loc loc, stg_err *err) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return stg_errf_at(err, loc, "tensor '%s' has a negative size %lld in dim %d", name, (long long)shape[i], i);
        if (__builtin_mul_overflow(n, shape[i], &n) || n > STG_MAX_NUMEL)
            return stg_errf_at(err, loc, "tensor '%s' would have more than 2^36 = %lld elements; sizes that large are not supported",
                               name, (long long)STG_MAX_NUMEL);
    }
    return 0;
}

int graph_add_tensor(stg_graph *g, const char *name, int ndim, const int64_t *shape, stg_dtype dt,
                     stg_tclass cls, stg_loc loc, stg_err *err) {
    if (ndim < 0 || ndim > STG_MAX_DIMS)
        return stg_errf_at(err, loc, "tensor '%s' has %d dims; at most %d are supported", name, ndim, STG_MAX_DIMS);
    if (strlen(name) >= STG_NAME_MAX)
        return stg_errf_at(err, loc, "name '%.40s...' is longer than %d characters", name, STG_NAME_MAX - 1);
    if (g->nt >= STG_MAX_TENSORS) return stg_errf_at(err, loc, "more than %d tensors in one graph", STG_MAX_TENSORS);
    if (graph_shape_check(name, ndim, shape, loc, err)) return -1;
    if (g->nt == g->cap_t) {
        int cap = g->cap_t ? g->cap_t * 2 : 256;
        stg_tensor *nt = stg_realloc(g->t, sizeof *nt * (size_t)cap, err);
        if (!nt) return -1;
        g->t = nt;
        g->cap_t = cap;
    }
    stg_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->dtype = dt;
    t->cls = cls;
    t->producer = -1;
    t->base = -1;
    t->param = -1;
    t->grad = -1;
    t->group = -1;
    t->loc = loc;
    return g->nt++;
}

int graph_find_tensor(const stg_graph *g, const char *name) {
    for (int i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0) return i;
    return -1;
}

int graph_param_state(const stg_graph *g, int p, stg_role role) {
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_OPTIMIZER && g->t[t].param == p && g->t[t].role == role) return t;
    return -1;
}

int graph_add_op(stg_graph *g, stg_op_kind kind, const int *in, int n_in, const stg_attrs *a,
                 stg_phase phase, const char *name_hint, stg_loc loc, int *out_ids, stg_err *err) {
    const stg_op_def *d = ops_def(kind);
    if (!d) return stg_errf_at(err, loc, "unknown op kind %d", (int)kind);
    if (n_in < d->min_in || (d->max_in >= 0 && n_in > d->max_in)) {
        if (d->max_in < 0)
            return stg_errf_at(err, loc, "%s takes at least %d inputs, got %d", d->name, d->min_in, n_in);
        if (d->min_in == d->max_in)
            return stg_errf_at(err, loc, "%s takes %d input%s, got %d", d->name, d->min_in, d->min_in == 1 ? "" : "s", n_in);
        return stg_errf_at(err, loc, "%s takes %d to %d inputs, got %d", d->name, d->min_in, d->max_in, n_in);
    }
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0 || in[i] >= g->nt) return stg_errf_at(err, loc, "%s: input %d is not a tensor", d->name, i);
    if (g->nops == g->cap_ops) {
        int cap = g->cap_ops ? g->cap_ops * 2 : 256;
        stg_op *no = stg_realloc(g->ops, sizeof *no * (size_t)cap, err);
        if (!no) return -1;
        g->ops = no;
        g->cap_ops = cap;
    }
    int id = g->nops;
    stg_op *op = &g->ops[id];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->phase = phase;
    op->fwd = -1;
    op->recompute_of = -1;
    op->loc = loc;
    if (a) op->a = *a;
    op->in = stg_malloc(sizeof(int) * (size_t)(n_in ? n_in : 1), err);
    if (!op->in) return -1;
    memcpy(op->in, in, sizeof(int) * (size_t)n_in);
    op->n_in = n_in;
    g->nops++;
    const char *hint = name_hint && name_hint[0] ? name_hint : d->name;
    const int n_out = ops_n_out(d, n_in);
    for (int o = 0; o < n_out; o++) {
        char nm[STG_NAME_MAX + 16];
        if (o == 0)
            snprintf(nm, sizeof nm, "%s", hint);
        else
            snprintf(nm, sizeof nm, "%s.%d", hint, o);
        nm[STG_NAME_MAX - 1] = 0;
        int t = graph_add_tensor(g, nm, 0, NULL, g->act_dtype, STG_CLASS_TEMPORARY, loc, err);
        if (t < 0) {
            g->nops--;
            free(op->in);
            return -1;
        }
        op = &g->ops[id];
        g->t[t].producer = id;
        op->out[o] = t;
    }
    op->n_out = n_out;
    if (d->view) g->t[op->out[0]].base = g->t[op->in[0]].base >= 0 ? g->t[op->in[0]].base : op->in[0];
    if (d->infer(g, id, err) < 0) return -1;
    for (int o = 0; o < op->n_out; o++) {
        stg_tensor *t = &g->t[g->ops[id].out[o]];
        for (int k = 0; k < t->ndim; k++)
            if (t->shape[k] <= 0)
                return stg_errf_at(err, loc, "%s: output '%s' would have a non-positive size in dim %d", d->name, t->name, k);
        if (t->ndim < 0 || t->ndim > STG_MAX_DIMS)
            return stg_errf_at(err, loc, "%s: output '%s' would have %d dims; at most %d are supported", d->name, t->name, t->ndim, STG_MAX_DIMS);
        if (graph_shape_check(t->name, t->ndim, t->shape, loc, err)) return -1;
        if (out_ids) out_ids[o] = g->ops[id].out[o];
    }
    return id;
}

int graph_fold_add(stg_graph *g, int prod, int addend, const char *name, int first_op, stg_err *err) {
    if (prod < 0 || prod >= g->nt || addend < 0 || addend >= g->nt || prod == addend) return 0;
    const stg_tensor *p = &g->t[prod], *a = &g->t[addend];
    int pr = p->producer;
    if (pr < 0 || pr < first_op) return 0;
    int k = ops_addend_at(&g->ops[pr]);
    if (k <= 0 || g->ops[pr].n_in != k || g->ops[pr].out[0] != prod || p->base >= 0 || p->cls == STG_CLASS_PARAM ||
        a->dtype != p->dtype || a->ndim != p->ndim)
        return 0;
    for (int i = 0; i < p->ndim; i++)
        if (a->shape[i] != p->shape[i]) return 0;
    for (int o = pr + 1; o < g->nops; o++) // ops before the producer cannot read its output
        for (int i = 0; i < g->ops[o].n_in; i++)
            if (g->ops[o].in[i] == prod || g->t[g->ops[o].in[i]].base == prod) return 0;
    stg_op *op = &g->ops[pr];
    int *in = stg_realloc(op->in, sizeof *in * (size_t)(k + 1), err);
    if (!in) return -1;
    op->in = in;
    op->in[op->n_in++] = addend;
    if (name && name[0]) snprintf(g->t[prod].name, sizeof g->t[prod].name, "%s", name);
    return 1;
}

int64_t graph_dim(const stg_graph *g, const char *name, bool *found) {
    for (int i = 0; i < g->ndims; i++)
        if (strcmp(g->dims[i].name, name) == 0) {
            if (found) *found = true;
            return g->dims[i].value;
        }
    if (found) *found = false;
    return 0;
}

static const char *const role_keys[STG_DIM_ROLES] = {"batch", "ctx", "vocab"};

const char *graph_role_key(stg_dim_role r) { return (unsigned)r < STG_DIM_ROLES ? role_keys[r] : "?"; }

int graph_role_parse(const char *key) {
    for (int r = 0; r < STG_DIM_ROLES; r++)
        if (strcmp(key, role_keys[r]) == 0) return r;
    return -1;
}

int graph_role_index(const stg_graph *g, stg_dim_role r) {
    if ((unsigned)r >= STG_DIM_ROLES) return -1;
    int i = g->role_dim[r];
    return i >= 0 && i < g->ndims ? i : -1;
}

int64_t graph_role_value(const stg_graph *g, stg_dim_role r, bool *found) {
    int i = graph_role_index(g, r);
    if (found) *found = i >= 0;
    return i >= 0 ? g->dims[i].value : 0;
}

const char *graph_role_name(const stg_graph *g, stg_dim_role r) {
    int i = graph_role_index(g, r);
    return i >= 0 ? g->dims[i].name : NULL;
}

const char *graph_role_missing(stg_dim_role r) {
    switch (r) {
    case STG_DIM_BATCH: return "the model has no batch dim: name one `batch`, or declare it in the model file: roles: {batch: DIM}";
    case STG_DIM_CTX: return "the model has no ctx dim: name one `ctx`, or declare it in the model file: roles: {ctx: DIM}";
    case STG_DIM_VOCAB: return "the model has no vocab dim: name one `vocab`, or declare it in the model file: roles: {vocab: DIM}";
    default: return "the model has no such dim";
    }
}

void graph_roles_by_name(stg_graph *g) {
    for (int r = 0; r < STG_DIM_ROLES; r++) {
        g->role_dim[r] = -1;
        for (int i = 0; i < g->ndims; i++)
            if (strcmp(g->dims[i].name, role_keys[r]) == 0) g->role_dim[r] = i;
    }
}

const char *graph_option(const stg_graph *g, const char *name) {
    for (int i = 0; i < g->nopts; i++)
        if (strcmp(g->opt_names[i], name) == 0) return g->opt_values[i];
    return NULL;
}

int64_t graph_param_count(const stg_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].cls == STG_CLASS_PARAM) n += stg_numel(&g->t[i]);
    return n;
}

double graph_op_flops(const stg_graph *g, int op) {
    const stg_op_def *d = ops_def(g->ops[op].kind);
    return d->flops ? d->flops(g, &g->ops[op]) : 0.0;
}

double graph_phase_flops(const stg_graph *g, stg_phase ph) {
    double f = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].phase == ph) f += graph_op_flops(g, i);
    return f;
}
