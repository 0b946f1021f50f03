// The JSON reader's fuzz entry point (runtime/json.c: Hugging Face config.json and index files, stg
// train's logs), shared by the libFuzzer target fuzz_json and by tests/test_hf.c, which replays the
// seed corpus and tests/fuzz/regressions/json/ through it. Same contract as fuzz_entry.h: bad input
// must end in an error message; an abort is a broken promise. What parses is written back as JSON
// and parsed again: the same tree (strings byte for byte, numbers bit for bit).
#ifndef STG_FUZZ_JSON_ENTRY_H
#define STG_FUZZ_JSON_ENTRY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/json.h"
#include "tests/fuzz/fuzz_check.h"


typedef struct {
    char *p;
    size_t n, cap;
} stg_fuzz_json_buf;

static inline void stg_fuzz_json_put(stg_fuzz_json_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = (char *)realloc(b->p, b->cap);
        STG_FUZZ_CHECK(b->p != NULL);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static inline void stg_fuzz_json_str(stg_fuzz_json_buf *b, const char *s) {
    stg_fuzz_json_put(b, "\"", 1);
    for (; *s; s++) {
        char e[8];
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') snprintf(e, sizeof e, "\\%c", c);
        else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c);
        else e[0] = (char)c, e[1] = 0;
        stg_fuzz_json_put(b, e, strlen(e));
    }
    stg_fuzz_json_put(b, "\"", 1);
}

static inline void stg_fuzz_json_emit(stg_fuzz_json_buf *b, const rt_json *v) {
    char num[64];
    switch (v->type) {
    case RT_JSON_NULL: stg_fuzz_json_put(b, "null", 4); break;
    case RT_JSON_BOOL: stg_fuzz_json_put(b, v->b ? "true" : "false", v->b ? 4 : 5); break;
    case RT_JSON_NUMBER:
        snprintf(num, sizeof num, "%.17g", v->num);
        stg_fuzz_json_put(b, num, strlen(num));
        break;
    case RT_JSON_STRING: stg_fuzz_json_str(b, v->str); break;
    default:
        stg_fuzz_json_put(b, v->type == RT_JSON_ARRAY ? "[" : "{", 1);
        for (int i = 0; i < v->n; i++) {
            if (i) stg_fuzz_json_put(b, ",", 1);
            if (v->type == RT_JSON_OBJECT) {
                stg_fuzz_json_str(b, v->keys[i]);
                stg_fuzz_json_put(b, ":", 1);
            }
            stg_fuzz_json_emit(b, &v->items[i]);
        }
        stg_fuzz_json_put(b, v->type == RT_JSON_ARRAY ? "]" : "}", 1);
    }
}

static inline int stg_fuzz_json_same(const rt_json *a, const rt_json *b) {
    if (a->type != b->type || a->n != b->n) return 0;
    if (a->type == RT_JSON_BOOL) return a->b == b->b;
    if (a->type == RT_JSON_NUMBER) return memcmp(&a->num, &b->num, sizeof a->num) == 0 || (a->num == 0 && b->num == 0);
    if (a->type == RT_JSON_STRING) return strcmp(a->str, b->str) == 0;
    for (int i = 0; i < a->n; i++) {
        if (a->type == RT_JSON_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0) return 0;
        if (!stg_fuzz_json_same(&a->items[i], &b->items[i])) return 0;
        if (a->type == RT_JSON_OBJECT) STG_FUZZ_CHECK(rt_json_get(a, a->keys[i]) == &a->items[i]); // keys are unique
    }
    return 1;
}

static inline int stg_fuzz_json(const uint8_t *data, size_t size) {
    rt_json *v;
    stg_err err;
    if (rt_json_parse((const char *)data, size, "fuzz", &v, &err)) {
        STG_FUZZ_CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
        return 0;
    }
    stg_fuzz_json_buf b = {NULL, 0, 0};
    stg_fuzz_json_emit(&b, v);
    rt_json *w;
    int r = rt_json_parse(b.p, b.n, "fuzz (written back)", &w, &err);
    if (r) fprintf(stderr, "%s\n", err.msg);
    STG_FUZZ_CHECK(r == 0);
    STG_FUZZ_CHECK(stg_fuzz_json_same(v, w));
    rt_json_free(w);
    rt_json_free(v);
    free(b.p);
    return 0;
}

#endif
