// The memory report: the plan, the analytical formula and (on a GPU) the measured device bytes side
// by side, with the peak step, the buffers live there, and a sentence for every difference over 1%
// between formula and plan. Text, Markdown, JSON or a self-contained SVG of live bytes by class
// over the schedule.
#ifndef STG_REPORT_H
#define STG_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "ops/base/err.h"
#include "graph/graph.h"
#include "planner/formula.h"
#include "planner/plan.h"

typedef enum { STG_REPORT_TEXT, STG_REPORT_MD, STG_REPORT_JSON, STG_REPORT_SVG } stg_report_format;

typedef struct {
    int64_t measured_bytes; // device bytes measured by a backend, -1 when none
    int nbeside;            // what the backend holds beside the plan (library workspaces, scratch), named
    const char *beside_name[8];
    int64_t beside_bytes[8];
    const char *mode;       // "train" | "forward"
    const char *model_path;
    const char *command;
    const struct stg_budget_report *budget; // the memory budget and what was recomputed; NULL when none
    const struct stg_shard_report *shard;   // JSON: per-device bytes under data parallelism (planner/shard.h); NULL when none
    int64_t shard_bucket, shard_capacity;   // with shard: bucket bytes, and device capacity for "devices needed" (0: none)
} stg_report_extra;

// Writes the report of plan p for graph g into f. fm may be NULL or unavailable; x may be NULL.
// Returns -1 (with the reason in err) when a write fails.
int report_write(FILE *f, stg_report_format fmt, const stg_graph *g, const stg_plan *p, const stg_formula *fm,
                 const stg_report_extra *x, stg_err *err);

// "text" | "md" | "json" | "svg" -> the format; -1 when unknown.
int report_format_from_name(const char *name);

#endif
