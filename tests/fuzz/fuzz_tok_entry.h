// The tokenizer's fuzz entry points (runtime/tokenizer/), shared by the libFuzzer targets
// fuzz_tok_json, fuzz_tok_gpt2 and fuzz_tok_encode and by tests/test_tokenizer.c, which replays
// the seed corpora and tests/fuzz/regressions/tok_*/ through them. Same contract as fuzz_entry.h:
// bad input must end in an error message; an abort is a broken promise.
#ifndef STG_FUZZ_TOK_ENTRY_H
#define STG_FUZZ_TOK_ENTRY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_check.h"


static inline void stg_fuzz_tok_err(const stg_err *e) {
    STG_FUZZ_CHECK(memchr(e->msg, 0, sizeof e->msg) != NULL && e->msg[0] != 0);
}

// Encodes text with t: decoding gives the text back, and the parallel encoder agrees.
static inline void stg_fuzz_tok_roundtrip(const rt_tok *t, const uint8_t *text, size_t n) {
    stg_err err;
    rt_tok_ids a = {0}, b = {0};
    STG_FUZZ_CHECK(rt_tok_encode(t, text, n, &a, &err) == 0);
    STG_FUZZ_CHECK(rt_tok_encode_parallel(t, text, n, 3, &b, &err) == 0);
    STG_FUZZ_CHECK(a.n == b.n && (a.n == 0 || memcmp(a.v, b.v, a.n * sizeof *a.v) == 0));
    uint8_t *out = NULL;
    size_t len = 0, cap = 0;
    STG_FUZZ_CHECK(rt_tok_decode(t, a.v, a.n, &out, &len, &cap, &err) == 0);
    STG_FUZZ_CHECK(len == n && (n == 0 || memcmp(out, text, n) == 0));
    free(out);
    rt_tok_ids_free(&a);
    rt_tok_ids_free(&b);
}

// A tokenizer that loaded: written back in its own format it loads again, the same.
static inline void stg_fuzz_tok_check_loaded(rt_tok *t, int hf) {
    stg_err err;
    size_t len;
    char *text = hf ? rt_tok_hf_json_text(t, &len, &err) : rt_tok_vocab_json_text(t, &len, &err);
    if (!text) { // only special tokens that are not UTF-8 cannot be written
        stg_fuzz_tok_err(&err);
    } else {
        rt_tok *u = NULL;
        int rc;
        if (hf) {
            rc = rt_tok_parse_hf_json(text, len, &u, &err);
        } else {
            size_t ml;
            char *m = rt_tok_merges_text(t, &ml, &err);
            STG_FUZZ_CHECK(m != NULL);
            rc = rt_tok_parse_gpt2(text, len, m, ml, &u, &err);
            free(m);
        }
        if (rc) fprintf(stderr, "written tokenizer does not load: %s\n", err.msg);
        STG_FUZZ_CHECK(rc == 0);
        STG_FUZZ_CHECK(rt_tok_vocab_size(u) == rt_tok_vocab_size(t) && rt_tok_merge_count(u) == rt_tok_merge_count(t));
        rt_tok_free(u);
        free(text);
    }
    static const uint8_t sample[] = "Hello, world! It's 2026.\n\n  \xc3\xa9t\xc3\xa9 \xff\xfe <|endoftext|> x";
    stg_fuzz_tok_roundtrip(t, sample, sizeof sample - 1);
    rt_tok_free(t);
}

// ---- tokenizer.json ------------------------------------------------------------------------------
static inline int stg_fuzz_tok_json(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1); // exact size: ASan sees any read past the end
    STG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    rt_tok *t = NULL;
    stg_err err;
    if (rt_tok_parse_hf_json(buf, size, &t, &err)) stg_fuzz_tok_err(&err);
    else stg_fuzz_tok_check_loaded(t, 1);
    free(buf);
    return 0;
}

// ---- vocab.json + merges.txt: the input is vocab.json, a NUL byte, then merges.txt ---------------
static inline int stg_fuzz_tok_gpt2(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t vn = nul ? (size_t)(nul - data) : size, mn = nul ? size - vn - 1 : 0;
    char *v = malloc(vn ? vn : 1), *m = malloc(mn ? mn : 1);
    STG_FUZZ_CHECK(v && m);
    memcpy(v, data, vn);
    if (mn) memcpy(m, nul + 1, mn);
    rt_tok *t = NULL;
    stg_err err;
    if (rt_tok_parse_gpt2(v, vn, m, mn, &t, &err)) stg_fuzz_tok_err(&err);
    else stg_fuzz_tok_check_loaded(t, 0);
    free(v);
    free(m);
    return 0;
}

// ---- encode: any bytes through a fixed tokenizer trained on a fixed text ---------------------------
static rt_tok *stg_fuzz_tok_fixed;

static inline int stg_fuzz_tok_encode(const uint8_t *data, size_t size) {
    if (!stg_fuzz_tok_fixed) {
        static const char text[] = "the cat sat on the mat. the cat's hat! 123 456 7890\n\n   spaces\t\ttabs "
                                   "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x91\x8b <|endoftext|> again the cat";
        const char *sp[2] = {"<|endoftext|>", "<|pad|>"};
        rt_tok_train_opts o = {.vocab = 256 + 2 + 80, .specials = sp, .n_specials = 2, .threads = 1};
        stg_err err;
        STG_FUZZ_CHECK(rt_tok_train_buffer((const uint8_t *)text, sizeof text - 1, &o, &stg_fuzz_tok_fixed, NULL, &err) == 0);
    }
    uint8_t *buf = malloc(size ? size : 1);
    STG_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    // Pre-tokens tile the text; safe cuts fall on their boundaries.
    size_t pos = 0;
    while (pos < size) {
        size_t e = rt_tok_pretok_next(buf, size, pos);
        STG_FUZZ_CHECK(e > pos && e <= size);
        pos = e;
    }
    stg_fuzz_tok_roundtrip(stg_fuzz_tok_fixed, buf, size);
    // The UTF-8 repair: output within 3 bytes per input byte, and valid (repairing it changes nothing).
    uint8_t *o1 = malloc(3 * size + 1), *o2 = malloc(9 * size + 1);
    STG_FUZZ_CHECK(o1 && o2);
    size_t held, k1 = rt_tok_utf8_sanitize(buf, size, 1, o1, &held);
    STG_FUZZ_CHECK(k1 <= 3 * size && held == 0);
    size_t k2 = rt_tok_utf8_sanitize(o1, k1, 1, o2, &held);
    STG_FUZZ_CHECK(k2 == k1 && (k1 == 0 || memcmp(o1, o2, k1) == 0));
    free(o1);
    free(o2);
    free(buf);
    return 0;
}

#endif
