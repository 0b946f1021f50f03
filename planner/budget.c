#include "planner/budget.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/step.h"

typedef struct {
    int t;
    double score; // bytes freed per FLOP recomputed
} cand;

static int by_score(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->t - y->t;
}

static double step_flops(const stg_graph *g) {
    double f = 0;
    for (int o = 0; o < g->nops; o++) f += graph_op_flops(g, o);
    return f;
}

// The search proper, on g, which belongs to the step being fitted. On "cannot fit" returns -1 with
// *smallest_p the plan of everything recomputed (NULL on other errors).
static int fit(stg_graph *g, int64_t budget, const stg_plan_opts *o, stg_plan **out, stg_budget_report *rep,
               stg_plan **smallest_p, stg_err *err) {
    memset(rep, 0, sizeof *rep);
    rep->budget = budget;
    *out = NULL;
    *smallest_p = NULL;
    stg_plan *p = NULL;
    if (plan_build(g, o, &p, err)) return -1;
    rep->peak_before = rep->peak_after = p->peak_bytes;
    rep->step_flops = step_flops(g);
    if (p->peak_bytes <= budget) {
        *out = p;
        return 0;
    }
    // Drop in rounds, the best bytes-per-FLOP first, re-planning after each round: cheap norms and
    // elementwise results go first, matmul chains last. A round drops candidates until their bytes
    // add up to what the plan is over budget (at least one), since a dropped activation frees at most
    // its own bytes at the peak.
    cand *c = NULL;
    for (;;) {
        cand *nc = realloc(c, sizeof *c * (size_t)g->nt); // recomputation adds tensors
        if (!nc) {
            free(c);
            plan_free(p);
            return stg_errf(err, "budget: out of host memory");
        }
        c = nc;
        int n = 0;
        for (int t = 0; t < g->nt; t++) {
            double f;
            if (!graph_recompute_cost(g, t, &f)) continue;
            c[n].t = t;
            c[n].score = (double)stg_bytes(&g->t[t]) / (f > 1 ? f : 1);
            n++;
        }
        if (n == 0) break;
        qsort(c, (size_t)n, sizeof *c, by_score);
        int64_t need = p->peak_bytes - budget, got = 0;
        for (int i = 0; i < n && (i == 0 || got < need); i++) {
            int t = c[i].t;
            double f;
            if (!graph_recompute_cost(g, t, &f)) continue; // an earlier drop in this round changed it
            int kind = g->ops[g->t[t].producer].kind;
            int64_t bytes = stg_bytes(&g->t[t]);
            int nops0 = g->nops;
            if (graph_recompute(g, t, err)) {
                free(c);
                plan_free(p);
                return -1;
            }
            double added = 0;
            for (int k = nops0; k < g->nops; k++) added += graph_op_flops(g, k);
            rep->extra_flops += added;
            rep->bytes_dropped += bytes;
            rep->by_kind[kind]++;
            rep->n_recomputed++;
            got += bytes;
        }
        plan_free(p);
        p = NULL;
        if (graph_schedule(g, err) || plan_build(g, o, &p, err)) {
            free(c);
            return -1;
        }
        rep->peak_after = p->peak_bytes;
        if (p->peak_bytes <= budget) {
            free(c);
            *out = p;
            return 0;
        }
    }
    free(c);
    int64_t reached = p->peak_bytes;
    *smallest_p = p;
    return stg_errf(err, "the step cannot fit in %.2f GiB: with every recomputable activation recomputed (%d of them) the smallest "
                         "planned peak is %.2f GiB (%lld bytes)",
                    (double)budget / (1 << 30), rep->n_recomputed, (double)reached / (1 << 30), (long long)reached);
}

// Whether g trains a fused LM head whose weight gradient is made early (the late_dw lever is left).
static bool early_head_dw(const stg_graph *g) {
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == STG_OP_LINEAR_CROSS_ENTROPY_BWD) return true;
    return false;
}

// One way to fit: the step o describes (late: with the fused head's weight gradient made late) fitted
// within budget. rc 0: fits (*out); -1 with *least the smallest plan reached (cannot fit) or NULL.
typedef struct {
    stg_step *s;
    stg_plan *least;
    stg_budget_report rep;
    int rc;
    stg_err err;
} fit_try;

static int try_fit(const stg_step_opts *plain, bool late, int64_t budget, const stg_step_opts *o, fit_try *t) {
    memset(t, 0, sizeof *t);
    stg_step_opts x = *plain;
    x.late_head_dw = late || plain->late_head_dw;
    if (stg_step_build(&x, &t->s, &t->err)) return t->rc = -2; // not a budget failure: stop
    t->rc = fit(t->s->g, budget, o->plan.alignment ? &o->plan : NULL, &t->s->p, &t->rep, &t->least, &t->err);
    return t->rc;
}

static void try_free(fit_try *t) {
    plan_free(t->least);
    stg_step_free(t->s);
    memset(t, 0, sizeof *t);
}

int plan_fit_budget(const stg_step_opts *o, int64_t budget, stg_step **out, stg_budget_report *rep, stg_step **smallest,
                    stg_err *err) {
    *out = NULL;
    if (smallest) *smallest = NULL;
    memset(rep, 0, sizeof *rep);
    // The step is built here, so the recomputation ops go into a graph nobody else holds.
    stg_step_opts plain = *o;
    plain.budget = 0;
    plain.no_plan = true;
    fit_try a, b;
    if (try_fit(&plain, false, budget, o, &a) == -2) {
        *err = a.err;
        try_free(&a);
        return -1;
    }
    // A second way when the step trains a fused LM head whose (vocab, d) weight gradient is held
    // through the backward and the plain plan is over budget: that gradient made just before its first
    // reader (late_dw=1; the logits once more, 2 rows vocab d FLOPs), then recomputation as needed.
    // The way that fits with fewer added FLOPs is kept (recomputing cheap activations usually costs
    // less than the logits' pass), else the one whose smallest plan is smaller.
    if (!o->late_head_dw && early_head_dw(a.s->g) && a.rep.peak_before > budget) {
        if (try_fit(&plain, true, budget, o, &b) == -2) {
            *err = b.err;
            try_free(&a);
            try_free(&b);
            return -1;
        }
        b.rep.late_head_dw = true;
        b.rep.peak_late = b.rep.peak_before;
        b.rep.peak_before = a.rep.peak_before;
        b.rep.late_flops = b.rep.step_flops - a.rep.step_flops;
        b.rep.step_flops = a.rep.step_flops;
        const double ca = a.rep.extra_flops, cb = b.rep.late_flops + b.rep.extra_flops;
        const int64_t la = a.rc == 0 ? a.rep.peak_after : a.least ? a.least->peak_bytes : INT64_MAX,
                      lb = b.rc == 0 ? b.rep.peak_after : b.least ? b.least->peak_bytes : INT64_MAX;
        const bool take_b = (b.rc == 0 && (a.rc != 0 || cb < ca)) || (a.rc != 0 && b.rc != 0 && lb < la);
        if (take_b) {
            fit_try t = a;
            a = b;
            b = t;
        }
        try_free(&b);
    }
    *rep = a.rep;
    if (a.rc) {
        *err = a.err;
        if (smallest && a.least) {
            a.s->p = a.least;
            a.s->budget = *rep;
            *smallest = a.s;
        } else {
            try_free(&a);
        }
        return -1;
    }
    a.s->budget = *rep;
    *out = a.s;
    return 0;
}
