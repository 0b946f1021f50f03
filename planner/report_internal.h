// Internals shared by the memory report's two files (not for use outside planner/):
//   planner/report.c        the analysis shared by the formats (the peak step, the arena tenants
//                           live there, bytes by class) and the entry report_write;
//   planner/report_write.c  the four writers: text and Markdown, JSON, SVG.
#ifndef STG_PLANNER_REPORT_INTERNAL_H
#define STG_PLANNER_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "planner/report.h"

// A report's output: the file and whether any write failed.
typedef struct wr {
    FILE *f;
    int bad;
} wr;

typedef struct occ {
    int t;
    int64_t bytes;
} occ;

typedef struct analysis {
    const char *mode;
    bool train;
    int peak_step, peak_op;
    int peak_out; // the tensor the peak op makes (-1 none)
    occ *live;    // arena tenants live at the peak, largest first
    int nlive;
    int64_t at_peak[STG_CLASS_COUNT];
    int64_t raw_class[STG_CLASS_COUNT]; // unaligned bytes of storage owners per class
    int n_class[STG_CLASS_COUNT];       // storage owners per class
    int grads_live;                     // gradient tensors occupying bytes at the peak
    int64_t graph_params;
    bool have_formula;
} analysis;

// ---- planner/report.c -------------------------------------------------------------------------

// "op -> its first output", the op that made tensor t ("-" for none).
void report_made_by(const stg_graph *g, int t, char *buf, size_t n);
// The largest live tensor of class c at the peak (-1 if none).
int report_largest_live(const analysis *a, const stg_graph *g, stg_tclass c);

// ---- planner/report_write.c -------------------------------------------------------------------
// Each returns 0, or -1 when out of memory (a failed write only sets w->bad).

int report_write_text(wr *w, bool md, const stg_graph *g, const stg_plan *p, const stg_formula *fm, const analysis *a,
                      const stg_report_extra *x);
int report_write_json(wr *w, const stg_graph *g, const stg_plan *p, const stg_formula *fm, const analysis *a,
                      const stg_report_extra *x);
int report_write_svg(wr *w, const stg_graph *g, const stg_plan *p, const analysis *a);

#endif
