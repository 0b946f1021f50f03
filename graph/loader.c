// YAML model loader. See docs/MODEL_FORMAT.md for the format.
#include "graph/loader.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "graph/expr.h"
#include "ops/registry.h"

#define MAX_FILES STG_MAX_MODEL_FILES
#define MAX_OPTS 16
#define MAX_CHOICES 8
#define MAX_VARS 8
#define MAX_ITEMS_NEST 16
#define MAX_FILE_BYTES (16 << 20)
// Limits that keep hostile model files cheap to reject (each has a message naming it):
#define MAX_OPS 30000           // ops in the forward graph, repeats expanded
#define MAX_STATEMENTS 300000   // statements executed, repeats expanded (also counts ones making no op)
#define MAX_CALL_NEST 64        // op calls nested inside one statement: f(g(h(...)))
#define MAX_DIM_DECLS 1000      // distinct dims
#define MAX_DIM_DEPTH 100       // dims defined through other dims: a: b, b: c, ...
#define MAX_YAML_DEPTH 64       // nested lists and mappings: libyaml's time grows with the square of the depth

typedef struct {
    yaml_document_t doc;
    const char *file; // interned in the graph
    int loaded;
} ydoc;

typedef struct {
    char name[64];
    const char *text; // expression text (points into a YAML node or a --set string)
    size_t len;
    stg_loc loc;
    int state; // 0 not evaluated, 1 evaluating, 2 done
    int64_t value;
} dimdef;

typedef struct {
    char name[64];
    char value[64];
    char choices[MAX_CHOICES][64];
    int nchoices;
    stg_loc loc;
} optdef;

typedef struct {
    char name[STG_NAME_MAX];
    int tensor;
    int version;               // bindings of this name within `scope` (for display names)
    char scope[STG_NAME_MAX];  // the scope of the latest binding
    bool param;
} sym;

typedef struct {
    char name[64];
    int64_t value;
} loopvar;

typedef struct {
    stg_graph *g;
    stg_err *err;
    ydoc docs[MAX_FILES];
    int ndocs;
    dimdef *dims;
    int ndims;
    // roles: the dim each role is given to (NULL: the dim named like the role), where, and the
    // resolved index into dims (-1: none)
    const char *role_decl[STG_DIM_ROLES];
    stg_loc role_loc[STG_DIM_ROLES];
    int role_dim[STG_DIM_ROLES];
    optdef opts[MAX_OPTS];
    int nopts;
    sym *syms;
    int nsyms, capsyms;
    int *symhash;  // open addressing over syms by name: index + 1, 0 for an empty slot
    int hashcap;   // a power of two, at least twice nsyms
    int nstatements;
    int call_nest;
    int dim_depth;
    loopvar vars[MAX_VARS];
    int nvars;
    char scope[STG_NAME_MAX];
    // where the sections were found (document index, node)
    int inputs_doc, graph_doc, loss_doc;
    yaml_node_t *inputs, *graph, *loss;
    int nest;
} L;

// ---- YAML helpers ---------------------------------------------------------------------------

static stg_loc node_loc(const ydoc *d, const yaml_node_t *n) {
    stg_loc l = {d->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
    return l;
}

// Location of character `off` of a scalar's text (exact for one-line scalars).
static stg_loc scalar_loc(const ydoc *d, const yaml_node_t *n, size_t off) {
    stg_loc l = node_loc(d, n);
    int quoted = n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE || n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    l.col += quoted + (int)off;
    return l;
}

static const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static yaml_node_t *node(ydoc *d, int idx) { return yaml_document_get_node(&d->doc, idx); }

static const char *kind_name(const yaml_node_t *n) {
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

static int expect_type(L *l, ydoc *d, yaml_node_t *n, yaml_node_type_t t, const char *what) {
    if (n->type == t) return 0;
    const char *want = t == YAML_SCALAR_NODE ? "a scalar" : t == YAML_SEQUENCE_NODE ? "a list" : "a mapping";
    return stg_errf_at(l->err, node_loc(d, n), "%s is %s; expected %s", what, kind_name(n), want);
}

// ---- dims -----------------------------------------------------------------------------------

static int dim_lookup(void *ctx, const char *name, int64_t *val, stg_err *err);

static int eval_dim(L *l, dimdef *dd) {
    if (dd->state == 2) return 0;
    if (dd->state == 1) return stg_errf_at(l->err, dd->loc, "dim '%s' depends on itself", dd->name);
    if (l->dim_depth >= MAX_DIM_DEPTH)
        return stg_errf_at(l->err, dd->loc, "dim '%s' is defined through a chain of more than %d other dims", dd->name,
                           MAX_DIM_DEPTH);
    dd->state = 1;
    int64_t v;
    l->dim_depth++;
    int r = expr_eval_int(dd->text, dd->len, dim_lookup, l, dd->loc, &v, l->err);
    l->dim_depth--;
    if (r) {
        dd->state = 0;
        return -1;
    }
    if (v <= 0) return stg_errf_at(l->err, dd->loc, "dim '%s' is %lld; dims must be positive", dd->name, (long long)v);
    dd->value = v;
    dd->state = 2;
    return 0;
}

static int dim_lookup(void *ctx, const char *name, int64_t *val, stg_err *err) {
    L *l = ctx;
    for (int i = l->nvars - 1; i >= 0; i--)
        if (strcmp(l->vars[i].name, name) == 0) {
            *val = l->vars[i].value;
            return 0;
        }
    for (int i = 0; i < l->ndims; i++)
        if (strcmp(l->dims[i].name, name) == 0) {
            if (eval_dim(l, &l->dims[i])) return -1;
            *val = l->dims[i].value;
            return 0;
        }
    return 1;
}

static dimdef *find_dim(L *l, const char *name) {
    for (int i = 0; i < l->ndims; i++)
        if (strcmp(l->dims[i].name, name) == 0) return &l->dims[i];
    return NULL;
}

static int set_dim(L *l, const char *name, const char *text, size_t len, stg_loc loc) {
    if (strlen(name) >= 64) return stg_errf_at(l->err, loc, "dim name '%.40s...' is too long", name);
    dimdef *dd = find_dim(l, name);
    if (!dd) {
        if (l->ndims >= MAX_DIM_DECLS) return stg_errf_at(l->err, loc, "more than %d dims; expected a model's few named sizes", MAX_DIM_DECLS);
        dimdef *nd = stg_realloc(l->dims, sizeof *nd * (size_t)(l->ndims + 1), l->err);
        if (!nd) return -1;
        l->dims = nd;
        dd = &l->dims[l->ndims++];
        memset(dd, 0, sizeof *dd);
        snprintf(dd->name, sizeof dd->name, "%s", name);
    }
    dd->text = text;
    dd->len = len;
    dd->loc = loc;
    dd->state = 0;
    return 0;
}

static bool ident_ok(const char *s) {
    if (!*s || !(isalpha((unsigned char)*s) || *s == '_')) return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_')) return false;
    return true;
}

static int read_dims(L *l, ydoc *d, yaml_node_t *m) {
    if (expect_type(l, d, m, YAML_MAPPING_NODE, "'dims'")) return -1;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "a dim name") || expect_type(l, d, v, YAML_SCALAR_NODE, "a dim value"))
            return -1;
        if (!ident_ok(sval(k)))
            return stg_errf_at(l->err, node_loc(d, k), "'%s' is not a valid dim name; expected letters, digits and _", sval(k));
        if (set_dim(l, sval(k), sval(v), v->data.scalar.length, scalar_loc(d, v, 0))) return -1;
    }
    return 0;
}

// ---- roles ----------------------------------------------------------------------------------

// roles: {batch: B, ctx: T, vocab: V}: the dim that has each role when it is not named like it.
static int read_roles(L *l, ydoc *d, yaml_node_t *m) {
    if (expect_type(l, d, m, YAML_MAPPING_NODE, "'roles'")) return -1;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "a role") || expect_type(l, d, v, YAML_SCALAR_NODE, "a dim name")) return -1;
        int r = graph_role_parse(sval(k));
        if (r < 0) return stg_errf_at(l->err, node_loc(d, k), "unknown role '%s'; expected batch, ctx or vocab", sval(k));
        if (!ident_ok(sval(v)))
            return stg_errf_at(l->err, node_loc(d, v), "'%s' is not a dim name; expected the name of the dim that is the %s", sval(v),
                               sval(k));
        l->role_decl[r] = sval(v);
        l->role_loc[r] = node_loc(d, v);
    }
    return 0;
}

static void dim_list(const L *l, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < l->ndims && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", l->dims[i].name);
}

// Each role's dim: the one `roles:` gives it to, else the one named like the role. Runs before
// --set, so that --set batch=N reaches the batch role's dim whatever the model calls it.
static int resolve_roles(L *l) {
    char known[1024];
    for (int r = 0; r < STG_DIM_ROLES; r++) {
        const char *key = graph_role_key((stg_dim_role)r);
        dimdef *named = find_dim(l, key), *dd = named;
        if (l->role_decl[r]) {
            if (!(dd = find_dim(l, l->role_decl[r]))) {
                dim_list(l, known, sizeof known);
                return stg_errf_at(l->err, l->role_loc[r], "role %s is given to '%s', which is not a dim of this model; expected one of %s",
                                   key, l->role_decl[r], known[0] ? known : "its dims (it has none)");
            }
            if (named && named != dd)
                return stg_errf_at(l->err, l->role_loc[r], "role %s is given to '%s', but another dim is named '%s'; "
                                   "rename one of them, so that `%s` means one dim", key, dd->name, key, key);
        }
        l->role_dim[r] = dd ? (int)(dd - l->dims) : -1;
        for (int q = 0; q < r; q++)
            if (l->role_dim[r] >= 0 && l->role_dim[q] == l->role_dim[r])
                return stg_errf_at(l->err, l->role_decl[r] ? l->role_loc[r] : l->role_loc[q], "dim '%s' is given two roles, %s and %s; "
                                   "each role needs a dim of its own", dd->name, graph_role_key((stg_dim_role)q), key);
    }
    return 0;
}

// ---- options --------------------------------------------------------------------------------

static optdef *find_opt(L *l, const char *name) {
    for (int i = 0; i < l->nopts; i++)
        if (strcmp(l->opts[i].name, name) == 0) return &l->opts[i];
    return NULL;
}

static int opt_has(const optdef *o, const char *v) {
    for (int i = 0; i < o->nchoices; i++)
        if (strcmp(o->choices[i], v) == 0) return 1;
    return 0;
}

static int choices_str(const optdef *o, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < o->nchoices && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "|" : "", o->choices[i]);
    return 0;
}

// options: {attention: [flash, naive]} (the first is the default) or {attention: naive} to pick
// a default of an option declared in an included file.
static int read_options(L *l, ydoc *d, yaml_node_t *m) {
    if (expect_type(l, d, m, YAML_MAPPING_NODE, "'options'")) return -1;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "an option name")) return -1;
        if (!ident_ok(sval(k)) || strlen(sval(k)) >= 64)
            return stg_errf_at(l->err, node_loc(d, k), "'%s' is not a valid option name", sval(k));
        optdef *o = find_opt(l, sval(k));
        if (v->type == YAML_SCALAR_NODE) {
            if (!o)
                return stg_errf_at(l->err, node_loc(d, k), "option '%s' is not declared; declare it with its choices, e.g. %s: [a, b]",
                                   sval(k), sval(k));
            if (!opt_has(o, sval(v))) {
                char c[600];
                choices_str(o, c, sizeof c);
                return stg_errf_at(l->err, node_loc(d, v), "option '%s' has no choice '%s'; expected %s", sval(k), sval(v), c);
            }
            snprintf(o->value, sizeof o->value, "%s", sval(v));
            continue;
        }
        if (expect_type(l, d, v, YAML_SEQUENCE_NODE, "an option's choices")) return -1;
        if (!o) {
            if (l->nopts == MAX_OPTS) return stg_errf_at(l->err, node_loc(d, k), "more than %d options", MAX_OPTS);
            o = &l->opts[l->nopts++];
        }
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", sval(k));
        o->loc = node_loc(d, k);
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *c = node(d, *it);
            if (expect_type(l, d, c, YAML_SCALAR_NODE, "a choice")) return -1;
            if (o->nchoices == MAX_CHOICES) return stg_errf_at(l->err, node_loc(d, c), "more than %d choices", MAX_CHOICES);
            if (!ident_ok(sval(c)) || strlen(sval(c)) >= 64)
                return stg_errf_at(l->err, node_loc(d, c), "'%s' is not a valid choice name", sval(c));
            snprintf(o->choices[o->nchoices++], 64, "%s", sval(c));
        }
        if (o->nchoices == 0) return stg_errf_at(l->err, node_loc(d, v), "option '%s' has no choices", o->name);
        snprintf(o->value, sizeof o->value, "%s", o->choices[0]);
    }
    return 0;
}

// ---- files ----------------------------------------------------------------------------------

// A first pass over the parser's events, before libyaml builds the document: nesting deeper than
// MAX_YAML_DEPTH is refused where it starts. libyaml's scanner rechecks every pending simple key
// at each token, so a document nested N deep costs time in N^2 (160k levels: 41 s); stopping at
// depth 64 keeps any file of the 16 MiB cap linear.
static int check_depth(L *l, const char *text, size_t len, const char *file) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return stg_errf(l->err, "%s: cannot initialise the YAML parser", file);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) break; // the load that follows reports the syntax error
        yaml_event_type_t t = ev.type;
        stg_loc loc = {file, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1};
        yaml_event_delete(&ev);
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > MAX_YAML_DEPTH) {
                rc = stg_errf_at(l->err, loc, "lists and mappings nest more than %d deep here; a model file needs a few levels",
                                 MAX_YAML_DEPTH);
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (t == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

static int cmp_key(const void *a, const void *b) {
    const yaml_node_t *x = *(yaml_node_t *const *)a, *y = *(yaml_node_t *const *)b;
    int c = strcmp((const char *)x->data.scalar.value, (const char *)y->data.scalar.value);
    if (c) return c;
    // the same key: the earlier one first, so the later is the one reported
    return x->start_mark.index < y->start_mark.index ? -1 : x->start_mark.index > y->start_mark.index;
}

// A key given twice in one mapping (dims: {batch: 8, batch: 16}) is an error: libyaml keeps both and
// the loader would take one silently. Every mapping node of the document is visited once (the flat
// node array, so aliases cost nothing more); keys are sorted, so a mapping of n keys costs n log n.
static int check_duplicate_keys(L *l, ydoc *d) {
    yaml_node_t **keys = NULL;
    size_t cap = 0;
    int rc = 0;
    for (yaml_node_t *n = d->doc.nodes.start; rc == 0 && n < d->doc.nodes.top; n++) {
        if (n->type != YAML_MAPPING_NODE) continue;
        size_t k = 0, np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
        if (np > cap) {
            yaml_node_t **nk = stg_realloc(keys, sizeof *nk * np, l->err);
            if (!nk) {
                rc = -1;
                break;
            }
            keys = nk;
            cap = np;
        }
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *kn = node(d, p->key);
            if (kn && kn->type == YAML_SCALAR_NODE) keys[k++] = kn;
        }
        if (k > 1) qsort(keys, k, sizeof *keys, cmp_key);
        for (size_t i = 1; i < k; i++)
            if (strcmp(sval(keys[i]), sval(keys[i - 1])) == 0) {
                rc = stg_errf_at(l->err, node_loc(d, keys[i]), "duplicate key '%s' (first at line %d, column %d): say it once", sval(keys[i]),
                                 (int)keys[i - 1]->start_mark.line + 1, (int)keys[i - 1]->start_mark.column + 1);
                break;
            }
    }
    free(keys);
    return rc;
}

static int parse_yaml(L *l, const char *text, size_t len, const char *file, int *doc_index) {
    if (l->ndocs == MAX_FILES) return stg_errf(l->err, "%s: includes nest more than %d files deep", file, MAX_FILES);
    ydoc *d = &l->docs[l->ndocs];
    d->file = graph_intern(l->g, file, l->err);
    if (!d->file) return -1;
    l->g->files[l->g->nfiles++] = d->file;
    if (check_depth(l, text, len, d->file)) return -1;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return stg_errf(l->err, "%s: cannot initialise the YAML parser", file);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &d->doc)) {
        stg_loc loc = {d->file, (int)parser.problem_mark.line + 1, (int)parser.problem_mark.column + 1};
        int r = stg_errf_at(l->err, loc, "malformed YAML: %s%s%s", parser.problem ? parser.problem : "syntax error",
                            parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return r;
    }
    yaml_parser_delete(&parser);
    d->loaded = 1;
    *doc_index = l->ndocs++;
    if (!yaml_document_get_root_node(&d->doc)) {
        stg_loc loc = {d->file, 0, 0};
        return stg_errf_at(l->err, loc, "the model file is empty; expected a mapping with dims, inputs, graph and loss");
    }
    return check_duplicate_keys(l, d);
}

static int read_file(const char *path, char **text, size_t *len, stg_err *err) {
    // Only regular files: a FIFO or a device (an include of /dev/stdin, /dev/zero) would block or
    // never end. O_NONBLOCK: opening a FIFO for reading would itself wait for a writer, before
    // fstat could say what it is (for a regular file the flag changes nothing).
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return stg_errf(err, "%s: cannot open the model file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return stg_errf(err, "%s: not a regular file; expected a model file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return stg_errf(err, "%s: cannot open the model file: %s", path, strerror(e));
    }
    if (st.st_size > MAX_FILE_BYTES) {
        fclose(f);
        return stg_errf(err, "%s: larger than %d MiB; not a model file", path, MAX_FILE_BYTES >> 20);
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > MAX_FILE_BYTES + 65536) {
                free(buf);
                fclose(f);
                return stg_errf(err, "%s: larger than %d MiB; not a model file", path, MAX_FILE_BYTES >> 20);
            }
            char *nb = stg_realloc(buf, cap, err);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return stg_errf(err, "%s: read error: %s", path, strerror(errno));
    }
    if (fclose(f) != 0) {
        free(buf);
        return stg_errf(err, "%s: close failed: %s", path, strerror(errno));
    }
    *text = buf;
    *len = n;
    return 0;
}

static int load_doc(L *l, const char *text, size_t len, const char *file);

static int load_path(L *l, const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (read_file(path, &text, &len, l->err)) return -1;
    int r = load_doc(l, text, len, path);
    free(text);
    return r;
}

static const char *const root_keys[] = {"name", "include", "dims", "roles", "options", "inputs", "graph", "loss"};

static int load_doc(L *l, const char *text, size_t len, const char *file) {
    int di = -1;
    if (parse_yaml(l, text, len, file, &di)) return -1;
    ydoc *d = &l->docs[di];
    yaml_node_t *root = yaml_document_get_root_node(&d->doc);
    if (expect_type(l, d, root, YAML_MAPPING_NODE, "the model file")) return -1;
    // includes first, so this file's sections override them
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "a key")) return -1;
        bool known = false;
        for (size_t i = 0; i < sizeof root_keys / sizeof *root_keys; i++) known |= strcmp(sval(k), root_keys[i]) == 0;
        if (!known)
            return stg_errf_at(l->err, node_loc(d, k), "unknown key '%s'; expected one of name, include, dims, roles, options, inputs, graph, loss",
                               sval(k));
        if (strcmp(sval(k), "include") != 0) continue;
        if (expect_type(l, d, v, YAML_SCALAR_NODE, "'include'")) return -1;
        char path[4096];
        const char *slash = strrchr(d->file, '/');
        if (sval(v)[0] == '/' || !slash)
            snprintf(path, sizeof path, "%s", sval(v));
        else
            snprintf(path, sizeof path, "%.*s/%s", (int)(slash - d->file), d->file, sval(v));
        if (l->ndocs == MAX_FILES) return stg_errf_at(l->err, node_loc(d, v), "includes nest more than %d files deep", MAX_FILES);
        if (load_path(l, path)) return stg_err_prefix(l->err, "%s:%d:%d: in the file included here", d->file,
                                                      (int)v->start_mark.line + 1, (int)v->start_mark.column + 1);
        d = &l->docs[di];
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        const char *key = sval(k);
        if (strcmp(key, "name") == 0) {
            if (expect_type(l, d, v, YAML_SCALAR_NODE, "'name'")) return -1;
            snprintf(l->g->name, sizeof l->g->name, "%s", sval(v));
        } else if (strcmp(key, "dims") == 0) {
            if (read_dims(l, d, v)) return -1;
        } else if (strcmp(key, "roles") == 0) {
            if (read_roles(l, d, v)) return -1;
        } else if (strcmp(key, "options") == 0) {
            if (read_options(l, d, v)) return -1;
        } else if (strcmp(key, "inputs") == 0) {
            l->inputs = v;
            l->inputs_doc = di;
        } else if (strcmp(key, "graph") == 0) {
            l->graph = v;
            l->graph_doc = di;
        } else if (strcmp(key, "loss") == 0) {
            l->loss = v;
            l->loss_doc = di;
        }
    }
    return 0;
}

// ---- --set ----------------------------------------------------------------------------------

static int apply_set(L *l, const char *s) {
    stg_loc loc = {"--set", 0, 0};
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1])
        return stg_errf_at(l->err, loc, "'%s' is not name=value (e.g. --set ctx=1024 or --set attention=naive)", s);
    char name[64];
    size_t n = (size_t)(eq - s);
    if (n >= sizeof name) return stg_errf_at(l->err, loc, "'%s': name too long", s);
    memcpy(name, s, n);
    name[n] = 0;
    while (n > 0 && isspace((unsigned char)name[n - 1])) name[--n] = 0;
    const char *val = eq + 1;
    while (isspace((unsigned char)*val)) val++;
    optdef *o = find_opt(l, name);
    if (o) {
        if (!opt_has(o, val)) {
            char c[600];
            choices_str(o, c, sizeof c);
            return stg_errf_at(l->err, loc, "'%s': option '%s' has no choice '%s'; expected %s", s, name, val, c);
        }
        snprintf(o->value, sizeof o->value, "%s", val);
        return 0;
    }
    dimdef *dd = find_dim(l, name);
    int r = graph_role_parse(name);
    if (!dd && r >= 0 && l->role_dim[r] >= 0) dd = &l->dims[l->role_dim[r]]; // --set ctx=N: the ctx role's dim, whatever its name
    if (!dd) {
        char known[1024];
        dim_list(l, known, sizeof known);
        size_t k = strlen(known);
        for (int i = 0; i < l->nopts && k < sizeof known; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, ", %s", l->opts[i].name);
        return stg_errf_at(l->err, loc, "'%s': '%s' is neither a dim nor an option of this model; expected one of %s%s%s", s, name, known,
                           r >= 0 ? "; " : "", r >= 0 ? graph_role_missing((stg_dim_role)r) : "");
    }
    stg_loc vloc = {"--set", 0, 0};
    return set_dim(l, dd->name, val, strlen(val), vloc);
}

// ---- statements -----------------------------------------------------------------------------

typedef struct {
    L *l;
    ydoc *d;
    yaml_node_t *n; // the scalar holding the statement
    const char *s;
    size_t len, i;
    const char *target; // display name of the statement's result (nested calls are named after it)
} S;

static stg_loc sloc(S *s, size_t at) { return scalar_loc(s->d, s->n, at); }

static void sws(S *s) {
    while (s->i < s->len && isspace((unsigned char)s->s[s->i])) s->i++;
}

static int serr(S *s, size_t at, const char *fmt, const char *a, const char *b) {
    char msg[700];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return stg_errf_at(s->l->err, sloc(s, at), "%s", msg);
}

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

// A name: letters, digits, _ and . with {expr} replaced by the expression's value.
static int read_name(S *s, char *out, size_t cap) {
    sws(s);
    size_t at = s->i, k = 0;
    if (s->i >= s->len || !(isalpha((unsigned char)s->s[s->i]) || s->s[s->i] == '_'))
        return serr(s, at, "expected a name%s%s", NULL, NULL);
    while (s->i < s->len && (name_char(s->s[s->i]) || s->s[s->i] == '{')) {
        if (s->s[s->i] == '{') {
            size_t e = s->i + 1;
            while (e < s->len && s->s[e] != '}') e++;
            if (e >= s->len) return serr(s, s->i, "unclosed '{' in a name%s%s", NULL, NULL);
            int64_t v;
            if (expr_eval_int(s->s + s->i + 1, e - s->i - 1, dim_lookup, s->l, sloc(s, s->i + 1), &v, s->l->err)) return -1;
            int w = snprintf(out + k, cap - k, "%lld", (long long)v);
            if (w < 0 || (size_t)w >= cap - k) return serr(s, at, "name too long%s%s", NULL, NULL);
            k += (size_t)w;
            s->i = e + 1;
            continue;
        }
        if (k + 1 >= cap) return serr(s, at, "name too long (at most %s characters)%s", "95", NULL);
        out[k++] = s->s[s->i++];
    }
    out[k] = 0;
    return 0;
}

static bool peek(S *s, char c) {
    sws(s);
    return s->i < s->len && s->s[s->i] == c;
}

static int expect(S *s, char c, const char *what) {
    sws(s);
    if (s->i < s->len && s->s[s->i] == c) {
        s->i++;
        return 0;
    }
    char cs[2] = {c, 0};
    return serr(s, s->i, "expected '%s' %s", cs, what);
}

// Names are bound once each (a rebinding updates its sym), so a hash of name -> sym finds them in
// constant time: a linear search made large repeat counts quadratic.
static uint32_t sym_hash(const char *s) {
    uint32_t h = 2166136261u; // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static sym *find_sym(L *l, const char *name) {
    if (!l->hashcap) return NULL;
    for (uint32_t i = sym_hash(name) & (uint32_t)(l->hashcap - 1);; i = (i + 1) & (uint32_t)(l->hashcap - 1)) {
        int k = l->symhash[i];
        if (!k) return NULL;
        if (strcmp(l->syms[k - 1].name, name) == 0) return &l->syms[k - 1];
    }
}

static void sym_hash_put(L *l, int idx) {
    uint32_t i = sym_hash(l->syms[idx].name) & (uint32_t)(l->hashcap - 1);
    while (l->symhash[i]) i = (i + 1) & (uint32_t)(l->hashcap - 1);
    l->symhash[i] = idx + 1;
}

static int bind(L *l, const char *name, int tensor, bool param, stg_loc loc) {
    sym *y = find_sym(l, name);
    if (y) {
        if (param || y->param) {
            const stg_loc pl = l->g->t[y->tensor].loc;
            if (param && y->param)
                return stg_errf_at(l->err, loc, "duplicate parameter '%s' (first declared at %s:%d:%d)", name,
                                   pl.file ? pl.file : "?", pl.line, pl.col);
            return stg_errf_at(l->err, loc, "'%s' is a parameter (declared at %s:%d:%d); assign to another name", name,
                               pl.file ? pl.file : "?", pl.line, pl.col);
        }
        y->tensor = tensor;
        if (strcmp(y->scope, l->scope) == 0) y->version++;
        else y->version = 0;
        memcpy(y->scope, l->scope, sizeof y->scope);
        return 0;
    }
    if (l->nsyms == l->capsyms) {
        int cap = l->capsyms ? l->capsyms * 2 : 256;
        sym *ns = stg_realloc(l->syms, sizeof *ns * (size_t)cap, l->err);
        if (!ns) return -1;
        l->syms = ns;
        l->capsyms = cap;
    }
    if (2 * (l->nsyms + 1) > l->hashcap) {
        int hc = l->hashcap ? l->hashcap * 2 : 512;
        int *nh = stg_calloc((size_t)hc, sizeof *nh, l->err);
        if (!nh) return -1;
        free(l->symhash);
        l->symhash = nh;
        l->hashcap = hc;
        for (int i = 0; i < l->nsyms; i++) sym_hash_put(l, i);
    }
    y = &l->syms[l->nsyms++];
    snprintf(y->name, sizeof y->name, "%s", name);
    sym_hash_put(l, l->nsyms - 1);
    y->tensor = tensor;
    y->version = 0;
    memcpy(y->scope, l->scope, sizeof y->scope);
    y->param = param;
    return 0;
}

// The display name of a bound value: scope.name, with ~k when the name is rebound in that scope.
static void display_name(L *l, const char *name, char *out) {
    sym *y = find_sym(l, name);
    int v = y && strcmp(y->scope, l->scope) == 0 ? y->version + 1 : 0;
    char b[STG_NAME_MAX * 2 + 16];
    if (l->scope[0]) snprintf(b, sizeof b, "%s.%s", l->scope, name);
    else snprintf(b, sizeof b, "%s", name);
    if (v > 0) {
        size_t n = strlen(b);
        snprintf(b + n, sizeof b - n, "~%d", v);
    }
    snprintf(out, STG_NAME_MAX, "%s", b);
}

// Finds the end of an attribute value: the next ',' or ')' outside brackets.
static size_t value_end(S *s) {
    int depth = 0;
    size_t e = s->i;
    for (; e < s->len; e++) {
        char c = s->s[e];
        if (c == '(' || c == '[') depth++;
        else if ((c == ')' || c == ']') && depth > 0) depth--;
        else if ((c == ',' || c == ')') && depth == 0) break;
    }
    return e;
}

static int parse_attr(S *s, const stg_op_def *def, const char *key, size_t key_at, stg_attrs *a, uint32_t *seen) {
    int idx = -1;
    for (int i = 0; i < def->n_attrs; i++)
        if (strcmp(def->attrs[i].name, key) == 0) idx = i;
    if (idx < 0) {
        char known[256];
        size_t k = 0;
        known[0] = 0;
        for (int i = 0; i < def->n_attrs && k < sizeof known; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", def->attrs[i].name);
        char msg[400];
        snprintf(msg, sizeof msg, "%s has no attribute '%s'; expected %s", def->name, key,
                 def->n_attrs ? known : "no attributes");
        return serr(s, key_at, "%s%s", msg, NULL);
    }
    if (*seen & (1u << idx)) return serr(s, key_at, "attribute '%s' given twice%s", key, NULL);
    *seen |= 1u << idx;
    const stg_attr_def *ad = &def->attrs[idx];
    sws(s);
    size_t at = s->i, e = value_end(s);
    char *base = (char *)a + ad->offset;
    if (ad->type == STG_ATTR_INT || ad->type == STG_ATTR_I64) {
        int64_t v;
        if (expr_eval_int(s->s + at, e - at, dim_lookup, s->l, sloc(s, at), &v, s->l->err)) return -1;
        if (ad->type == STG_ATTR_I64) *(int64_t *)base = v;
        else if (v < INT32_MIN || v > INT32_MAX) return serr(s, at, "attribute '%s' is out of range%s", key, NULL);
        else *(int *)base = (int)v;
    } else if (ad->type == STG_ATTR_FLOAT) {
        double v;
        if (expr_eval_float(s->s + at, e - at, dim_lookup, s->l, sloc(s, at), &v, s->l->err)) return -1;
        if (isnan(v)) return serr(s, at, "attribute '%s' is not a number%s", key, NULL);
        *(double *)base = v;
    } else { // shape: [e1, e2, ...]
        stg_reshape_attrs *r = (stg_reshape_attrs *)base;
        if (expect(s, '[', "to start a shape")) return -1;
        r->ndim = 0;
        while (!peek(s, ']')) {
            if (r->ndim == STG_MAX_DIMS) return serr(s, s->i, "a shape has at most 6 dims%s%s", NULL, NULL);
            sws(s);
            size_t b = s->i, q = b;
            int depth = 0;
            for (; q < s->len; q++) {
                char c = s->s[q];
                if (c == '(') depth++;
                else if (c == ')' && depth > 0) depth--;
                else if ((c == ',' || c == ']') && depth == 0) break;
            }
            int64_t v;
            if (expr_eval_int(s->s + b, q - b, dim_lookup, s->l, sloc(s, b), &v, s->l->err)) return -1;
            if (v <= 0 && v != -1) return serr(s, b, "shape sizes must be positive%s%s", NULL, NULL);
            if (v > STG_MAX_NUMEL) return serr(s, b, "shape size too large%s%s", NULL, NULL);
            r->shape[r->ndim++] = v;
            int64_t prod = 1;
            for (int i = 0; i < r->ndim; i++)
                if (r->shape[i] > 0 && (__builtin_mul_overflow(prod, r->shape[i], &prod) || prod > STG_MAX_NUMEL))
                    return serr(s, b, "the shape has more than 2^36 elements%s%s", NULL, NULL);
            s->i = q;
            if (peek(s, ',')) s->i++;
        }
        s->i++;
        sws(s);
        return 0;
    }
    s->i = e;
    return 0;
}

static int parse_value(S *s, const char *target, int *out, bool *call);

static int parse_call_body(S *s, const char *opname, size_t name_at, const char *target, int *outs, int *n_out);

// op(args...) starting at the op name; `target` names the result. Calls nest (an argument may be a
// call), at most MAX_CALL_NEST deep: each level takes stack.
static int parse_call(S *s, const char *opname, size_t name_at, const char *target, int *outs, int *n_out) {
    if (s->l->call_nest >= MAX_CALL_NEST)
        return serr(s, name_at, "op calls nest more than %s deep in one statement; split it into several statements%s", "64", NULL);
    s->l->call_nest++;
    int r = parse_call_body(s, opname, name_at, target, outs, n_out);
    s->l->call_nest--;
    return r;
}

static int parse_call_body(S *s, const char *opname, size_t name_at, const char *target, int *outs, int *n_out) {
    L *l = s->l;
    int kind = ops_lookup(opname);
    if (kind < 0) {
        char known[900];
        size_t k = 0;
        known[0] = 0;
        for (int i = 0; i < STG_OP_COUNT && k < sizeof known; i++) {
            const stg_op_def *d = ops_def((stg_op_kind)i);
            if (d->grad) k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", d->name);
        }
        char msg[1000];
        snprintf(msg, sizeof msg, "unknown op '%s'; expected one of %s", opname, known);
        return serr(s, name_at, "%s%s", msg, NULL);
    }
    const stg_op_def *def = ops_def((stg_op_kind)kind);
    if (expect(s, '(', "after the op name")) return -1;
    int in[64];
    bool call[64]; // input i is the result of a call nested here (nothing else can read it)
    int n_in = 0;
    stg_attrs a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < def->n_attrs; i++) {
        char *base = (char *)&a + def->attrs[i].offset;
        if (def->attrs[i].type == STG_ATTR_FLOAT) *(double *)base = def->attrs[i].def;
        else if (def->attrs[i].type == STG_ATTR_INT) *(int *)base = (int)def->attrs[i].def;
        else if (def->attrs[i].type == STG_ATTR_I64) *(int64_t *)base = (int64_t)def->attrs[i].def;
    }
    uint32_t seen = 0;
    int arg = 0;
    while (!peek(s, ')')) {
        if (arg++ && expect(s, ',', "between arguments")) return -1;
        sws(s);
        size_t at = s->i;
        // key=value (but not key==value)?
        size_t j = s->i;
        while (j < s->len && (isalnum((unsigned char)s->s[j]) || s->s[j] == '_')) j++;
        size_t q = j;
        while (q < s->len && isspace((unsigned char)s->s[q])) q++;
        if (j > s->i && q < s->len && s->s[q] == '=' && (q + 1 >= s->len || s->s[q + 1] != '=')) {
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(j - s->i), s->s + s->i);
            s->i = q + 1;
            if (parse_attr(s, def, key, at, &a, &seen)) return -1;
            continue;
        }
        if (n_in == 64) return serr(s, at, "too many inputs%s%s", NULL, NULL);
        if (parse_value(s, s->target, &in[n_in], &call[n_in])) return -1;
        n_in++;
    }
    s->i++;
    for (int i = 0; i < def->n_attrs; i++)
        if (def->attrs[i].required && !(seen & (1u << i))) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s needs the attribute '%s'", def->name, def->attrs[i].name);
            return serr(s, name_at, "%s%s", msg, NULL);
        }
    if (!def->grad) return serr(s, name_at, "'%s' is a backward or optimizer op; model files declare the forward graph only%s", opname, NULL);
    if (def->from_call) def->from_call(&a, n_in); // e.g. linear(x, w, b): the third input is a bias
    if (l->g->nops >= MAX_OPS)
        return serr(s, name_at, "the forward graph has more than %s ops (repeats expanded); check the repeat counts%s", "30000", NULL);
    // add(x, linear(...)): the nested product adds x itself (one pass over the bytes fewer)
    for (int i = n_in - 1; kind == STG_OP_ADD && n_in == 2 && i >= 0; i--) {
        int r = call[i] ? graph_fold_add(l->g, in[i], in[1 - i], target, 0, l->err) : 0;
        if (r < 0) return -1;
        if (r) {
            outs[0] = in[i];
            *n_out = 1;
            return 0;
        }
    }
    int id = graph_add_op(l->g, (stg_op_kind)kind, in, n_in, &a, STG_PHASE_FORWARD, target, sloc(s, name_at), outs, l->err);
    if (id < 0) return -1;
    *n_out = ops_n_out(def, n_in);
    return 0;
}

// A value: a call or a bound name. Its result tensor goes to *out.
static int parse_value(S *s, const char *target, int *out, bool *call) {
    sws(s);
    size_t at = s->i;
    char name[STG_NAME_MAX];
    if (read_name(s, name, sizeof name)) return -1;
    if (peek(s, '(')) {
        char hint[STG_NAME_MAX + 32];
        snprintf(hint, sizeof hint, "%s/%s", target, name);
        hint[STG_NAME_MAX - 1] = 0;
        int outs[STG_MAX_OUT], n;
        if (parse_call(s, name, at, hint, outs, &n)) return -1;
        *out = outs[0];
        if (call) *call = true;
        return 0;
    }
    sym *y = find_sym(s->l, name);
    if (!y) return serr(s, at, "'%s' is used before it is defined%s", name, NULL);
    if (call) *call = false;
    *out = y->tensor;
    return 0;
}

static int parse_param(S *s) {
    L *l = s->l;
    size_t at;
    sws(s);
    at = s->i;
    char name[STG_NAME_MAX];
    if (read_name(s, name, sizeof name)) return -1;
    if (expect(s, '[', "to start the parameter's shape, e.g. [d_out, d_in]")) return -1;
    int64_t shape[STG_MAX_DIMS];
    int nd = 0;
    while (!peek(s, ']')) {
        if (nd && expect(s, ',', "between sizes")) return -1;
        if (nd == STG_MAX_DIMS) return serr(s, s->i, "a shape has at most 6 dims%s%s", NULL, NULL);
        sws(s);
        size_t b = s->i, q = b;
        while (q < s->len && s->s[q] != ',' && s->s[q] != ']') q++;
        if (expr_eval_int(s->s + b, q - b, dim_lookup, l, sloc(s, b), &shape[nd], l->err)) return -1;
        if (shape[nd] <= 0) return serr(s, b, "parameter sizes must be positive%s%s", NULL, NULL);
        nd++;
        s->i = q;
    }
    s->i++;
    stg_init init = STG_INIT_NONE;
    double std = NAN; // init=normal's std=EXPR (the rest of the statement: a float expression)
    size_t std_at = 0;
    while (s->i < s->len) {
        sws(s);
        if (s->i >= s->len) break;
        size_t kat = s->i;
        char key[64];
        if (read_name(s, key, sizeof key)) return -1;
        if (strcmp(key, "std") == 0) {
            if (expect(s, '=', "after std")) return -1;
            if (!isnan(std)) return serr(s, kat, "std is given twice%s%s", NULL, NULL);
            sws(s);
            std_at = s->i;
            if (expr_eval_float(s->s + std_at, s->len - std_at, dim_lookup, l, sloc(s, std_at), &std, l->err)) return -1;
            if (!(std > 0) || isinf(std)) return serr(s, std_at, "std must be a positive number%s%s", NULL, NULL);
            s->i = s->len;
            break;
        }
        if (strcmp(key, "init") != 0)
            return serr(s, kat, "unknown parameter attribute '%s'; expected init=%s", key, "linear|embedding|ones|zeros|normal (std=EXPR)");
        if (expect(s, '=', "after init")) return -1;
        size_t vat = s->i;
        char v[64];
        if (read_name(s, v, sizeof v)) return -1;
        if (strcmp(v, "linear") == 0) init = STG_INIT_LINEAR;
        else if (strcmp(v, "embedding") == 0) init = STG_INIT_EMBEDDING;
        else if (strcmp(v, "ones") == 0) init = STG_INIT_ONES;
        else if (strcmp(v, "zeros") == 0) init = STG_INIT_ZEROS;
        else if (strcmp(v, "normal") == 0) init = STG_INIT_NORMAL;
        else return serr(s, vat, "unknown initializer '%s'; expected linear, embedding, ones, zeros or normal%s", v, NULL);
    }
    if (init == STG_INIT_NONE) return serr(s, at, "parameter '%s' needs init=linear|embedding|ones|zeros|normal%s", name, NULL);
    if (init == STG_INIT_LINEAR && nd != 2) return serr(s, at, "init=linear is for [d_out, d_in] weights; '%s' is not 2-D%s", name, NULL);
    if (init == STG_INIT_NORMAL && isnan(std)) return serr(s, at, "init=normal needs std=EXPR (last), e.g. std=0.02 for '%s'%s", name, NULL);
    if (init != STG_INIT_NORMAL && !isnan(std)) return serr(s, std_at, "std is for init=normal only%s%s", NULL, NULL);
    int t = graph_add_tensor(l->g, name, nd, shape, l->g->act_dtype, STG_CLASS_PARAM, sloc(s, at), l->err);
    if (t < 0) return -1;
    l->g->t[t].init = init;
    l->g->t[t].init_std = init == STG_INIT_NORMAL ? std : 0.0;
    return bind(l, name, t, true, sloc(s, at));
}

// Counts one statement (or one repeat iteration) against MAX_STATEMENTS: repeat counts multiply,
// so without this a few nested repeats of statements that make no op would run for ages.
static int count_statement(L *l, ydoc *d, yaml_node_t *n) {
    if (++l->nstatements <= MAX_STATEMENTS) return 0;
    return stg_errf_at(l->err, node_loc(d, n), "the graph expands to more than %d statements (repeats expanded); check the repeat counts",
                       MAX_STATEMENTS);
}

static int statement(L *l, ydoc *d, yaml_node_t *n) {
    if (count_statement(l, d, n)) return -1;
    S s = {l, d, n, sval(n), n->data.scalar.length, 0, ""};
    sws(&s);
    if (s.len - s.i > 6 && strncmp(s.s + s.i, "param", 5) == 0 && isspace((unsigned char)s.s[s.i + 5])) {
        s.i += 5;
        return parse_param(&s);
    }
    char targets[STG_MAX_OUT][STG_NAME_MAX];
    size_t tat[STG_MAX_OUT];
    int nt = 0;
    for (;;) {
        if (nt == STG_MAX_OUT) return serr(&s, s.i, "at most 3 names on the left of '='%s%s", NULL, NULL);
        sws(&s);
        tat[nt] = s.i;
        if (read_name(&s, targets[nt], STG_NAME_MAX)) return -1;
        nt++;
        if (!peek(&s, ',')) break;
        s.i++;
    }
    if (expect(&s, '=', "after the name(s) being defined, e.g. 'x = add(x, y)' or 'param NAME [dims] init=...'")) return -1;
    char disp[STG_NAME_MAX];
    display_name(l, targets[0], disp);
    s.target = disp;
    sws(&s);
    size_t vat = s.i;
    char first[STG_NAME_MAX];
    size_t save = s.i;
    if (read_name(&s, first, sizeof first)) return -1;
    int outs[STG_MAX_OUT];
    int n_out = 1;
    if (peek(&s, '(')) {
        if (parse_call(&s, first, vat, disp, outs, &n_out)) return -1;
    } else {
        s.i = save;
        if (parse_value(&s, disp, &outs[0], NULL)) return -1;
    }
    sws(&s);
    if (s.i < s.len) return serr(&s, s.i, "unexpected text after the statement%s%s", NULL, NULL);
    if (nt > n_out) return serr(&s, tat[n_out], "the op has %s output(s); too many names on the left%s", n_out == 1 ? "1" : n_out == 2 ? "2" : "3", NULL);
    for (int i = 0; i < nt; i++) {
        if (find_sym(l, targets[i]) && find_sym(l, targets[i])->param)
            return serr(&s, tat[i], "'%s' is a parameter; assign to another name%s", targets[i], NULL);
        char dn[STG_NAME_MAX];
        display_name(l, targets[i], dn);
        stg_tensor *t = &l->g->t[outs[i]];
        if (t->producer >= 0 && t->cls != STG_CLASS_PARAM && t->cls != STG_CLASS_INPUT) snprintf(t->name, sizeof t->name, "%s", dn);
        if (bind(l, targets[i], outs[i], false, sloc(&s, tat[i]))) return -1;
    }
    return 0;
}

// ---- blocks ---------------------------------------------------------------------------------

static int items(L *l, ydoc *d, yaml_node_t *seq);

static yaml_node_t *map_get(ydoc *d, yaml_node_t *m, const char *key) {
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(sval(k), key) == 0) return node(d, p->value);
    }
    return NULL;
}

static int check_keys(L *l, ydoc *d, yaml_node_t *m, const char *const *keys, int nkeys, const char *expected) {
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key);
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "a key")) return -1;
        bool ok = false;
        for (int i = 0; i < nkeys; i++) ok |= strcmp(sval(k), keys[i]) == 0;
        if (!ok) return stg_errf_at(l->err, node_loc(d, k), "unknown key '%s'; expected %s", sval(k), expected);
    }
    return 0;
}

static int repeat_block(L *l, ydoc *d, yaml_node_t *m) {
    static const char *const keys[] = {"repeat", "as", "scope", "do"};
    if (check_keys(l, d, m, keys, 4, "repeat, as, scope, do")) return -1;
    yaml_node_t *cnt = map_get(d, m, "repeat"), *as = map_get(d, m, "as"), *scope = map_get(d, m, "scope"),
                *body = map_get(d, m, "do");
    if (expect_type(l, d, cnt, YAML_SCALAR_NODE, "the repeat count")) return -1;
    if (!body) return stg_errf_at(l->err, node_loc(d, m), "repeat needs 'do:' with the list of statements to repeat");
    if (expect_type(l, d, body, YAML_SEQUENCE_NODE, "'do'")) return -1;
    int64_t n;
    if (expr_eval_int(sval(cnt), cnt->data.scalar.length, dim_lookup, l, scalar_loc(d, cnt, 0), &n, l->err)) return -1;
    if (n <= 0 || n > 100000) return stg_errf_at(l->err, node_loc(d, cnt), "repeat count %lld is out of range; expected 1 to 100000", (long long)n);
    if (as && (expect_type(l, d, as, YAML_SCALAR_NODE, "'as'") || !ident_ok(sval(as)) || strlen(sval(as)) >= 64))
        return stg_errf_at(l->err, node_loc(d, as), "'as' must be a name");
    if (scope && expect_type(l, d, scope, YAML_SCALAR_NODE, "'scope'")) return -1;
    if (l->nvars == MAX_VARS) return stg_errf_at(l->err, node_loc(d, m), "repeat blocks nest more than %d deep", MAX_VARS);
    char saved[STG_NAME_MAX];
    memcpy(saved, l->scope, sizeof saved);
    int vi = l->nvars++;
    snprintf(l->vars[vi].name, sizeof l->vars[vi].name, "%s", as ? sval(as) : "_");
    for (int64_t i = 0; i < n; i++) {
        if (count_statement(l, d, m)) return -1;
        l->vars[vi].value = i;
        if (scope) {
            S s = {l, d, scope, sval(scope), scope->data.scalar.length, 0, ""};
            char nm[STG_NAME_MAX];
            if (read_name(&s, nm, sizeof nm)) return -1;
            snprintf(l->scope, sizeof l->scope, "%s", nm);
        }
        if (items(l, d, body)) return -1;
    }
    l->nvars--;
    memcpy(l->scope, saved, sizeof saved);
    return 0;
}

// The condition c, 'option == value' or 'option != value', into *take.
static int eval_cond(L *l, ydoc *d, yaml_node_t *c, bool *take) {
    if (expect_type(l, d, c, YAML_SCALAR_NODE, "the condition")) return -1;
    const char *txt = sval(c);
    const char *op = strstr(txt, "==");
    bool neg = false;
    if (!op) {
        op = strstr(txt, "!=");
        neg = true;
    }
    if (!op) return stg_errf_at(l->err, node_loc(d, c), "condition '%s' is not 'option == value' or 'option != value'", txt);
    char name[64], val[64];
    int nn = (int)(op - txt);
    while (nn > 0 && isspace((unsigned char)txt[nn - 1])) nn--;
    const char *vs = op + 2;
    while (isspace((unsigned char)*vs)) vs++;
    snprintf(name, sizeof name, "%.*s", nn, txt);
    snprintf(val, sizeof val, "%s", vs);
    for (int k = (int)strlen(val); k > 0 && isspace((unsigned char)val[k - 1]); k--) val[k - 1] = 0;
    optdef *o = find_opt(l, name);
    if (!o) return stg_errf_at(l->err, node_loc(d, c), "'%s' is not an option; declare it under 'options:'", name);
    if (!opt_has(o, val)) {
        char ch[600];
        choices_str(o, ch, sizeof ch);
        return stg_errf_at(l->err, node_loc(d, c), "option '%s' has no choice '%s'; expected %s", name, val, ch);
    }
    *take = (strcmp(o->value, val) == 0) != neg;
    return 0;
}

static int if_block(L *l, ydoc *d, yaml_node_t *m) {
    static const char *const keys[] = {"if", "then", "else"};
    if (check_keys(l, d, m, keys, 3, "if, then, else")) return -1;
    yaml_node_t *c = map_get(d, m, "if"), *th = map_get(d, m, "then"), *el = map_get(d, m, "else");
    bool take;
    if (eval_cond(l, d, c, &take)) return -1;
    if (!th) return stg_errf_at(l->err, node_loc(d, m), "'if' needs 'then:'");
    yaml_node_t *body = take ? th : el;
    if (!body) return 0;
    if (expect_type(l, d, body, YAML_SEQUENCE_NODE, take ? "'then'" : "'else'")) return -1;
    return items(l, d, body);
}

static int items(L *l, ydoc *d, yaml_node_t *seq) {
    if (expect_type(l, d, seq, YAML_SEQUENCE_NODE, "a block of statements")) return -1;
    if (++l->nest > MAX_ITEMS_NEST) return stg_errf_at(l->err, node_loc(d, seq), "blocks nest more than %d deep", MAX_ITEMS_NEST);
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        yaml_node_t *n = node(d, *it);
        int r;
        if (n->type == YAML_SCALAR_NODE) r = statement(l, d, n);
        else if (n->type == YAML_MAPPING_NODE && map_get(d, n, "repeat")) r = repeat_block(l, d, n);
        else if (n->type == YAML_MAPPING_NODE && map_get(d, n, "if")) r = if_block(l, d, n);
        else
            r = stg_errf_at(l->err, node_loc(d, n), "a graph item is %s; expected a statement ('x = op(...)', 'param ...'), "
                            "a 'repeat:' block or an 'if:' block", kind_name(n));
        if (r) return -1;
    }
    l->nest--;
    return 0;
}

// ---- inputs ---------------------------------------------------------------------------------

static int read_inputs(L *l) {
    ydoc *d = &l->docs[l->inputs_doc];
    yaml_node_t *m = l->inputs;
    if (expect_type(l, d, m, YAML_MAPPING_NODE, "'inputs'")) return -1;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(d, p->key), *v = node(d, p->value);
        if (v->type == YAML_MAPPING_NODE) { // {if: option == value, is: [dims..., dtype]}: declared when the condition holds
            static const char *const keys[] = {"if", "is"};
            bool take;
            if (check_keys(l, d, v, keys, 2, "if, is") || eval_cond(l, d, map_get(d, v, "if"), &take)) return -1;
            if (!take) continue;
            if (!(v = map_get(d, v, "is"))) return stg_errf_at(l->err, node_loc(d, k), "input '%s' needs 'is: [dims..., dtype]'", sval(k));
        }
        if (expect_type(l, d, k, YAML_SCALAR_NODE, "an input name") || expect_type(l, d, v, YAML_SEQUENCE_NODE, "an input's [dims..., dtype]"))
            return -1;
        int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (n < 1 || n > STG_MAX_DIMS + 1)
            return stg_errf_at(l->err, node_loc(d, v), "input '%s' must be [dims..., dtype] with at most %d dims", sval(k), STG_MAX_DIMS);
        int64_t shape[STG_MAX_DIMS];
        for (int i = 0; i + 1 < n; i++) {
            yaml_node_t *e = node(d, v->data.sequence.items.start[i]);
            if (expect_type(l, d, e, YAML_SCALAR_NODE, "a size")) return -1;
            if (expr_eval_int(sval(e), e->data.scalar.length, dim_lookup, l, scalar_loc(d, e, 0), &shape[i], l->err)) return -1;
            if (shape[i] <= 0) return stg_errf_at(l->err, node_loc(d, e), "sizes must be positive");
        }
        yaml_node_t *dt = node(d, v->data.sequence.items.start[n - 1]);
        if (expect_type(l, d, dt, YAML_SCALAR_NODE, "a dtype")) return -1;
        stg_dtype dtype;
        if (strcmp(sval(dt), "i32") == 0) dtype = STG_I32;
        else if (strcmp(sval(dt), "f32") == 0 || strcmp(sval(dt), "float") == 0) dtype = l->g->act_dtype;
        else return stg_errf_at(l->err, node_loc(d, dt), "unknown input dtype '%s'; expected i32 or float", sval(dt));
        if (find_sym(l, sval(k))) return stg_errf_at(l->err, node_loc(d, k), "duplicate input '%s'", sval(k));
        int t = graph_add_tensor(l->g, sval(k), n - 1, shape, dtype, STG_CLASS_INPUT, node_loc(d, k), l->err);
        if (t < 0 || bind(l, sval(k), t, false, node_loc(d, k))) return -1;
    }
    return 0;
}

// ---- entry points ---------------------------------------------------------------------------

static void cleanup(L *l) {
    for (int i = 0; i < l->ndocs; i++)
        if (l->docs[i].loaded) yaml_document_delete(&l->docs[i].doc);
    free(l->dims);
    free(l->syms);
    free(l->symhash);
}

static int finish(L *l, const stg_load_opts *o) {
    stg_graph *g = l->g;
    if (resolve_roles(l)) return -1;
    for (int i = 0; o && i < o->nsets; i++)
        if (apply_set(l, o->sets[i])) return -1;
    if (l->ndims) {
        g->dims = stg_calloc((size_t)l->ndims, sizeof *g->dims, l->err);
        if (!g->dims) return -1;
    }
    for (int i = 0; i < l->ndims; i++) {
        if (eval_dim(l, &l->dims[i])) return -1;
        snprintf(g->dims[i].name, sizeof g->dims[i].name, "%s", l->dims[i].name);
        g->dims[i].value = l->dims[i].value;
    }
    g->ndims = l->ndims;
    memcpy(g->role_dim, l->role_dim, sizeof g->role_dim);
    if (l->nopts) {
        g->opt_names = stg_calloc((size_t)l->nopts, sizeof *g->opt_names, l->err);
        g->opt_values = stg_calloc((size_t)l->nopts, sizeof *g->opt_values, l->err);
        if (!g->opt_names || !g->opt_values) return -1;
    }
    for (int i = 0; i < l->nopts; i++) {
        snprintf(g->opt_names[i], 64, "%s", l->opts[i].name);
        snprintf(g->opt_values[i], 64, "%s", l->opts[i].value);
    }
    g->nopts = l->nopts;
    stg_loc top = {l->docs[0].file, 0, 0};
    if (!l->inputs) return stg_errf_at(l->err, top, "no 'inputs:' section; expected e.g. inputs: {tokens: [batch, ctx, i32]}");
    if (!l->graph) return stg_errf_at(l->err, top, "no 'graph:' section; expected the list of forward statements");
    if (!l->loss) return stg_errf_at(l->err, top, "no 'loss:' key; expected the name of the scalar loss, e.g. loss: loss");
    if (read_inputs(l)) return -1;
    if (items(l, &l->docs[l->graph_doc], l->graph)) return -1;
    ydoc *ld = &l->docs[l->loss_doc];
    if (expect_type(l, ld, l->loss, YAML_SCALAR_NODE, "'loss'")) return -1;
    sym *y = find_sym(l, sval(l->loss));
    if (!y) return stg_errf_at(l->err, node_loc(ld, l->loss), "loss '%s' is not defined by the graph", sval(l->loss));
    if (stg_numel(&g->t[y->tensor]) != 1 || g->t[y->tensor].ndim != 0)
        return stg_errf_at(l->err, node_loc(ld, l->loss), "loss '%s' must be a scalar, e.g. the output of cross_entropy", sval(l->loss));
    g->loss = y->tensor;
    g->n_fwd_ops = g->nops;
    if (!g->name[0]) snprintf(g->name, sizeof g->name, "%s", "model");
    return 0;
}

// Loads from a path (text NULL) or from text in memory.
static int load(const char *path, const char *text, size_t len, const stg_load_opts *o, stg_graph **out, stg_err *err) {
    *out = NULL;
    L l;
    memset(&l, 0, sizeof l);
    l.err = err;
    if (text && len > MAX_FILE_BYTES) return stg_errf(err, "%s: larger than %d MiB; not a model file", path, MAX_FILE_BYTES >> 20);
    l.g = graph_new(o ? o->precision : STG_PREC_FP32, err);
    if (!l.g) return -1;
    int r = text ? load_doc(&l, text, len, path) : load_path(&l, path);
    if (!r) r = finish(&l, o);
    cleanup(&l);
    if (r) {
        graph_free(l.g);
        return -1;
    }
    *out = l.g;
    return 0;
}

int graph_load(const char *path, const stg_load_opts *o, stg_graph **out, stg_err *err) { return load(path, NULL, 0, o, out, err); }

int graph_load_string(const char *text, size_t len, const char *name, const stg_load_opts *o, stg_graph **out,
                      stg_err *err) {
    return load(name, text, len, o, out, err);
}
