// stg plot: the curves of one or more runs from their JSON-lines logs (stg train --log), as one
// plain SVG: loss and validation loss against steps and against wall-clock time, the learning rate
// and tokens/s beneath, the runs overlaid in colours and labelled.
//
// A log that a resumed run appended to holds steps again that the first run already logged (those
// after the checkpoint it resumed from): the later lines replace them, and the resumed segment's
// wall-clock times (elapsed_s restarts at 0) are placed after the last time of the segment before,
// which counts the time the lost steps took.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/base/file.h"
#include "runtime/json.h"
#include "tools/stg/cli.h"

#define PLOT_MAX_RUNS 16
#define PLOT_MAX_POINTS 10000 // per series: longer logs are thinned to every k-th point (and the last)

enum { F_LOSS, F_VAL, F_LR, F_TPS, F_FIELDS };
static const char *const field_key[F_FIELDS] = {"loss", "val_loss", "lr", "tokens_per_s"};

typedef struct {
    double step, t; // t: wall-clock seconds (NAN when the log has none)
    double v[F_FIELDS];
} plot_row;

typedef struct {
    const char *path;
    char label[256];
    plot_row *rows;
    int n, cap;
    bool has_time;
} plot_run;

static int run_push(plot_run *r, const plot_row *row) {
    if (r->n == r->cap) {
        int nc = r->cap ? 2 * r->cap : 256;
        plot_row *p = realloc(r->rows, sizeof *p * (size_t)nc);
        if (!p) return -1;
        r->rows = p;
        r->cap = nc;
    }
    r->rows[r->n++] = *row;
    return 0;
}

// Reads a log; prints the problem (file:line) and returns -1 on bad input.
static int read_log(plot_run *r) {
    FILE *f = fopen(r->path, "r");
    if (!f) {
        fprintf(stderr, "stg plot: %s: %s\n", r->path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int ln = 0, rc = 0;
    double t_offset = 0, t_last = 0; // resumed segments: times after the previous segment's
    while ((len = getline(&line, &cap, f)) >= 0) {
        ln++;
        if (len == 0 || strspn(line, " \t\r\n") == (size_t)len) continue;
        rt_json *v;
        stg_err err;
        char what[4200];
        snprintf(what, sizeof what, "%s:%d", r->path, ln);
        if (rt_json_parse(line, (size_t)len, what, &v, &err)) {
            fprintf(stderr, "stg plot: %s\n", err.msg);
            rc = -1;
            break;
        }
        const rt_json *step = rt_json_get(v, "step"), *el = rt_json_get(v, "elapsed_s");
        if (v->type != RT_JSON_OBJECT || !step || step->type != RT_JSON_NUMBER || !(step->num >= 0)) {
            fprintf(stderr, "stg plot: %s: not a log line of stg train (an object with a \"step\" number)\n", what);
            rt_json_free(v);
            rc = -1;
            break;
        }
        plot_row row;
        row.step = step->num;
        row.t = NAN;
        for (int k = 0; k < F_FIELDS; k++) {
            const rt_json *x = rt_json_get(v, field_key[k]);
            row.v[k] = x && x->type == RT_JSON_NUMBER ? x->num : NAN;
            if (x && x->type != RT_JSON_NUMBER) {
                fprintf(stderr, "stg plot: %s: \"%s\" is not a number\n", what, field_key[k]);
                rc = -1;
            }
        }
        if (el && el->type == RT_JSON_NUMBER) {
            // a resumed segment: its step went back, or its clock restarted
            if (r->n > 0 && (row.step <= r->rows[r->n - 1].step || el->num + t_offset < t_last)) t_offset = t_last;
            row.t = el->num + t_offset;
            t_last = row.t;
            r->has_time = true;
        }
        rt_json_free(v);
        if (rc) break;
        while (r->n > 0 && r->rows[r->n - 1].step >= row.step) r->n--; // the resumed run's lines replace these
        if (run_push(r, &row)) {
            fprintf(stderr, "stg plot: out of memory\n");
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "stg plot: %s: read error\n", r->path);
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc == 0 && r->n == 0) {
        fprintf(stderr, "stg plot: %s: no log lines\n", r->path);
        rc = -1;
    }
    return rc;
}

// ---- drawing ------------------------------------------------------------------------------------

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                      "#bcbd22", "#17becf"};

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving about n ticks over [lo, hi].
static double nice_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n;
    if (!(raw > 0)) return 1;
    double p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void tick_label(char *buf, size_t n, double v, double step) {
    double a = fabs(v);
    if (v == 0) snprintf(buf, n, "0");
    else if (a >= 1e5 || a < 1e-3) snprintf(buf, n, "%.3g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, n, "%.*f", dec > 6 ? 6 : dec, v);
    }
}

typedef struct {
    double x, y, w, h;     // the plotting area in the picture
    double x0, x1, y0, y1; // data ranges
} panel;

static double px(const panel *p, double x) { return p->x + (x - p->x0) / (p->x1 - p->x0) * p->w; }
static double py(const panel *p, double y) { return p->y + p->h - (y - p->y0) / (p->y1 - p->y0) * p->h; }

// Ranges over every run's points of the given fields (xt: time instead of step); false when none.
static bool ranges(const plot_run *runs, int nr, bool xt, const int *fields, int nf, panel *p) {
    p->x0 = p->y0 = INFINITY;
    p->x1 = p->y1 = -INFINITY;
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < runs[r].n; i++) {
            const plot_row *w = &runs[r].rows[i];
            double x = xt ? w->t : w->step;
            if (!isfinite(x)) continue;
            for (int k = 0; k < nf; k++) {
                double y = w->v[fields[k]];
                if (!isfinite(y)) continue;
                p->x0 = fmin(p->x0, x), p->x1 = fmax(p->x1, x), p->y0 = fmin(p->y0, y), p->y1 = fmax(p->y1, y);
            }
        }
    if (!isfinite(p->x0)) return false;
    if (p->x1 <= p->x0) p->x1 = p->x0 + 1;
    double pad = (p->y1 - p->y0) * 0.05;
    if (!(pad > 0)) pad = fabs(p->y0) * 0.05 + 1e-12;
    p->y0 -= pad, p->y1 += pad;
    if (fields[0] != F_LOSS && p->y0 < 0 && p->y0 + pad >= 0) p->y0 = 0; // rates and throughput from 0
    return true;
}

static void axes(FILE *f, const panel *p, const char *title, const char *xlabel) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", p->x, p->y, p->w, p->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">", p->x, p->y - 8);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", p->x + p->w / 2, p->y + p->h + 32,
            xlabel);
    char lab[64];
    double s = nice_step(p->x0, p->x1, 6);
    for (double v = ceil(p->x0 / s) * s; v <= p->x1 + 1e-9 * s; v += s) {
        double x = px(p, v);
        tick_label(lab, sizeof lab, v, s);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                   "text-anchor=\"middle\">%s</text>\n",
                x, p->y, x, p->y + p->h, x, p->y + p->h + 14, lab);
    }
    s = nice_step(p->y0, p->y1, 5);
    for (double v = ceil(p->y0 / s) * s; v <= p->y1 + 1e-9 * s; v += s) {
        double y = py(p, v);
        tick_label(lab, sizeof lab, fabs(v) < 1e-12 * s ? 0 : v, s);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                   "text-anchor=\"end\">%s</text>\n",
                p->x, y, p->x + p->w, y, p->x - 5, y + 3, lab);
    }
}

// One series as a polyline (class names the field; data-run the run's index), thinned past
// PLOT_MAX_POINTS.
static void series(FILE *f, const panel *p, const plot_run *r, int ri, bool xt, int field) {
    int n = 0;
    for (int i = 0; i < r->n; i++) n += isfinite(r->rows[i].v[field]) && isfinite(xt ? r->rows[i].t : r->rows[i].step);
    if (n == 0) return;
    int every = (n + PLOT_MAX_POINTS - 1) / PLOT_MAX_POINTS, k = 0;
    fprintf(f, "<polyline class=\"%s\" data-run=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", field_key[field], ri,
            colours[ri % 10], field == F_VAL ? "2" : "1.3", field == F_VAL ? " stroke-dasharray=\"6 3\"" : "");
    for (int i = 0; i < r->n; i++) {
        const plot_row *w = &r->rows[i];
        double x = xt ? w->t : w->step, y = w->v[field];
        if (!isfinite(y) || !isfinite(x)) continue;
        if (k++ % every != 0 && k != n) continue;
        fprintf(f, "%.2f,%.2f ", px(p, x), py(p, y));
    }
    fprintf(f, "\"/>\n");
    if (field != F_VAL || n > 200) return;
    for (int i = 0; i < r->n; i++) { // validation points are few: each marked
        const plot_row *w = &r->rows[i];
        double x = xt ? w->t : w->step, y = w->v[field];
        if (isfinite(y) && isfinite(x)) fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", px(p, x), py(p, y), colours[ri % 10]);
    }
}

static void panel_draw(FILE *f, panel *p, const plot_run *runs, int nr, bool xt, const int *fields, int nf, const char *title) {
    const char *xlabel = xt ? "wall-clock time (s)" : "step";
    if (!ranges(runs, nr, xt, fields, nf, p)) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#bbb\"/>\n", p->x, p->y, p->w, p->h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">", p->x, p->y - 8);
        xml_text(f, title);
        fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"#777\">%s</text>\n", p->x + p->w / 2,
                p->y + p->h / 2, xt ? "no elapsed_s in these logs" : "no values in these logs");
        return;
    }
    axes(f, p, title, xlabel);
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < nf; k++) series(f, p, &runs[r], r, xt, fields[k]);
}

static int draw(FILE *f, const plot_run *runs, int nr, const char *title) {
    const double W = 1200, ml = 70, mr = 30, gap = 80, pw = (W - ml - mr - gap) / 2, top = 90 + 18.0 * ((nr + 1) / 2);
    const double h_loss = 300, h_small = 170, vgap = 70;
    double H = top + h_loss + 2 * (h_small + vgap) + 60;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"18\" font-weight=\"bold\">", ml);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%.0f\" y=\"48\" font-size=\"11\" fill=\"#555\">solid: training loss; dashed: validation loss</text>\n", ml);
    for (int r = 0; r < nr; r++) { // the legend, two columns
        double x = ml + (r % 2) * (pw + gap), y = 70 + 18.0 * (r / 2);
        fprintf(f, "<g class=\"legend\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.1f\" "
                   "y=\"%.1f\" font-size=\"12\">",
                x, y - 4, x + 24, y - 4, colours[r % 10], x + 30, y);
        xml_text(f, runs[r].label);
        fprintf(f, "</text></g>\n");
    }
    const int lossf[] = {F_LOSS, F_VAL}, lrf[] = {F_LR}, tpsf[] = {F_TPS};
    for (int c = 0; c < 2; c++) {
        bool xt = c == 1;
        double x = ml + c * (pw + gap), y = top;
        panel p = {x, y, pw, h_loss, 0, 0, 0, 0};
        panel_draw(f, &p, runs, nr, xt, lossf, 2, xt ? "loss vs wall-clock time" : "loss vs steps");
        y += h_loss + vgap;
        panel q = {x, y, pw, h_small, 0, 0, 0, 0};
        panel_draw(f, &q, runs, nr, xt, lrf, 1, "learning rate");
        y += h_small + vgap;
        panel t = {x, y, pw, h_small, 0, 0, 0, 0};
        panel_draw(f, &t, runs, nr, xt, tpsf, 1, "tokens/s");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}

int cmd_plot(int argc, char **argv) {
    plot_run runs[PLOT_MAX_RUNS];
    memset(runs, 0, sizeof runs);
    const char *out = NULL, *title = NULL, *labels[PLOT_MAX_RUNS];
    int nr = 0, nl = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(argv[i], "--title") == 0) {
            if (!(title = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(argv[i], "--label") == 0) {
            const char *v = cli_value(argc, argv, &i);
            if (!v) return 2;
            if (nl == PLOT_MAX_RUNS) {
                fprintf(stderr, "stg plot: at most %d --label options\n", PLOT_MAX_RUNS);
                return 2;
            }
            labels[nl++] = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "stg plot: unexpected argument '%s'\n", argv[i]);
            cli_usage(stderr, "plot");
            return 2;
        } else {
            if (nr == PLOT_MAX_RUNS) {
                fprintf(stderr, "stg plot: at most %d logs in one picture\n", PLOT_MAX_RUNS);
                return 2;
            }
            runs[nr++].path = argv[i];
        }
    }
    if (nr == 0 || !out) {
        fprintf(stderr, "stg plot: %s\n", nr == 0 ? "give one or more LOG.jsonl files (stg train --log)" : "-o FILE.svg is needed");
        cli_usage(stderr, "plot");
        return 2;
    }
    if (nl && nl != nr) {
        fprintf(stderr, "stg plot: %d --label options for %d logs: give one per log, in order, or none\n", nl, nr);
        return 2;
    }
    const char *inw[PLOT_MAX_RUNS], *inp[PLOT_MAX_RUNS];
    for (int r = 0; r < nr; r++) inp[r] = runs[r].path, inw[r] = "log";
    stg_err err;
    if (stg_check_output(out, "-o", inp, inw, nr, &err)) {
        fprintf(stderr, "stg plot: %s\n", err.msg);
        return 2;
    }
    for (int r = 0; r < nr; r++) {
        if (read_log(&runs[r])) goto done;
        if (nl) snprintf(runs[r].label, sizeof runs[r].label, "%s", labels[r]);
        else { // the file name without its directory and .jsonl
            const char *b = strrchr(runs[r].path, '/');
            b = b ? b + 1 : runs[r].path;
            size_t n = strlen(b);
            if (n > 6 && strcmp(b + n - 6, ".jsonl") == 0) n -= 6;
            snprintf(runs[r].label, sizeof runs[r].label, "%.*s", (int)n, b);
        }
        int nv = 0;
        for (int i = 0; i < runs[r].n; i++) nv += isfinite(runs[r].rows[i].v[F_VAL]);
        size_t k = strlen(runs[r].label);
        snprintf(runs[r].label + k, sizeof runs[r].label - k, " (%d steps%s%s)", runs[r].n, nv ? ", validation" : "",
                 runs[r].has_time ? "" : ", no wall-clock times");
    }
    char tmp[4300];
    FILE *f = cli_out_open(out, tmp, sizeof tmp);
    rc = 1;
    if (!f) goto done;
    int dr = draw(f, runs, nr, title ? title : "stg train");
    if (cli_out_close(f, out, tmp) || dr) goto done;
    if (f != stdout) {
        int pts = 0;
        for (int r = 0; r < nr; r++) pts += runs[r].n;
        printf("stg plot: %d run%s, %d steps: %s\n", nr, nr == 1 ? "" : "s", pts, out);
    }
    rc = 0;
done:
    for (int r = 0; r < nr; r++) free(runs[r].rows);
    return rc;
}
