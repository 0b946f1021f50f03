// The step pipeline in one call: load the model (graph/loader.h) with its --set overrides, add the
// backward and optimizer (or classify a forward-only graph), group matmuls, schedule, validate, and
// plan: plainly, or within a memory budget (planner/budget.h). The CLI, the budget search, the fit
// suggestions and the tests all build a step through here, so a new pass is added in one place.
// Planner layer: calls graph/ and planner/, never the runtime; never prints.
#ifndef STG_STEP_H
#define STG_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "planner/budget.h"
#include "planner/plan.h"

typedef struct stg_step_opts {
    const char *model_path;            // the model file; with `text`, the name used in messages
    const char *text;                  // YAML text in memory instead of the file (tests), or NULL
    size_t text_len;
    const char *const *sets;           // "name=value" overrides, in order (later ones win)
    int nsets;
    stg_precision precision;
    bool train;                        // backward and optimizer (graph_autodiff); else the forward's classes
    stg_optim_config optim;
    bool ungrouped;                    // no graph_group_matmuls: every product its own op
    bool no_plan;                      // stop after the passes (s->p stays NULL)
    int64_t budget;                    // > 0: plan within this many bytes (plan_fit_budget); 0: plainly
    bool late_head_dw;                 // every linear_cross_entropy with late_dw=1 (the budget search's first lever)
    stg_plan_opts plan;                // alignment 0: plan_defaults()
} stg_step_opts;

typedef struct stg_step {
    stg_graph *g;
    stg_plan *p;              // NULL when built with no_plan
    stg_budget_report budget; // when built with a budget
} stg_step;

// Training in fp32 with the default optimizer, grouped matmuls, a plain plan, no overrides.
stg_step_opts stg_step_defaults(void);

// Builds the step o describes. Errors: a load error as the loader words it ("file:line:col: ..."),
// a pass or validation error prefixed with the model path, a plan or budget error as is.
int stg_step_build(const stg_step_opts *o, stg_step **out, stg_err *err);

// The same from a forward graph the caller built (the loader's fields of o are not read; model_path
// only names it in messages); takes ownership of fwd, freeing it on failure. No budget: the budget
// search rebuilds the step from the model, which a caller's graph cannot give.
int stg_step_from_graph(stg_graph *fwd, const stg_step_opts *o, stg_step **out, stg_err *err);

void stg_step_free(stg_step *s);

#endif
