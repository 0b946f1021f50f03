#include "runtime/json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t n, i;
    const char *what;
    stg_err *err;
} jp;

static int jfail(jp *p, const char *msg) { return stg_errf(p->err, "%s: byte %zu: %s", p->what, p->i, msg); }

static void jws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int hex4(jp *p, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        if (p->i >= p->n) return jfail(p, "a \\u escape ends early");
        char c = p->s[p->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return jfail(p, "a \\u escape needs 4 hex digits");
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

// The length of the well-formed UTF-8 sequence at s[0..n) (Unicode table 3-7), 0 when ill-formed.
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t j = 2; j < k; j++)
        if (s[j] < 0x80 || s[j] > 0xBF) return 0;
    return k;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F)), o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int jstring(jp *p, char **out) {
    p->i++; // the opening quote
    size_t start = p->i;
    char *o = stg_malloc(p->n - start + 1, p->err); // decoded text is never longer than its source
    if (!o) return -1;
    size_t k = 0;
    for (;;) {
        if (p->i >= p->n) {
            free(o);
            return jfail(p, "a string is not closed");
        }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20) {
            free(o);
            return jfail(p, "a control character inside a string (escape it)");
        }
        if (c != '\\') {
            size_t l = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
            if (!l) {
                free(o);
                return jfail(p, "invalid UTF-8 inside a string");
            }
            memcpy(o + k, p->s + p->i, l);
            k += l;
            p->i += l;
            continue;
        }
        p->i++;
        if (p->i >= p->n) {
            free(o);
            return jfail(p, "a string ends inside an escape");
        }
        char e = p->s[p->i++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *at = e ? strchr(from, e) : NULL;
        if (at) {
            o[k++] = to[at - from];
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || hex4(p, &cp)) {
            free(o);
            return e == 'u' ? -1 : jfail(p, "an unknown escape in a string");
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) { // a high surrogate: its low half must follow
            if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                free(o);
                return jfail(p, "a lone high surrogate escape");
            }
            p->i += 2;
            if (hex4(p, &lo)) {
                free(o);
                return -1;
            }
            if (lo < 0xDC00 || lo > 0xDFFF) {
                free(o);
                return jfail(p, "a high surrogate escape without its low half");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
            free(o);
            return jfail(p, cp ? "a lone low surrogate escape" : "\\u0000 inside a string");
        }
        k += put_utf8(o + k, cp); // at most as long as the 6- or 12-byte escape
    }
    o[k] = 0;
    *out = o;
    return 0;
}

static int jnumber(jp *p, double *out) {
    size_t a = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "a number needs a digit");
    if (p->s[p->i] == '0') p->i++;
    else
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "a digit must follow the decimal point");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "an exponent needs a digit");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    char buf[64];
    size_t len = p->i - a;
    if (len >= sizeof buf) { // long numbers: strtod on a copy of any length
        char *c = stg_malloc(len + 1, p->err);
        if (!c) return -1;
        memcpy(c, p->s + a, len);
        c[len] = 0;
        *out = strtod(c, NULL);
        free(c);
    } else {
        memcpy(buf, p->s + a, len);
        buf[len] = 0;
        *out = strtod(buf, NULL);
    }
    if (!isfinite(*out)) return p->i = a, jfail(p, "a number out of the range of a double");
    return 0;
}

static int jvalue(jp *p, rt_json *v, int depth);

static int jgrow(jp *p, rt_json *v, int *cap, bool keys) {
    if (v->n < *cap) return 0;
    int nc = *cap ? 2 * *cap : 8;
    rt_json *it = stg_realloc(v->items, sizeof *it * (size_t)nc, p->err);
    if (!it) return -1;
    v->items = it;
    if (keys) {
        char **k = stg_realloc(v->keys, sizeof *k * (size_t)nc, p->err);
        if (!k) return -1;
        v->keys = k;
    }
    *cap = nc;
    return 0;
}

static int jcontainer(jp *p, rt_json *v, int depth, bool obj) {
    if (depth >= JSON_MAX_DEPTH) return jfail(p, "nested more than 64 deep");
    v->type = obj ? RT_JSON_OBJECT : RT_JSON_ARRAY;
    char close = obj ? '}' : ']';
    p->i++;
    jws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    int cap = 0;
    for (;;) {
        jws(p);
        if (jgrow(p, v, &cap, obj)) return -1;
        char *key = NULL;
        if (obj) {
            if (p->i >= p->n || p->s[p->i] != '"') return jfail(p, "an object member must start with a string key");
            size_t at = p->i;
            if (jstring(p, &key)) return -1;
            for (int k = 0; k < v->n; k++)
                if (strcmp(v->keys[k], key) == 0) {
                    free(key);
                    p->i = at;
                    return jfail(p, "a duplicate key");
                }
            jws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                return jfail(p, "expected ':' after an object key");
            }
            p->i++;
            v->keys[v->n] = key;
        }
        memset(&v->items[v->n], 0, sizeof *v->items);
        v->n++; // counted first: freed with the rest on failure
        jws(p);
        if (jvalue(p, &v->items[v->n - 1], depth + 1)) return -1;
        jws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return 0;
        }
        return jfail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int jvalue(jp *p, rt_json *v, int depth) {
    memset(v, 0, sizeof *v);
    if (p->i >= p->n) return jfail(p, "a value is missing");
    char c = p->s[p->i];
    if (c == '{' || c == '[') return jcontainer(p, v, depth, c == '{');
    if (c == '"') {
        v->type = RT_JSON_STRING;
        return jstring(p, &v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = RT_JSON_NUMBER;
        return jnumber(p, &v->num);
    }
    const char *lit[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lit[k]);
        if (p->n - p->i >= l && memcmp(p->s + p->i, lit[k], l) == 0) {
            p->i += l;
            v->type = k == 2 ? RT_JSON_NULL : RT_JSON_BOOL;
            v->b = k == 0;
            return 0;
        }
    }
    return jfail(p, "expected a value (an object, array, string, number, true, false or null)");
}

static void jclear(rt_json *v) {
    for (int k = 0; k < v->n; k++) {
        jclear(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

void rt_json_free(rt_json *v) {
    if (!v) return;
    jclear(v);
    free(v);
}

int rt_json_parse(const char *text, size_t len, const char *what, rt_json **out, stg_err *err) {
    *out = NULL;
    rt_json *v = stg_calloc(1, sizeof *v, err);
    if (!v) return -1;
    jp p = {text, len, 0, what, err};
    jws(&p);
    if (jvalue(&p, v, 0)) {
        rt_json_free(v);
        return -1;
    }
    jws(&p);
    if (p.i != p.n) {
        rt_json_free(v);
        return jfail(&p, "text after the value");
    }
    *out = v;
    return 0;
}

const rt_json *rt_json_get(const rt_json *v, const char *key) {
    if (!v || v->type != RT_JSON_OBJECT) return NULL;
    for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], key) == 0) return &v->items[k];
    return NULL;
}
