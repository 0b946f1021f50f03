// The byte-level BPE tokenizer (runtime/tokenizer/): the pre-tokeniser against a table of tricky
// strings, training against a brute-force reference merge loop written here, encode/decode round
// trips, special tokens, parallel and streamed encoding against whole encoding, the file formats
// and their error messages, the UTF-8 repair, and the command line's handling of bad input.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include "runtime/data.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_tok_entry.h"

static char dir[256];

static int setup(void **s) { return tu_mkdtemp(dir, sizeof dir, "test_tok"); }
static int teardown(void **s) { return tu_rmtree(dir); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void) { return tu_next(&rng_state); } // reproducible test data

// ---- pre-tokenisation ---------------------------------------------------------------------------
//
// Each case is the expected pre-tokens joined by '|' (so no input holds '|'); the input is their
// concatenation. Expected splits derived from the pattern by hand; tools/tok/pretok_check.js
// re-derives every case that is valid UTF-8 with JavaScript's own regex engine (the /u flag gives
// \p{L}, \p{N}) from the lines between the markers below.
static const char *const pretok_cases[] = {
    // PRETOK CASES BEGIN
    "Hello| world",
    "I|'m| you|'re| we|'ve| they|'ll| he|'d| she|'s| it|'t",
    "DON|'|T",
    "'s|'|S",
    "''|s",
    "'ll|'|LL",
    "x|'|z",
    "abc|123|def",
    "3|.|14159| 1|,|000|,|000",
    "  | leading",
    "trailing|   ",
    "a| | b",
    "a|\n|\n|b",
    "a| \n| b",
    "x|\t|\t|y",
    "a|\r|\n|b",
    "\r\n",
    "   ",
    " ",
    "end|\n\n\n",
    "Ünïcödé| naïve| café",
    "Привет| мир",
    "日本語のテキスト|。",
    "مرحبا| بالعالم",
    "१२३| ٣٤٥",
    "Ⅻ| ½",
    "hi| 👋🏽| there|🎉!",
    "a|\xc2\xa0|b",
    "\xe3\x80\x80|x",
    "x|\xe3\x80\x80|\xe3\x80\x80|y",
    "hello|!!!| ...| | ?",
    "$|100| #|tag| @|user",
    "e|\xcc\x81",
    "Ελληνικά| κείμενο| 2024",
    "한국어| 텍스트",
    "ab|\xff|cd",
    " \xff\xfe",
    "\xc3(",
    "\xe2\x82",
    "é|\xa9",
    "\xed\xa0\x80",
    "\xc0\xaf",
    "x|\xf0\x9f\x98",
    "tab|\t",
    "a|,| b|;| c|:",
    "(|x|)| [|y|]| {|z|}",
    "don|’|t",
    "C|++| and| C|#",
    "v|1|.|2|.|3",
    "foo|_|bar| foo|-|bar",
    "\xef\xbf\xbd|x",
    // PRETOK CASES END
};

static void test_pretok_table(void **s) {
    (void)s;
    for (size_t c = 0; c < sizeof pretok_cases / sizeof *pretok_cases; c++) {
        const char *spec = pretok_cases[c];
        char input[256];
        size_t bounds[64], nb = 0, n = 0;
        for (const char *p = spec; *p; p++) {
            if (*p == '|') bounds[nb++] = n;
            else input[n++] = *p;
        }
        bounds[nb++] = n;
        size_t pos = 0, k = 0;
        while (pos < n) {
            size_t e = rt_tok_pretok_next((const uint8_t *)input, n, pos);
            if (e <= pos || e > n) fail_msg("case %zu: pre-token end %zu after %zu", c, e, pos);
            if (k >= nb || e != bounds[k])
                fail_msg("case %zu \"%s\": pre-token %zu is [%zu, %zu), expected it to end at %zu", c, spec, k, pos, e,
                         k < nb ? bounds[k] : (size_t)0);
            pos = e;
            k++;
        }
        if (n && k != nb) fail_msg("case %zu: %zu pre-tokens, expected %zu", c, k, nb);
    }
}

// The safe cuts must be pre-token boundaries: checked against the scanner on random mixed text.
static void test_safe_cuts(void **s) {
    (void)s;
    static const char *const atoms[] = {"word", " word", "  ", "\n", "'s", "'", "123", ".", "é", "日本", " ", "\t", "!",
                                        "\xff", "<|endoftext|>", "x", "Zz", "\xe3\x80\x80"};
    const char *sp[1] = {"<|endoftext|>"};
    size_t sl[1] = {13};
    for (int trial = 0; trial < 50; trial++) {
        char buf[4096];
        size_t n = 0;
        while (n < sizeof buf - 32) {
            const char *a = atoms[rnd() % (sizeof atoms / sizeof *atoms)];
            memcpy(buf + n, a, strlen(a));
            n += strlen(a);
        }
        // Boundaries of the whole text, specials first, as the encoder does.
        uint8_t *is_b = calloc(n + 1, 1), *in_sp = calloc(n + 1, 1);
        assert_non_null(is_b);
        assert_non_null(in_sp);
        size_t pos = 0;
        while (pos < n) {
            const char *q = strstr(buf + pos, "<|endoftext|>");
            size_t e = q && (size_t)(q - buf) < n ? (size_t)(q - buf) : n;
            while (pos < e) {
                is_b[pos] = 1;
                pos = rt_tok_pretok_next((const uint8_t *)buf, e, pos);
            }
            if (e < n) {
                is_b[e] = 1;
                for (size_t i = e + 1; i < e + 13; i++) in_sp[i] = 1;
                pos = e + 13;
            }
        }
        for (size_t lo = 0; lo + 1 < n; lo += 37) {
            size_t p = rt_tok_safe_cut((const uint8_t *)buf, n, lo, n, 0, sp, sl, 1);
            if (!p) continue;
            if (!is_b[p] || in_sp[p]) fail_msg("trial %d: safe cut at %zu is not a pre-token boundary", trial, p);
        }
        free(is_b);
        free(in_sp);
    }
}

// ---- training against a brute-force reference -------------------------------------------------------
//
// The reference: the words and their counts in plain arrays, every pair counted from scratch at
// every step, the best pair chosen by (count, left bytes, right bytes), every occurrence merged
// left to right. Merges are compared as byte strings.

typedef struct {
    uint8_t *b[64];
    size_t l[64];
    int n;
    int64_t count;
} rword;

typedef struct {
    uint8_t a[512], b[512];
    size_t la, lb;
} rmerge;

static int bytes_cmp(const uint8_t *a, size_t la, const uint8_t *b, size_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : la < lb ? -1 : la > lb;
}

static int reference_train(const char *text, size_t n, const char *special, int n_merges, rmerge *out) {
    rword *w = calloc(20000, sizeof *w);
    int nw = 0;
    size_t pos = 0, sl = special ? strlen(special) : 0;
    while (pos < n) {
        const char *q = special ? strstr(text + pos, special) : NULL;
        size_t e = q ? (size_t)(q - text) : n;
        while (pos < e) {
            size_t x = rt_tok_pretok_next((const uint8_t *)text, e, pos);
            int found = -1;
            for (int i = 0; i < nw && found < 0; i++) {
                size_t len = 0;
                for (int j = 0; j < w[i].n; j++) len += w[i].l[j];
                if (len == x - pos) {
                    uint8_t tmp[64];
                    size_t o = 0;
                    for (int j = 0; j < w[i].n; j++) memcpy(tmp + o, w[i].b[j], w[i].l[j]), o += w[i].l[j];
                    if (memcmp(tmp, text + pos, len) == 0) found = i;
                }
            }
            if (found >= 0) w[found].count++;
            else {
                assert_true(x - pos < 64 && nw < 20000);
                for (size_t j = pos; j < x; j++) {
                    w[nw].b[j - pos] = malloc(512);
                    w[nw].b[j - pos][0] = (uint8_t)text[j];
                    w[nw].l[j - pos] = 1;
                }
                w[nw].n = (int)(x - pos);
                w[nw].count = 1;
                nw++;
            }
            pos = x;
        }
        if (q) pos = e + sl;
    }
    int m = 0;
    for (; m < n_merges; m++) {
        // Count every pair from scratch.
        int64_t best = 0;
        const uint8_t *ba = NULL, *bb = NULL;
        size_t bla = 0, blb = 0;
        for (int i = 0; i < nw; i++)
            for (int j = 0; j + 1 < w[i].n; j++) {
                const uint8_t *a = w[i].b[j], *b = w[i].b[j + 1];
                size_t la = w[i].l[j], lb = w[i].l[j + 1];
                int64_t c = 0;
                for (int i2 = 0; i2 < nw; i2++)
                    for (int j2 = 0; j2 + 1 < w[i2].n; j2++)
                        if (!bytes_cmp(w[i2].b[j2], w[i2].l[j2], a, la) && !bytes_cmp(w[i2].b[j2 + 1], w[i2].l[j2 + 1], b, lb))
                            c += w[i2].count;
                int better = c > best;
                if (c == best && ba) {
                    int ca = bytes_cmp(a, la, ba, bla);
                    better = ca > 0 || (ca == 0 && bytes_cmp(b, lb, bb, blb) > 0);
                }
                if (better) best = c, ba = a, bb = b, bla = la, blb = lb;
            }
        if (!best) break;
        memcpy(out[m].a, ba, bla);
        memcpy(out[m].b, bb, blb);
        out[m].la = bla;
        out[m].lb = blb;
        // Merge every occurrence, left to right.
        for (int i = 0; i < nw; i++) {
            int o = 0;
            for (int j = 0; j < w[i].n;) {
                if (j + 1 < w[i].n && !bytes_cmp(w[i].b[j], w[i].l[j], out[m].a, out[m].la) &&
                    !bytes_cmp(w[i].b[j + 1], w[i].l[j + 1], out[m].b, out[m].lb)) {
                    uint8_t *nb = malloc(512);
                    assert_true(out[m].la + out[m].lb <= 512);
                    memcpy(nb, out[m].a, out[m].la);
                    memcpy(nb + out[m].la, out[m].b, out[m].lb);
                    size_t nl = out[m].la + out[m].lb;
                    free(w[i].b[j]);
                    free(w[i].b[j + 1]);
                    w[i].b[o] = nb;
                    w[i].l[o] = nl;
                    o++;
                    j += 2;
                } else {
                    w[i].b[o] = w[i].b[j];
                    w[i].l[o] = w[i].l[j];
                    o++;
                    j++;
                }
            }
            w[i].n = o;
        }
    }
    for (int i = 0; i < nw; i++)
        for (int j = 0; j < w[i].n; j++) free(w[i].b[j]);
    free(w);
    return m;
}

// Text from a small alphabet, so that pairs repeat and counts tie often.
static size_t tie_text(char *buf, size_t cap, int with_special) {
    static const char *const words[] = {"ab", "ba", "abab", "aab", " ab", " ba", " cab", "bc", " bcb", "c", "'s", " aa",
                                        "\n", "  ", "a1", "12", " 21", "é", "éa", " ñ", "!!", " ?!"};
    size_t n = 0;
    while (n + 32 < cap) {
        if (with_special && rnd() % 17 == 0) {
            memcpy(buf + n, "<|endoftext|>", 13);
            n += 13;
            continue;
        }
        const char *w = words[rnd() % (sizeof words / sizeof *words)];
        memcpy(buf + n, w, strlen(w));
        n += strlen(w);
    }
    buf[n] = 0;
    return n;
}

static void check_against_reference(const char *text, size_t n, const char *special, uint64_t vocab) {
    const char *sp[1] = {special};
    rt_tok_train_opts o = {.vocab = vocab, .specials = sp, .n_specials = special ? 1 : 0, .threads = 2};
    rt_tok *t = NULL;
    stg_err err;
    if (rt_tok_train_buffer((const uint8_t *)text, n, &o, &t, NULL, &err)) fail_msg("train: %s", err.msg);
    int want = (int)(vocab - 256 - (special ? 1 : 0));
    rmerge *ref = calloc((size_t)want, sizeof *ref);
    int m = reference_train(text, n, special, want, ref);
    assert_int_equal(rt_tok_merge_count(t), m);
    for (int i = 0; i < m; i++) {
        uint32_t a, b, c;
        size_t la, lb;
        rt_tok_merge_at(t, (uint32_t)i, &a, &b, &c);
        const uint8_t *pa = rt_tok_token_bytes(t, a, &la), *pb = rt_tok_token_bytes(t, b, &lb);
        if (bytes_cmp(pa, la, ref[i].a, ref[i].la) || bytes_cmp(pb, lb, ref[i].b, ref[i].lb))
            fail_msg("merge %d: stg (%.*s, %.*s), reference (%.*s, %.*s)", i, (int)la, pa, (int)lb, pb, (int)ref[i].la, ref[i].a,
                     (int)ref[i].lb, ref[i].b);
        assert_int_equal(c, 256 + (special ? 1 : 0) + (uint32_t)i);
    }
    free(ref);
    rt_tok_free(t);
}

static void test_train_matches_reference(void **s) {
    (void)s;
    char *buf = malloc(8192);
    for (int seed = 1; seed <= 4; seed++) {
        rng_state = 0x1234567ULL * (uint64_t)seed;
        size_t n = tie_text(buf, seed < 3 ? 2000 : 6000, seed % 2);
        check_against_reference(buf, n, seed % 2 ? "<|endoftext|>" : NULL, 256 + (seed % 2) + 60);
    }
    // Every count a tie: the byte order alone decides.
    const char *ties = "ab cd ef gh ij kl mn op qr st";
    check_against_reference(ties, strlen(ties), NULL, 256 + 20);
    // A run of one byte (overlapping pairs): "aaaaa" counts (a, a) as in the reference.
    const char *runs = "aaaaa aaa aaaaaaa bbbb bb";
    check_against_reference(runs, strlen(runs), NULL, 256 + 10);
    free(buf);
}

// Streaming (small blocks, many threads) and the buffer give the same tokenizer.
static void test_train_streamed_equals_buffer(void **s) {
    (void)s;
    rng_state = 42;
    size_t cap = 200000;
    char *buf = malloc(cap + 64);
    size_t n = tie_text(buf, cap, 1);
    char path[300];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    tu_write(path, buf, n);
    const char *sp[1] = {"<|endoftext|>"};
    rt_tok_train_opts o1 = {.vocab = 600, .specials = sp, .n_specials = 1, .threads = 1};
    rt_tok_train_opts o2 = {.vocab = 600, .specials = sp, .n_specials = 1, .threads = 3, .chunk_bytes = 4096};
    rt_tok *a, *b;
    stg_err err;
    assert_int_equal(rt_tok_train_buffer((const uint8_t *)buf, n, &o1, &a, NULL, &err), 0);
    const char *paths[1] = {path};
    if (rt_tok_train_files(paths, 1, &o2, &b, NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_tok_merge_count(a), rt_tok_merge_count(b));
    for (uint32_t i = 0; i < rt_tok_merge_count(a); i++) {
        uint32_t x[3], y[3];
        rt_tok_merge_at(a, i, &x[0], &x[1], &x[2]);
        rt_tok_merge_at(b, i, &y[0], &y[1], &y[2]);
        assert_memory_equal(x, y, sizeof x);
    }
    rt_tok_free(a);
    rt_tok_free(b);
    free(buf);
}

// ---- encoding ----------------------------------------------------------------------------------------

static rt_tok *trained(uint64_t vocab) {
    rng_state = 7;
    char *buf = malloc(100064);
    size_t n = tie_text(buf, 100000, 1);
    const char *sp[2] = {"<|endoftext|>", "<|pad|>"};
    rt_tok_train_opts o = {.vocab = vocab, .specials = sp, .n_specials = 2};
    rt_tok *t;
    stg_err err;
    if (rt_tok_train_buffer((const uint8_t *)buf, n, &o, &t, NULL, &err)) fail_msg("%s", err.msg);
    free(buf);
    return t;
}

// The reference encoder: bytes to ids, then the lowest-ranked adjacent pair merged (leftmost
// first) until none merges; ranks found by a linear search of the merge list.
static size_t reference_encode_word(const rt_tok *t, const uint8_t *p, size_t n, uint32_t *w) {
    for (size_t i = 0; i < n; i++) w[i] = p[i]; // a trained vocabulary: byte b is id b
    for (;;) {
        uint32_t best = UINT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            for (uint32_t r = 0; r < rt_tok_merge_count(t) && r < best; r++) {
                uint32_t a, b, c;
                rt_tok_merge_at(t, r, &a, &b, &c);
                if (a == w[i] && b == w[i + 1]) {
                    best = r;
                    at = i;
                }
            }
        if (best == UINT32_MAX) return n;
        uint32_t a, b, c;
        rt_tok_merge_at(t, best, &a, &b, &c);
        w[at] = c;
        memmove(w + at + 1, w + at + 2, (n - at - 2) * sizeof *w);
        n--;
    }
}

static void test_encode_matches_reference(void **s) {
    (void)s;
    rt_tok *t = trained(400);
    stg_err err;
    // Short and long pre-tokens (the encoder switches algorithms past 48 bytes).
    static const char *const words[] = {"abab", " cab", "aabababbababa", "éaéaéaé", "!!!!!!!", "ab"};
    for (int k = 0; k < 60; k++) {
        char p[600];
        size_t n = 0;
        int len = k < 30 ? 2 + k : 40 + 7 * k;
        const char *unit = words[k % 6];
        for (; (int)n < len; n++) p[n] = unit[n % strlen(unit)];
        if (k % 6 == 1) p[0] = ' ';
        // One pre-token of the whole string? Only letters runs or punctuation runs are; compare
        // pre-token by pre-token.
        rt_tok_ids ids = {0};
        assert_int_equal(rt_tok_encode(t, (const uint8_t *)p, n, &ids, &err), 0);
        size_t at = 0, pos = 0;
        while (pos < n) {
            size_t e = rt_tok_pretok_next((const uint8_t *)p, n, pos);
            uint32_t w[600];
            size_t m = reference_encode_word(t, (const uint8_t *)p + pos, e - pos, w);
            assert_true(at + m <= ids.n);
            assert_memory_equal(ids.v + at, w, m * sizeof *w);
            at += m;
            pos = e;
        }
        assert_int_equal(at, ids.n);
        rt_tok_ids_free(&ids);
    }
    rt_tok_free(t);
}

static void test_roundtrip_random_bytes(void **s) {
    (void)s;
    rt_tok *t = trained(500);
    stg_err err;
    rng_state = 99;
    for (int trial = 0; trial < 40; trial++) {
        size_t n = (size_t)(rnd() % 3000);
        uint8_t *p = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rnd();
            // Mostly the training alphabet (so merges apply), sometimes any byte at all.
            p[i] = r % 3 == 0 ? (uint8_t)(r >> 8) : (uint8_t)"ab c'1\n\xc3\xa9<|>"[(r >> 8) % 13];
        }
        rt_tok_ids ids = {0};
        assert_int_equal(rt_tok_encode(t, p, n, &ids, &err), 0);
        uint8_t *out = NULL;
        size_t len = 0, cap = 0;
        assert_int_equal(rt_tok_decode(t, ids.v, ids.n, &out, &len, &cap, &err), 0);
        assert_int_equal(len, n);
        if (n) assert_memory_equal(out, p, n);
        free(out);
        free(p);
        rt_tok_ids_free(&ids);
    }
    rt_tok_free(t);
}

static void test_specials(void **s) {
    (void)s;
    rt_tok *t = trained(600);
    stg_err err;
    int64_t eot = rt_tok_special_id(t, "<|endoftext|>"), pad = rt_tok_special_id(t, "<|pad|>");
    assert_int_equal(eot, 256);
    assert_int_equal(pad, 257);
    // Never formed by merges: no other token holds a special's text.
    for (uint32_t id = 0; id < rt_tok_vocab_size(t); id++) {
        size_t l;
        const uint8_t *b = rt_tok_token_bytes(t, id, &l);
        if (id == 256 || id == 257) continue;
        for (size_t i = 0; i + 7 <= l; i++) assert_false(memcmp(b + i, "<|pad|>", 7) == 0);
        for (size_t i = 0; i + 13 <= l; i++) assert_false(memcmp(b + i, "<|endoftext|>", 13) == 0);
    }
    // Never split: each occurrence is its one id, whatever surrounds it.
    const char *text = "ab<|endoftext|>ab <|pad|><|pad|> <|endoftext|>\n<|endoftext|";
    rt_tok_ids ids = {0};
    assert_int_equal(rt_tok_encode(t, (const uint8_t *)text, strlen(text), &ids, &err), 0);
    int ne = 0, np = 0;
    for (size_t i = 0; i < ids.n; i++) ne += ids.v[i] == 256, np += ids.v[i] == 257;
    assert_int_equal(ne, 3 - 1); // the last one is cut short: plain text
    assert_int_equal(np, 2);
    uint8_t *out = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(rt_tok_decode(t, ids.v, ids.n, &out, &len, &cap, &err), 0);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(out, text, len);
    free(out);
    rt_tok_ids_free(&ids);
    rt_tok_free(t);
}

static size_t mixed_text(char *buf, size_t cap) {
    static const char *const atoms[] = {"The ", "quick", " brown", " fox", "'s", "  ", "\n\n", "\n", " 123", ".", ",",
                                        " é", "日本語", " 👋", "<|endoftext|>", "\xff", " ab", "abab", "\t", "!!", "<|pad|>"};
    size_t n = 0;
    while (n + 32 < cap) {
        const char *a = atoms[rnd() % (sizeof atoms / sizeof *atoms)];
        memcpy(buf + n, a, strlen(a));
        n += strlen(a);
    }
    return n;
}

static void test_parallel_equals_whole(void **s) {
    (void)s;
    rt_tok *t = trained(700);
    stg_err err;
    rng_state = 5;
    size_t cap = 300000;
    char *buf = malloc(cap);
    size_t n = mixed_text(buf, cap);
    rt_tok_ids whole = {0};
    assert_int_equal(rt_tok_encode(t, (const uint8_t *)buf, n, &whole, &err), 0);
    for (int th = 1; th <= 7; th += 2) {
        rt_tok_ids par = {0};
        assert_int_equal(rt_tok_encode_parallel(t, (const uint8_t *)buf, n, th, &par, &err), 0);
        assert_int_equal(par.n, whole.n);
        assert_memory_equal(par.v, whole.v, whole.n * sizeof *whole.v);
        rt_tok_ids_free(&par);
    }
    // Streamed from files in 4 KiB blocks, three threads, a separator between two documents.
    char in1[300], in2[300], out[300];
    snprintf(in1, sizeof in1, "%s/a.txt", dir);
    snprintf(in2, sizeof in2, "%s/b.txt", dir);
    snprintf(out, sizeof out, "%s/ab.bin", dir);
    tu_write(in1, buf, n);
    tu_write(in2, buf, n);
    const char *paths[2] = {in1, in2};
    rt_tok_encode_opts o = {.doc_sep = "<|endoftext|>", .threads = 3, .chunk_bytes = 4096};
    int64_t cnt = rt_tok_encode_files(t, paths, 2, out, &o, &err);
    if (cnt < 0) fail_msg("%s", err.msg);
    assert_int_equal(cnt, 2 * (int64_t)whole.n + 1);
    rt_tokens *tk;
    assert_int_equal(rt_tokens_open(out, rt_tok_vocab_size(t), &tk, &err), 0);
    assert_int_equal(rt_tokens_count(tk), cnt);
    for (size_t i = 0; i < whole.n; i++) {
        assert_int_equal(rt_tokens_at(tk, (int64_t)i), whole.v[i]);
        assert_int_equal(rt_tokens_at(tk, (int64_t)(whole.n + 1 + i)), whole.v[i]);
    }
    assert_int_equal(rt_tokens_at(tk, (int64_t)whole.n), 256);
    rt_tokens_free(tk);
    // The same as .npy.
    snprintf(out, sizeof out, "%s/ab.npy", dir);
    o.format = RT_TOK_OUT_NPY;
    assert_int_equal(rt_tok_encode_files(t, paths, 2, out, &o, &err), cnt);
    assert_int_equal(rt_tokens_open(out, rt_tok_vocab_size(t), &tk, &err), 0);
    assert_int_equal(rt_tokens_count(tk), cnt);
    assert_int_equal(rt_tokens_at(tk, 5), whole.v[5]);
    rt_tokens_free(tk);
    rt_tok_ids_free(&whole);
    free(buf);
    rt_tok_free(t);
}

// A vocabulary past 65536 (every byte pair a token) gives a uint32 .bin with its header, which the
// training data reader takes.
static void test_uint32_bin(void **s) {
    (void)s;
    uint32_t n = 256 + 65536;
    uint8_t *pool = malloc((size_t)n * 2);
    const uint8_t **toks = malloc(n * sizeof *toks);
    size_t *lens = malloc(n * sizeof *lens);
    uint32_t(*merges)[3] = malloc(65536 * sizeof *merges);
    for (uint32_t i = 0; i < 256; i++) pool[i] = (uint8_t)i, toks[i] = pool + i, lens[i] = 1;
    for (uint32_t k = 0; k < 65536; k++) {
        uint8_t *q = pool + 256 + 2 * k;
        q[0] = (uint8_t)(k >> 8);
        q[1] = (uint8_t)k;
        toks[256 + k] = q;
        lens[256 + k] = 2;
        merges[k][0] = k >> 8;
        merges[k][1] = k & 255;
        merges[k][2] = 256 + k;
    }
    rt_tok *t;
    stg_err err;
    if (rt_tok_build(n, toks, lens, NULL, 65536, (const uint32_t(*)[3])merges, &t, &err)) fail_msg("%s", err.msg);
    char in[300], out[300];
    snprintf(in, sizeof in, "%s/zz.txt", dir);
    snprintf(out, sizeof out, "%s/zz.bin", dir);
    tu_write(in, "zzzz", 4); // 'z' 'z' is pair 0x7a7a: id 256 + 0x7a7a = 31610... and "\xff\xff" below
    const char *paths[1] = {in};
    rt_tok_encode_opts o = {.threads = 1};
    assert_int_equal(rt_tok_encode_files(t, paths, 1, out, &o, &err), 2);
    rt_tokens *tk;
    assert_int_equal(rt_tokens_open(out, n, &tk, &err), 0);
    assert_int_equal(rt_tokens_count(tk), 2);
    assert_int_equal(rt_tokens_at(tk, 0), 256 + 0x7a7a);
    rt_tokens_free(tk);
    tu_write(in, "\xff\xff", 2);
    assert_int_equal(rt_tok_encode_files(t, paths, 1, out, &o, &err), 1);
    assert_int_equal(rt_tokens_open(out, n, &tk, &err), 0);
    assert_int_equal(rt_tokens_at(tk, 0), 256 + 0xffff); // past uint16
    rt_tokens_free(tk);
    // An id at or past the model's vocabulary: the message gives the position and the id.
    assert_int_equal(rt_tokens_open(out, 65536, &tk, &err), -1);
    assert_non_null(strstr(err.msg, "token at index 0 has value 65791"));
    rt_tok_free(t);
    free(pool);
    free(toks);
    free(lens);
    free(merges);
}

// ---- formats ---------------------------------------------------------------------------------------

static void same_tokenizer(const rt_tok *a, const rt_tok *b) {
    assert_int_equal(rt_tok_vocab_size(a), rt_tok_vocab_size(b));
    assert_int_equal(rt_tok_merge_count(a), rt_tok_merge_count(b));
    assert_int_equal(rt_tok_special_count(a), rt_tok_special_count(b));
    for (uint32_t i = 0; i < rt_tok_vocab_size(a); i++) {
        size_t la, lb;
        const uint8_t *pa = rt_tok_token_bytes(a, i, &la), *pb = rt_tok_token_bytes(b, i, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(pa, pb, la);
    }
    for (uint32_t i = 0; i < rt_tok_merge_count(a); i++) {
        uint32_t x[3], y[3];
        rt_tok_merge_at(a, i, &x[0], &x[1], &x[2]);
        rt_tok_merge_at(b, i, &y[0], &y[1], &y[2]);
        assert_memory_equal(x, y, sizeof x);
    }
}

static void test_formats_roundtrip(void **s) {
    (void)s;
    rt_tok *t = trained(500);
    stg_err err;
    char d[300], p[400];
    snprintf(d, sizeof d, "%s/tok/", dir);
    if (rt_tok_save(t, d, NULL, 0, &err)) fail_msg("%s", err.msg);
    rt_tok *a, *b, *c;
    snprintf(p, sizeof p, "%s/tok/tokenizer.json", dir);
    if (rt_tok_load(p, &a, &err)) fail_msg("%s", err.msg);
    snprintf(p, sizeof p, "%s/tok/vocab.json", dir);
    if (rt_tok_load(p, &b, &err)) fail_msg("%s", err.msg);
    if (rt_tok_load(d, &c, &err)) fail_msg("%s", err.msg);
    same_tokenizer(t, a);
    same_tokenizer(t, b);
    same_tokenizer(t, c);
    rt_tok_free(a);
    rt_tok_free(b);
    rt_tok_free(c);
    // GPT-2's alphabet: space is 'Ġ' (U+0120), newline 'Ċ' (U+010A), byte 0xAD (not printable) U+0143.
    assert_int_equal(rt_tok_byte_to_cp(' '), 0x120);
    assert_int_equal(rt_tok_byte_to_cp('\n'), 0x10A);
    assert_int_equal(rt_tok_byte_to_cp(0xAD), 0x143);
    assert_int_equal(rt_tok_byte_to_cp('A'), 'A');
    rt_tok_free(t);
}

// A minimal GPT-2 pair of files: the 256 bytes in alphabet order, merges "a b" and "ab c".
static char *mini_vocab(const char *extra) {
    char *v = malloc(1 << 16);
    size_t n = (size_t)sprintf(v, "{");
    for (int b = 0; b < 256; b++) {
        uint32_t cp = rt_tok_byte_to_cp((uint8_t)b);
        char u[8];
        if (cp < 0x80) u[0] = (char)cp, u[1] = 0;
        else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), u[2] = 0;
        if (cp == '"' || cp == '\\') n += (size_t)sprintf(v + n, "\"\\%s\": %d, ", u, b);
        else n += (size_t)sprintf(v + n, "\"%s\": %d, ", u, b);
    }
    sprintf(v + n, "\"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258%s}", extra);
    return v;
}

static void parse_fails(const char *vocab, const char *merges, const char *want) {
    rt_tok *t = NULL;
    stg_err err;
    err.msg[0] = 0;
    int rc = rt_tok_parse_gpt2(vocab, strlen(vocab), merges, strlen(merges), &t, &err);
    if (rc == 0) {
        rt_tok_free(t);
        fail_msg("expected failure with '%s'", want);
    }
    if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
}

static void test_gpt2_files(void **s) {
    (void)s;
    char *v = mini_vocab("");
    rt_tok *t;
    stg_err err;
    const char *m = "#version: 0.2\na b\nab c\n";
    if (rt_tok_parse_gpt2(v, strlen(v), m, strlen(m), &t, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_tok_vocab_size(t), 259);
    assert_int_equal(rt_tok_merge_count(t), 2);
    assert_int_equal(rt_tok_special_id(t, "<|endoftext|>"), 258); // made by no merge: special
    rt_tok_ids ids = {0};
    assert_int_equal(rt_tok_encode(t, (const uint8_t *)"abc<|endoftext|>", 16, &ids, &err), 0);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.v[0], 257);
    assert_int_equal(ids.v[1], 258);
    rt_tok_ids_free(&ids);
    rt_tok_free(t);
    parse_fails(v, "#version: 0.2\na b\nab xyz\n", "names the unknown token \"xyz\"");
    parse_fails(v, "a b\nb c\n", "makes a token that is not in the vocabulary");
    parse_fails(v, "a b\nabc\n", "line 2: expected two tokens separated by one space");
    parse_fails(v, "a b\na b\n", "merge 2 repeats merge 1");
    parse_fails(v, "a b\n\nab c\n", "line 2: empty line");
    free(v);
    parse_fails("{\"a\": 0, \"b\": 1", "", "line 1, column 16: unterminated object (truncated?)");
    parse_fails("{\"a\": 0, ", "", "expected a string key");
    parse_fails("[1, 2]", "", "must be a JSON object");
    parse_fails("{\"a\": -1}", "", "not an integer in [0, 2^32 - 1)");
    parse_fails("{\"a\": 0, \"b\": 0}", "", "id 0 is given twice");
    parse_fails("{\"a\": 1}", "", "id 1 with 1 tokens: the ids must run from 0 without gaps");
    parse_fails("{\"a\": 0}", "", "at least the 256 byte tokens");
    parse_fails("{\"a\\q\": 0}", "", "unknown escape");
    parse_fails("{\"\\ud800\": 0}", "", "high surrogate without its low surrogate");
    // A token no merge makes (and not a byte) is special in a vocab.json.
    char *v2 = mini_vocab(", \"zz\": 259");
    if (rt_tok_parse_gpt2(v2, strlen(v2), m, strlen(m), &t, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_tok_special_id(t, "zz"), 259);
    rt_tok_free(t);
    free(v2);
}

static void test_hf_json_errors(void **s) {
    (void)s;
    struct {
        const char *json, *want;
    } cases[] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "stg reads BPE models only"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"byte_fallback\": true}}", "byte_fallback is true"},
        {"{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", "normalizer is set"},
        {"{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"vocab\": {}, \"merges\": []}}", "pre_tokenizer is of type Metaspace"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": {}}}", "model.merges must be an array"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [5]}}", "merge 1 is a number"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]}}", "not in the vocabulary"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "unknown token \"b\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u4e00\": 0}, \"merges\": []}}", "outside GPT-2's byte alphabet"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"added_tokens\": [{\"id\": \"x\"}]}", "integer \"id\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [", "unexpected end of the file (truncated?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rt_tok *t = NULL;
        stg_err err;
        err.msg[0] = 0;
        if (rt_tok_parse_hf_json(cases[i].json, strlen(cases[i].json), &t, &err) == 0) {
            rt_tok_free(t);
            fail_msg("case %zu accepted", i);
        }
        if (!strstr(err.msg, cases[i].want)) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].want);
    }
}

// ---- UTF-8 repair ------------------------------------------------------------------------------------

static void test_utf8_sanitize(void **s) {
    (void)s;
    struct {
        const char *in, *out;
    } cases[] = {
        {"abc", "abc"},
        {"\xe2\x82\xac", "\xe2\x82\xac"},
        {"\xe2\x82", "\xef\xbf\xbd"},                                          // cut short: one U+FFFD
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},              // a surrogate: three
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                              // overlong: two
        {"\xf0\x9f\x98\x80x", "\xf0\x9f\x98\x80x"},
        {"\xf0\x9f\x98x", "\xef\xbf\xbdx"},
        {"a\xffz", "a\xef\xbf\xbdz"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // past U+10FFFF
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t out[64];
        size_t held, n = strlen(cases[i].in);
        size_t k = rt_tok_utf8_sanitize((const uint8_t *)cases[i].in, n, 1, out, &held);
        assert_int_equal(held, 0);
        if (k != strlen(cases[i].out) || memcmp(out, cases[i].out, k)) fail_msg("case %zu", i);
    }
    // Not final: a sequence cut by the end of the piece is held back, then completed.
    uint8_t out[16];
    size_t held;
    size_t k = rt_tok_utf8_sanitize((const uint8_t *)"ab\xe2\x82", 4, 0, out, &held);
    assert_int_equal(k, 2);
    assert_int_equal(held, 2);
    k = rt_tok_utf8_sanitize((const uint8_t *)"\xe2\x82\xac", 3, 1, out, &held);
    assert_int_equal(k, 3);
}

// ---- the command line ---------------------------------------------------------------------------------

static int exists(const char *name) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void put(const char *name, const char *text) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    tu_write(p, text, strlen(text));
}

// Exit 2 with the message, and no output left behind.
static void expect_bad(const char *want, const char *out_name, const char *args) {
    char out[16384];
    int rc = tu_stg_in(dir, out, sizeof out, "%s", args);
    if (rc != 2) fail_msg("stg %s: exit %d, expected 2\n%s", args, rc, out);
    if (!strstr(out, want)) fail_msg("stg %s: output\n%s\nlacks '%s'", args, out, want);
    if (out_name && exists(out_name)) fail_msg("stg %s left %s behind", args, out_name);
}

static void test_cli(void **s) {
    (void)s;
    char out[16384];
    rng_state = 11;
    char *buf = malloc(60064);
    size_t n = tie_text(buf, 60000, 1);
    char p[400];
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    tu_write(p, buf, n);
    free(buf);
    put("empty.txt", "");
    put("only_special.txt", "<|endoftext|><|endoftext|>");
    int rc = tu_stg_in(dir, out, sizeof out, "tokenizer train corpus.txt --vocab 400 --special '<|endoftext|>' -o tok.json");
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "vocabulary 400"));
    assert_non_null(strstr(out, "peak memory"));
    rc = tu_stg_in(dir, out, sizeof out, "tokenizer train corpus.txt --vocab 400 -o tokdir/");
    if (rc != 0) fail_msg("%s", out);
    assert_true(exists("tokdir/vocab.json") && exists("tokdir/merges.txt") && exists("tokdir/tokenizer.json"));
    assert_int_equal(tu_stg_in(dir, out, sizeof out, "tokenizer --help"), 0);
    assert_int_equal(tu_stg_in(dir, out, sizeof out, "tokenize --help"), 0);
    assert_int_equal(tu_stg_in(dir, out, sizeof out, "detokenize --help"), 0);

    expect_bad("the corpus is empty", "t1.json", "tokenizer train empty.txt --vocab 300 -o t1.json");
    expect_bad("the corpus is empty", "t1.json", "tokenizer train only_special.txt --special '<|endoftext|>' --vocab 300 -o t1.json");
    expect_bad("at least 256 bytes + 1 special tokens = 257", "t1.json", "tokenizer train corpus.txt --vocab 256 --special x -o t1.json");
    expect_bad("at most 2^32", "t1.json", "tokenizer train corpus.txt --vocab 4294967297 -o t1.json");
    expect_bad("is the same file as the input", NULL, "tokenizer train corpus.txt --vocab 300 -o corpus.txt");
    expect_bad("cannot open", "t1.json", "tokenizer train nonexistent.txt --vocab 300 -o t1.json");

    // Bad tokenizer files.
    put("trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0");
    expect_bad("truncated", "x.bin", "tokenize --tokenizer trunc.json corpus.txt -o x.bin");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && mkdir -p bad && cp tokdir/vocab.json bad/ && printf '#version: 0.2\\n\\304\\240 zzzz\\n' > bad/merges.txt", dir);
    assert_int_equal(system(cmd), 0);
    expect_bad("names the unknown token \"zzzz\"", "x.bin", "tokenize --tokenizer bad/vocab.json corpus.txt -o x.bin");
    snprintf(cmd, sizeof cmd, "cd '%s' && head -c 100 tokdir/vocab.json > bad/vocab.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_bad("vocab.json: line 1", "x.bin", "tokenize --tokenizer bad/vocab.json corpus.txt -o x.bin");
    expect_bad("is not a special token", "x.bin", "tokenize --tokenizer tok.json corpus.txt -o x.bin --doc-sep '<|nope|>'");
    expect_bad("is the same file as the input", NULL, "tokenize --tokenizer tok.json corpus.txt -o corpus.txt");

    // Round trip through the files; standard input; detokenize.
    rc = tu_stg_in(dir, out, sizeof out, "tokenize --tokenizer tok.json corpus.txt corpus.txt --doc-sep '<|endoftext|>' -o c.bin");
    if (rc != 0) fail_msg("%s", out);
    rc = tu_stg_in(dir, out, sizeof out, "detokenize --tokenizer tok.json c.bin -o back.txt --bytes");
    if (rc != 0) fail_msg("%s", out);
    snprintf(cmd, sizeof cmd, "cd '%s' && (cat corpus.txt; printf '<|endoftext|>'; cat corpus.txt) | cmp - back.txt", dir);
    assert_int_equal(system(cmd), 0);
    rc = tu_stg_in(dir, out, sizeof out, "tokenize --tokenizer tok.json < corpus.txt -o d.bin");
    if (rc != 0) fail_msg("%s", out);
    snprintf(cmd, sizeof cmd, "cd '%s' && head -c $(stat -c %%s d.bin) c.bin | cmp - d.bin", dir);
    assert_int_equal(system(cmd), 0);
    // Ids that end mid-character decode to U+FFFD, never a crash: a raw byte file as ids.
    snprintf(p, sizeof p, "%s/bytes.bin", dir);
    tu_write(p, "\xe2\x00\x82\x00", 4); // ids 0xe2, 0x82: the first two bytes of a 3-byte sequence
    rc = tu_stg_in(dir, out, sizeof out, "detokenize --tokenizer tok.json bytes.bin");
    assert_int_equal(rc, 0);
    assert_string_equal(out, "\xef\xbf\xbd");
    // Ids past the vocabulary.
    snprintf(p, sizeof p, "%s/big.bin", dir);
    tu_write(p, "\x00\x00\xff\xff", 4);
    expect_bad("token at index 1 has value 65535", NULL, "detokenize --tokenizer tok.json big.bin");

    // Into training: --tokenizer sets vocab, --data is checked against it.
    rc = tu_stg_in(dir, out, sizeof out, "check '%s/models/tiny.yaml' --tokenizer tok.json", STG_SOURCE_DIR);
    if (rc != 0) fail_msg("%s", out);
    rc = tu_stg_in(dir, out, sizeof out, "train '%s/models/tiny.yaml' --device cpu --tokenizer tok.json --data c.bin --steps 2", STG_SOURCE_DIR);
    if (rc != 0) fail_msg("%s", out);
    char args[1024];
    snprintf(args, sizeof args, "train '%s/models/tiny.yaml' --device cpu --set vocab=300 --data c.bin --steps 2", STG_SOURCE_DIR);
    expect_bad("outside the vocabulary [0, 300)", NULL, args);
}

// ---- the fuzz targets' seeds and saved findings ---------------------------------------------------

static int replay(const char *sub, const char *target, int (*fn)(const uint8_t *, size_t)) {
    char d[4096];
    snprintf(d, sizeof d, "%s/tests/fuzz/%s/%s", STG_SOURCE_DIR, sub, target);
    return tu_replay(d, fn, 0);
}

static void test_fuzz_seeds(void **s) {
    (void)s;
    int n = 0;
    for (int k = 0; k < 2; k++) {
        const char *sub = k ? "regressions" : "corpus";
        n += replay(sub, "tok_json", stg_fuzz_tok_json) + replay(sub, "tok_gpt2", stg_fuzz_tok_gpt2) +
             replay(sub, "tok_encode", stg_fuzz_tok_encode);
    }
    assert_true(n >= 7);
    rt_tok_free(stg_fuzz_tok_fixed);
    stg_fuzz_tok_fixed = NULL;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretok_table),
        cmocka_unit_test(test_safe_cuts),
        cmocka_unit_test(test_train_matches_reference),
        cmocka_unit_test(test_train_streamed_equals_buffer),
        cmocka_unit_test(test_encode_matches_reference),
        cmocka_unit_test(test_roundtrip_random_bytes),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_parallel_equals_whole),
        cmocka_unit_test(test_uint32_bin),
        cmocka_unit_test(test_formats_roundtrip),
        cmocka_unit_test(test_gpt2_files),
        cmocka_unit_test(test_hf_json_errors),
        cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
