#include "runtime/safetensors.h"

#include "runtime/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_meta {
    char *key, *value;
} st_meta;

struct rt_st {
    stg_mmap map;          // when opened from a file
    rt_st_tensor *t;      // header order
    size_t nt, cap_t;
    size_t *by_name;      // indices into t, sorted by name
    st_meta *meta;
    size_t nmeta, cap_meta;
};

// ---- UTF-8 ----------------------------------------------------------------------------------

// Length of the valid UTF-8 sequence starting at s[0] (s[0] >= 0x80), or 0 if invalid.
// Rejects overlong forms, surrogates and code points above U+10FFFF.
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static int utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) { i++; continue; }
        size_t k = utf8_seq(p + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

// ---- the JSON header parser -------------------------------------------------------------------

typedef struct {
    const unsigned char *s; // header bytes
    size_t n, i;            // length, cursor
    stg_err *err;
} jcur;

// Header byte i is file byte 8 + i.
static int jfail(jcur *c, const char *what) {
    return stg_errf(c->err, "safetensors header: %s at byte %zu", what, 8 + c->i);
}

static void jws(jcur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

// Skips whitespace; 1 if the next byte is ch (not consumed).
static int jpeek(jcur *c, char ch) {
    jws(c);
    return c->i < c->n && c->s[c->i] == (unsigned char)ch;
}

static int jexpect(jcur *c, char ch, const char *what) {
    if (!jpeek(c, ch)) return jfail(c, c->i >= c->n ? "unexpected end of header" : what);
    c->i++;
    return 0;
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int jhex4(jcur *c, uint32_t *out) {
    if (c->n - c->i < 4) return jfail(c, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(c->s[c->i + (size_t)k]);
        if (h < 0) return jfail(c, "bad hex digit in \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    c->i += 4;
    *out = v;
    return 0;
}

// A JSON string, decoded to a malloc'ed NUL-terminated UTF-8 string.
static int jstring(jcur *c, char **out) {
    *out = NULL;
    jws(c);
    if (c->i >= c->n) return jfail(c, "unexpected end of header, expected a string");
    if (c->s[c->i] != '"') return jfail(c, "expected a string");
    c->i++;
    // Pass 1: find the closing quote (the decoded string is never longer than the raw one).
    size_t j = c->i;
    while (j < c->n && c->s[j] != '"') j += c->s[j] == '\\' ? 2 : 1;
    if (j >= c->n) return jfail(c, "unterminated string");
    char *o = stg_malloc(j - c->i + 1, c->err);
    if (!o) return -1;
    size_t k = 0;
    while (c->s[c->i] != '"') {
        unsigned char ch = c->s[c->i];
        if (ch < 0x20) {
            free(o);
            return jfail(c, "control character in string (must be escaped)");
        }
        if (ch >= 0x80) {
            size_t m = utf8_seq(c->s + c->i, c->n - c->i);
            if (!m) {
                free(o);
                return jfail(c, "invalid UTF-8 in string");
            }
            memcpy(o + k, c->s + c->i, m);
            k += m;
            c->i += m;
            continue;
        }
        if (ch != '\\') {
            o[k++] = (char)ch;
            c->i++;
            continue;
        }
        c->i++; // the escape letter exists: pass 1 stopped only at an unescaped quote
        unsigned char e = c->s[c->i++];
        uint32_t cp;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u':
            if (jhex4(c, &cp) != 0) { free(o); return -1; }
            if (cp >= 0xdc00 && cp <= 0xdfff) { free(o); return jfail(c, "lone low surrogate in \\u escape"); }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (c->n - c->i < 2 || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u') {
                    free(o);
                    return jfail(c, "high surrogate not followed by a low surrogate");
                }
                c->i += 2;
                if (jhex4(c, &lo) != 0) { free(o); return -1; }
                if (lo < 0xdc00 || lo > 0xdfff) { free(o); return jfail(c, "high surrogate not followed by a low surrogate"); }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) { free(o); return jfail(c, "NUL character (\\u0000) in string is not supported"); }
            k += utf8_put(o + k, cp);
            break;
        default:
            c->i--;
            free(o);
            return jfail(c, "invalid escape sequence in string");
        }
    }
    c->i++; // closing quote
    o[k] = '\0';
    *out = o;
    return 0;
}

// A non-negative JSON integer that fits int64 (no sign, fraction or exponent).
static int jint(jcur *c, int64_t *out) {
    jws(c);
    if (c->i >= c->n) return jfail(c, "unexpected end of header, expected an integer");
    if (c->s[c->i] == '-') return jfail(c, "negative integer (expected >= 0)");
    if (c->s[c->i] < '0' || c->s[c->i] > '9') return jfail(c, "expected an integer");
    if (c->s[c->i] == '0' && c->i + 1 < c->n && c->s[c->i + 1] >= '0' && c->s[c->i + 1] <= '9')
        return jfail(c, "integer with a leading zero");
    int64_t v = 0;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        int d = c->s[c->i] - '0';
        if (v > (INT64_MAX - d) / 10) return jfail(c, "integer overflows int64");
        v = v * 10 + d;
        c->i++;
    }
    if (c->i < c->n && (c->s[c->i] == '.' || c->s[c->i] == 'e' || c->s[c->i] == 'E'))
        return jfail(c, "expected an integer, found a fraction or exponent");
    *out = v;
    return 0;
}

// [int, int, ...] with at most `max` elements.
static int jint_array(jcur *c, int64_t *v, int max, int *count, const char *too_many) {
    if (jexpect(c, '[', "expected '['") != 0) return -1;
    int n = 0;
    if (jpeek(c, ']')) {
        c->i++;
        *count = 0;
        return 0;
    }
    for (;;) {
        if (n >= max) return jfail(c, too_many);
        if (jint(c, &v[n]) != 0) return -1;
        n++;
        if (jpeek(c, ',')) { c->i++; continue; }
        if (jpeek(c, ']')) { c->i++; break; }
        return jfail(c, c->i >= c->n ? "unexpected end of header" : "expected ',' or ']' in array");
    }
    *count = n;
    return 0;
}

static int dtype_from_name(const char *s, rt_dtype *dt) {
    for (int d = 0; d < RT_DT_COUNT; d++)
        if (strcmp(s, rt_dtype_name((rt_dtype)d)) == 0) {
            *dt = (rt_dtype)d;
            return 0;
        }
    return -1;
}

// {"dtype": ..., "shape": [...], "data_offsets": [b, e]}
// A key and its ':' (after white space): *k allocated, *at where the key starts (for messages that
// point at it).
static int jkey(jcur *c, char **k, size_t *at) {
    jws(c);
    *at = c->i;
    if (jstring(c, k) != 0) return -1;
    if (jexpect(c, ':', "expected ':' after a key") != 0) {
        free(*k);
        return -1;
    }
    return 0;
}

static int jtensor(jcur *c, rt_st_tensor *t) {
    int have_dt = 0, have_shape = 0, have_off = 0;
    int64_t off[2] = {0, 0};
    if (jexpect(c, '{', "expected '{' starting a tensor entry") != 0) return -1;
    if (jpeek(c, '}')) return jfail(c, "empty tensor entry (needs dtype, shape, data_offsets)");
    for (;;) {
        size_t key_at;
        char *k;
        if (jkey(c, &k, &key_at) != 0) return -1;
        int dup = 0;
        if (strcmp(k, "dtype") == 0) {
            if (!(dup = have_dt)) {
                have_dt = 1;
                jws(c);
                size_t at = c->i;
                char *v;
                if (jstring(c, &v) != 0) { free(k); return -1; }
                int bad = dtype_from_name(v, &t->dtype) != 0;
                free(v);
                if (bad) {
                    free(k);
                    c->i = at;
                    return jfail(c, "unknown dtype (expected F32, F64, BF16, F16, I32, I64, U8 or U16)");
                }
            }
        } else if (strcmp(k, "shape") == 0) {
            if (!(dup = have_shape)) {
                have_shape = 1;
                if (jint_array(c, t->shape, RT_ST_MAX_DIMS, &t->ndim, "too many dimensions (at most 8)") != 0) {
                    free(k);
                    return -1;
                }
            }
        } else if (strcmp(k, "data_offsets") == 0) {
            if (!(dup = have_off)) {
                have_off = 1;
                int n;
                jws(c);
                size_t at = c->i;
                if (jint_array(c, off, 2, &n, "data_offsets must have exactly 2 elements") != 0) { free(k); return -1; }
                if (n != 2) {
                    free(k);
                    c->i = at;
                    return jfail(c, "data_offsets must have exactly 2 elements");
                }
            }
        } else {
            free(k);
            c->i = key_at;
            return jfail(c, "unknown key in tensor entry (expected dtype, shape, data_offsets)");
        }
        free(k);
        if (dup) {
            c->i = key_at;
            return jfail(c, "duplicate key in tensor entry");
        }
        if (jpeek(c, ',')) { c->i++; continue; }
        if (jpeek(c, '}')) { c->i++; break; }
        return jfail(c, c->i >= c->n ? "unexpected end of header" : "expected ',' or '}' in tensor entry");
    }
    if (!have_dt) return jfail(c, "tensor entry has no dtype");
    if (!have_shape) return jfail(c, "tensor entry has no shape");
    if (!have_off) return jfail(c, "tensor entry has no data_offsets");
    if ((uint64_t)off[0] > SIZE_MAX || (uint64_t)off[1] > SIZE_MAX) return jfail(c, "data_offsets too large");
    t->begin = (size_t)off[0];
    t->end = (size_t)off[1];
    return 0;
}

static int jmeta(jcur *c, rt_st *st) {
    if (jexpect(c, '{', "__metadata__ must be an object of strings") != 0) return -1;
    if (jpeek(c, '}')) { c->i++; return 0; }
    for (;;) {
        jws(c);
        size_t key_at = c->i;
        char *k, *v;
        if (jstring(c, &k) != 0) return -1;
        for (size_t m = 0; m < st->nmeta; m++)
            if (strcmp(st->meta[m].key, k) == 0) {
                free(k);
                c->i = key_at;
                return jfail(c, "duplicate key in __metadata__");
            }
        if (jexpect(c, ':', "expected ':' after a key") != 0) { free(k); return -1; }
        if (!jpeek(c, '"')) {
            free(k);
            return jfail(c, "__metadata__ values must be strings");
        }
        if (jstring(c, &v) != 0) { free(k); return -1; }
        if (st->nmeta == st->cap_meta) {
            size_t cap = st->cap_meta ? 2 * st->cap_meta : 8;
            st_meta *p = stg_realloc(st->meta, cap * sizeof *p, c->err);
            if (!p) { free(k); free(v); return -1; }
            st->meta = p;
            st->cap_meta = cap;
        }
        st->meta[st->nmeta].key = k;
        st->meta[st->nmeta].value = v;
        st->nmeta++;
        if (jpeek(c, ',')) { c->i++; continue; }
        if (jpeek(c, '}')) { c->i++; return 0; }
        return jfail(c, c->i >= c->n ? "unexpected end of header" : "expected ',' or '}' in __metadata__");
    }
}

static int jheader(jcur *c, rt_st *st) {
    int have_meta = 0;
    if (jexpect(c, '{', "header must be a JSON object starting with '{'") != 0) return -1;
    if (jpeek(c, '}')) {
        c->i++;
    } else {
        for (;;) {
            size_t key_at;
            char *k;
            if (jkey(c, &k, &key_at) != 0) return -1;
            if (strcmp(k, "__metadata__") == 0) {
                free(k);
                if (have_meta) {
                    c->i = key_at;
                    return jfail(c, "duplicate __metadata__");
                }
                have_meta = 1;
                if (jmeta(c, st) != 0) return -1;
            } else {
                if (st->nt >= RT_ST_MAX_TENSORS) {
                    free(k);
                    c->i = key_at;
                    return jfail(c, "too many tensors (at most 100000)");
                }
                if (st->nt == st->cap_t) {
                    size_t cap = st->cap_t ? 2 * st->cap_t : 16;
                    rt_st_tensor *p = stg_realloc(st->t, cap * sizeof *p, c->err);
                    if (!p) { free(k); return -1; }
                    st->t = p;
                    st->cap_t = cap;
                }
                rt_st_tensor *t = &st->t[st->nt];
                memset(t, 0, sizeof *t);
                t->name = k;
                st->nt++; // owned from here on (freed with st)
                if (jtensor(c, t) != 0) return -1;
            }
            if (jpeek(c, ',')) { c->i++; continue; }
            if (jpeek(c, '}')) { c->i++; break; }
            return jfail(c, c->i >= c->n ? "unexpected end of header" : "expected ',' or '}' in the header object");
        }
    }
    jws(c);
    if (c->i != c->n) return jfail(c, "trailing characters after the header object");
    return 0;
}

// ---- validation and lookup ------------------------------------------------------------------

typedef struct {
    size_t begin, end, idx;
} off_key;

typedef struct {
    const char *name;
    size_t idx;
} name_key;

static int cmp_offset(const void *a, const void *b) {
    const off_key *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const name_key *)a)->name, ((const name_key *)b)->name);
}

static void shape_str(const rt_st_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int validate(rt_st *st, const unsigned char *data, size_t data_len, stg_err *err) {
    for (size_t i = 0; i < st->nt; i++) {
        rt_st_tensor *t = &st->t[i];
        size_t es = rt_dtype_size(t->dtype);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t s = (uint64_t)t->shape[d];
            if (s != 0 && numel > (uint64_t)(SIZE_MAX / es) / s)
                return stg_errf(err, "safetensors: tensor '%s': shape overflows the address space", t->name);
            numel *= s;
        }
        t->numel = (int64_t)numel;
        t->nbytes = (size_t)numel * es;
        char sh[200];
        shape_str(t, sh, sizeof sh);
        if (t->begin > t->end)
            return stg_errf(err, "safetensors: tensor '%s': data_offsets [%zu, %zu] are reversed", t->name, t->begin, t->end);
        if (t->end - t->begin != t->nbytes)
            return stg_errf(err, "safetensors: tensor '%s': data_offsets [%zu, %zu] hold %zu bytes but %s %s needs %zu",
                            t->name, t->begin, t->end, t->end - t->begin, rt_dtype_name(t->dtype), sh, t->nbytes);
        if (t->end > data_len)
            return stg_errf(err, "safetensors: tensor '%s': data_offsets [%zu, %zu] out of range: the data region has %zu bytes",
                            t->name, t->begin, t->end, data_len);
        t->data = t->nbytes ? data + t->begin : NULL;
    }
    size_t nt = st->nt ? st->nt : 1;
    off_key *ok = stg_malloc(nt * sizeof *ok, err);
    if (!ok) return -1;
    for (size_t i = 0; i < st->nt; i++) ok[i] = (off_key){st->t[i].begin, st->t[i].end, i};
    qsort(ok, st->nt, sizeof *ok, cmp_offset);
    size_t pos = 0;
    int rc = 0;
    for (size_t k = 0; k < st->nt && rc == 0; k++) {
        const rt_st_tensor *t = &st->t[ok[k].idx];
        if (t->begin < pos) {
            const rt_st_tensor *p = &st->t[ok[k - 1].idx];
            rc = stg_errf(err, "safetensors: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap", p->name, p->begin,
                          p->end, t->name, t->begin, t->end);
        } else if (t->begin > pos) {
            rc = stg_errf(err, "safetensors: hole of %zu bytes in the data before tensor '%s' [%zu, %zu]",
                          t->begin - pos, t->name, t->begin, t->end);
        }
        pos = t->end;
    }
    free(ok);
    if (rc != 0) return -1;
    if (pos != data_len)
        return stg_errf(err, "safetensors: %zu bytes of data after the last tensor (data region %zu bytes, tensors cover %zu)",
                        data_len - pos, data_len, pos);
    name_key *nk = stg_malloc(nt * sizeof *nk, err);
    size_t *order = stg_malloc(nt * sizeof *order, err);
    if (!nk || !order) {
        free(nk);
        free(order);
        return -1;
    }
    for (size_t i = 0; i < st->nt; i++) nk[i] = (name_key){st->t[i].name, i};
    qsort(nk, st->nt, sizeof *nk, cmp_name);
    for (size_t k = 0; k < st->nt; k++) {
        order[k] = nk[k].idx;
        if (k && strcmp(nk[k - 1].name, nk[k].name) == 0 && rc == 0)
            rc = stg_errf(err, "safetensors: duplicate tensor name '%s'", nk[k].name);
    }
    free(nk);
    if (rc != 0) {
        free(order);
        return -1;
    }
    st->by_name = order;
    return 0;
}

void rt_st_free(rt_st *st) {
    if (!st) return;
    for (size_t i = 0; i < st->nt; i++) free((char *)st->t[i].name);
    for (size_t i = 0; i < st->nmeta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->t);
    free(st->meta);
    free(st->by_name);
    stg_mmap_close(&st->map);
    free(st);
}

int rt_st_parse(const void *buf, size_t len, rt_st **out, stg_err *err) {
    *out = NULL;
    const unsigned char *b = buf;
    if (len < 8) return stg_errf(err, "safetensors: truncated: %zu bytes, the header length needs 8", len);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)b[k] << (8 * k);
    if (n > RT_ST_MAX_HEADER)
        return stg_errf(err, "safetensors: header length %llu exceeds the limit of %u bytes", (unsigned long long)n,
                        RT_ST_MAX_HEADER);
    if (n > len - 8)
        return stg_errf(err, "safetensors: header length %llu is beyond the end of the file (%zu bytes, needs %llu)",
                        (unsigned long long)n, len, (unsigned long long)n + 8);
    if (n < 2) return stg_errf(err, "safetensors: header length %llu is too small for a JSON object", (unsigned long long)n);
    rt_st *st = stg_calloc(1, sizeof *st, err);
    if (!st) return -1;
    jcur c = {.s = b + 8, .n = (size_t)n, .i = 0, .err = err};
    if (jheader(&c, st) != 0 || validate(st, b + 8 + n, len - 8 - (size_t)n, err) != 0) {
        rt_st_free(st);
        return -1;
    }
    *out = st;
    return 0;
}

int rt_st_open(const char *path, rt_st **out, stg_err *err) {
    *out = NULL;
    stg_mmap m;
    if (rt_require_regular(path, "safetensors file", err) || stg_mmap_open(path, &m, err) != 0) return -1;
    rt_st *st;
    if (rt_st_parse(m.data, m.size, &st, err) != 0) {
        stg_mmap_close(&m);
        return stg_err_prefix(err, "%s", path);
    }
    st->map = m;
    *out = st;
    return 0;
}

size_t rt_st_count(const rt_st *st) { return st->nt; }

const rt_st_tensor *rt_st_at(const rt_st *st, size_t i) { return i < st->nt ? &st->t[i] : NULL; }

const rt_st_tensor *rt_st_find(const rt_st *st, const char *name) {
    size_t lo = 0, hi = st->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const rt_st_tensor *t = &st->t[st->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t rt_st_meta_count(const rt_st *st) { return st->nmeta; }

void rt_st_meta_at(const rt_st *st, size_t i, const char **key, const char **value) {
    *key = i < st->nmeta ? st->meta[i].key : NULL;
    *value = i < st->nmeta ? st->meta[i].value : NULL;
}

const char *rt_st_meta_get(const rt_st *st, const char *key) {
    for (size_t i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

// ---- writer ---------------------------------------------------------------------------------

typedef struct st_entry {
    char *name;
    rt_dtype dtype;
    int ndim;
    int64_t shape[RT_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
} st_entry;

struct rt_st_writer {
    st_entry *e;
    size_t ne, cap_e;
    st_meta *meta;
    size_t nmeta, cap_meta;
};

rt_st_writer *rt_st_writer_new(stg_err *err) { return stg_calloc(1, sizeof(rt_st_writer), err); }

void rt_st_writer_free(rt_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->ne; i++) free(w->e[i].name);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->e);
    free(w->meta);
    free(w);
}

int rt_st_writer_add(rt_st_writer *w, const char *name, rt_dtype dt, int ndim, const int64_t *shape,
                     const void *data, stg_err *err) {
    if (!name) return stg_errf(err, "safetensors writer: tensor name is NULL");
    if (!utf8_valid(name)) return stg_errf(err, "safetensors writer: tensor name is not valid UTF-8");
    if (strcmp(name, "__metadata__") == 0) return stg_errf(err, "safetensors writer: '__metadata__' is not a tensor name");
    if (rt_dtype_size(dt) == 0) return stg_errf(err, "safetensors writer: tensor '%s': invalid dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > RT_ST_MAX_DIMS)
        return stg_errf(err, "safetensors writer: tensor '%s': %d dimensions (0 to %d supported)", name, ndim, RT_ST_MAX_DIMS);
    if (w->ne >= RT_ST_MAX_TENSORS) return stg_errf(err, "safetensors writer: more than %d tensors", RT_ST_MAX_TENSORS);
    for (size_t i = 0; i < w->ne; i++)
        if (strcmp(w->e[i].name, name) == 0) return stg_errf(err, "safetensors writer: duplicate tensor name '%s'", name);
    size_t es = rt_dtype_size(dt);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return stg_errf(err, "safetensors writer: tensor '%s': negative dimension %lld", name, (long long)shape[d]);
        uint64_t s = (uint64_t)shape[d];
        if (s != 0 && numel > (uint64_t)(SIZE_MAX / es) / s)
            return stg_errf(err, "safetensors writer: tensor '%s': shape overflows the address space", name);
        numel *= s;
    }
    size_t nbytes = (size_t)numel * es;
    if (nbytes && !data) return stg_errf(err, "safetensors writer: tensor '%s': data is NULL for %zu bytes", name, nbytes);
    if (w->ne == w->cap_e) {
        size_t cap = w->cap_e ? 2 * w->cap_e : 16;
        st_entry *p = stg_realloc(w->e, cap * sizeof *p, err);
        if (!p) return -1;
        w->e = p;
        w->cap_e = cap;
    }
    st_entry *e = &w->e[w->ne];
    memset(e, 0, sizeof *e);
    e->name = stg_strdup(name, err);
    if (!e->name) return -1;
    e->dtype = dt;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->nbytes = nbytes;
    e->data = data;
    w->ne++;
    return 0;
}

int rt_st_writer_meta(rt_st_writer *w, const char *key, const char *value, stg_err *err) {
    if (!key || !value) return stg_errf(err, "safetensors writer: metadata key or value is NULL");
    if (!utf8_valid(key) || !utf8_valid(value)) return stg_errf(err, "safetensors writer: metadata '%s' is not valid UTF-8", key);
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta[i].key, key) == 0) return stg_errf(err, "safetensors writer: duplicate metadata key '%s'", key);
    if (w->nmeta == w->cap_meta) {
        size_t cap = w->cap_meta ? 2 * w->cap_meta : 8;
        st_meta *p = stg_realloc(w->meta, cap * sizeof *p, err);
        if (!p) return -1;
        w->meta = p;
        w->cap_meta = cap;
    }
    char *k = stg_strdup(key, err);
    char *v = k ? stg_strdup(value, err) : NULL;
    if (!v) {
        free(k);
        return -1;
    }
    w->meta[w->nmeta].key = k;
    w->meta[w->nmeta].value = v;
    w->nmeta++;
    return 0;
}

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt_ll(sbuf *b, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    sb_put(b, tmp, (size_t)n);
}

// A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 passes through.
static void sb_json(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        if (*p == '"') sb_put(b, "\\\"", 2);
        else if (*p == '\\') sb_put(b, "\\\\", 2);
        else if (*p == '\n') sb_put(b, "\\n", 2);
        else if (*p == '\t') sb_put(b, "\\t", 2);
        else if (*p == '\r') sb_put(b, "\\r", 2);
        else if (*p < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", *p);
            sb_put(b, tmp, 6);
        } else sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

int rt_st_writer_write(const rt_st_writer *w, const char *path, stg_err *err) {
    sbuf h = {0};
    sb_str(&h, "{");
    int first = 1;
    if (w->nmeta) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i) sb_str(&h, ",");
            sb_json(&h, w->meta[i].key);
            sb_str(&h, ":");
            sb_json(&h, w->meta[i].value);
        }
        sb_str(&h, "}");
        first = 0;
    }
    size_t off = 0;
    for (size_t i = 0; i < w->ne; i++) {
        const st_entry *e = &w->e[i];
        if (!first) sb_str(&h, ",");
        first = 0;
        sb_json(&h, e->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, rt_dtype_name(e->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_str(&h, ",");
            sb_fmt_ll(&h, (long long)e->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_fmt_ll(&h, (long long)off);
        sb_str(&h, ",");
        if (e->nbytes > SIZE_MAX - off || off + e->nbytes > (size_t)INT64_MAX) {
            free(h.p);
            return stg_errf(err, "%s: total tensor data overflows", path);
        }
        off += e->nbytes;
        sb_fmt_ll(&h, (long long)off);
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8 != 0) sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        return stg_errf(err, "%s: out of host memory building the safetensors header", path);
    }
    if (h.n > RT_ST_MAX_HEADER) {
        free(h.p);
        return stg_errf(err, "%s: safetensors header of %zu bytes exceeds the limit of %u", path, h.n, RT_ST_MAX_HEADER);
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
    stg_afile *f;
    if (stg_afile_open(path, &f, err) != 0) {
        free(h.p);
        return -1;
    }
    int rc = stg_afile_write(f, len8, 8, err);
    if (rc == 0) rc = stg_afile_write(f, h.p, h.n, err);
    free(h.p);
    for (size_t i = 0; rc == 0 && i < w->ne; i++) rc = stg_afile_write(f, w->e[i].data, w->e[i].nbytes, err);
    if (rc != 0) {
        stg_afile_abort(f);
        return -1;
    }
    return stg_afile_commit(f, err);
}
