// YAML model loader: files and includes, dims, options, --set, inputs, the repeat and if blocks.
// The statements inside the graph's lists are parsed by graph/callexpr.c (graph/loader_internal.h
// holds what the two share). See docs/MODEL_FORMAT.md for the format.
#include "graph/loader.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/expr.h"
#include "graph/loader_internal.h"

#define MAX_ITEMS_NEST 16
#define MAX_FILE_BYTES (16 << 20)
// Limits that keep hostile model files cheap to reject (each has a message naming it; the others
// are in graph/callexpr.c):
#define MAX_DIM_DECLS 1000      // distinct dims
#define MAX_DIM_DEPTH 100       // dims defined through other dims: a: b, b: c, ...
#define MAX_YAML_DEPTH 64       // nested lists and mappings: libyaml's time grows with the square of the depth

// ---- YAML helpers ---------------------------------------------------------------------------

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

static int eval_dim(L *l, dimdef *dd) {
    if (dd->state == 2) return 0;
    if (dd->state == 1) return stg_errf_at(l->err, dd->loc, "dim '%s' depends on itself", dd->name);
    if (l->dim_depth >= MAX_DIM_DEPTH)
        return stg_errf_at(l->err, dd->loc, "dim '%s' is defined through a chain of more than %d other dims", dd->name,
                           MAX_DIM_DEPTH);
    dd->state = 1;
    int64_t v;
    l->dim_depth++;
    int r = expr_eval_int(dd->text, dd->len, loader_dim_lookup, l, dd->loc, &v, l->err);
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

int loader_dim_lookup(void *ctx, const char *name, int64_t *val, stg_err *err) {
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
    if (expr_eval_int(sval(cnt), cnt->data.scalar.length, loader_dim_lookup, l, scalar_loc(d, cnt, 0), &n, l->err)) return -1;
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
        if (callexpr_count_statement(l, d, m)) return -1;
        l->vars[vi].value = i;
        if (scope) {
            char nm[STG_NAME_MAX];
            if (callexpr_name(l, d, scope, nm, sizeof nm)) return -1;
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
        if (n->type == YAML_SCALAR_NODE) r = callexpr_statement(l, d, n);
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
            if (expr_eval_int(sval(e), e->data.scalar.length, loader_dim_lookup, l, scalar_loc(d, e, 0), &shape[i], l->err)) return -1;
            if (shape[i] <= 0) return stg_errf_at(l->err, node_loc(d, e), "sizes must be positive");
        }
        yaml_node_t *dt = node(d, v->data.sequence.items.start[n - 1]);
        if (expect_type(l, d, dt, YAML_SCALAR_NODE, "a dtype")) return -1;
        stg_dtype dtype;
        if (strcmp(sval(dt), "i32") == 0) dtype = STG_I32;
        else if (strcmp(sval(dt), "f32") == 0 || strcmp(sval(dt), "float") == 0) dtype = l->g->act_dtype;
        else return stg_errf_at(l->err, node_loc(d, dt), "unknown input dtype '%s'; expected i32 or float", sval(dt));
        if (callexpr_find_sym(l, sval(k))) return stg_errf_at(l->err, node_loc(d, k), "duplicate input '%s'", sval(k));
        int t = graph_add_tensor(l->g, sval(k), n - 1, shape, dtype, STG_CLASS_INPUT, node_loc(d, k), l->err);
        if (t < 0 || callexpr_bind(l, sval(k), t, false, node_loc(d, k))) return -1;
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
    sym *y = callexpr_find_sym(l, sval(l->loss));
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
