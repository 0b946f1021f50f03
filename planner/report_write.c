// The memory report's writers (text and Markdown, JSON, SVG) over the analysis of planner/report.c
// (planner/report_internal.h holds what the two share).
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/report_internal.h"
#include "planner/shard.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define TOP_N 10

// ---- output -----------------------------------------------------------------------------------

static void pr(wr *w, const char *fmt, ...) STG_PRINTF(2, 3);

static void pr(wr *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(w->f, fmt, ap) < 0) w->bad = 1;
    va_end(ap);
}

// "1,234,567"
static const char *commas(char *buf, size_t n, int64_t v) {
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", (long long)(v < 0 ? -v : v));
    size_t len = strlen(raw), k = 0;
    if (v < 0 && k + 1 < n) buf[k++] = '-';
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && k + 1 < n) buf[k++] = ',';
        if (k + 1 < n) buf[k++] = raw[i];
    }
    buf[k] = 0;
    return buf;
}

// "1.23 GiB (1,320,702,976 B)"
static const char *gib(char *buf, size_t n, int64_t v) {
    char c[40];
    snprintf(buf, n, "%.2f GiB (%s B)", (double)v / GIB, commas(c, sizeof c, v));
    return buf;
}

static const char *gib_short(char *buf, size_t n, int64_t v) {
    snprintf(buf, n, "%.2f GiB", (double)v / GIB);
    return buf;
}

static double pct(int64_t a, int64_t b) { return b != 0 ? 100.0 * (double)(a - b) / (double)b : (a != 0 ? 100.0 : 0.0); }

static bool differs(int64_t plan, int64_t formula) {
    int64_t d = plan - formula;
    if (d < 0) d = -d;
    int64_t ref = formula > plan ? formula : plan;
    return d > 0 && (double)d > 0.01 * (double)ref;
}

// ---- tables (text: padded columns; md: pipes) -------------------------------------------------

#define TAB_COLS 7
#define TAB_ROWS 24
#define TAB_CELL 256

typedef struct table {
    int ncols, nrows;
    char cell[TAB_ROWS][TAB_COLS][TAB_CELL];
} table;

static void tab_row(table *t, ...) {
    if (t->nrows >= TAB_ROWS) return;
    va_list ap;
    va_start(ap, t);
    for (int c = 0; c < t->ncols; c++) {
        const char *s = va_arg(ap, const char *);
        snprintf(t->cell[t->nrows][c], TAB_CELL, "%s", s ? s : "");
    }
    va_end(ap);
    t->nrows++;
}

static void tab_write(wr *w, const table *t, bool md) {
    if (md) {
        for (int r = 0; r < t->nrows; r++) {
            pr(w, "|");
            for (int c = 0; c < t->ncols; c++) pr(w, " %s |", t->cell[r][c]);
            pr(w, "\n");
            if (r == 0) {
                pr(w, "|");
                for (int c = 0; c < t->ncols; c++) pr(w, "%s|", c == 0 ? "---" : "---:");
                pr(w, "\n");
            }
        }
        pr(w, "\n");
        return;
    }
    int width[TAB_COLS] = {0};
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            int l = (int)strlen(t->cell[r][c]);
            if (l > width[c]) width[c] = l;
        }
    for (int r = 0; r < t->nrows; r++) {
        pr(w, " ");
        for (int c = 0; c < t->ncols; c++) pr(w, " %-*s", c + 1 < t->ncols ? width[c] : 0, t->cell[r][c]);
        pr(w, "\n");
    }
    pr(w, "\n");
}

// ---- text and Markdown ------------------------------------------------------------------------

static const char *precision_story(const stg_graph *g) {
    switch (g->precision) {
    case STG_PREC_BF16:
        return g->bf16_grads ? "bf16 working weights, activations and the products' weight gradients; fp32 master weights, the "
                               "other gradients and AdamW state"
                             : "bf16 working weights and activations; fp32 master weights, gradients and AdamW state";
    case STG_PREC_FP64: return "everything float64 (CPU reference)";
    default: return "everything float32";
    }
}

// One sentence per difference over 1% between formula and plan.
// The formula's bytes by class (0 where it has no term: temporaries, workspace).
static void formula_by_class(const stg_formula *fm, int64_t fc[STG_CLASS_COUNT]) {
    for (int c = 0; c < STG_CLASS_COUNT; c++) fc[c] = 0;
    fc[STG_CLASS_PARAM] = fm->param;
    fc[STG_CLASS_GRAD] = fm->grad;
    fc[STG_CLASS_OPTIMIZER] = fm->optimizer;
    fc[STG_CLASS_INPUT] = fm->input;
    fc[STG_CLASS_ACTIVATION] = fm->activation;
}

static int explain(wr *w, bool md, const stg_graph *g, const stg_plan *p, const stg_formula *fm, const analysis *a) {
    char b1[64], b2[64], b3[64], b4[64], c1[40];
    const char *li = md ? "- " : "  - ";
    int n = 0;
    // Persistent classes: plan bytes are all of them, for the whole step.
    struct {
        stg_tclass c;
        int64_t f;
        const char *what;
    } pers[3] = {{STG_CLASS_PARAM, fm->param, "parameters"},
                 {STG_CLASS_OPTIMIZER, fm->optimizer, "optimizer state"},
                 {STG_CLASS_INPUT, fm->input, "inputs"}};
    for (int i = 0; i < 3; i++) {
        stg_tclass c = pers[i].c;
        int64_t pv = p->by_class[c], fv = pers[i].f;
        if (!differs(pv, fv)) continue;
        n++;
        int64_t pad = p->by_class[c] - a->raw_class[c];
        pr(w, "%s%s: the plan holds %s in %d tensors, the formula %s (%+.1f%%).", li, stg_class_name(c),
           gib(b1, sizeof b1, pv), a->n_class[c], gib(b2, sizeof b2, fv), pct(pv, fv));
        if (c == STG_CLASS_PARAM && a->graph_params != fm->params)
            pr(w, " The graph has %s parameter elements where the closed form counts %lld.",
               commas(c1, sizeof c1, a->graph_params), (long long)fm->params);
        if (c == STG_CLASS_OPTIMIZER && !a->train)
            pr(w, " Forward mode has no optimizer state.");
        pr(w, " Alignment to %lld bytes adds %s.", (long long)p->alignment, gib(b3, sizeof b3, pad));
        if (a->raw_class[c] != fv && pad < (pv > fv ? pv - fv : fv - pv))
            pr(w, " Without padding the graph's %s take %s: the graph's tensors differ from the closed form.", pers[i].what,
               gib(b4, sizeof b4, a->raw_class[c]));
        pr(w, "\n");
    }
    // Gradients: arena tensors, live from their backward op to the optimizer.
    {
        int64_t pv = a->at_peak[STG_CLASS_GRAD], fv = fm->grad, tot = p->by_class[STG_CLASS_GRAD];
        if (differs(pv, fv)) {
            n++;
            if (pv < fv)
                pr(w,
                   "%sgrad: the formula counts all %s of gradients at once; at the peak (step %d) only %s of them are live "
                   "(%d of %d gradient tensors) — the rest are written later in the backward, after the activations they "
                   "need have died, and each is freed once the optimizer has read it.",
                   li, gib(b1, sizeof b1, fv), a->peak_step, gib(b2, sizeof b2, pv), a->grads_live,
                   a->n_class[STG_CLASS_GRAD]);
            else
                pr(w, "%sgrad: at the peak (step %d) %s of gradients are live, more than the formula's %s (%+.1f%%).", li,
                   a->peak_step, gib(b1, sizeof b1, pv), gib(b2, sizeof b2, fv), pct(pv, fv));
            if (differs(tot, fv))
                pr(w, " Over the whole step the plan writes %s of gradients in %d tensors (alignment adds %s).",
                   gib(b3, sizeof b3, tot), a->n_class[STG_CLASS_GRAD],
                   gib(b4, sizeof b4, tot - a->raw_class[STG_CLASS_GRAD]));
            pr(w, "\n");
        }
    }
    // Activations and temporaries.
    {
        int64_t act = a->at_peak[STG_CLASS_ACTIVATION], tmp = a->at_peak[STG_CLASS_TEMPORARY];
        int64_t pv = act + tmp, fv = fm->activation;
        if (differs(pv, fv)) {
            n++;
            if (a->train)
                pr(w,
                   "%sactivation+temporary: the formula counts %s (saved activations of all %lld layers, the final norm and "
                   "%s, all at once); at the peak (step %d, %s) %s are live (%+.1f%%): %s of saved activations "
                   "not yet consumed by the backward and %s of temporaries",
                   li, gib(b1, sizeof b1, fv), (long long)fm->n_layers, fm->fused_head ? "the fused head's scratch" : "the logits",
                   a->peak_step,
                   a->peak_op >= 0 ? stg_phase_name(g->ops[a->peak_op].phase) : "-", gib(b2, sizeof b2, pv), pct(pv, fv),
                   gib(b3, sizeof b3, act), gib(b4, sizeof b4, tmp));
            else
                pr(w,
                   "%sactivation+temporary: the formula counts %s (the largest layer working set plus the logits); at the "
                   "peak (step %d) %s are live (%+.1f%%): %s of activations and %s of temporaries",
                   li, gib(b1, sizeof b1, fv), a->peak_step, gib(b2, sizeof b2, pv), pct(pv, fv), gib(b3, sizeof b3, act),
                   gib(b4, sizeof b4, tmp));
            int big = report_largest_live(a, g, STG_CLASS_TEMPORARY);
            if (big >= 0) {
                char mb[STG_NAME_MAX + 40], sh[64];
                report_made_by(g, big, mb, sizeof mb);
                pr(w, ", such as the largest '%s' %s %s (%s, made by %s)", g->t[big].name, stg_shape_str(&g->t[big], sh, sizeof sh),
                   stg_dtype_name(g->t[big].dtype), gib(b1, sizeof b1, p->size[p->owner[big]]), mb);
            }
            pr(w, ".");
            int64_t all_act = p->by_class[STG_CLASS_ACTIVATION];
            if (a->train && differs(all_act, fv))
                pr(w,
                   " Over the whole step the graph saves %s in %d activation tensors against the closed form's %s: "
                   "the difference is in what the graph saves beyond (or instead of) the closed form's list, and "
                   "alignment (%s).",
                   gib(b1, sizeof b1, all_act), a->n_class[STG_CLASS_ACTIVATION], gib(b2, sizeof b2, fv),
                   gib(b3, sizeof b3, all_act - a->raw_class[STG_CLASS_ACTIVATION]));
            pr(w, "\n");
        }
    }
    if (p->by_class[STG_CLASS_WORKSPACE] > 0) {
        n++;
        pr(w, "%sworkspace: %s of runtime state (optimizer step, learning rate) that the formula does not count.\n", li,
           gib(b1, sizeof b1, p->by_class[STG_CLASS_WORKSPACE]));
    }
    if (differs(p->peak_bytes, fm->total)) {
        n++;
        pr(w, "%stotal: the planned peak %s is %+.1f%% from the formula's %s. At the peak, per class (plan - formula):", li,
           gib(b1, sizeof b1, p->peak_bytes), pct(p->peak_bytes, fm->total), gib(b2, sizeof b2, fm->total));
        int64_t fc[STG_CLASS_COUNT];
        formula_by_class(fm, fc);
        for (int c = 0; c < STG_CLASS_COUNT; c++) {
            int64_t pv = a->at_peak[c];
            if (c == STG_CLASS_TEMPORARY) continue;
            if (c == STG_CLASS_ACTIVATION) pv += a->at_peak[STG_CLASS_TEMPORARY];
            if (pv == fc[c]) continue;
            pr(w, " %s %s%.2f GiB;", c == STG_CLASS_ACTIVATION ? "activation+temporary" : stg_class_name(c),
               pv >= fc[c] ? "+" : "-", fabs((double)(pv - fc[c])) / GIB);
        }
        pr(w, " and placement above the lower bound (fragmentation) adds %s.\n",
           gib(b3, sizeof b3, p->peak_bytes - p->lower_bound_bytes));
    }
    if (n == 0) pr(w, "%sno class differs from the formula by more than 1%%.\n", li);
    return 0;
}

int report_write_text(wr *w, bool md, const stg_graph *g, const stg_plan *p, const stg_formula *fm, const analysis *a,
                      const stg_report_extra *x) {
    char b1[64], b2[64], b3[64], c1[40];
    const char *h1 = md ? "# " : "", *h2 = md ? "## " : "";
    bool hf = a->have_formula;
    pr(w, "%sstg memory report: %s\n\n", h1, g->name[0] ? g->name : "(unnamed model)");
    if (md) {
        if (x && x->model_path) pr(w, "- model file: `%s`\n", x->model_path);
        if (x && x->command) pr(w, "- command: `%s`\n", x->command);
        pr(w, "- precision: **%s** (%s)\n", stg_precision_name(g->precision), precision_story(g));
        pr(w, "- mode: **%s**\n", a->mode);
    } else {
        if (x && x->model_path) pr(w, "model file:  %s\n", x->model_path);
        if (x && x->command) pr(w, "command:     %s\n", x->command);
        pr(w, "precision:   %s (%s)\n", stg_precision_name(g->precision), precision_story(g));
        pr(w, "mode:        %s\n", a->mode);
    }
    if (graph_optim_in_backward(g))
        pr(w, md ? "- optimizer: **in backward** (%s)\n" : "optimizer:   in backward (%s)\n",
           "each parameter's AdamW update runs as soon as its gradient is final, beside the rest of the backward pass; its "
           "gradient is freed once the updates after it have read a 16th of all the gradients' bytes; gradient clipping uses the "
           "previous step's global norm, and the first step of a run does not clip");
    if (g->grad_accum > 1) {
        char gb[64];
        pr(w, md ? "- gradient accumulation: **%d micro-batches** per optimizer step (%s)\n" : "accumulation: %d micro-batches per optimizer step (%s)\n",
           g->grad_accum, "each of the model's batch; the gradients are persistent, written by the first micro-batch's backward pass "
                          "and added into by the others, and clipping and AdamW run once after the last");
        pr(w, md ? "- accumulated gradients: %s, persistent\n" : "gradients:   %s, persistent (accumulated over the micro-batches)\n",
           gib(gb, sizeof gb, p->by_class[STG_CLASS_GRAD]));
    }
    pr(w, md ? "- dims:" : "dims:       ");
    for (int i = 0; i < g->ndims; i++) pr(w, " %s=%lld", g->dims[i].name, (long long)g->dims[i].value);
    for (int i = 0; i < g->nopts; i++) pr(w, " %s=%s", g->opt_names[i], g->opt_values[i]);
    pr(w, "\n");
    pr(w, md ? "- parameters: %s" : "parameters:  %s", commas(c1, sizeof c1, a->graph_params));
    if (hf) pr(w, " (formula: %s)", commas(b1, sizeof b1, fm->params));
    pr(w, "\n\n");

    // Totals.
    pr(w, "%sTotals\n\n", h2);
    table *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->ncols = 2;
    tab_row(t, "", "bytes");
    tab_row(t, "planned peak (persistent + arena)", gib(b1, sizeof b1, p->peak_bytes));
    int64_t beside = 0;
    for (int i = 0; x && i < x->nbeside && i < 8; i++) {
        char k[128];
        snprintf(k, sizeof k, "beside the plan: %s", x->beside_name[i]);
        tab_row(t, k, gib(b2, sizeof b2, x->beside_bytes[i]));
        beside += x->beside_bytes[i];
    }
    if (x && x->nbeside > 0) tab_row(t, "planned peak + beside the plan", gib(b2, sizeof b2, p->peak_bytes + beside));
    if (x && x->measured_bytes >= 0) {
        char m[160];
        int n = snprintf(m, sizeof m, "%s (%+.1f%% vs planned", gib(b2, sizeof b2, x->measured_bytes), pct(x->measured_bytes, p->peak_bytes));
        if (x->nbeside > 0 && n > 0 && (size_t)n < sizeof m)
            n += snprintf(m + n, sizeof m - (size_t)n, "; %+.2f%% vs planned + beside", pct(x->measured_bytes, p->peak_bytes + beside));
        if (n > 0 && (size_t)n < sizeof m) snprintf(m + n, sizeof m - (size_t)n, ")");
        tab_row(t, "measured on the device", m);
    }
    if (hf) {
        char m[96];
        snprintf(m, sizeof m, "%s (planned peak is %+.1f%%)", gib(b2, sizeof b2, fm->total), pct(p->peak_bytes, fm->total));
        tab_row(t, "formula total", m);
    } else {
        tab_row(t, "formula total", fm && fm->reason[0] ? fm->reason : "not available");
    }
    tab_row(t, "lower bound (max live bytes)", gib(b1, sizeof b1, p->lower_bound_bytes));
    tab_row(t, "persistent region", gib(b1, sizeof b1, p->persistent_bytes));
    tab_row(t, "arena", gib(b1, sizeof b1, p->arena_bytes));
    {
        char m[96];
        snprintf(m, sizeof m, "%.2f%% (arena over its lower bound; ordering %s)", 100.0 * p->fragmentation, p->strategy);
        tab_row(t, "fragmentation", m);
    }
    tab_write(w, t, md);

    // Memory budget and recomputation.
    if (x && x->budget) {
        const stg_budget_report *bu = x->budget;
        pr(w, "%sMemory budget\n\n", h2);
        pr(w, "Budget %s; without recomputation the planned peak is %s", gib(b1, sizeof b1, bu->budget),
           gib(b2, sizeof b2, bu->peak_before));
        if (bu->late_head_dw)
            pr(w, "; with the fused head's weight gradient made late (late_dw=1: made just before its first reader, the logits "
                  "computed once more, %.4g FLOPs, %.1f%% of the step) it is %s",
               bu->late_flops, bu->step_flops > 0 ? 100.0 * bu->late_flops / bu->step_flops : 0.0, gib(b2, sizeof b2, bu->peak_late));
        if (bu->n_recomputed == 0) {
            pr(w, ": it fits, nothing is recomputed and the schedule is unchanged.\n\n");
        } else {
            pr(w, ". %d saved activations (%s) are dropped after the forward pass and recomputed in the backward pass, "
                  "which brings the peak to %s. The recomputation costs %.4g FLOPs, %.1f%% of the step's %.4g. Dropped, by the op "
                  "that makes them:",
               bu->n_recomputed, gib(b1, sizeof b1, bu->bytes_dropped), gib(b2, sizeof b2, bu->peak_after), bu->extra_flops,
               bu->step_flops > 0 ? 100.0 * bu->extra_flops / bu->step_flops : 0.0, bu->step_flops);
            for (int k = 0; k < STG_OP_COUNT; k++)
                if (bu->by_kind[k]) pr(w, " %s %d;", ops_name((stg_op_kind)k), bu->by_kind[k]);
            pr(w, "\n\n");
        }
    }

    // Classes.
    pr(w, "%sBytes by class\n\n", h2);
    memset(t, 0, sizeof *t);
    t->ncols = 4;
    tab_row(t, "class", "formula", "plan (all tensors)", "live at peak");
    int64_t fc[STG_CLASS_COUNT] = {0};
    if (hf) formula_by_class(fm, fc);
    for (int c = 0; c < STG_CLASS_COUNT; c++) {
        const char *fs = "-";
        if (hf && c != STG_CLASS_TEMPORARY && c != STG_CLASS_WORKSPACE) fs = gib(b1, sizeof b1, fc[c]);
        if (hf && c == STG_CLASS_ACTIVATION) {
            snprintf(b1, sizeof b1, "%s", gib(b3, sizeof b3, fc[c]));
            fs = b1;
        }
        tab_row(t, c == STG_CLASS_ACTIVATION && hf ? "activation (formula: +temporary)" : stg_class_name((stg_tclass)c), fs,
                gib(b2, sizeof b2, p->by_class[c]), gib(b3, sizeof b3, a->at_peak[c]));
    }
    {
        int64_t sum = 0;
        for (int c = 0; c < STG_CLASS_COUNT; c++) sum += p->by_class[c];
        tab_row(t, "total", hf ? gib(b1, sizeof b1, fm->total) : "-", gib(b2, sizeof b2, sum),
                gib(b3, sizeof b3, plan_live_at(p, a->peak_step, -1)));
    }
    tab_write(w, t, md);

    // The formula's terms.
    if (hf) {
        pr(w, "%sFormula, term by term (%s, %s attention)\n\n", h2, a->train ? "train" : "forward", fm->attention);
        memset(t, 0, sizeof *t);
        t->ncols = 3;
        tab_row(t, "term", "bytes", "how");
        for (int i = 0; i < fm->nterms && i < TAB_ROWS - 1; i++)
            tab_row(t, fm->terms[i].name, gib(b1, sizeof b1, fm->terms[i].bytes), fm->terms[i].how);
        tab_write(w, t, md);
    } else {
        pr(w, "%sFormula\n\nnot available: %s\n\n", h2, fm && fm->reason[0] ? fm->reason : "no formula");
    }

    // The peak.
    pr(w, "%sThe peak\n\n", h2);
    if (a->peak_op < 0) {
        pr(w, "The schedule is empty.\n\n");
    } else {
        const stg_op *op = &g->ops[a->peak_op];
        pr(w, "Peak at schedule position %d of %d: op %d '%s' (%s phase)", a->peak_step, g->nsched, a->peak_op,
           ops_name(op->kind), stg_phase_name(op->phase));
        if (a->peak_out >= 0) pr(w, ", which makes '%s'", g->t[a->peak_out].name);
        pr(w, ". Live there: %s.\n\n", gib(b1, sizeof b1, plan_live_at(p, a->peak_step, -1)));
        pr(w, "Live bytes by class at the peak:");
        for (int c = 0; c < STG_CLASS_COUNT; c++)
            if (a->at_peak[c]) pr(w, " %s %s;", stg_class_name((stg_tclass)c), gib_short(b1, sizeof b1, a->at_peak[c]));
        pr(w, "\n\nLargest arena buffers live at the peak (persistent tensors, %s, are live throughout):\n\n",
           gib_short(b2, sizeof b2, p->persistent_bytes));
        memset(t, 0, sizeof *t);
        t->ncols = 7;
        tab_row(t, "#", "tensor", "class", "shape", "dtype", "bytes", "made by");
        for (int i = 0; i < a->nlive && i < TOP_N; i++) {
            int id = a->live[i].t;
            char num[16], sh[96], mb[STG_NAME_MAX + 40];
            snprintf(num, sizeof num, "%d", i + 1);
            report_made_by(g, id, mb, sizeof mb);
            tab_row(t, num, g->t[id].name, stg_class_name(g->t[id].cls), stg_shape_str(&g->t[id], sh, sizeof sh),
                    stg_dtype_name(g->t[id].dtype), gib(b1, sizeof b1, a->live[i].bytes), mb);
        }
        tab_write(w, t, md);
    }
    free(t);

    pr(w, "%sFormula vs plan\n\n", h2);
    if (!hf) {
        pr(w, "No formula for this model (%s); the plan stands alone.\n", fm && fm->reason[0] ? fm->reason : "not available");
    } else {
        pr(w, "The formula is the \"everything at once\" accounting: every gradient, every saved activation and the logits "
              "counted together. The plan is lower because a tensor takes bytes only from its write to its last read: "
              "gradients are written while activations die, and temporaries reuse the same arena bytes.\n\n");
        explain(w, md, g, p, fm, a);
    }
    return 0;
}

// ---- JSON -------------------------------------------------------------------------------------

static void json_str(wr *w, const char *s) {
    pr(w, "\"");
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '"': pr(w, "\\\""); break;
        case '\\': pr(w, "\\\\"); break;
        case '\n': pr(w, "\\n"); break;
        case '\r': pr(w, "\\r"); break;
        case '\t': pr(w, "\\t"); break;
        default:
            if (*c < 0x20)
                pr(w, "\\u%04x", *c);
            else
                pr(w, "%c", *c);
        }
    }
    pr(w, "\"");
}

static void json_num_or_null(wr *w, bool have, int64_t v) {
    if (have)
        pr(w, "%lld", (long long)v);
    else
        pr(w, "null");
}

static double finite_or_zero(double v) { return isfinite(v) ? v : 0.0; }

int report_write_json(wr *w, const stg_graph *g, const stg_plan *p, const stg_formula *fm, const analysis *a,
                      const stg_report_extra *x) {
    bool hf = a->have_formula;
    pr(w, "{\n  \"model\": ");
    json_str(w, g->name);
    pr(w, ",\n  \"model_path\": ");
    if (x && x->model_path)
        json_str(w, x->model_path);
    else
        pr(w, "null");
    pr(w, ",\n  \"command\": ");
    if (x && x->command)
        json_str(w, x->command);
    else
        pr(w, "null");
    pr(w, ",\n  \"params\": %lld,\n  \"precision\": ", (long long)a->graph_params);
    json_str(w, stg_precision_name(g->precision));
    pr(w, ",\n  \"mode\": ");
    json_str(w, a->mode);
    pr(w, ",\n  \"grad_accum\": %d", g->grad_accum > 1 ? g->grad_accum : 1);
    pr(w, ",\n  \"dims\": {");
    for (int i = 0; i < g->ndims; i++) {
        pr(w, "%s", i ? ", " : "");
        json_str(w, g->dims[i].name);
        pr(w, ": %lld", (long long)g->dims[i].value);
    }
    pr(w, "},\n  \"options\": {");
    for (int i = 0; i < g->nopts; i++) {
        pr(w, "%s", i ? ", " : "");
        json_str(w, g->opt_names[i]);
        pr(w, ": ");
        json_str(w, g->opt_values[i]);
    }
    pr(w, "},\n  \"plan\": {\n");
    pr(w, "    \"peak_bytes\": %lld,\n    \"lower_bound_bytes\": %lld,\n    \"arena_bytes\": %lld,\n", (long long)p->peak_bytes,
       (long long)p->lower_bound_bytes, (long long)p->arena_bytes);
    pr(w, "    \"persistent_bytes\": %lld,\n    \"fragmentation\": %.6f,\n    \"alignment\": %lld,\n",
       (long long)p->persistent_bytes, finite_or_zero(p->fragmentation), (long long)p->alignment);
    pr(w, "    \"strategy\": ");
    json_str(w, p->strategy);
    pr(w, ",\n    \"n_storages\": %d,\n    \"n_inplace\": %d,\n    \"steps\": %d,\n", p->n_storages, p->n_inplace, p->nsched);
    pr(w, "    \"peak_step\": %d,\n    \"peak_op\": ", p->peak_step);
    if (a->peak_op >= 0)
        json_str(w, ops_name(g->ops[a->peak_op].kind));
    else
        pr(w, "null");
    pr(w, ",\n    \"peak_phase\": ");
    if (a->peak_op >= 0)
        json_str(w, stg_phase_name(g->ops[a->peak_op].phase));
    else
        pr(w, "null");
    pr(w, ",\n    \"peak_tensor\": ");
    if (a->peak_out >= 0)
        json_str(w, g->t[a->peak_out].name);
    else
        pr(w, "null");
    pr(w, ",\n    \"by_class\": {");
    for (int c = 0; c < STG_CLASS_COUNT; c++)
        pr(w, "%s\"%s\": %lld", c ? ", " : "", stg_class_name((stg_tclass)c), (long long)p->by_class[c]);
    pr(w, "},\n    \"live_at_peak\": {");
    for (int c = 0; c < STG_CLASS_COUNT; c++)
        pr(w, "%s\"%s\": %lld", c ? ", " : "", stg_class_name((stg_tclass)c), (long long)a->at_peak[c]);
    pr(w, "},\n    \"top_buffers\": [");
    for (int i = 0; i < a->nlive && i < TOP_N; i++) {
        int id = a->live[i].t;
        char sh[96], mb[STG_NAME_MAX + 40];
        report_made_by(g, id, mb, sizeof mb);
        pr(w, "%s\n      {\"name\": ", i ? "," : "");
        json_str(w, g->t[id].name);
        pr(w, ", \"class\": ");
        json_str(w, stg_class_name(g->t[id].cls));
        pr(w, ", \"shape\": ");
        json_str(w, stg_shape_str(&g->t[id], sh, sizeof sh));
        pr(w, ", \"dtype\": ");
        json_str(w, stg_dtype_name(g->t[id].dtype));
        pr(w, ", \"bytes\": %lld, \"made_by\": ", (long long)a->live[i].bytes);
        json_str(w, mb);
        pr(w, "}");
    }
    pr(w, "%s]\n  },\n  \"formula\": {\n    \"available\": %s,\n    \"reason\": ", a->nlive ? "\n    " : "",
       hf ? "true" : "false");
    if (fm && !hf && fm->reason[0])
        json_str(w, fm->reason);
    else
        pr(w, "null");
    pr(w, ",\n    \"params\": ");
    json_num_or_null(w, hf, hf ? fm->params : 0);
    pr(w, ",\n    \"total_bytes\": ");
    json_num_or_null(w, hf, hf ? fm->total : 0);
    const char *keys[5] = {"param", "grad", "optimizer", "activation", "input"};
    int64_t vals[5] = {0};
    if (hf) {
        vals[0] = fm->param, vals[1] = fm->grad, vals[2] = fm->optimizer, vals[3] = fm->activation, vals[4] = fm->input;
    }
    for (int i = 0; i < 5; i++) {
        pr(w, ",\n    \"%s\": ", keys[i]);
        json_num_or_null(w, hf, vals[i]);
    }
    pr(w, ",\n    \"terms\": [");
    for (int i = 0; hf && i < fm->nterms; i++) {
        pr(w, "%s\n      {\"name\": ", i ? "," : "");
        json_str(w, fm->terms[i].name);
        pr(w, ", \"bytes\": %lld, \"how\": ", (long long)fm->terms[i].bytes);
        json_str(w, fm->terms[i].how);
        pr(w, "}");
    }
    pr(w, "%s]\n  },\n  \"measured_bytes\": ", hf && fm->nterms ? "\n    " : "");
    json_num_or_null(w, x && x->measured_bytes >= 0, x ? x->measured_bytes : 0);
    pr(w, ",\n  \"beside_plan\": {");
    for (int i = 0; x && i < x->nbeside && i < 8; i++) pr(w, "%s\"%s\": %lld", i ? ", " : "", x->beside_name[i], (long long)x->beside_bytes[i]);
    pr(w, "}");
    pr(w, ",\n  \"optimizer_in_backward\": %s", graph_optim_in_backward(g) ? "true" : "false");
    pr(w, ",\n  \"clipping_norm\": \"%s\"", graph_optim_in_backward(g) ? "previous step" : "this step");
    if (x && x->budget) {
        const stg_budget_report *bu = x->budget;
        pr(w, ",\n  \"budget\": {\"budget_bytes\": %lld, \"peak_before_bytes\": %lld, \"peak_after_bytes\": %lld, \"recomputed\": %d, "
              "\"bytes_dropped\": %lld, \"extra_flops\": %.6g, \"step_flops\": %.6g, \"late_head_dw\": %s, \"peak_late_bytes\": %lld, "
              "\"late_flops\": %.6g}",
           (long long)bu->budget, (long long)bu->peak_before, (long long)bu->peak_after, bu->n_recomputed, (long long)bu->bytes_dropped,
           bu->extra_flops, bu->step_flops, bu->late_head_dw ? "true" : "false", (long long)bu->peak_late, bu->late_flops);
    } else {
        pr(w, ",\n  \"budget\": null");
    }
    if (x && x->shard) {
        const stg_shard_report *r = x->shard;
        pr(w, ",\n  \"data_parallel\": {\"world\": %d, \"zero\": %d, \"peak_bytes\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, "
              "\"optimizer_bytes\": %lld, \"removed_bytes\": %lld, \"transient_bytes\": %lld, \"per_device_bytes\": %lld",
           r->world, r->zero, (long long)r->peak, (long long)r->params, (long long)r->grads, (long long)r->optimizer, (long long)r->removed,
           (long long)r->transient, (long long)r->per_device);
        if (x->shard_capacity > 0) {
            pr(w, ", \"capacity_bytes\": %lld, \"devices_needed\": [", (long long)x->shard_capacity);
            for (int z = 0; z <= 3; z++) {
                int n = plan_shard_devices_needed(g, p, z, x->shard_bucket, x->shard_capacity, 1 << 16);
                if (n) pr(w, "%s%d", z ? ", " : "", n);
                else pr(w, "%snull", z ? ", " : "");
            }
            pr(w, "]");
        }
        pr(w, "}");
    }
    pr(w, "\n}\n");
    return 0;
}

// ---- SVG --------------------------------------------------------------------------------------

static void xml_str(wr *w, const char *s) {
    for (const char *c = s ? s : ""; *c; c++) {
        switch (*c) {
        case '<': pr(w, "&lt;"); break;
        case '>': pr(w, "&gt;"); break;
        case '&': pr(w, "&amp;"); break;
        case '"': pr(w, "&quot;"); break;
        case '\'': pr(w, "&apos;"); break;
        default: pr(w, "%c", *c);
        }
    }
}

int report_write_svg(wr *w, const stg_graph *g, const stg_plan *p, const analysis *a) {
    const double W = 1100, H = 560, ml = 90, mr = 190, mt = 50, mb = 60;
    const double pw = W - ml - mr, ph = H - mt - mb;
    // Stack order: persistent classes at the bottom, then what the step writes.
    static const stg_tclass order[STG_CLASS_COUNT] = {STG_CLASS_PARAM,     STG_CLASS_OPTIMIZER,  STG_CLASS_INPUT,
                                                      STG_CLASS_WORKSPACE, STG_CLASS_GRAD,       STG_CLASS_ACTIVATION,
                                                      STG_CLASS_TEMPORARY};
    static const char *const color[STG_CLASS_COUNT] = {[STG_CLASS_PARAM] = "#4e79a7",     [STG_CLASS_GRAD] = "#e15759",
                                                       [STG_CLASS_OPTIMIZER] = "#76b7b2", [STG_CLASS_INPUT] = "#59a14f",
                                                       [STG_CLASS_ACTIVATION] = "#f28e2b", [STG_CLASS_TEMPORARY] = "#edc948",
                                                       [STG_CLASS_WORKSPACE] = "#b07aa1"};
    int ns = p->nsched;
    int64_t ymax_b = p->peak_bytes > 0 ? p->peak_bytes : 1;
    double ymax = (double)ymax_b / GIB * 1.08;
    // Nice tick step in GiB.
    double raw = ymax / 5.0, mag = pow(10.0, floor(log10(raw))), step = mag;
    if (raw / mag > 5)
        step = 10 * mag;
    else if (raw / mag > 2)
        step = 5 * mag;
    else if (raw / mag > 1)
        step = 2 * mag;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    ymax = ceil(ymax / step - 1e-9) * step;

    pr(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    pr(w, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
       W, H, W, H);
    pr(w, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    pr(w, "<text x=\"%.0f\" y=\"24\" font-size=\"16\">", ml);
    xml_str(w, g->name[0] ? g->name : "model");
    pr(w, ": live bytes by class over the schedule (%s, %s)</text>\n", stg_precision_name(g->precision), a->mode);

    // Sample points: at most ~1 per pixel; in each bucket the step with the most live bytes.
    int npts = ns;
    int maxpts = (int)pw;
    if (npts > maxpts) npts = maxpts;
    int *pts = malloc(sizeof(int) * (size_t)(npts > 0 ? npts : 1));
    if (!pts) return -1;
    for (int i = 0; i < npts; i++) {
        int lo = (int)((int64_t)i * ns / npts), hi = (int)((int64_t)(i + 1) * ns / npts);
        int best = lo;
        for (int s = lo; s < hi; s++)
            if (plan_live_at(p, s, -1) > plan_live_at(p, best, -1)) best = s;
        if (p->peak_step >= lo && p->peak_step < hi) best = p->peak_step;
        pts[i] = best;
    }
#define SX(s) (ml + (ns > 1 ? (double)(s) / (double)(ns - 1) : 0.5) * pw)
#define SY(b) (mt + ph - ((double)(b) / GIB) / ymax * ph)

    // Phase spans.
    static const char *const phase_fill[3] = {"#dde8f5", "#f6e3d9", "#e3f0dc"};
    {
        int best_start[3] = {-1, -1, -1}, best_len[3] = {0, 0, 0};
        int s = 0;
        while (s < ns) {
            int ph_ = (int)g->ops[g->schedule[s]].phase, e = s;
            while (e + 1 < ns && (int)g->ops[g->schedule[e + 1]].phase == ph_) e++;
            double x0 = ns > 1 ? SX(s) - 0.5 * pw / (ns - 1) : ml, x1 = ns > 1 ? SX(e) + 0.5 * pw / (ns - 1) : ml + pw;
            if (x0 < ml) x0 = ml;
            if (x1 > ml + pw) x1 = ml + pw;
            if (ph_ >= 0 && ph_ < 3) {
                pr(w, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"/>\n", x0, mt, x1 - x0, ph,
                   phase_fill[ph_]);
                if (e - s + 1 > best_len[ph_]) {
                    best_len[ph_] = e - s + 1;
                    best_start[ph_] = s;
                }
            }
            s = e + 1;
        }
        for (int k = 0; k < 3; k++)
            if (best_start[k] >= 0) {
                double xc = SX(best_start[k] + (best_len[k] - 1) / 2.0);
                pr(w, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n", xc, mt + 14,
                   stg_phase_name((stg_phase)k));
            }
    }

    // Stacked areas.
    if (npts > 0) {
        int64_t *cum = calloc((size_t)npts * (STG_CLASS_COUNT + 1), sizeof(int64_t));
        if (!cum) {
            free(pts);
            return -1;
        }
        for (int i = 0; i < npts; i++)
            for (int k = 0; k < STG_CLASS_COUNT; k++)
                cum[(size_t)i * (STG_CLASS_COUNT + 1) + (size_t)k + 1] =
                    cum[(size_t)i * (STG_CLASS_COUNT + 1) + (size_t)k] + plan_live_at(p, pts[i], order[k]);
        for (int k = 0; k < STG_CLASS_COUNT; k++) {
            bool any = false;
            for (int i = 0; i < npts; i++)
                if (plan_live_at(p, pts[i], order[k])) any = true;
            if (!any) continue;
            pr(w, "<polygon fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" points=\"", color[order[k]]);
            for (int i = 0; i < npts; i++)
                pr(w, "%.2f,%.2f ", npts > 1 ? SX(pts[i]) : ml, SY(cum[(size_t)i * (STG_CLASS_COUNT + 1) + (size_t)k + 1]));
            if (npts == 1) pr(w, "%.2f,%.2f ", ml + pw, SY(cum[(size_t)k + 1]));
            if (npts == 1) pr(w, "%.2f,%.2f ", ml + pw, SY(cum[(size_t)k]));
            for (int i = npts - 1; i >= 0; i--)
                pr(w, "%.2f,%.2f ", npts > 1 ? SX(pts[i]) : ml, SY(cum[(size_t)i * (STG_CLASS_COUNT + 1) + (size_t)k]));
            pr(w, "\"/>\n");
        }
        free(cum);
    }
    free(pts);

    // Axes and ticks.
    pr(w, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", ml, mt, ml, mt + ph);
    pr(w, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", ml, mt + ph, ml + pw, mt + ph);
    for (int i = 0; i * step <= ymax + 1e-12 && i < 50; i++) {
        double v = i * step, y = mt + ph - v / ymax * ph;
        pr(w, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#ccc\" stroke-dasharray=\"2,3\"/>\n", ml, y, ml + pw, y);
        pr(w, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%.*f GiB</text>\n", ml - 6, y + 4, dec, v);
    }
    if (ns > 0) {
        int xs = ns / 10 > 0 ? ns / 10 : 1;
        for (int s = 0; s < ns; s += xs) {
            pr(w, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"black\"/>\n", SX(s), mt + ph, SX(s), mt + ph + 5);
            pr(w, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%d</text>\n", SX(s), mt + ph + 18, s);
        }
    }
    pr(w, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">schedule step</text>\n", ml + pw / 2, H - 16);
    pr(w, "<text x=\"20\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.0f)\">live bytes (GiB)</text>\n",
       mt + ph / 2, mt + ph / 2);

    // The peak.
    if (p->peak_step >= 0) {
        int64_t pk = plan_live_at(p, p->peak_step, -1);
        double px = SX(p->peak_step), py = SY(pk);
        pr(w, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#c00\" stroke-dasharray=\"4,3\"/>\n", px, mt, px,
           mt + ph);
        pr(w, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"#c00\"/>\n", px, py);
        pr(w, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" fill=\"#c00\">peak %.2f GiB at step %d</text>\n",
           px + (px > ml + pw * 0.7 ? -8 : 8), py - 8 < mt + 28 ? mt + 28 : py - 8, px > ml + pw * 0.7 ? "end" : "start",
           (double)pk / GIB, p->peak_step);
        if (p->peak_bytes > pk) {
            double ay = SY(p->peak_bytes);
            pr(w, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#333\" stroke-dasharray=\"6,3\"/>\n", ml, ay,
               ml + pw, ay);
            pr(w, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\" fill=\"#333\">planned %.2f GiB (with fragmentation)</text>\n",
               ml + pw - 4, ay - 4, (double)p->peak_bytes / GIB);
        }
    }
#undef SX
#undef SY

    // Legend.
    double lx = ml + pw + 20, ly = mt + 10;
    pr(w, "<text x=\"%.0f\" y=\"%.0f\" font-weight=\"bold\">class</text>\n", lx, ly);
    for (int k = STG_CLASS_COUNT - 1, row = 0; k >= 0; k--, row++) {
        double y = ly + 12 + row * 20;
        pr(w, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", lx, y, color[order[k]]);
        pr(w, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", lx + 20, y + 11, stg_class_name(order[k]));
    }
    pr(w, "</svg>\n");
    return 0;
}
