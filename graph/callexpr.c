// The statements of a model file's graph lists (docs/MODEL_FORMAT.md): 'x = op(a, b, key=value)',
// several names on the left, nested calls, 'x = y', 'param NAME [dims] init=...'; names may carry
// {expr}; the table of bound names (SSA rebinding, display names scope.name~k). The YAML walking
// that reaches each statement is graph/loader.c; the state both share is graph/loader_internal.h.
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/expr.h"
#include "graph/loader_internal.h"
#include "ops/registry.h"

// Limits that keep hostile model files cheap to reject (each has a message naming it; the others
// are in graph/loader.c):
#define MAX_OPS 30000           // ops in the forward graph, repeats expanded
#define MAX_STATEMENTS 300000   // statements executed, repeats expanded (also counts ones making no op)
#define MAX_CALL_NEST 64        // op calls nested inside one statement: f(g(h(...)))

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
            if (expr_eval_int(s->s + s->i + 1, e - s->i - 1, loader_dim_lookup, s->l, sloc(s, s->i + 1), &v, s->l->err)) return -1;
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

sym *callexpr_find_sym(L *l, const char *name) {
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

int callexpr_bind(L *l, const char *name, int tensor, bool param, stg_loc loc) {
    sym *y = callexpr_find_sym(l, name);
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
    sym *y = callexpr_find_sym(l, name);
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
        if (expr_eval_int(s->s + at, e - at, loader_dim_lookup, s->l, sloc(s, at), &v, s->l->err)) return -1;
        if (ad->type == STG_ATTR_I64) *(int64_t *)base = v;
        else if (v < INT32_MIN || v > INT32_MAX) return serr(s, at, "attribute '%s' is out of range%s", key, NULL);
        else *(int *)base = (int)v;
    } else if (ad->type == STG_ATTR_FLOAT) {
        double v;
        if (expr_eval_float(s->s + at, e - at, loader_dim_lookup, s->l, sloc(s, at), &v, s->l->err)) return -1;
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
            if (expr_eval_int(s->s + b, q - b, loader_dim_lookup, s->l, sloc(s, b), &v, s->l->err)) return -1;
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
    sym *y = callexpr_find_sym(s->l, name);
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
        if (expr_eval_int(s->s + b, q - b, loader_dim_lookup, l, sloc(s, b), &shape[nd], l->err)) return -1;
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
            if (expr_eval_float(s->s + std_at, s->len - std_at, loader_dim_lookup, l, sloc(s, std_at), &std, l->err)) return -1;
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
    return callexpr_bind(l, name, t, true, sloc(s, at));
}

// Counts one statement (or one repeat iteration) against MAX_STATEMENTS: repeat counts multiply,
// so without this a few nested repeats of statements that make no op would run for ages.
int callexpr_count_statement(L *l, ydoc *d, yaml_node_t *n) {
    if (++l->nstatements <= MAX_STATEMENTS) return 0;
    return stg_errf_at(l->err, node_loc(d, n), "the graph expands to more than %d statements (repeats expanded); check the repeat counts",
                       MAX_STATEMENTS);
}

int callexpr_statement(L *l, ydoc *d, yaml_node_t *n) {
    if (callexpr_count_statement(l, d, n)) return -1;
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
        if (callexpr_find_sym(l, targets[i]) && callexpr_find_sym(l, targets[i])->param)
            return serr(&s, tat[i], "'%s' is a parameter; assign to another name%s", targets[i], NULL);
        char dn[STG_NAME_MAX];
        display_name(l, targets[i], dn);
        stg_tensor *t = &l->g->t[outs[i]];
        if (t->producer >= 0 && t->cls != STG_CLASS_PARAM && t->cls != STG_CLASS_INPUT) snprintf(t->name, sizeof t->name, "%s", dn);
        if (callexpr_bind(l, targets[i], outs[i], false, sloc(&s, tat[i]))) return -1;
    }
    return 0;
}

int callexpr_name(L *l, ydoc *d, yaml_node_t *n, char *out, size_t cap) {
    S s = {l, d, n, sval(n), n->data.scalar.length, 0, ""};
    return read_name(&s, out, cap);
}
