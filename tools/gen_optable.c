// gen_optable: the files derived from the op rows (ops/<family>/rules.c, read through the
// registry), written or checked between their marker lines:
//   docs/MODEL_FORMAT.md  the op table (every op a model file writes: its row's doc and doc_attrs),
//                         between <!-- ops:begin ... --> and <!-- ops:end -->;
//   tests/fuzz/stg.dict   every op kind's name and every attribute name of the rows, between
//                         "# ops:begin ..." and "# ops:end".
// Usage: gen_optable --check|--write [SOURCE_DIR]   (SOURCE_DIR: the repository, by default the one
// it was built from). --check compares the checked-in sections with what the rows give and prints
// the difference (exit 1 when stale; ctest test_optable runs it); --write replaces the sections in
// place (atomically, only when they changed; `cmake --build build --target optable` runs it).
// Exit status 2: bad usage, a missing marker, a row without its doc, or a file that cannot be
// read or written.
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/base/err.h"
#include "ops/base/file.h"
#include "ops/registry.h"

#define OPTABLE_CMD "cmake --build build --target optable"

// ---- a growing string -----------------------------------------------------------------------------

typedef struct {
    char *s;
    size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) STG_PRINTF(2, 3);

static void put(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        fprintf(stderr, "gen_optable: cannot format output\n");
        exit(2);
    }
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t cap = 2 * b->cap + (size_t)k + 4096;
        char *s = realloc(b->s, cap);
        if (!s) {
            fprintf(stderr, "gen_optable: out of memory\n");
            exit(2);
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

// ---- what the rows give ---------------------------------------------------------------------------

// Whether text holds `name` (in backquotes).
static bool names(const char *text, const char *name) {
    char want[96];
    snprintf(want, sizeof want, "`%s`", name);
    return text && strstr(text, want);
}

static int bad_cell(const char *op, const char *what, const char *text, stg_err *err) {
    if (!text) return 0;
    if (strchr(text, '|') || strchr(text, '\n'))
        return stg_errf(err, "op '%s': its %s holds '|' or a line break, which would break the table's row", op, what);
    return 0;
}

// The op table's lines: every kind with a gradient rule (the forward ops a model file writes).
static int op_table(buf *b, stg_err *err) {
    put(b, "| op | inputs → outputs | attributes |\n|---|---|---|\n");
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = ops_def((stg_op_kind)k);
        if (!d->grad) continue;
        if (!d->doc || !d->doc[0])
            return stg_errf(err, "op '%s' has no doc (its rules row's .doc: inputs → outputs for docs/MODEL_FORMAT.md)", d->name);
        if (bad_cell(d->name, ".doc", d->doc, err) || bad_cell(d->name, ".doc_attrs", d->doc_attrs, err)) return -1;
        if (d->n_attrs == 0 && d->doc_attrs)
            return stg_errf(err, "op '%s' has .doc_attrs but no attributes", d->name);
        for (int a = 0; a < d->n_attrs; a++)
            if (!names(d->doc_attrs, d->attrs[a].name))
                return stg_errf(err, "op '%s': its .doc_attrs does not name its attribute `%s`", d->name, d->attrs[a].name);
        if (d->doc_attrs) put(b, "| `%s` | %s | %s |\n", d->name, d->doc, d->doc_attrs);
        else put(b, "| `%s` | %s | |\n", d->name, d->doc);
    }
    return 0;
}

// The fuzz dictionary's lines: every op kind's name, then every attribute name (first use order).
static int dict(buf *b, stg_err *err) {
    (void)err;
    for (int k = 0; k < STG_OP_COUNT; k++) put(b, "op_%s=\"%s\"\n", ops_name((stg_op_kind)k), ops_name((stg_op_kind)k));
    const char *seen[256];
    int nseen = 0;
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = ops_def((stg_op_kind)k);
        for (int a = 0; a < d->n_attrs; a++) {
            const char *n = d->attrs[a].name;
            bool dup = false;
            for (int i = 0; i < nseen && !dup; i++) dup = strcmp(seen[i], n) == 0;
            if (dup) continue;
            if (nseen == (int)(sizeof seen / sizeof *seen)) return stg_errf(err, "more than %d attribute names", nseen);
            seen[nseen++] = n;
            put(b, "attr_%s=\"%s=\"\n", n, n);
        }
    }
    return 0;
}

// ---- the files ------------------------------------------------------------------------------------

typedef struct {
    const char *path;  // relative to the source directory
    const char *begin; // the begin marker line starts with this
    const char *end;   // the end marker line
    int (*gen)(buf *b, stg_err *err);
} target;

static const target targets[] = {
    {"docs/MODEL_FORMAT.md", "<!-- ops:begin", "<!-- ops:end -->", op_table},
    {"tests/fuzz/stg.dict", "# ops:begin", "# ops:end", dict},
};

static char *read_file(const char *path, size_t *len, stg_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return stg_errf(err, "%s: cannot open", path), NULL;
    buf b = {0};
    char chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, "%.*s", (int)r, chunk);
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(b.s), stg_errf(err, "%s: read error", path), NULL;
    if (!b.s) put(&b, "%s", "");
    *len = b.n;
    return b.s;
}

// The start of the line after the one at p (or the end).
static const char *next_line(const char *p) {
    const char *e = strchr(p, '\n');
    return e ? e + 1 : p + strlen(p);
}

// The section of text between the begin marker's line and the end marker's line: [*from, *to).
static int find_section(const char *path, const char *text, const target *t, const char **from, const char **to, stg_err *err) {
    const char *b = NULL;
    for (const char *p = text; *p; p = next_line(p))
        if (strncmp(p, t->begin, strlen(t->begin)) == 0) {
            b = p;
            break;
        }
    if (!b) return stg_errf(err, "%s: no line starting with '%s' (the generated section's begin marker)", path, t->begin);
    *from = next_line(b);
    for (const char *p = *from; *p; p = next_line(p))
        if (strncmp(p, t->end, strlen(t->end)) == 0) {
            *to = p;
            return 0;
        }
    return stg_errf(err, "%s: no line '%s' after '%s' (the generated section's end marker)", path, t->end, t->begin);
}

// Prints the difference between the checked-in section (old) and the generated one (new) as
// removed (-) and added (+) lines, numbered as in the file, after the lines they share at both ends.
static void print_diff(const char *path, int first_line, const char *old, size_t nold, const char *gen, size_t ngen) {
    size_t a = 0; // common prefix, whole lines
    int line = first_line;
    for (size_t i = 0; i < nold && i < ngen && old[i] == gen[i]; i++)
        if (old[i] == '\n') a = i + 1, line++;
    size_t eo = nold, eg = ngen; // common suffix, whole lines, not into the prefix
    while (eo > a && eg > a && old[eo - 1] == gen[eg - 1]) eo--, eg--;
    while (eo < nold && eo > a && old[eo - 1] != '\n') eo++, eg++;
    fprintf(stderr, "%s:%d: the generated section is stale; the op rows give:\n", path, line);
    for (const char *p = old + a; p < old + eo;) {
        const char *e = memchr(p, '\n', (size_t)(old + eo - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(old + eo - p);
        fprintf(stderr, "-%.*s\n", (int)n, p);
        p += n + (e ? 1 : 0);
    }
    for (const char *p = gen + a; p < gen + eg;) {
        const char *e = memchr(p, '\n', (size_t)(gen + eg - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(gen + eg - p);
        fprintf(stderr, "+%.*s\n", (int)n, p);
        p += n + (e ? 1 : 0);
    }
}

// Checks or rewrites target t under dir: 0 when up to date (or written), 1 when stale (check), -1
// with err.
static int run_target(const char *dir, const target *t, bool write, stg_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, t->path) >= (int)sizeof path) return stg_errf(err, "%s/%s: path too long", dir, t->path);
    size_t len;
    char *text = read_file(path, &len, err);
    if (!text) return -1;
    const char *from = NULL, *to = NULL;
    buf gen = {0};
    if (find_section(path, text, t, &from, &to, err) || t->gen(&gen, err)) return free(text), free(gen.s), -1;
    size_t nold = (size_t)(to - from);
    int rc = 0;
    if (nold != gen.n || memcmp(from, gen.s, gen.n) != 0) {
        if (write) {
            stg_afile *f = NULL;
            if (stg_afile_open(path, &f, err)) {
                rc = -1;
            } else if (stg_afile_write(f, text, (size_t)(from - text), err) || stg_afile_write(f, gen.s, gen.n, err) ||
                       stg_afile_write(f, to, len - (size_t)(to - text), err)) {
                stg_afile_abort(f);
                rc = -1;
            } else if (stg_afile_commit(f, err)) { // (commit frees f, failing or not)
                rc = -1;
            } else {
                printf("gen_optable: wrote %s\n", path);
            }
        } else {
            int line = 1;
            for (const char *p = text; p < from; p++) line += *p == '\n';
            print_diff(path, line, from, nold, gen.s, gen.n);
            fprintf(stderr, "%s: regenerate it from the op rows with `" OPTABLE_CMD "` (or gen_optable --write)\n", path);
            rc = 1;
        }
    }
    free(text);
    free(gen.s);
    return rc;
}

int main(int argc, char **argv) {
    bool write = false, check = false;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--write") == 0) write = true;
        else if (strcmp(argv[i], "--check") == 0) check = true;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else {
            fprintf(stderr, "gen_optable: unknown argument '%s'\nusage: gen_optable --check|--write [SOURCE_DIR]\n", argv[i]);
            return 2;
        }
    }
    if (write == check) {
        fprintf(stderr, "usage: gen_optable --check|--write [SOURCE_DIR]\n");
        return 2;
    }
#ifdef STG_SOURCE_DIR
    if (!dir) dir = STG_SOURCE_DIR;
#endif
    if (!dir) {
        fprintf(stderr, "gen_optable: name the source directory\n");
        return 2;
    }
    int status = 0;
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        stg_err err;
        int rc = run_target(dir, &targets[i], write, &err);
        if (rc < 0) {
            fprintf(stderr, "gen_optable: %s\n", err.msg);
            return 2;
        }
        if (rc) status = 1;
    }
    if (check && !status) printf("gen_optable: the op table and the fuzz dictionary match the op rows\n");
    return status;
}
