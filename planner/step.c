#include "planner/step.h"

#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"

stg_step_opts stg_step_defaults(void) {
    stg_step_opts o;
    memset(&o, 0, sizeof o);
    o.precision = STG_PREC_FP32;
    o.train = true;
    o.optim = graph_optim_defaults();
    o.plan = plan_defaults();
    return o;
}

void stg_step_free(stg_step *s) {
    if (!s) return;
    plan_free(s->p);
    graph_free(s->g);
    free(s);
}

// Everything between loading and planning: backward and optimizer (or the forward's classes),
// grouped products, the schedule; then the whole graph's consistency.
static int passes(const stg_step_opts *o, stg_graph *g, stg_err *err) {
    for (int i = 0; o->late_head_dw && i < g->nops; i++)
        if (g->ops[i].kind == STG_OP_LINEAR_CROSS_ENTROPY) g->ops[i].a.lce.late_dw = 1;
    if (o->train ? graph_autodiff(g, &o->optim, err) : (graph_classify(g), 0)) return -1;
    if (!o->ungrouped && graph_group_matmuls(g, err) < 0) return -1;
    if (graph_schedule(g, err) || graph_validate(g, err)) return -1;
    return 0;
}

int stg_step_from_graph(stg_graph *fwd, const stg_step_opts *o, stg_step **out, stg_err *err) {
    *out = NULL;
    if (o->budget)
        return graph_free(fwd), stg_errf(err, "a memory budget rebuilds the step from its model: build it with stg_step_build");
    stg_step *s = stg_calloc(1, sizeof *s, err);
    if (!s) return graph_free(fwd), -1;
    s->g = fwd;
    if (passes(o, s->g, err)) {
        // the loader words its own errors with the file; the passes do not know it
        if (o->model_path) stg_err_prefix(err, "%s", o->model_path);
        return stg_step_free(s), -1;
    }
    if (!o->no_plan && plan_build(s->g, o->plan.alignment ? &o->plan : NULL, &s->p, err)) return stg_step_free(s), -1;
    *out = s;
    return 0;
}

int stg_step_build(const stg_step_opts *o, stg_step **out, stg_err *err) {
    *out = NULL;
    if (o->budget > 0 && !o->no_plan) {
        stg_budget_report rep;
        return plan_fit_budget(o, o->budget, out, &rep, NULL, err);
    }
    stg_load_opts lo = {o->precision, o->sets, o->nsets};
    stg_graph *g = NULL;
    if (o->text ? graph_load_string(o->text, o->text_len, o->model_path ? o->model_path : "model.yaml", &lo, &g, err)
                : graph_load(o->model_path, &lo, &g, err))
        return -1;
    stg_step_opts rest = *o;
    rest.budget = 0; // the graph is ours, but a budget is fitted above, from the model
    return stg_step_from_graph(g, &rest, out, err);
}
