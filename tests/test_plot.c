// stg plot: two runs' logs (stg train --log) become one SVG that is well-formed XML (checked by a
// small parser here: every tag closed in order, attributes quoted, entities known), with one
// polyline per series, panel and run holding one point per logged value, inside the picture; a log
// a resumed run appended to is read with the resumed lines replacing the lost ones and its clock
// continuing; labels are escaped; bad input ends in exit 2 with nothing written.
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

#define STG "'" STG_BINARY "'"
#define TINY " train '" STG_SOURCE_DIR "/models/tiny.yaml' --device cpu --set n_layers=1 --set d_model=16 --set d_ff=32 --set ctx=8 --set batch=2"

static char dir[64];

static int setup(void **s) {
    if (tu_mkdtemp(dir, sizeof dir, "plot")) return -1;
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             STG TINY " --steps 30 --val-every 10 --lr 1e-2 --log %s/a.jsonl >/dev/null 2>&1 && " STG TINY
                      " --steps 24 --val-every 8 --lr 3e-3 --schedule wsd --log %s/b.jsonl >/dev/null 2>&1",
             dir, dir);
    return tu_run(cmd, out, sizeof out) == 0 ? 0 : -1;
}

static int teardown(void **s) { return tu_rmtree(dir); }

// Well-formed XML as SVG needs it: a declaration, then elements properly nested, attributes
// name="value" without '<' or a raw '&', text with known entities only. Returns NULL or the problem.
static const char *xml_check(const char *s, int *elements) {
    static char why[256];
    const char *stack[64];
    size_t slen[64];
    int depth = 0, roots = 0;
    *elements = 0;
    if (strncmp(s, "<?xml ", 6) != 0) return "no XML declaration";
    s = strstr(s, "?>");
    if (!s) return "the declaration is not closed";
    s += 2;
    while (*s) {
        if (*s != '<') {
            if (*s == '&') {
                const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
                size_t k = 0;
                while (k < 5 && strncmp(s, ents[k], strlen(ents[k])) != 0) k++;
                if (k == 5) return "an unknown entity";
            }
            if (depth == 0 && !strchr(" \t\r\n", *s)) return "text outside the root element";
            s++;
            continue;
        }
        if (s[1] == '/') { // a closing tag
            const char *n = s + 2;
            size_t l = strcspn(n, " >");
            if (depth == 0 || l != slen[depth - 1] || strncmp(n, stack[depth - 1], l) != 0) {
                snprintf(why, sizeof why, "</%.*s> closes <%.*s>", (int)l, n, depth ? (int)slen[depth - 1] : 0, depth ? stack[depth - 1] : "");
                return why;
            }
            depth--;
            s = strchr(n, '>');
            if (!s) return "a closing tag is not closed";
            s++;
            continue;
        }
        const char *n = s + 1;
        size_t l = strcspn(n, " \t\n/>");
        if (l == 0) return "an empty tag name";
        const char *p = n + l;
        for (;;) { // attributes
            while (*p == ' ' || *p == '\n' || *p == '\t') p++;
            if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
            size_t al = strcspn(p, "= \t\n>");
            if (al == 0 || p[al] != '=' || p[al + 1] != '"') {
                snprintf(why, sizeof why, "<%.*s>: an attribute is not name=\"value\"", (int)l, n);
                return why;
            }
            const char *v = p + al + 2, *e = strchr(v, '"');
            if (!e) return "an attribute value is not closed";
            for (const char *c = v; c < e; c++) {
                if (*c == '<') return "'<' inside an attribute";
                if (*c == '&' && strncmp(c, "&amp;", 5) && strncmp(c, "&lt;", 4) && strncmp(c, "&gt;", 4) && strncmp(c, "&quot;", 6))
                    return "a raw '&' inside an attribute";
            }
            p = e + 1;
        }
        ++*elements;
        if (depth == 0 && ++roots > 1) return "two root elements";
        if (*p == '/') {
            s = p + 2;
            continue;
        }
        if (depth == 64) return "nested too deep";
        stack[depth] = n;
        slen[depth++] = l;
        s = p + 1;
    }
    if (depth) return "an element is not closed";
    if (roots != 1) return "no root element";
    return NULL;
}

// The polylines of class `cls` and run `run`, in order: their point counts into n[] (at most 4),
// checking every point lies inside the picture and, when increasing, that x increases.
static int polylines(const char *svg, const char *cls, int run, int *n, bool increasing) {
    char key[96];
    snprintf(key, sizeof key, "<polyline class=\"%s\" data-run=\"%d\"", cls, run);
    int k = 0;
    double W = 0, H = 0;
    assert_int_equal(sscanf(strstr(svg, "<svg "), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lf\" height=\"%lf\"", &W, &H), 2);
    for (const char *p = strstr(svg, key); p; p = strstr(p + 1, key)) {
        const char *pts = strstr(p, "points=\"");
        assert_non_null(pts);
        pts += 8;
        const char *end = strchr(pts, '"');
        int c = 0;
        double lastx = -1;
        while (pts < end) {
            double x, y;
            int used;
            if (sscanf(pts, "%lf,%lf %n", &x, &y, &used) != 2) fail_msg("bad point at %.20s", pts);
            if (!(x >= 0 && x <= W && y >= 0 && y <= H)) fail_msg("point %g,%g outside %gx%g", x, y, W, H);
            if (increasing && !(x > lastx)) fail_msg("%s run %d: x %g after %g", cls, run, x, lastx);
            lastx = x;
            pts += used;
            c++;
        }
        assert_true(k < 4);
        n[k++] = c;
    }
    return k;
}

static int count_lines(const char *path, const char *field) {
    char *s = tu_slurp(path, NULL);
    assert_non_null(s);
    int n = 0;
    for (char *p = strstr(s, field); p; p = strstr(p + 1, field)) n++;
    free(s);
    return n;
}

static void test_two_runs(void **s) {
    char cmd[2048], out[4096], svgp[128], a[128], b[128];
    snprintf(svgp, sizeof svgp, "%s/run.svg", dir);
    snprintf(a, sizeof a, "%s/a.jsonl", dir);
    snprintf(b, sizeof b, "%s/b.jsonl", dir);
    snprintf(cmd, sizeof cmd, STG " plot %s %s -o %s --title 'two runs' --label 'lr 1e-2 <cosine>' --label 'lr 3e-3 & wsd' 2>&1", a, b, svgp);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s", out);
    char *svg = tu_slurp(svgp, NULL);
    assert_non_null(svg);
    int elements;
    // the checker itself refuses what is not well-formed
    assert_non_null(xml_check("<?xml version=\"1.0\"?><svg><g></svg>", &elements));
    assert_non_null(xml_check("<?xml version=\"1.0\"?><svg a=b/>", &elements));
    assert_non_null(xml_check("<?xml version=\"1.0\"?><svg><text>a & b</text></svg>", &elements));
    assert_non_null(xml_check("<?xml version=\"1.0\"?><svg/><svg/>", &elements));
    assert_null(xml_check("<?xml version=\"1.0\"?><svg><text x=\"1\">a &amp; b</text></svg>", &elements));
    const char *why = xml_check(svg, &elements);
    if (why) fail_msg("not well-formed: %s", why);
    assert_true(elements > 50);
    assert_non_null(strstr(svg, "lr 1e-2 &lt;cosine&gt; (30 steps, validation)"));
    assert_non_null(strstr(svg, "lr 3e-3 &amp; wsd (24 steps, validation)"));
    const int steps[2] = {30, 24};
    const char *logs[2] = {a, b};
    for (int r = 0; r < 2; r++) {
        int n[4];
        // loss, learning rate and tokens/s: against steps and against time, one point per logged step
        const char *cls[] = {"loss", "lr", "tokens_per_s"};
        for (int c = 0; c < 3; c++) {
            assert_int_equal(polylines(svg, cls[c], r, n, true), 2);
            assert_int_equal(n[0], steps[r]);
            assert_int_equal(n[1], steps[r]);
        }
        int vals = count_lines(logs[r], "\"val_loss\"");
        assert_int_equal(vals, r == 0 ? 3 : 3); // steps 10, 20, 30; 8, 16, 24
        assert_int_equal(polylines(svg, "val_loss", r, n, true), 2);
        assert_int_equal(n[0], vals);
        assert_int_equal(n[1], vals);
    }
    free(svg);
}

// A log with a resumed segment: steps 1-8, then 6-12 again with the clock from 0.
static void test_resumed(void **s) {
    char path[128], svgp[128], cmd[1024], out[4096];
    snprintf(path, sizeof path, "%s/resumed.jsonl", dir);
    snprintf(svgp, sizeof svgp, "%s/resumed.svg", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 1; i <= 8; i++) fprintf(f, "{\"step\": %d, \"loss\": %g, \"lr\": 0.001, \"tokens_per_s\": 100, \"elapsed_s\": %d}\n", i, 5.0 - 0.1 * i, i);
    for (int i = 6; i <= 12; i++)
        fprintf(f, "{\"step\": %d, \"loss\": %g, \"lr\": 0.001, \"tokens_per_s\": 100, \"elapsed_s\": %d%s}\n", i, 5.0 - 0.1 * i, i - 5,
                i == 10 ? ", \"val_loss\": 4.5" : "");
    fprintf(f, "\n"); // blank lines are nothing
    fclose(f);
    snprintf(cmd, sizeof cmd, STG " plot %s -o %s 2>&1", path, svgp);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s", out);
    char *svg = tu_slurp(svgp, NULL);
    int n[4], elements;
    assert_null(xml_check(svg, &elements));
    assert_int_equal(polylines(svg, "loss", 0, n, true), 2); // x increasing in both panels: steps and the continued clock
    assert_int_equal(n[0], 12);
    assert_int_equal(n[1], 12);
    assert_int_equal(polylines(svg, "val_loss", 0, n, true), 2);
    assert_int_equal(n[0], 1);
    free(svg);
    // an old log without elapsed_s: the time panels say so
    f = fopen(path, "w");
    for (int i = 1; i <= 5; i++) fprintf(f, "{\"step\": %d, \"loss\": 4, \"lr\": 0.001, \"grad_norm\": 1, \"tokens_per_s\": 100}\n", i);
    fclose(f);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s", out);
    svg = tu_slurp(svgp, NULL);
    assert_null(xml_check(svg, &elements));
    assert_non_null(strstr(svg, "no elapsed_s in these logs"));
    assert_non_null(strstr(svg, "no wall-clock times"));
    assert_int_equal(polylines(svg, "loss", 0, n, true), 1);
    assert_int_equal(n[0], 5);
    free(svg);
}

static void test_refusals(void **s) {
    char bad[128], empty[128], nostep[128], never[128], a[128];
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    snprintf(empty, sizeof empty, "%s/empty.jsonl", dir);
    snprintf(nostep, sizeof nostep, "%s/nostep.jsonl", dir);
    snprintf(never, sizeof never, "%s/never.svg", dir);
    snprintf(a, sizeof a, "%s/a.jsonl", dir);
    FILE *f = fopen(bad, "w");
    fprintf(f, "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 3,}\n");
    fclose(f);
    f = fopen(empty, "w");
    fclose(f);
    f = fopen(nostep, "w");
    fprintf(f, "{\"loss\": 3}\n");
    fclose(f);
    struct {
        const char *args, *want;
    } rows[] = {
        {"%s/nothing.jsonl -o NEVER", "nothing.jsonl: No such file"},
        {"BAD -o NEVER", "bad.jsonl:2: byte 22: an object member must start with a string key"},
        {"EMPTY -o NEVER", "empty.jsonl: no log lines"},
        {"NOSTEP -o NEVER", "nostep.jsonl:1: not a log line of stg train"},
        {"A", "-o FILE.svg is needed"},
        {"-o NEVER", "give one or more LOG.jsonl files"},
        {"A -o A", "is the same file as the log"},
        {"A A -o NEVER --label x", "1 --label options for 2 logs"},
        {"A -o NEVER --bogus", "unexpected argument '--bogus'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char args[1024] = "", cmd[2048], out[4096];
        const char *p = rows[i].args;
        while (*p) {
            const char *names[] = {"NEVER", "BAD", "EMPTY", "NOSTEP", "A", "%s"}, *paths[] = {never, bad, empty, nostep, a, dir};
            int k = 0;
            while (k < 6 && strncmp(p, names[k], strlen(names[k])) != 0) k++;
            size_t at = strlen(args);
            if (k < 6) snprintf(args + at, sizeof args - at, "%s", paths[k]), p += strlen(names[k]);
            else snprintf(args + at, sizeof args - at, "%c", *p++);
        }
        snprintf(cmd, sizeof cmd, STG " plot %s 2>&1", args);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc != 2 || !strstr(out, rows[i].want)) fail_msg("%s: exit %d (want 2), '%s' not in\n%s", cmd, rc, rows[i].want, out);
        assert_int_equal(access(never, F_OK), -1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_runs), cmocka_unit_test(test_resumed), cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
