// Fitting a step into a memory budget: the planner chooses saved activations to drop and
// recompute in the backward pass (graph_recompute), cheapest bytes first, re-plans, and repeats
// until the plan fits or nothing more can be dropped.
#ifndef STG_BUDGET_H
#define STG_BUDGET_H

#include <stdint.h>

#include "graph/graph.h"
#include "planner/plan.h"

typedef struct stg_budget_report {
    int64_t budget;          // bytes asked for
    int64_t peak_before;     // planned peak with nothing recomputed
    int64_t peak_after;      // planned peak of the returned plan
    int n_recomputed;        // activations dropped and recomputed
    int64_t bytes_dropped;   // their bytes
    double extra_flops;      // FLOPs of the recomputation copies
    double step_flops;       // FLOPs of the step without them
    int by_kind[STG_OP_COUNT]; // dropped activations by the kind of op that makes them
} stg_budget_report;

// Plans g within `budget` bytes (peak_bytes <= budget), rewriting g (recomputation ops and a new
// schedule) only when the plain plan does not fit. On failure returns -1 saying the smallest peak
// it could reach; g is then left with everything recomputable recomputed.
int plan_fit_budget(stg_graph *g, int64_t budget, const stg_plan_opts *o, stg_plan **out, stg_budget_report *rep,
                    stg_err *err);

#endif
