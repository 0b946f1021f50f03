// The inference graphs of graph/infer.h: the forward ops the logits need are copied in order (their
// shapes inferred again), the loss dropped, each attention op given its cached form, and one sample
// op appended.
#include "graph/infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"

typedef struct {
    const stg_graph *f; // the forward graph
    stg_graph *g;       // the one being built
    const graph_infer_opts *o;
    graph_infer_info *info;
    int *m;             // (f->nt) f's tensor -> g's, -1 when g has none
    char *need;         // (f->nops) the logits depend on the op
    char *absorbed;     // (f->nops) decode: a rope op folded into the attention op that reads it
    double *theta;      // (f->nops) decode: the RoPE theta folded into an attention op, 0 for none
    stg_err *err;
} D;

static stg_loc loc_in(D *d, stg_loc l) {
    l.file = l.file ? graph_intern(d->g, l.file, d->err) : NULL;
    return l;
}

static bool reads(const stg_op *op, int t) {
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i] == t) return true;
    return false;
}

// The single reader among the needed ops of tensor t and its views, or -1 when there are none or
// several (op `self` counted once however many of its inputs read t).
static int only_reader(const D *d, int t) {
    int r = -1;
    for (int o = 0; o < d->f->nops; o++) {
        if (!d->need[o]) continue;
        const stg_op *op = &d->f->ops[o];
        bool hit = reads(op, t);
        for (int i = 0; !hit && i < op->n_in; i++) hit = d->f->t[op->in[i]].base == t;
        if (!hit) continue;
        if (r >= 0) return -1;
        r = o;
    }
    return r;
}

// The ops the logits depend on: a backward sweep from them (forward graphs are in topological order).
static void mark_needed(D *d, int logits) {
    const stg_graph *f = d->f;
    char *want = calloc((size_t)f->nt, 1);
    if (!want) return;
    want[logits] = 1;
    for (int o = f->nops - 1; o >= 0; o--) {
        const stg_op *op = &f->ops[o];
        bool any = false;
        for (int k = 0; k < op->n_out; k++) any |= want[op->out[k]] != 0;
        if (!any) continue;
        d->need[o] = 1;
        // attention's optional 4th input (packed documents) is not read by the inference forms
        int n = op->kind == STG_OP_ATTENTION && op->n_in > 3 ? 3 : op->n_in;
        for (int i = 0; i < n; i++) {
            want[op->in[i]] = 1;
            if (f->t[op->in[i]].base >= 0) want[f->t[op->in[i]].base] = 1;
        }
    }
    free(want);
}

// Decode: each attention op whose q and k come straight from rope ops (same theta, read by nothing
// else) takes their rotation over, at the position on the device. A rope op left over is an error:
// at one token per step it would rotate every token to position 0.
static int fold_rope(D *d) {
    const stg_graph *f = d->f;
    for (int o = 0; o < f->nops; o++) {
        const stg_op *op = &f->ops[o];
        if (!d->need[o] || op->kind != STG_OP_ATTENTION) continue;
        int pq = f->t[op->in[0]].producer, pk = f->t[op->in[1]].producer;
        if (pq < 0 || pk < 0 || f->ops[pq].kind != STG_OP_ROPE || f->ops[pk].kind != STG_OP_ROPE) continue;
        const stg_rope_attrs *aq = &f->ops[pq].a.rope, *ak = &f->ops[pk].a.rope;
        if (aq->inverse || ak->inverse || aq->theta != ak->theta || pq == pk) continue;
        if (only_reader(d, op->in[0]) != o || only_reader(d, op->in[1]) != o) continue;
        d->absorbed[pq] = d->absorbed[pk] = 1;
        d->theta[o] = aq->theta;
    }
    for (int o = 0; o < f->nops; o++)
        if (d->need[o] && f->ops[o].kind == STG_OP_ROPE && !d->absorbed[o])
            return stg_errf_at(d->err, f->ops[o].loc,
                               "rope: decoding applies RoPE inside attention, to q and k taken straight from rope ops; this rope's "
                               "output '%s' goes elsewhere, which one token per step cannot reproduce",
                               f->t[f->ops[o].out[0]].name);
    return 0;
}

static int add_state(D *d, const char *name, int ndim, const int64_t *shape, stg_dtype dt, stg_tclass cls) {
    stg_loc none = {NULL, 0, 0};
    return graph_add_tensor(d->g, name, ndim, shape, dt, cls, none, d->err);
}

// Names g's outputs of new op `id` as f's outputs of op `o`.
static void copy_names(D *d, int id, int o) {
    const stg_op *fo = &d->f->ops[o], *go = &d->g->ops[id];
    for (int k = 0; k < go->n_out && k < fo->n_out; k++)
        snprintf(d->g->t[go->out[k]].name, STG_NAME_MAX, "%s", d->f->t[fo->out[k]].name);
}

static int map_in(D *d, const stg_op *op, int i) {
    int t = d->m[op->in[i]];
    if (t < 0)
        stg_errf_at(d->err, op->loc, "%s reads '%s', which an inference graph cannot compute (the attention's log-sum-exp, or the "
                    "training targets)", ops_name(op->kind), d->f->t[op->in[i]].name);
    return t;
}

static int copy_ops(D *d) {
    const stg_graph *f = d->f;
    stg_graph *g = d->g;
    graph_infer_info *in = d->info;
    int layer = 0;
    for (int o = 0; o < f->nops; o++) {
        if (!d->need[o]) continue;
        const stg_op *op = &f->ops[o];
        stg_loc loc = loc_in(d, op->loc);
        if (op->loc.file && !loc.file) return -1;
        if (d->absorbed[o]) { // a rope folded into its attention op: its output stands for its input
            d->m[op->out[0]] = d->m[op->in[0]];
            continue;
        }
        int ins[64], outs[STG_MAX_OUT];
        int n = op->kind == STG_OP_ATTENTION ? 3 : op->n_in;
        if (n > 64) return stg_errf_at(d->err, op->loc, "%s: too many inputs to copy", ops_name(op->kind));
        for (int i = 0; i < n; i++)
            if ((ins[i] = map_in(d, op, i)) < 0) return -1;
        if (op->kind != STG_OP_ATTENTION) {
            int id = graph_add_op(g, op->kind, ins, n, &op->a, STG_PHASE_FORWARD, f->t[op->out[0]].name, loc, outs, d->err);
            if (id < 0) return -1;
            copy_names(d, id, o);
            for (int k = 0; k < op->n_out; k++) d->m[op->out[k]] = outs[k];
            continue;
        }
        int kc = in->kv0 + 2 * layer, vc = kc + 1;
        layer++;
        if (d->o->kind == GRAPH_INFER_PREFILL) { // the model's attention, then K and V into the cache
            int id = graph_add_op(g, op->kind, ins, 3, &op->a, STG_PHASE_FORWARD, f->t[op->out[0]].name, loc, outs, d->err);
            if (id < 0) return -1;
            copy_names(d, id, o);
            for (int k = 0; k < op->n_out; k++) d->m[op->out[k]] = outs[k];
            int w[5] = {ins[1], ins[2], kc, vc, in->pos};
            char nm[STG_NAME_MAX];
            snprintf(nm, sizeof nm, "kv_write.%d", layer - 1);
            if (graph_add_op(g, STG_OP_KV_WRITE, w, 5, NULL, STG_PHASE_FORWARD, nm, loc, NULL, d->err) < 0) return -1;
            continue;
        }
        stg_attrs a;
        memset(&a, 0, sizeof a);
        a.attention_cached.scale = op->a.attention.scale;
        a.attention_cached.rope_theta = d->theta[o];
        int c[6] = {ins[0], ins[1], ins[2], kc, vc, in->pos};
        int id = graph_add_op(g, STG_OP_ATTENTION_CACHED, c, 6, &a, STG_PHASE_FORWARD, f->t[op->out[0]].name, loc, outs, d->err);
        if (id < 0) return -1;
        d->m[op->out[0]] = outs[0]; // the log-sum-exp (output 1) is for the backward pass: none here
    }
    return 0;
}

// The token input: the one INPUT the needed ops read (attention's document ids aside), i32 (B, S).
static int find_tokens(D *d) {
    const stg_graph *f = d->f;
    int tok = -1;
    for (int o = 0; o < f->nops; o++) {
        if (!d->need[o]) continue;
        const stg_op *op = &f->ops[o];
        int n = op->kind == STG_OP_ATTENTION && op->n_in > 3 ? 3 : op->n_in;
        for (int i = 0; i < n; i++) {
            int t = op->in[i];
            if (f->t[t].cls != STG_CLASS_INPUT || t == tok) continue;
            if (tok >= 0)
                return stg_errf(d->err, "the logits depend on two inputs, '%s' and '%s'; sampling feeds one: the token ids", f->t[tok].name,
                                f->t[t].name);
            tok = t;
        }
    }
    if (tok < 0) return stg_errf(d->err, "the logits depend on no input; sampling feeds them the token ids");
    const stg_tensor *x = &f->t[tok];
    if (x->dtype != STG_I32 || x->ndim != 2)
        return stg_errf(d->err, "the input '%s' must be token ids, [batch, ctx, i32], to sample from the model", x->name);
    return tok;
}

static int derive(D *d) {
    const stg_graph *f = d->f;
    stg_graph *g = d->g;
    graph_infer_info *in = d->info;
    if (f->loss < 0 || f->t[f->loss].producer < 0 || f->ops[f->t[f->loss].producer].kind != STG_OP_CROSS_ENTROPY)
        return stg_errf(d->err, "sampling needs a model whose loss is cross_entropy(logits, targets): the logits are what it samples from");
    int logits = f->ops[f->t[f->loss].producer].in[0];
    const stg_tensor *lg = &f->t[logits];
    mark_needed(d, logits);
    for (int o = 0; o < f->nops; o++)
        if (d->need[o] && f->ops[o].kind == STG_OP_CAUSAL_MASK)
            return stg_errf_at(d->err, f->ops[o].loc, "causal_mask: the attention is written out (--attention naive); sampling needs the "
                               "fused attention op (--attention flash), whose cached form it runs");
    if (d->o->kind == GRAPH_INFER_DECODE && fold_rope(d)) return -1;
    int tok = find_tokens(d);
    if (tok < 0) return -1;
    const int64_t B = f->t[tok].shape[0], S = f->t[tok].shape[1], C = d->o->ctx;
    if (lg->ndim < 2 || lg->shape[0] != B || stg_numel(lg) % (B * S) != 0)
        return stg_errf(d->err, "the logits '%s' must be (batch, ctx, vocab) for the tokens '%s'", lg->name, f->t[tok].name);
    if (S > C) return stg_errf(d->err, "%lld tokens per step do not fit a cache of %lld positions", (long long)S, (long long)C);
    in->batch = B, in->tokens_per_step = S, in->ctx = C, in->vocab = lg->shape[lg->ndim - 1];
    in->tokens = -1;
    // the parameters, in the model's order
    for (int t = 0; t < f->nt; t++) {
        const stg_tensor *x = &f->t[t];
        if (x->cls != STG_CLASS_PARAM) continue;
        stg_loc loc = loc_in(d, x->loc);
        if (x->loc.file && !loc.file) return -1;
        if ((d->m[t] = graph_add_tensor(g, x->name, x->ndim, x->shape, x->dtype, STG_CLASS_PARAM, loc, d->err)) < 0) return -1;
        g->t[d->m[t]].init = x->init;
    }
    // the sampler's state and the token ids
    int64_t s_tok[2] = {B, 1}, s_pos[1] = {1}, s_ids[2] = {B, C};
    if ((in->token = add_state(d, "sample.token", 2, s_tok, STG_I32, STG_CLASS_WORKSPACE)) < 0 ||
        (in->pos = add_state(d, "sample.pos", 1, s_pos, STG_I32, STG_CLASS_WORKSPACE)) < 0 ||
        (in->ids = add_state(d, "sample.ids", 2, s_ids, STG_I32, STG_CLASS_WORKSPACE)) < 0)
        return -1;
    if (d->o->kind == GRAPH_INFER_PREFILL) {
        if ((in->tokens = add_state(d, f->t[tok].name, 2, f->t[tok].shape, STG_I32, STG_CLASS_INPUT)) < 0) return -1;
        d->m[tok] = in->tokens;
    } else {
        if (S != 1) return stg_errf(d->err, "a decode step takes one token per sequence, not %lld", (long long)S);
        d->m[tok] = in->token;
    }
    // the KV cache: one pair per attention op, in model order
    in->kv0 = g->nt;
    for (int o = 0; o < f->nops; o++) {
        const stg_op *op = &f->ops[o];
        if (!d->need[o] || op->kind != STG_OP_ATTENTION) continue;
        const stg_tensor *k = &f->t[op->in[1]];
        if (k->ndim != 4) return stg_errf_at(d->err, op->loc, "attention: k '%s' must be (B, S, H, Dh)", k->name);
        if (in->n_layers == 0) in->kv_heads = k->shape[2], in->head_dim = k->shape[3];
        int64_t s[4] = {B, k->shape[2], C, k->shape[3]}; // head-major: a head's positions contiguous
        char nm[64];
        for (int j = 0; j < 2; j++) {
            snprintf(nm, sizeof nm, "kv.%d.%c", in->n_layers, j ? 'v' : 'k');
            if (add_state(d, nm, 4, s, k->dtype, STG_CLASS_WORKSPACE) < 0) return -1;
        }
        in->n_layers++;
    }
    if (copy_ops(d)) return -1;
    if ((in->logits = d->m[logits]) < 0) return stg_errf(d->err, "internal: the logits were not copied");
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.sample = d->o->sample;
    a.sample.advance = S;
    int sin[4] = {in->logits, in->token, in->pos, in->ids};
    stg_loc none = {NULL, 0, 0};
    if (graph_add_op(g, STG_OP_SAMPLE, sin, 4, &a, STG_PHASE_FORWARD, "sample", none, NULL, d->err) < 0) return -1;
    g->n_fwd_ops = g->nops;
    return 0;
}

// The dims, their roles and the options, as loaded (they describe the graph's shapes: batch B, ctx S).
static int copy_dims(const stg_graph *f, stg_graph *g, stg_err *err) {
    snprintf(g->name, sizeof g->name, "%s", f->name);
    if (f->ndims) {
        if (!(g->dims = stg_calloc((size_t)f->ndims, sizeof *g->dims, err))) return -1;
        memcpy(g->dims, f->dims, sizeof *g->dims * (size_t)f->ndims);
        g->ndims = f->ndims;
    }
    memcpy(g->role_dim, f->role_dim, sizeof g->role_dim); // the same dims, so the same roles
    if (f->nopts) {
        g->opt_names = stg_calloc((size_t)f->nopts, sizeof *g->opt_names, err);
        g->opt_values = stg_calloc((size_t)f->nopts, sizeof *g->opt_values, err);
        if (!g->opt_names || !g->opt_values) return -1;
        memcpy(g->opt_names, f->opt_names, sizeof *g->opt_names * (size_t)f->nopts);
        memcpy(g->opt_values, f->opt_values, sizeof *g->opt_values * (size_t)f->nopts);
        g->nopts = f->nopts;
    }
    return 0;
}

int graph_infer(const stg_graph *fwd, const graph_infer_opts *o, stg_graph **out, graph_infer_info *info, stg_err *err) {
    *out = NULL;
    memset(info, 0, sizeof *info);
    if (fwd->nops != fwd->n_fwd_ops) return stg_errf(err, "graph_infer: expected a forward graph, as loaded");
    if (o->ctx <= 0) return stg_errf(err, "graph_infer: the cache needs at least one position");
    D d = {fwd, NULL, o, info, NULL, NULL, NULL, NULL, err};
    d.g = graph_new(fwd->precision, err);
    d.m = malloc(sizeof(int) * (size_t)(fwd->nt ? fwd->nt : 1));
    d.need = calloc((size_t)(fwd->nops ? fwd->nops : 1), 1);
    d.absorbed = calloc((size_t)(fwd->nops ? fwd->nops : 1), 1);
    d.theta = calloc((size_t)(fwd->nops ? fwd->nops : 1), sizeof(double));
    int rc = -1;
    if (!d.g || !d.m || !d.need || !d.absorbed || !d.theta) {
        if (d.g) stg_errf(err, "graph_infer: out of host memory");
        goto out;
    }
    for (int t = 0; t < fwd->nt; t++) d.m[t] = -1;
    if (copy_dims(fwd, d.g, err) || derive(&d)) goto out;
    *out = d.g;
    d.g = NULL;
    rc = 0;
out:
    graph_free(d.g);
    free(d.m);
    free(d.need);
    free(d.absorbed);
    free(d.theta);
    return rc;
}
