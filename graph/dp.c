// Data parallelism as a graph rewrite: gradient buckets and their allreduce ops (graph.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

typedef struct {
    int grad, last; // gradient tensor, the last op that writes it (creation order = schedule order)
} dp_item;

static int cmp_item(const void *a, const void *b) {
    const dp_item *x = a, *y = b;
    return x->last != y->last ? (x->last < y->last ? -1 : 1) : (x->grad < y->grad ? -1 : x->grad > y->grad);
}

int graph_data_parallel(stg_graph *g, const stg_optim_config *oc, stg_err *err) {
    stg_loc none = {NULL, 0, 0};
    if (oc->in_backward)
        return stg_errf(err, "data parallelism needs every gradient averaged over the ranks before any AdamW update; "
                             "--optimizer-in-backward updates each parameter as soon as its local gradient is final");
    if (oc->dp_bucket_bytes < 0 || oc->dp_first_bucket_bytes < 0) return stg_errf(err, "data parallel: negative bucket size");
    int np = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM && g->t[t].grad >= 0) np++;
    if (np == 0) return 0;
    dp_item *it = stg_malloc(sizeof *it * (size_t)np, err);
    int *in = stg_malloc(sizeof *in * (size_t)np, err);
    int rc = -1;
    if (!it || !in) goto out;
    np = 0;
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM || g->t[t].grad < 0) continue;
        int gt = g->t[t].grad, last = g->t[gt].producer;
        if (g->t[gt].base >= 0) {
            stg_errf(err, "data parallel: the gradient of '%s' is a view; buckets need gradients with their own storage", g->t[t].name);
            goto out;
        }
        for (int o = 0; o < g->nops; o++) // ops that write it in place after its producer
            for (int k = 0; k < g->ops[o].n_out; k++)
                if (g->ops[o].out[k] == gt && o > last) last = o;
        it[np++] = (dp_item){gt, last};
    }
    qsort(it, (size_t)np, sizeof *it, cmp_item);
    int group = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].group >= group) group = g->t[t].group + 1;
    int nb = 0;
    for (int i = 0; i < np;) {
        int64_t cap = nb == 0 && oc->dp_first_bucket_bytes > 0 ? oc->dp_first_bucket_bytes : oc->dp_bucket_bytes;
        int64_t bytes = 0;
        int n = 0;
        // one dtype a bucket (bf16 gradients beside fp32 ones: one allreduce each)
        while (i < np && (n == 0 || ((cap == 0 || bytes + stg_bytes(&g->t[it[i].grad]) <= cap) &&
                                     g->t[it[i].grad].dtype == g->t[in[0]].dtype))) {
            bytes += stg_bytes(&g->t[it[i].grad]);
            g->t[it[i].grad].group = group;
            in[n++] = it[i++].grad;
        }
        // the planner places a group in tensor-id order: list the inputs that way too
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && in[b - 1] > in[b]; b--) {
                int x = in[b];
                in[b] = in[b - 1];
                in[b - 1] = x;
            }
        char nm[64];
        snprintf(nm, sizeof nm, "allreduce.bucket%d", nb);
        if (graph_add_op(g, STG_OP_ALLREDUCE, in, n, NULL, STG_PHASE_BACKWARD, nm, none, NULL, err) < 0) goto out;
        group++;
        nb++;
    }
    if (g->loss >= 0) {
        int l = g->loss;
        if (graph_add_op(g, STG_OP_ALLREDUCE, &l, 1, NULL, STG_PHASE_BACKWARD, "allreduce.loss", none, NULL, err) < 0) goto out;
    }
    rc = nb;
out:
    free(it);
    free(in);
    return rc;
}

typedef struct {
    int64_t n;
    int t;
} dp_size;

static int cmp_size(const void *a, const void *b) {
    const dp_size *x = a, *y = b;
    return x->n != y->n ? (x->n > y->n ? -1 : 1) : (x->t < y->t ? -1 : x->t > y->t);
}

void graph_dp_owners(const stg_graph *g, const stg_optim_config *oc, int *owner) {
    int world = oc->dp_world > 0 ? oc->dp_world : 1, np = 0;
    for (int t = 0; t < g->nt; t++) {
        owner[t] = -1;
        if (g->t[t].cls == STG_CLASS_PARAM) np++;
    }
    dp_size *s = malloc(sizeof *s * (size_t)(np ? np : 1));
    int64_t *load = calloc((size_t)world, sizeof *load);
    if (!s || !load) { // no memory for the balance: round robin (still the same on every rank)
        int k = 0;
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].cls == STG_CLASS_PARAM) owner[t] = k++ % world;
        free(s);
        free(load);
        return;
    }
    np = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM) s[np++] = (dp_size){stg_numel(&g->t[t]), t};
    qsort(s, (size_t)np, sizeof *s, cmp_size);
    for (int i = 0; i < np; i++) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[s[i].t] = best;
        load[best] += s[i].n;
    }
    free(s);
    free(load);
}
