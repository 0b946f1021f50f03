#include "planner/budget.h"

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

int plan_fit_budget(const stg_step_opts *o, int64_t budget, stg_step **out, stg_budget_report *rep, stg_step **smallest,
                    stg_err *err) {
    *out = NULL;
    if (smallest) *smallest = NULL;
    memset(rep, 0, sizeof *rep);
    // The step is built here, so the recomputation ops go into a graph nobody else holds.
    stg_step_opts plain = *o;
    plain.budget = 0;
    plain.no_plan = true;
    stg_step *s;
    if (stg_step_build(&plain, &s, err)) return -1;
    stg_plan *least = NULL;
    if (fit(s->g, budget, o->plan.alignment ? &o->plan : NULL, &s->p, rep, &least, err)) {
        if (smallest && least) {
            s->p = least;
            s->budget = *rep;
            *smallest = s;
        } else {
            plan_free(least);
            stg_step_free(s);
        }
        return -1;
    }
    s->budget = *rep;
    *out = s;
    return 0;
}
