// Fitting a step into a memory budget: the planner chooses saved activations to drop and
// recompute in the backward pass (graph_recompute), those live at the peak and cheapest bytes
// first, re-planning after each round, along one path that does not depend on the budget (so a
// budget above one that fits fits too), until the plan fits or nothing more can be dropped without
// raising the peak.
#ifndef STG_BUDGET_H
#define STG_BUDGET_H

#include <stdint.h>

#include "graph/graph.h"
#include "planner/plan.h"

struct stg_step;
struct stg_step_opts;

typedef struct stg_budget_report {
    int64_t budget;          // bytes asked for
    int64_t peak_before;     // planned peak with nothing recomputed
    int64_t peak_after;      // planned peak of the returned plan
    int n_recomputed;        // activations dropped and recomputed
    int64_t bytes_dropped;   // their bytes
    double extra_flops;      // FLOPs of the recomputation copies
    double step_flops;       // FLOPs of the step without them
    int by_kind[STG_OP_COUNT]; // dropped activations by the kind of op that makes them
    bool late_head_dw;       // the fused head's weight gradient made late (late_dw=1) to fit: peak_before is the
                             // plan without it, peak_late the plan with it before any recomputation
    int64_t peak_late;
    double late_flops;       // the FLOPs late_dw adds (the logits once more)
} stg_budget_report;

// Builds the step o describes (planner/step.h; o->budget and o->no_plan are not read) and plans it
// within `budget` bytes (peak_bytes <= budget), adding recomputation ops and a new schedule to that
// step's own graph only when the plain plan does not fit: no graph of the caller's is rewritten.
// On success *out is the fitted step (its `budget` field a copy of *rep). When the search finds no
// plan that fits, returns -1 saying the smallest peak it reached and, when
// `smallest` is non-NULL, hands that step (planned) over in *smallest for callers that want to run it
// anyway; on any other error *smallest is NULL.
int plan_fit_budget(const struct stg_step_opts *o, int64_t budget, struct stg_step **out, stg_budget_report *rep,
                    struct stg_step **smallest, stg_err *err);

// Builds the step o describes and recomputes every activation that can be (the search's order, round
// after round until none is left), then plans it (*out; rep as plan_fit_budget's). The most
// recomputation there is, which is not always the lowest peak (a copy can live beside the peak):
// for tests of recomputation's numerics and for comparison.
int plan_recompute_all(const struct stg_step_opts *o, struct stg_step **out, stg_budget_report *rep, stg_err *err);

#endif
