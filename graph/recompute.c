// Recomputation: dropping a saved activation and making it again in the backward pass.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "ops/registry.h"

#define MAX_CHAIN 12 // ops copied for one activation at most

static int root_of(const stg_graph *g, int t) { return g->t[t].base >= 0 ? g->t[t].base : t; }

// Whether t is available when the backward pass runs: persistent, or a forward tensor that stays
// saved (read by a backward op and not the one being dropped), or made in the backward pass.
static bool available(const stg_graph *g, int t, int dropped) {
    const stg_tensor *x = &g->t[t];
    if (stg_class_persistent(x->cls)) return true;
    int r = root_of(g, t);
    if (r == dropped) return false;
    int pr = g->t[r].producer;
    if (pr < 0) return true;
    if (g->ops[pr].phase != STG_PHASE_FORWARD) return true;
    return g->t[r].cls == STG_CLASS_ACTIVATION;
}

// FLOPs to recompute t from available tensors; -1 when it cannot be done within MAX_CHAIN ops.
static double chain_cost(const stg_graph *g, int t, int dropped, char *seen, int *nops) {
    if (available(g, t, dropped)) return 0;
    int pr = g->t[t].producer;
    if (pr < 0 || g->ops[pr].phase != STG_PHASE_FORWARD) return -1;
    if (seen[pr]) return 0;
    seen[pr] = 1;
    if (++*nops > MAX_CHAIN) return -1;
    const stg_op_def *d = ops_def(g->ops[pr].kind);
    if (d->mutates_in) return -1;
    double f = graph_op_flops(g, pr);
    for (int i = 0; i < g->ops[pr].n_in; i++) {
        double c = chain_cost(g, g->ops[pr].in[i], dropped, seen, nops);
        if (c < 0) return -1;
        f += c;
    }
    return f;
}

static bool droppable(const stg_graph *g, int t) {
    if (t < 0 || t >= g->nt) return false;
    const stg_tensor *x = &g->t[t];
    return x->base < 0 && x->cls == STG_CLASS_ACTIVATION && x->producer >= 0 && g->ops[x->producer].phase == STG_PHASE_FORWARD &&
           t != g->loss;
}

bool graph_recompute_cost(const stg_graph *g, int t, double *flops) {
    if (!droppable(g, t)) return false;
    char *seen = calloc((size_t)g->nops, 1);
    if (!seen) return false;
    int nops = 0;
    double f = chain_cost(g, t, t, seen, &nops);
    free(seen);
    if (f < 0) return false;
    *flops = f;
    return true;
}

// The copy of forward tensor t made in the backward pass (memo: forward tensor -> copy).
static int copy_of(stg_graph *g, int t, int dropped, int *memo, stg_err *err) {
    if (available(g, t, dropped)) return t;
    if (memo[t] >= 0) return memo[t];
    int pr = g->t[t].producer;
    stg_op src = g->ops[pr];
    int in[64];
    if (src.n_in > 64) return stg_errf(err, "recompute: too many inputs");
    for (int i = 0; i < src.n_in; i++)
        if ((in[i] = copy_of(g, src.in[i], dropped, memo, err)) < 0) return -1;
    char hint[STG_NAME_MAX + 8];
    snprintf(hint, sizeof hint, "%s'", g->t[src.out[0]].name);
    hint[STG_NAME_MAX - 1] = 0;
    int outs[STG_MAX_OUT];
    int id = graph_add_op(g, src.kind, in, src.n_in, &src.a, STG_PHASE_BACKWARD, hint, src.loc, outs, err);
    if (id < 0) return -1;
    g->ops[id].recompute_of = pr;
    for (int k = 0; k < src.n_out; k++) memo[src.out[k]] = outs[k];
    return memo[t];
}

int graph_recompute(stg_graph *g, int t, stg_err *err) {
    double f;
    if (!graph_recompute_cost(g, t, &f))
        return stg_errf(err, "'%s' cannot be recomputed from what the backward pass still holds", t >= 0 && t < g->nt ? g->t[t].name : "?");
    const int nt0 = g->nt, nops0 = g->nops;
    int *memo = malloc(sizeof(int) * (size_t)nt0);
    if (!memo) return stg_errf(err, "recompute: out of host memory");
    for (int i = 0; i < nt0; i++) memo[i] = -1;
    // every backward or optimizer reader of t (or of a forward view of t) reads a copy instead,
    // copies made by earlier recomputations included
    int rc = 0;
    for (int o = 0; o < nops0 && rc == 0; o++) {
        if (g->ops[o].phase == STG_PHASE_FORWARD) continue;
        for (int i = 0; i < g->ops[o].n_in; i++) {
            int x = g->ops[o].in[i];
            if (x >= nt0 || root_of(g, x) != t) continue;
            int c = copy_of(g, x, t, memo, err);
            if (c < 0) {
                rc = -1;
                break;
            }
            g->ops[o].in[i] = c;
        }
    }
    free(memo);
    if (rc) return -1;
    graph_classify(g);
    if (g->t[t].cls == STG_CLASS_ACTIVATION) return stg_errf(err, "internal: '%s' is still read by the backward pass", g->t[t].name);
    return 0;
}
