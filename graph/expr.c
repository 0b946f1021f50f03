#include "graph/expr.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    bool fl; // float mode
    stg_expr_lookup lookup;
    void *ctx;
    stg_loc loc;
    stg_err *err;
    int depth;
} P;

typedef struct {
    int64_t i;
    double f;
} V;

static int perr(P *p, size_t at, const char *what) {
    stg_loc l = p->loc;
    if (l.col > 0) l.col += (int)at;
    return stg_errf_at(p->err, l, "%s in expression '%.*s'", what, (int)(p->n > 120 ? 120 : p->n), p->s);
}

static void ws(P *p) {
    while (p->i < p->n && isspace((unsigned char)p->s[p->i])) p->i++;
}

static int expr(P *p, V *v);

static int primary(P *p, V *v) {
    ws(p);
    if (p->i >= p->n) return perr(p, p->i, "expected a number, a name or '('");
    char c = p->s[p->i];
    size_t at = p->i;
    if (c == '(') {
        p->i++;
        if (expr(p, v)) return -1;
        ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') return perr(p, p->i, "expected ')'");
        p->i++;
        return 0;
    }
    if (isdigit((unsigned char)c) || (p->fl && c == '.')) {
        if (p->fl) {
            char buf[64];
            size_t k = 0;
            while (p->i < p->n && k < sizeof buf - 1 &&
                   (isdigit((unsigned char)p->s[p->i]) || p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E' ||
                    ((p->s[p->i] == '-' || p->s[p->i] == '+') && k > 0 && (buf[k - 1] == 'e' || buf[k - 1] == 'E'))))
                buf[k++] = p->s[p->i++];
            buf[k] = 0;
            char *end;
            v->f = strtod(buf, &end);
            if (*end) return perr(p, at, "malformed number");
            return 0;
        }
        int64_t x = 0;
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) {
            if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, p->s[p->i] - '0', &x))
                return perr(p, at, "number too large");
            p->i++;
        }
        if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
            return perr(p, at, "dims are integers; found a decimal number");
        v->i = x;
        return 0;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        char name[64];
        size_t k = 0;
        while (p->i < p->n && (isalnum((unsigned char)p->s[p->i]) || p->s[p->i] == '_')) {
            if (k < sizeof name - 1) name[k++] = p->s[p->i];
            p->i++;
        }
        name[k] = 0;
        ws(p);
        if (p->i < p->n && p->s[p->i] == '(') {
            if (!p->fl || strcmp(name, "sqrt") != 0) return perr(p, at, "unknown function (only sqrt, in float attributes)");
            p->i++;
            if (expr(p, v)) return -1;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ')') return perr(p, p->i, "expected ')'");
            p->i++;
            if (v->f < 0) return perr(p, at, "sqrt of a negative number");
            v->f = sqrt(v->f);
            return 0;
        }
        if (p->fl && strcmp(name, "inf") == 0) {
            v->f = INFINITY;
            return 0;
        }
        int64_t val;
        int r = p->lookup ? p->lookup(p->ctx, name, &val, p->err) : 1;
        if (r < 0) return -1;
        if (r > 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "unknown dim '%s'", name);
            return perr(p, at, msg);
        }
        if (p->fl) v->f = (double)val;
        else v->i = val;
        return 0;
    }
    return perr(p, at, "unexpected character");
}

static int unary(P *p, V *v) {
    ws(p);
    if (p->i < p->n && (p->s[p->i] == '-' || p->s[p->i] == '+')) {
        char op = p->s[p->i++];
        if (++p->depth > 64) return perr(p, p->i, "expression nested too deeply");
        int r = unary(p, v);
        p->depth--;
        if (r) return -1;
        if (op == '-') {
            if (p->fl) v->f = -v->f;
            else if (v->i == INT64_MIN) return perr(p, p->i, "overflow");
            else v->i = -v->i;
        }
        return 0;
    }
    return primary(p, v);
}

static int term(P *p, V *v) {
    if (unary(p, v)) return -1;
    for (;;) {
        ws(p);
        if (p->i >= p->n) return 0;
        char op = p->s[p->i];
        if (op != '*' && op != '/' && op != '%') return 0;
        size_t at = p->i++;
        V r;
        if (unary(p, &r)) return -1;
        if (p->fl) {
            if (op == '*') v->f *= r.f;
            else if (op == '/') {
                if (r.f == 0) return perr(p, at, "division by zero");
                v->f /= r.f;
            } else
                return perr(p, at, "'%' is for integers");
        } else if (op == '*') {
            if (__builtin_mul_overflow(v->i, r.i, &v->i)) return perr(p, at, "overflow");
        } else {
            if (r.i == 0) return perr(p, at, "division by zero");
            if (r.i == -1 && v->i == INT64_MIN) return perr(p, at, "overflow");
            if (op == '/') {
                if (v->i % r.i) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "%lld / %lld is not an integer", (long long)v->i, (long long)r.i);
                    return perr(p, at, msg);
                }
                v->i /= r.i;
            } else
                v->i %= r.i;
        }
    }
}

static int expr(P *p, V *v) {
    if (++p->depth > 64) return perr(p, p->i, "expression nested too deeply");
    if (term(p, v)) return -1;
    for (;;) {
        ws(p);
        if (p->i >= p->n || (p->s[p->i] != '+' && p->s[p->i] != '-')) break;
        char op = p->s[p->i];
        size_t at = p->i++;
        V r;
        if (term(p, &r)) return -1;
        if (p->fl) v->f = op == '+' ? v->f + r.f : v->f - r.f;
        else if (op == '+' ? __builtin_add_overflow(v->i, r.i, &v->i) : __builtin_sub_overflow(v->i, r.i, &v->i))
            return perr(p, at, "overflow");
    }
    p->depth--;
    return 0;
}

static int run(P *p, V *v) {
    ws(p);
    if (p->i >= p->n) return perr(p, 0, "empty expression");
    if (expr(p, v)) return -1;
    ws(p);
    if (p->i < p->n) return perr(p, p->i, "unexpected text after the expression");
    return 0;
}

int expr_eval_int(const char *s, size_t len, stg_expr_lookup lookup, void *ctx, stg_loc loc, int64_t *out, stg_err *err) {
    P p = {s, len, 0, false, lookup, ctx, loc, err, 0};
    V v = {0, 0};
    if (run(&p, &v)) return -1;
    *out = v.i;
    return 0;
}

int expr_eval_float(const char *s, size_t len, stg_expr_lookup lookup, void *ctx, stg_loc loc, double *out, stg_err *err) {
    P p = {s, len, 0, true, lookup, ctx, loc, err, 0};
    V v = {0, 0};
    if (run(&p, &v)) return -1;
    *out = v.f;
    return 0;
}
