#include "planner/budget.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/step.h"

typedef struct {
    int t;
    int at_peak;  // live at the plan's peak step: only these can lower the peak now
    double score; // bytes freed per FLOP recomputed
} cand;

static int by_score(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->at_peak != y->at_peak) return y->at_peak - x->at_peak;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->t - y->t;
}

static double step_flops(const stg_graph *g) {
    double f = 0;
    for (int o = 0; o < g->nops; o++) f += graph_op_flops(g, o);
    return f;
}

// The activations of g that can be dropped (ids below nt0, not set aside) into c (room for g->nt):
// with p (g's plan), those live at its peak step first; then the best bytes per FLOP first. Returns
// how many.
static int candidates(const stg_graph *g, const stg_plan *p, int nt0, const char *aside, cand *c) {
    int n = 0;
    for (int t = 0; t < g->nt && t < nt0; t++) {
        double f;
        if ((aside && aside[t]) || !graph_recompute_cost(g, t, &f)) continue;
        c[n].t = t;
        c[n].at_peak = p && t < p->nt && p->first[t] >= 0 && p->first[t] <= p->peak_step && p->last[t] >= p->peak_step;
        c[n].score = (double)stg_bytes(&g->t[t]) / (f > 1 ? f : 1);
        n++;
    }
    qsort(c, (size_t)n, sizeof *c, by_score);
    return n;
}

// Drops activation t (graph_recompute) and counts it in rep.
static int drop_one(stg_graph *g, int t, stg_budget_report *rep, stg_err *err) {
    int kind = g->ops[g->t[t].producer].kind;
    int64_t bytes = stg_bytes(&g->t[t]);
    int nops0 = g->nops;
    if (graph_recompute(g, t, err)) return -1;
    for (int k = nops0; k < g->nops; k++) rep->extra_flops += graph_op_flops(g, k);
    rep->bytes_dropped += bytes;
    rep->by_kind[kind]++;
    rep->n_recomputed++;
    return 0;
}

// Builds the step x describes afresh into *s (freeing the one there), drops drops[0, nd) in that
// order and plans it into *p. The build is deterministic, so the tensor ids of drops name the same
// activations in every build.
static int rebuild(const stg_step_opts *x, const stg_plan_opts *o, const int *drops, int nd, stg_step **s, stg_plan **p,
                   stg_budget_report *rep, stg_err *err) {
    plan_free(*p);
    *p = NULL;
    stg_step_free(*s);
    *s = NULL;
    if (stg_step_build(x, s, err)) return -1;
    rep->n_recomputed = 0;
    rep->bytes_dropped = 0;
    rep->extra_flops = 0;
    memset(rep->by_kind, 0, sizeof rep->by_kind);
    for (int i = 0; i < nd; i++)
        if (drop_one((*s)->g, drops[i], rep, err)) return -1;
    if (nd && graph_schedule((*s)->g, err)) return -1;
    return plan_build((*s)->g, o, p, err);
}

// At most this many rounds undone (each a rebuild of the step) before the path ends at the best plan
// it has (a test model needs a few; each costs a build and a plan).
#define MAX_UNDO 64
// A round of the path drops candidates until their bytes reach this fraction of the plain plan's
// non-persistent peak (at least one candidate).
#define ROUND_SHARE 16

// The search proper, on the step *sp (built from x), which belongs to the search: on success *out is
// its plan. It walks one path of plans that does not depend on the budget, then stops at the first
// plan of the path within it, so that a budget above one that fits fits too (an earlier search sized
// its rounds by the overshoot and kept every round: it fitted budgets below ones it refused).
// The path: rounds of drops, the activations live at the plan's peak step first (no other drop can
// lower the peak; without this preference the path reached 10-40% fewer budgets on the test models),
// among them the best bytes per FLOP first (cheap norms and elementwise results first, matmul chains
// last), each round dropping candidates until their bytes reach 1/ROUND_SHARE of the plain
// plan's non-persistent peak, re-planned after each round. Recomputing can raise the peak (a copy made
// in the backward pass lives beside what is live there): a round that raises it is undone (the step
// rebuilt with the rounds kept so far) and its candidates set aside until the peak next falls; after
// the first undone round the rounds drop one candidate each. So the path's peaks never rise. At the
// first round whose plan fits, its drops are replayed one at a time from the round before, and the
// first of those plans that fits is the answer (the fewest drops, and FLOPs, of that round). On
// "cannot fit" returns -1 with *smallest_p the path's last plan, its lowest peak (NULL on other
// errors); *sp then holds its step.
static int fit(const stg_step_opts *x, stg_step **sp, int64_t budget, const stg_plan_opts *o, stg_plan **out, stg_budget_report *rep,
               stg_plan **smallest_p, stg_err *err) {
    memset(rep, 0, sizeof *rep);
    rep->budget = budget;
    *out = NULL;
    *smallest_p = NULL;
    stg_plan *p = NULL;
    stg_graph *g = (*sp)->g;
    if (plan_build(g, o, &p, err)) return -1;
    rep->peak_before = rep->peak_after = p->peak_bytes;
    rep->step_flops = step_flops(g);
    if (p->peak_bytes <= budget) {
        *out = p;
        return 0;
    }
    const int nt0 = g->nt; // candidates are forward tensors: ids below nt0 in every build
    const int64_t quota = (p->peak_bytes - p->persistent_bytes) / ROUND_SHARE;
    cand *c = NULL;
    int *drops = malloc(sizeof(int) * (size_t)nt0);
    char *aside = calloc((size_t)nt0, 1);
    int nd = 0, undone = 0, rc = -1;
    bool single = false;
    if (!drops || !aside) {
        stg_errf(err, "budget: out of host memory");
        goto out;
    }
    for (;;) {
        cand *nc = realloc(c, sizeof *c * (size_t)g->nt); // recomputation adds tensors
        if (!nc) {
            stg_errf(err, "budget: out of host memory");
            goto out;
        }
        c = nc;
        int n = candidates(g, p, nt0, aside, c);
        if (n == 0) break;
        const int64_t before = p->peak_bytes;
        const int r0 = nd;
        int64_t got = 0;
        for (int i = 0; i < n && (i == 0 || (!single && got < quota)); i++) {
            int t = c[i].t;
            double f;
            if (!graph_recompute_cost(g, t, &f)) continue; // an earlier drop in this round changed it
            got += stg_bytes(&g->t[t]);
            if (drop_one(g, t, rep, err)) goto out;
            drops[nd++] = t;
        }
        plan_free(p);
        p = NULL;
        if (graph_schedule(g, err) || plan_build(g, o, &p, err)) goto out;
        rep->peak_after = p->peak_bytes;
        if (p->peak_bytes <= before) { // kept: a peak the round left where it was may take more rounds to fall
            if (p->peak_bytes < before) memset(aside, 0, (size_t)nt0); // set aside against the old peak
            if (p->peak_bytes > budget) continue;
            // the first plan of the path within the budget: the fewest of this round's drops that fit,
            // replayed one at a time from the round's start (the whole round fits)
            if (nd - r0 > 1) {
                if (rebuild(x, o, drops, r0, sp, &p, rep, err)) goto out;
                g = (*sp)->g;
                for (int k = r0; k < nd; k++) {
                    if (drop_one(g, drops[k], rep, err)) goto out;
                    plan_free(p);
                    p = NULL;
                    if (graph_schedule(g, err) || plan_build(g, o, &p, err)) goto out;
                    if (p->peak_bytes <= budget) break;
                }
            }
            rep->peak_after = p->peak_bytes;
            *out = p;
            p = NULL;
            rc = 0;
            goto out;
        }
        if (!single && nd - r0 > 1)
            single = true; // the round's candidates again, one at a time
        else
            for (int k = r0; k < nd; k++) aside[drops[k]] = 1;
        nd = r0;
        if (rebuild(x, o, drops, nd, sp, &p, rep, err)) goto out;
        g = (*sp)->g;
        rep->peak_after = p->peak_bytes;
        if (++undone == MAX_UNDO) break;
    }
    *smallest_p = p;
    stg_errf(err, "the step cannot fit in %.2f GiB: the smallest planned peak the search found is %.2f GiB (%lld bytes), with %d "
                  "activations recomputed",
             (double)budget / (1 << 30), (double)p->peak_bytes / (1 << 30), (long long)p->peak_bytes, rep->n_recomputed);
    p = NULL;
out:
    plan_free(p);
    free(c);
    free(drops);
    free(aside);
    return rc;
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
    stg_plan *p = NULL; // the search may rebuild t->s: its plan is set once the search is over
    t->rc = fit(&x, &t->s, budget, o->plan.alignment ? &o->plan : NULL, &p, &t->rep, &t->least, &t->err);
    if (t->rc == 0) t->s->p = p;
    if (t->rc && !t->s) t->rc = -2; // a rebuild failed: not a budget failure either
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

int plan_recompute_all(const stg_step_opts *o, stg_step **out, stg_budget_report *rep, stg_err *err) {
    *out = NULL;
    memset(rep, 0, sizeof *rep);
    stg_step_opts x = *o;
    x.budget = 0;
    x.no_plan = true;
    stg_step *s = NULL;
    stg_plan *p = NULL;
    cand *c = NULL;
    int rc = -1;
    if (stg_step_build(&x, &s, err) || plan_build(s->g, o->plan.alignment ? &o->plan : NULL, &p, err)) goto out;
    rep->peak_before = p->peak_bytes;
    rep->step_flops = step_flops(s->g);
    const int nt0 = s->g->nt;
    for (;;) {
        cand *nc = realloc(c, sizeof *c * (size_t)s->g->nt);
        if (!nc) {
            stg_errf(err, "budget: out of host memory");
            goto out;
        }
        c = nc;
        int n = candidates(s->g, NULL, nt0, NULL, c);
        if (n == 0) break;
        for (int i = 0; i < n; i++) {
            double f;
            if (graph_recompute_cost(s->g, c[i].t, &f) && drop_one(s->g, c[i].t, rep, err)) goto out;
        }
    }
    plan_free(p);
    p = NULL;
    if (graph_schedule(s->g, err) || plan_build(s->g, o->plan.alignment ? &o->plan : NULL, &p, err)) goto out;
    rep->peak_after = p->peak_bytes;
    s->p = p;
    p = NULL;
    s->budget = *rep;
    *out = s;
    s = NULL;
    rc = 0;
out:
    plan_free(p);
    stg_step_free(s);
    free(c);
    return rc;
}
