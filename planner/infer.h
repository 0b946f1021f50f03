// The inference pipeline in one call, as planner/step.h is for training: load the model at the
// sampling shapes, derive the prefill and decode graphs (graph/infer.h), group matmuls, schedule,
// validate and plan both; and their memory: every term (weights, KV cache, the sampler's state, the
// prefill and decode temporaries) against a closed-form formula, and the largest batch and context
// that fit a device.
// Planner layer: calls graph/ and planner/, never the runtime; never prints (but for the report
// writer, which writes to the FILE it is given).
#ifndef STG_PLANNER_INFER_H
#define STG_PLANNER_INFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"
#include "graph/infer.h"
#include "planner/plan.h"

typedef struct stg_infer_opts {
    const char *model_path;      // the model file; with `text`, the name used in messages
    const char *text;            // YAML text in memory instead of the file (tests), or NULL
    size_t text_len;
    const char *const *sets;     // "name=value" overrides, in order (the model's ctx is the cache's size)
    int nsets;
    stg_precision precision;
    int64_t batch;               // sequences sampled together (B)
    int64_t prompt;              // prompt tokens per sequence (P), 1 <= P <= ctx
    stg_sample_attrs sample;     // the sampling rule
    bool ungrouped;              // no graph_group_matmuls
    bool no_plan;                // graphs only
} stg_infer_opts;

enum { STG_INFER_PREFILL = 0, STG_INFER_DECODE = 1 };

typedef struct stg_infer {
    stg_graph *g[2];             // prefill, decode
    stg_plan *p[2];              // NULL with no_plan
    graph_infer_info info[2];
    int64_t batch, prompt, ctx;
} stg_infer;

// Defaults: fp32, batch 1, greedy (temperature 0, top_k 0, top_p 1, seed 0), grouped matmuls.
stg_infer_opts stg_infer_defaults(void);

// Builds both graphs. The model needs dims `batch` and `ctx` shaping its token input and parameters
// that do not depend on them; its `attention` option (when it has one) is set to flash and its
// `fused_head` option (when it has one) to off. Errors name the model file.
int stg_infer_build(const stg_infer_opts *o, stg_infer **out, stg_err *err);
void stg_infer_free(stg_infer *s);

// ---- memory -------------------------------------------------------------------------------------

#define STG_INFER_TERMS 8

typedef struct stg_infer_term {
    char name[40];
    int64_t plan, formula; // bytes; formula -1 when the model is not the CS336 LM
    char how[200];         // the formula with the numbers put in
} stg_infer_term;

typedef struct stg_infer_mem {
    int nterms;
    stg_infer_term t[STG_INFER_TERMS]; // weights, KV cache, sampler state, prompt tokens, prefill
                                       // temporaries, decode temporaries
    int64_t persistent;  // one copy of every persistent tensor (shared by the two executors)
    int64_t arena;       // the larger of the two arenas (the other executor uses the same bytes)
    int64_t total;       // persistent + arena
    int64_t formula_total;
    char formula_note[160]; // why there is no formula, when there is none
} stg_infer_mem;

int stg_infer_memory(const stg_infer *s, stg_infer_mem *m, stg_err *err);

// The largest batch at this ctx and the largest ctx at o's batch (each with o's prompt, or the
// whole context when shorter) whose total fits `capacity` bytes; 0 when none. o as for
// stg_infer_build.
int stg_infer_fit(const stg_infer_opts *o, int64_t ctx, int64_t capacity, int64_t *max_batch, int64_t *max_ctx, stg_err *err);

// The report: text or JSON. measured: device bytes measured by a backend (-1: none); capacity:
// device bytes for the fit (0: no fit section).
int stg_infer_report(FILE *f, bool json, const stg_infer_opts *o, const stg_infer *s, const stg_infer_mem *m, int64_t measured,
                     int64_t capacity, stg_err *err);

#endif
