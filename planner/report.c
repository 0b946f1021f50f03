// The memory report: the analysis every format shares (the peak step, the arena tenants live
// there, bytes by class) and the entry report_write; the writers are planner/report_write.c.
#include "planner/report.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/report_internal.h"

int report_format_from_name(const char *name) {
    if (!name) return -1;
    if (strcmp(name, "text") == 0 || strcmp(name, "txt") == 0) return STG_REPORT_TEXT;
    if (strcmp(name, "md") == 0 || strcmp(name, "markdown") == 0) return STG_REPORT_MD;
    if (strcmp(name, "json") == 0) return STG_REPORT_JSON;
    if (strcmp(name, "svg") == 0) return STG_REPORT_SVG;
    return -1;
}

// ---- analysis shared by the formats -----------------------------------------------------------

static int cmp_occ(const void *a, const void *b) {
    const occ *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static int analyse(const stg_graph *g, const stg_plan *p, const stg_formula *fm, const stg_report_extra *x, analysis *a,
                   stg_err *err) {
    memset(a, 0, sizeof *a);
    a->mode = x && x->mode ? x->mode : "train";
    a->train = strcmp(a->mode, "forward") != 0;
    a->peak_step = p->peak_step;
    a->peak_op = a->peak_step >= 0 && a->peak_step < g->nsched ? g->schedule[a->peak_step] : -1;
    a->peak_out = a->peak_op >= 0 && g->ops[a->peak_op].n_out > 0 ? g->ops[a->peak_op].out[0] : -1;
    a->have_formula = fm && fm->available;
    a->graph_params = graph_param_count(g);
    for (int c = 0; c < STG_CLASS_COUNT; c++) a->at_peak[c] = plan_live_at(p, a->peak_step, c);
    int nt = g->nt;
    for (int t = 0; t < nt; t++)
        if (p->owner[t] == t && p->region[t] != STG_REGION_NONE) {
            a->raw_class[g->t[t].cls] += stg_bytes(&g->t[t]);
            a->n_class[g->t[t].cls]++;
        }
    if (a->peak_step < 0) return 0;
    // Storage lives (union of tenants) and group blocks.
    int *sf = malloc(sizeof(int) * (size_t)(nt > 0 ? nt : 1));
    int *sl = malloc(sizeof(int) * (size_t)(nt > 0 ? nt : 1));
    a->live = malloc(sizeof(occ) * (size_t)(nt > 0 ? nt : 1));
    int maxg = -1;
    for (int t = 0; t < nt; t++)
        if (g->t[t].group > maxg) maxg = g->t[t].group;
    int *gf = malloc(sizeof(int) * (size_t)(maxg >= 0 ? maxg + 2 : 2));
    int *gl = malloc(sizeof(int) * (size_t)(maxg >= 0 ? maxg + 2 : 2));
    if (!sf || !sl || !a->live || !gf || !gl) {
        free(sf);
        free(sl);
        free(gf);
        free(gl);
        free(a->live);
        a->live = NULL;
        return stg_errf(err, "report: out of memory");
    }
    for (int t = 0; t < nt; t++) sf[t] = sl[t] = -1;
    for (int i = 0; i <= maxg; i++) gf[i] = gl[i] = -1;
    for (int t = 0; t < nt; t++) {
        int st = p->owner[t];
        if (p->first[t] < 0) continue;
        if (sf[st] < 0 || p->first[t] < sf[st]) sf[st] = p->first[t];
        if (p->last[t] > sl[st]) sl[st] = p->last[t];
    }
    for (int t = 0; t < nt; t++) {
        int gr = g->t[t].group;
        if (gr < 0 || p->owner[t] != t || sf[t] < 0) continue;
        if (gf[gr] < 0 || sf[t] < gf[gr]) gf[gr] = sf[t];
        if (sl[t] > gl[gr]) gl[gr] = sl[t];
    }
    int s = a->peak_step;
    for (int t = 0; t < nt; t++) {
        if (g->t[t].base >= 0 || p->region[t] != STG_REGION_ARENA) continue;
        int st = p->owner[t], gr = g->t[st].group;
        int from, to;
        if (st == t)
            from = gr >= 0 ? gf[gr] : sf[t];
        else
            from = p->first[t];
        if (p->next_inplace[t] >= 0)
            to = p->first[p->next_inplace[t]] - 1;
        else
            to = gr >= 0 ? gl[gr] : sl[st];
        if (from < 0 || s < from || s > to) continue;
        a->live[a->nlive++] = (occ){t, p->size[st]};
        if (g->t[t].cls == STG_CLASS_GRAD) a->grads_live++;
    }
    qsort(a->live, (size_t)a->nlive, sizeof *a->live, cmp_occ);
    free(sf);
    free(sl);
    free(gf);
    free(gl);
    return 0;
}

void report_made_by(const stg_graph *g, int t, char *buf, size_t n) {
    int op = g->t[t].producer;
    if (op < 0 || op >= g->nops) {
        snprintf(buf, n, "-");
        return;
    }
    const stg_op *o = &g->ops[op];
    snprintf(buf, n, "%s -> %s", ops_name(o->kind), o->n_out > 0 ? g->t[o->out[0]].name : "?");
}

int report_largest_live(const analysis *a, const stg_graph *g, stg_tclass c) {
    for (int i = 0; i < a->nlive; i++)
        if (g->t[a->live[i].t].cls == c) return a->live[i].t;
    return -1;
}

// ---- entry ------------------------------------------------------------------------------------

int report_write(FILE *f, stg_report_format fmt, const stg_graph *g, const stg_plan *p, const stg_formula *fm,
                 const stg_report_extra *x, stg_err *err) {
    if (!f || !g || !p) return stg_errf(err, "report: no file, graph or plan");
    if (p->nt != g->nt || p->nsched != g->nsched)
        return stg_errf(err, "report: the plan (%d tensors, %d steps) is not of this graph (%d, %d)", p->nt, p->nsched, g->nt,
                        g->nsched);
    stg_formula none;
    if (!fm) {
        memset(&none, 0, sizeof none);
        snprintf(none.reason, sizeof none.reason, "no formula given");
        fm = &none;
    }
    analysis a;
    if (analyse(g, p, fm, x, &a, err)) return -1;
    wr w = {f, 0};
    int rc = 0;
    switch (fmt) {
    case STG_REPORT_TEXT: rc = report_write_text(&w, false, g, p, fm, &a, x); break;
    case STG_REPORT_MD: rc = report_write_text(&w, true, g, p, fm, &a, x); break;
    case STG_REPORT_JSON: rc = report_write_json(&w, g, p, fm, &a, x); break;
    case STG_REPORT_SVG: rc = report_write_svg(&w, g, p, &a); break;
    default: rc = stg_errf(err, "report: unknown format %d", (int)fmt);
    }
    free(a.live);
    if (rc < 0 && !(fmt < STG_REPORT_TEXT || fmt > STG_REPORT_SVG)) return stg_errf(err, "report: out of memory");
    if (rc < 0) return -1;
    if (fflush(f) != 0 || w.bad || ferror(f)) return stg_errf(err, "report: writing the %s report failed",
                                                                fmt == STG_REPORT_JSON ? "JSON" : fmt == STG_REPORT_SVG ? "SVG" : "text");
    return 0;
}
