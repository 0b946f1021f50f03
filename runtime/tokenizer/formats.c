// Tokenizer files: GPT-2's vocab.json + merges.txt (token strings in GPT-2's bytes-to-unicode
// alphabet) and the BPE model of Hugging Face's tokenizer.json; a small strict JSON reader for them;
// the writers; loading and saving by path. docs/TOKENIZER.md describes the rules.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ops/base/file.h"
#include "runtime/tokenizer/tokenizer_internal.h"

#define TOK_FILE_MAX ((size_t)1 << 30) // 1 GiB: far above any real tokenizer file
#define JSON_MAX_DEPTH 64

// ---- GPT-2's bytes-to-unicode alphabet ---------------------------------------------------------------
//
// The printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand for themselves; the other 68 bytes, in
// increasing order, take the code points 256, 257, ... (so space, 0x20, is U+0120 'Ġ').

static int printable_latin1(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t rt_tok_byte_to_cp(uint8_t b) {
    if (printable_latin1(b)) return b;
    uint32_t k = 0;
    for (int x = 0; x < b; x++)
        if (!printable_latin1(x)) k++;
    return 256 + k;
}

// The byte a code point stands for, or -1.
static int cp_to_byte(uint32_t cp) {
    static int16_t table[256 + 68];
    static int ready;
    if (!ready) { // idempotent: concurrent first calls write the same values
        for (int i = 0; i < 256 + 68; i++) table[i] = -1;
        for (int b = 0; b < 256; b++) table[rt_tok_byte_to_cp((uint8_t)b)] = (int16_t)b;
        ready = 1;
    }
    return cp < 256 + 68 ? table[cp] : -1;
}

// Decodes a token string of the alphabet into bytes (out has room for n bytes). Returns the byte
// count, or -1 when a character is not in the alphabet.
static long alphabet_decode(const uint8_t *s, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode(s, n, i, &cp);
        int b = cp == TOK_INVALID_CP ? -1 : cp_to_byte(cp);
        if (b < 0) return -1;
        out[o++] = (uint8_t)b;
        i += l;
    }
    return (long)o;
}

// ---- a growing text buffer -------------------------------------------------------------------------------

typedef struct {
    char *p;
    size_t n, cap;
    int bad;
} sbuf;

static void sb_put(sbuf *b, const void *s, size_t n) {
    if (b->bad) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1 << 16;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->bad = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_cp(sbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    sb_put(b, u, n);
}

// ---- JSON ----------------------------------------------------------------------------------------------

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct {
    uint8_t type;
    int is_int;
    int64_t i;           // numbers (is_int) and booleans
    uint32_t first, next; // first child, next sibling (UINT32_MAX: none); objects: key, value, key, ...
    uint32_t count;      // children (objects: pairs)
    const char *s;       // strings: unescaped, NUL-terminated, in the document's string buffer
    size_t len;
} jnode;

typedef struct {
    const char *src;
    size_t n, pos;
    jnode *nodes;
    size_t nn, capn;
    char *strs; // unescaped strings (never longer than the source)
    size_t ns;
    const char *what; // file kind, for messages
    stg_err *err;
} jdoc;

#define JNONE UINT32_MAX

static int jfail(jdoc *d, const char *msg) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < d->pos && i < d->n; i++) {
        if (d->src[i] == '\n') line++, col = 1;
        else col++;
    }
    return stg_errf(d->err, "%s: line %zu, column %zu: %s", d->what, line, col, msg);
}

static void jws(jdoc *d) {
    while (d->pos < d->n && (d->src[d->pos] == ' ' || d->src[d->pos] == '\t' || d->src[d->pos] == '\n' || d->src[d->pos] == '\r'))
        d->pos++;
}

static uint32_t jnew(jdoc *d, int type) {
    if (d->nn == d->capn) {
        size_t nc = d->capn ? d->capn * 2 : 1024;
        jnode *nn = realloc(d->nodes, nc * sizeof *nn);
        if (!nn) {
            stg_errf(d->err, "%s: out of memory", d->what);
            return JNONE;
        }
        d->nodes = nn;
        d->capn = nc;
    }
    if (d->nn >= JNONE - 1) {
        stg_errf(d->err, "%s: too many JSON values", d->what);
        return JNONE;
    }
    jnode *x = &d->nodes[d->nn];
    memset(x, 0, sizeof *x);
    x->type = (uint8_t)type;
    x->first = x->next = JNONE;
    return (uint32_t)d->nn++;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int j4hex(jdoc *d, uint32_t *v) {
    if (d->n - d->pos < 4) return jfail(d, "truncated \\u escape");
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(d->src[d->pos + (size_t)k]);
        if (h < 0) return jfail(d, "bad \\u escape (expected 4 hex digits)");
        x = x << 4 | (uint32_t)h;
    }
    d->pos += 4;
    *v = x;
    return 0;
}

// A string at d->pos (the opening quote): unescaped into d->strs.
static int jstring(jdoc *d, const char **s, size_t *len) {
    d->pos++;
    char *out = d->strs + d->ns;
    size_t o = 0;
    for (;;) {
        if (d->pos >= d->n) return jfail(d, "unterminated string (truncated?)");
        unsigned char c = (unsigned char)d->src[d->pos];
        if (c == '"') {
            d->pos++;
            break;
        }
        if (c < 0x20) return jfail(d, "control character in a string (must be escaped)");
        if (c != '\\') {
            out[o++] = (char)c;
            d->pos++;
            continue;
        }
        if (++d->pos >= d->n) return jfail(d, "unterminated escape");
        char e = d->src[d->pos++];
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (j4hex(d, &cp)) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(d, "\\u escape is a lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (d->n - d->pos < 2 || d->src[d->pos] != '\\' || d->src[d->pos + 1] != 'u')
                    return jfail(d, "\\u escape is a high surrogate without its low surrogate");
                d->pos += 2;
                if (j4hex(d, &lo)) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return jfail(d, "\\u escape: a high surrogate followed by no low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            // UTF-8 of cp: at most 4 bytes, never more than the 6 (or 12) source bytes it came from.
            if (cp < 0x80) out[o++] = (char)cp;
            else if (cp < 0x800) out[o++] = (char)(0xC0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 0x3F));
            else if (cp < 0x10000)
                out[o++] = (char)(0xE0 | cp >> 12), out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[o++] = (char)(0x80 | (cp & 0x3F));
            else
                out[o++] = (char)(0xF0 | cp >> 18), out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[o++] = (char)(0x80 | (cp & 0x3F));
            break;
        }
        default: d->pos--; return jfail(d, "unknown escape in a string");
        }
    }
    out[o] = 0;
    d->ns += o + 1;
    *s = out;
    *len = o;
    return 0;
}

static uint32_t jvalue(jdoc *d, int depth);

static uint32_t jcontainer(jdoc *d, int depth, int obj) {
    uint32_t me = jnew(d, obj ? J_OBJ : J_ARR);
    if (me == JNONE) return JNONE;
    d->pos++;
    jws(d);
    uint32_t last = JNONE;
    char close = obj ? '}' : ']';
    if (d->pos < d->n && d->src[d->pos] == close) {
        d->pos++;
        return me;
    }
    for (;;) {
        uint32_t k = JNONE;
        if (obj) {
            jws(d);
            if (d->pos >= d->n || d->src[d->pos] != '"') return jfail(d, "expected a string key"), JNONE;
            k = jnew(d, J_STR);
            if (k == JNONE) return JNONE;
            const char *s;
            size_t l;
            if (jstring(d, &s, &l)) return JNONE;
            d->nodes[k].s = s;
            d->nodes[k].len = l;
            jws(d);
            if (d->pos >= d->n || d->src[d->pos] != ':') return jfail(d, "expected ':' after a key"), JNONE;
            d->pos++;
        }
        uint32_t v = jvalue(d, depth + 1);
        if (v == JNONE) return JNONE;
        uint32_t head = obj ? k : v;
        if (obj) d->nodes[k].next = v;
        if (last == JNONE) d->nodes[me].first = head;
        else d->nodes[last].next = head;
        last = v;
        d->nodes[me].count++;
        jws(d);
        if (d->pos >= d->n) return jfail(d, obj ? "unterminated object (truncated?)" : "unterminated array (truncated?)"), JNONE;
        char c = d->src[d->pos];
        if (c == ',') {
            d->pos++;
            continue;
        }
        if (c == close) {
            d->pos++;
            return me;
        }
        return jfail(d, obj ? "expected ',' or '}'" : "expected ',' or ']'"), JNONE;
    }
}

static uint32_t jvalue(jdoc *d, int depth) {
    if (depth > JSON_MAX_DEPTH) return jfail(d, "nested too deeply"), JNONE;
    jws(d);
    if (d->pos >= d->n) return jfail(d, "unexpected end of the file (truncated?)"), JNONE;
    char c = d->src[d->pos];
    if (c == '{' || c == '[') return jcontainer(d, depth, c == '{');
    if (c == '"') {
        uint32_t x = jnew(d, J_STR);
        if (x == JNONE) return JNONE;
        const char *s;
        size_t l;
        if (jstring(d, &s, &l)) return JNONE;
        d->nodes[x].s = s;
        d->nodes[x].len = l;
        return x;
    }
    static const char *const words[] = {"null", "true", "false"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(words[k]);
        if (d->n - d->pos >= l && memcmp(d->src + d->pos, words[k], l) == 0) {
            uint32_t x = jnew(d, k == 0 ? J_NULL : J_BOOL);
            if (x == JNONE) return JNONE;
            d->nodes[x].i = k == 1;
            d->pos += l;
            return x;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t st = d->pos;
        int is_int = 1, neg = 0;
        if (d->src[d->pos] == '-') neg = 1, d->pos++;
        size_t digits = 0;
        int64_t v = 0;
        int overflow = 0;
        while (d->pos < d->n && d->src[d->pos] >= '0' && d->src[d->pos] <= '9') {
            int dg = d->src[d->pos++] - '0';
            if (v > (INT64_MAX - dg) / 10) overflow = 1;
            else v = v * 10 + dg;
            digits++;
        }
        if (!digits) return jfail(d, "bad number"), JNONE;
        if (digits > 1 && d->src[st + (size_t)neg] == '0') return jfail(d, "bad number (leading zero)"), JNONE;
        if (d->pos < d->n && d->src[d->pos] == '.') {
            is_int = 0;
            d->pos++;
            size_t fd = 0;
            while (d->pos < d->n && d->src[d->pos] >= '0' && d->src[d->pos] <= '9') d->pos++, fd++;
            if (!fd) return jfail(d, "bad number (no digit after '.')"), JNONE;
        }
        if (d->pos < d->n && (d->src[d->pos] == 'e' || d->src[d->pos] == 'E')) {
            is_int = 0;
            d->pos++;
            if (d->pos < d->n && (d->src[d->pos] == '+' || d->src[d->pos] == '-')) d->pos++;
            size_t ed = 0;
            while (d->pos < d->n && d->src[d->pos] >= '0' && d->src[d->pos] <= '9') d->pos++, ed++;
            if (!ed) return jfail(d, "bad number (no exponent digits)"), JNONE;
        }
        uint32_t x = jnew(d, J_NUM);
        if (x == JNONE) return JNONE;
        d->nodes[x].is_int = is_int && !overflow;
        d->nodes[x].i = neg ? -v : v;
        return x;
    }
    return jfail(d, "expected a JSON value"), JNONE;
}

static int jparse(jdoc *d, const char *src, size_t n, const char *what, stg_err *err) {
    memset(d, 0, sizeof *d);
    d->src = src;
    d->n = n;
    d->what = what;
    d->err = err;
    if (n > TOK_FILE_MAX) return stg_errf(err, "%s: %zu bytes is too large for a tokenizer file", what, n);
    d->strs = malloc(n + 1);
    if (!d->strs) return stg_errf(err, "%s: out of memory", what);
    uint32_t root = jvalue(d, 0);
    if (root == JNONE) return -1;
    jws(d);
    if (d->pos != d->n) return jfail(d, "unexpected text after the JSON value");
    return 0;
}

static void jfree(jdoc *d) {
    free(d->nodes);
    free(d->strs);
}

// The value of key k in object o, or JNONE.
static uint32_t jget(const jdoc *d, uint32_t o, const char *k) {
    if (o == JNONE || d->nodes[o].type != J_OBJ) return JNONE;
    for (uint32_t c = d->nodes[o].first; c != JNONE; c = d->nodes[d->nodes[c].next].next)
        if (strcmp(d->nodes[c].s, k) == 0 && strlen(k) == d->nodes[c].len) return d->nodes[c].next;
    return JNONE;
}

static const char *jtype_name(int t) {
    static const char *const n[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return n[t];
}

// ---- building a tokenizer from token strings ----------------------------------------------------------

typedef struct {
    uint32_t n;
    const char **key;  // (n) the token string as written (NULL: id missing so far)
    size_t *klen;
    uint8_t *added;    // (n) from added_tokens: special, bytes = key
    uint32_t (*merges)[3];
    uint32_t nm;
    const char *what;  // file, for messages
} parts;

static void parts_free(parts *p) {
    free(p->key);
    free(p->klen);
    free(p->added);
    free(p->merges);
}

// Turns token strings into bytes and calls rt_tok_build. implicit_specials: tokens that are
// neither single bytes nor made by a merge are special, their text the string as written
// (vocab.json has no other way to say so; GPT-2's "<|endoftext|>" is one).
static int parts_build(parts *p, int implicit_specials, rt_tok **out, stg_err *err) {
    uint32_t n = p->n;
    for (uint32_t i = 0; i < n; i++)
        if (!p->key[i]) return stg_errf(err, "%s: token id %u is missing (ids must run from 0 to %u)", p->what, i, n - 1);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += p->klen[i];
    uint8_t *pool = malloc(total + 1);
    const uint8_t **toks = malloc((size_t)n * sizeof *toks);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    uint8_t *spec = calloc(n, 1), *made = calloc(n, 1);
    int rc = 0;
    if (!pool || !toks || !lens || !spec || !made) rc = stg_errf(err, "%s: out of memory", p->what);
    for (uint32_t r = 0; r < p->nm && rc == 0; r++) made[p->merges[r][2]] = 1;
    size_t at = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        toks[i] = pool + at;
        long l = p->added[i] ? -1 : alphabet_decode((const uint8_t *)p->key[i], p->klen[i], pool + at);
        int special = p->added[i] || (implicit_specials && !made[i] && l != 1);
        if (special || l < 0) {
            if (!special) {
                rc = stg_errf(err, "%s: token %u \"%.60s\" has a character outside GPT-2's byte alphabet", p->what, i, p->key[i]);
                break;
            }
            memcpy(pool + at, p->key[i], p->klen[i]);
            l = (long)p->klen[i];
            spec[i] = 1;
        }
        if (l == 0) {
            rc = stg_errf(err, "%s: token %u is empty", p->what, i);
            break;
        }
        lens[i] = (size_t)l;
        at += (size_t)l;
    }
    if (rc == 0 && rt_tok_build(n, toks, lens, spec, p->nm, (const uint32_t(*)[3])p->merges, out, err)) {
        stg_err_prefix(err, "%s", p->what);
        rc = -1;
    }
    free(pool);
    free(toks);
    free(lens);
    free(spec);
    free(made);
    return rc;
}

// Reads the vocabulary object (string -> id) into p.
static int read_vocab(const jdoc *d, uint32_t vo, parts *p, uint32_t n_extra, stg_err *err) {
    if (vo == JNONE || d->nodes[vo].type != J_OBJ) return stg_errf(err, "%s: the vocabulary must be a JSON object of token -> id", p->what);
    int64_t maxid = -1, count = 0;
    for (uint32_t c = d->nodes[vo].first; c != JNONE; c = d->nodes[d->nodes[c].next].next, count++) {
        const jnode *v = &d->nodes[d->nodes[c].next];
        if (v->type != J_NUM || !v->is_int || v->i < 0 || v->i >= (int64_t)UINT32_MAX)
            return stg_errf(err, "%s: token \"%.60s\" has id that is not an integer in [0, 2^32 - 1)", p->what, d->nodes[c].s);
        if (v->i > maxid) maxid = v->i;
    }
    // Ids run from 0 without gaps, so the highest is below the number of tokens (those of
    // added_tokens included): checked before anything is sized by it.
    if (maxid >= count + (int64_t)n_extra)
        return stg_errf(err, "%s: id %lld with %lld tokens: the ids must run from 0 without gaps", p->what, (long long)maxid,
                        (long long)(count + (int64_t)n_extra));
    p->n = (uint32_t)(maxid + 1);
    return 0;
}

static int parts_alloc(parts *p, uint32_t n, stg_err *err) {
    p->n = n;
    p->key = calloc(n ? n : 1, sizeof *p->key);
    p->klen = calloc(n ? n : 1, sizeof *p->klen);
    p->added = calloc(n ? n : 1, 1);
    if (!p->key || !p->klen || !p->added) return stg_errf(err, "%s: out of memory", p->what);
    return 0;
}

static int parts_set(parts *p, uint32_t id, const char *s, size_t l, int added, stg_err *err) {
    if (p->key[id] && !(added && p->klen[id] == l && memcmp(p->key[id], s, l) == 0) && !(added && !p->added[id]))
        return stg_errf(err, "%s: id %u is given twice (\"%.60s\" and \"%.60s\")", p->what, id, p->key[id], s);
    p->key[id] = s;
    p->klen[id] = l;
    if (added) p->added[id] = 1;
    return 0;
}

// Resolves merges given as (left string, right string) through a map of token strings to ids.
typedef struct {
    tok_bmap ids;
} keymap;

static int keymap_build(keymap *km, const parts *p, stg_err *err) {
    if (tok_bmap_init(&km->ids, (size_t)p->n * 2, err)) return -1;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->added[i] || !p->key[i]) continue; // a missing id is reported by parts_build
        int added;
        int64_t *v = tok_bmap_upsert(&km->ids, (const uint8_t *)p->key[i], p->klen[i],
                                     tok_hash_bytes((const uint8_t *)p->key[i], p->klen[i]), &added, err);
        if (!v) return -1;
        *v = i;
    }
    return 0;
}

static int64_t keymap_get(const keymap *km, const char *s, size_t l) {
    int64_t *v = tok_bmap_find(&km->ids, (const uint8_t *)s, l, tok_hash_bytes((const uint8_t *)s, l));
    return v ? *v : -1;
}

static int add_merge(parts *p, const keymap *km, const char *a, size_t la, const char *b, size_t lb, size_t line,
                     const char *where, stg_err *err) {
    int64_t ia = keymap_get(km, a, la), ib = keymap_get(km, b, lb);
    if (ia < 0 || ib < 0)
        return stg_errf(err, "%s %zu: the merge \"%.*s %.*s\" names the unknown token \"%.*s\"", where, line, (int)(la > 60 ? 60 : la), a,
                        (int)(lb > 60 ? 60 : lb), b, ia < 0 ? (int)(la > 60 ? 60 : la) : (int)(lb > 60 ? 60 : lb), ia < 0 ? a : b);
    char small[512];
    char *cat = la + lb <= sizeof small ? small : malloc(la + lb);
    if (!cat) return stg_errf(err, "out of memory");
    memcpy(cat, a, la);
    memcpy(cat + la, b, lb);
    int64_t ic = keymap_get(km, cat, la + lb);
    if (cat != small) free(cat);
    if (ic < 0)
        return stg_errf(err, "%s %zu: the merge \"%.*s %.*s\" makes a token that is not in the vocabulary", where, line,
                        (int)(la > 60 ? 60 : la), a, (int)(lb > 60 ? 60 : lb), b);
    p->merges[p->nm][0] = (uint32_t)ia;
    p->merges[p->nm][1] = (uint32_t)ib;
    p->merges[p->nm][2] = (uint32_t)ic;
    p->nm++;
    return 0;
}

int rt_tok_parse_gpt2(const char *vj, size_t vn, const char *mt, size_t mn, rt_tok **out, stg_err *err) {
    *out = NULL;
    jdoc d;
    parts p;
    memset(&p, 0, sizeof p);
    p.what = "vocab.json";
    keymap km;
    memset(&km, 0, sizeof km);
    int rc = jparse(&d, vj, vn, "vocab.json", err);
    uint32_t root = 0;
    if (rc == 0) rc = read_vocab(&d, root, &p, 0, err);
    if (rc == 0) rc = parts_alloc(&p, p.n, err);
    for (uint32_t c = rc == 0 ? d.nodes[root].first : JNONE; c != JNONE && rc == 0; c = d.nodes[d.nodes[c].next].next)
        rc = parts_set(&p, (uint32_t)d.nodes[d.nodes[c].next].i, d.nodes[c].s, d.nodes[c].len, 0, err);
    if (rc == 0) rc = keymap_build(&km, &p, err);
    if (rc == 0 && mn > TOK_FILE_MAX) rc = stg_errf(err, "merges.txt: %zu bytes is too large", mn);
    if (rc == 0) {
        size_t lines = 1;
        for (size_t i = 0; i < mn; i++) lines += mt[i] == '\n';
        p.merges = malloc(lines * sizeof *p.merges);
        if (!p.merges) rc = stg_errf(err, "merges.txt: out of memory");
    }
    size_t pos = 0, line = 0;
    while (rc == 0 && pos < mn) {
        const char *nl = memchr(mt + pos, '\n', mn - pos);
        size_t end = nl ? (size_t)(nl - mt) : mn, e = end;
        line++;
        if (e > pos && mt[e - 1] == '\r') e--;
        const char *s = mt + pos;
        size_t l = e - pos;
        pos = end + 1;
        if (line == 1 && l >= 8 && memcmp(s, "#version", 8) == 0) continue;
        if (l == 0) {
            // Only blank lines at the end.
            size_t q = pos;
            while (q < mn && (mt[q] == '\n' || mt[q] == '\r')) q++;
            if (q < mn) rc = stg_errf(err, "merges.txt line %zu: empty line", line);
            break;
        }
        const char *sp = memchr(s, ' ', l);
        if (!sp || sp == s || sp == s + l - 1 || memchr(sp + 1, ' ', (size_t)(s + l - sp - 1))) {
            rc = stg_errf(err, "merges.txt line %zu: expected two tokens separated by one space, got \"%.*s\"", line,
                          (int)(l > 80 ? 80 : l), s);
            break;
        }
        rc = add_merge(&p, &km, s, (size_t)(sp - s), sp + 1, (size_t)(s + l - sp - 1), line, "merges.txt line", err);
    }
    if (rc == 0) rc = parts_build(&p, 1, out, err);
    tok_bmap_free(&km.ids);
    parts_free(&p);
    jfree(&d);
    return rc;
}

// A pre-tokeniser or decoder object: null, or ByteLevel as GPT-2 has it.
static int check_byte_level(const jdoc *d, uint32_t x, const char *field, int decoder, stg_err *err) {
    if (x == JNONE || d->nodes[x].type == J_NULL) return 0;
    uint32_t ty = jget(d, x, "type");
    if (ty == JNONE || d->nodes[ty].type != J_STR || strcmp(d->nodes[ty].s, "ByteLevel") != 0)
        return stg_errf(err, "tokenizer.json: %s is %s%s%s; stg implements byte-level BPE with GPT-2's pre-tokenisation only (ByteLevel)",
                        field, ty != JNONE && d->nodes[ty].type == J_STR ? "of type " : "not ByteLevel",
                        ty != JNONE && d->nodes[ty].type == J_STR ? d->nodes[ty].s : "", "");
    if (decoder) return 0;
    uint32_t aps = jget(d, x, "add_prefix_space"), ur = jget(d, x, "use_regex");
    if (aps != JNONE && d->nodes[aps].type == J_BOOL && d->nodes[aps].i)
        return stg_errf(err, "tokenizer.json: %s has add_prefix_space true; stg encodes without a prefix space", field);
    if (ur != JNONE && d->nodes[ur].type == J_BOOL && !d->nodes[ur].i)
        return stg_errf(err, "tokenizer.json: %s has use_regex false; stg always splits by GPT-2's pattern", field);
    return 0;
}

int rt_tok_parse_hf_json(const char *text, size_t text_len, rt_tok **out, stg_err *err) {
    *out = NULL;
    jdoc d;
    parts p;
    memset(&p, 0, sizeof p);
    p.what = "tokenizer.json";
    keymap km;
    memset(&km, 0, sizeof km);
    int rc = jparse(&d, text, text_len, "tokenizer.json", err);
    uint32_t root = 0, model = JNONE, vocab = JNONE, merges = JNONE, added = JNONE;
    if (rc == 0 && d.nodes[root].type != J_OBJ) rc = stg_errf(err, "tokenizer.json: the top level must be an object");
    if (rc == 0) {
        model = jget(&d, root, "model");
        if (model == JNONE || d.nodes[model].type != J_OBJ) rc = stg_errf(err, "tokenizer.json: no \"model\" object");
    }
    if (rc == 0) {
        uint32_t ty = jget(&d, model, "type");
        if (ty != JNONE && (d.nodes[ty].type != J_STR || strcmp(d.nodes[ty].s, "BPE") != 0))
            rc = stg_errf(err, "tokenizer.json: model type %s%s%s; stg reads BPE models only",
                          d.nodes[ty].type == J_STR ? "\"" : "", d.nodes[ty].type == J_STR ? d.nodes[ty].s : jtype_name(d.nodes[ty].type),
                          d.nodes[ty].type == J_STR ? "\"" : "");
    }
    // Options stg does not implement: refused rather than silently encoding differently.
    static const char *const off_opts[] = {"byte_fallback", "ignore_merges", "fuse_unk"};
    for (int k = 0; k < 3 && rc == 0; k++) {
        uint32_t o = jget(&d, model, off_opts[k]);
        if (o != JNONE && d.nodes[o].type == J_BOOL && d.nodes[o].i && k < 2)
            rc = stg_errf(err, "tokenizer.json: model.%s is true; stg's BPE does not implement it", off_opts[k]);
    }
    static const char *const null_opts[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int k = 0; k < 3 && rc == 0; k++) {
        uint32_t o = jget(&d, model, null_opts[k]);
        if (o == JNONE || d.nodes[o].type == J_NULL || (d.nodes[o].type == J_STR && d.nodes[o].len == 0)) continue;
        if (k == 2 && d.nodes[o].type == J_NUM && d.nodes[o].is_int && d.nodes[o].i == 0) continue;
        rc = stg_errf(err, "tokenizer.json: model.%s is set; stg's BPE does not implement it", null_opts[k]);
    }
    if (rc == 0) {
        uint32_t nz = jget(&d, root, "normalizer");
        if (nz != JNONE && d.nodes[nz].type != J_NULL) rc = stg_errf(err, "tokenizer.json: a normalizer is set; stg does not normalise text");
    }
    if (rc == 0) rc = check_byte_level(&d, jget(&d, root, "pre_tokenizer"), "pre_tokenizer", 0, err);
    if (rc == 0) rc = check_byte_level(&d, jget(&d, root, "decoder"), "decoder", 1, err);
    if (rc == 0) {
        vocab = jget(&d, model, "vocab");
        merges = jget(&d, model, "merges");
        added = jget(&d, root, "added_tokens");
        if (merges == JNONE || d.nodes[merges].type != J_ARR) rc = stg_errf(err, "tokenizer.json: model.merges must be an array");
        else if (added != JNONE && d.nodes[added].type != J_ARR && d.nodes[added].type != J_NULL)
            rc = stg_errf(err, "tokenizer.json: added_tokens must be an array");
    }
    uint32_t n_added = added != JNONE && rc == 0 && d.nodes[added].type == J_ARR ? d.nodes[added].count : 0;
    if (rc == 0) rc = read_vocab(&d, vocab, &p, n_added, err);
    // added_tokens may lie past the model's vocabulary.
    uint32_t n = p.n;
    uint64_t n_total = (rc == 0 ? d.nodes[vocab].count : 0) + (uint64_t)n_added;
    if (rc == 0 && added != JNONE && d.nodes[added].type == J_ARR)
        for (uint32_t c = d.nodes[added].first; c != JNONE; c = d.nodes[c].next) {
            uint32_t id = jget(&d, c, "id"), ct = jget(&d, c, "content");
            if (id == JNONE || ct == JNONE || d.nodes[id].type != J_NUM || !d.nodes[id].is_int || d.nodes[id].i < 0 ||
                d.nodes[id].i >= (int64_t)UINT32_MAX - 1 || d.nodes[ct].type != J_STR) {
                rc = stg_errf(err, "tokenizer.json: each added token needs an integer \"id\" and a string \"content\"");
                break;
            }
            if ((uint64_t)d.nodes[id].i >= n_total) {
                rc = stg_errf(err, "tokenizer.json: added token id %lld with %llu tokens: the ids must run from 0 without gaps",
                              (long long)d.nodes[id].i, (unsigned long long)n_total);
                break;
            }
            if ((uint32_t)d.nodes[id].i + 1 > n) n = (uint32_t)d.nodes[id].i + 1;
        }
    if (rc == 0) rc = parts_alloc(&p, n, err);
    for (uint32_t c = rc == 0 ? d.nodes[vocab].first : JNONE; c != JNONE && rc == 0; c = d.nodes[d.nodes[c].next].next)
        rc = parts_set(&p, (uint32_t)d.nodes[d.nodes[c].next].i, d.nodes[c].s, d.nodes[c].len, 0, err);
    if (rc == 0 && added != JNONE && d.nodes[added].type == J_ARR)
        for (uint32_t c = d.nodes[added].first; c != JNONE && rc == 0; c = d.nodes[c].next) {
            uint32_t id = jget(&d, c, "id"), ct = jget(&d, c, "content");
            rc = parts_set(&p, (uint32_t)d.nodes[id].i, d.nodes[ct].s, d.nodes[ct].len, 1, err);
        }
    if (rc == 0) rc = keymap_build(&km, &p, err);
    if (rc == 0) {
        p.merges = malloc((d.nodes[merges].count ? d.nodes[merges].count : 1) * sizeof *p.merges);
        if (!p.merges) rc = stg_errf(err, "tokenizer.json: out of memory");
    }
    size_t k = 0;
    for (uint32_t c = rc == 0 ? d.nodes[merges].first : JNONE; c != JNONE && rc == 0; c = d.nodes[c].next) {
        k++;
        const jnode *m = &d.nodes[c];
        // "left right" (tokenizers before 0.20) or ["left", "right"].
        if (m->type == J_STR) {
            const char *sp = memchr(m->s, ' ', m->len);
            if (!sp || sp == m->s || sp == m->s + m->len - 1 || memchr(sp + 1, ' ', (size_t)(m->s + m->len - sp - 1))) {
                rc = stg_errf(err, "tokenizer.json: merge %zu \"%.80s\" is not two tokens separated by one space", k, m->s);
                break;
            }
            rc = add_merge(&p, &km, m->s, (size_t)(sp - m->s), sp + 1, (size_t)(m->s + m->len - sp - 1), k, "tokenizer.json: merge", err);
        } else if (m->type == J_ARR && m->count == 2 && d.nodes[m->first].type == J_STR && d.nodes[d.nodes[m->first].next].type == J_STR) {
            const jnode *a = &d.nodes[m->first], *b = &d.nodes[a->next];
            rc = add_merge(&p, &km, a->s, a->len, b->s, b->len, k, "tokenizer.json: merge", err);
        } else {
            rc = stg_errf(err, "tokenizer.json: merge %zu is %s; expected \"left right\" or [\"left\", \"right\"]", k, jtype_name(m->type));
        }
    }
    if (rc == 0) rc = parts_build(&p, 0, out, err);
    tok_bmap_free(&km.ids);
    parts_free(&p);
    jfree(&d);
    return rc;
}

// ---- writers -------------------------------------------------------------------------------------------

// The token's string: special tokens as their text, the others through the byte alphabet.
static void put_token_json(sbuf *b, const rt_tok *t, uint32_t id) {
    const uint8_t *p = tok_bytes(t, id);
    size_t l = tok_len(t, id);
    sb_put(b, "\"", 1);
    if (t->special[id]) {
        for (size_t i = 0; i < l; i++) {
            uint8_t c = p[i];
            char e[8];
            if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, sb_put(b, e, 2);
            else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c), sb_put(b, e, 6);
            else sb_put(b, &c, 1);
        }
    } else {
        for (size_t i = 0; i < l; i++) {
            uint32_t cp = rt_tok_byte_to_cp(p[i]);
            if (cp == '"' || cp == '\\') {
                char e[2] = {'\\', (char)cp};
                sb_put(b, e, 2);
            } else {
                sb_cp(b, cp);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static void put_token_plain(sbuf *b, const rt_tok *t, uint32_t id) {
    const uint8_t *p = tok_bytes(t, id);
    for (size_t i = 0, l = tok_len(t, id); i < l; i++) sb_cp(b, rt_tok_byte_to_cp(p[i]));
}

// Special tokens must be valid UTF-8 to be written as JSON strings.
static int check_specials_utf8(const rt_tok *t, stg_err *err) {
    for (int j = 0; j < t->n_special; j++) {
        uint32_t id = t->special_ids[j];
        const uint8_t *p = tok_bytes(t, id);
        size_t l = tok_len(t, id);
        for (size_t i = 0; i < l;) {
            uint32_t cp;
            size_t k = tok_utf8_decode(p, l, i, &cp);
            if (cp == TOK_INVALID_CP) return stg_errf(err, "special token %u is not valid UTF-8: it cannot be written as JSON", id);
            i += k;
        }
    }
    return 0;
}

static char *finish(sbuf *b, size_t *len, stg_err *err) {
    if (b->bad) {
        free(b->p);
        stg_errf(err, "out of memory writing the tokenizer");
        return NULL;
    }
    *len = b->n;
    return b->p;
}

char *rt_tok_vocab_json_text(const rt_tok *t, size_t *len, stg_err *err) {
    if (check_specials_utf8(t, err)) return NULL;
    sbuf b = {0};
    sb_str(&b, "{");
    for (uint32_t i = 0; i < t->n; i++) {
        char num[32];
        if (i) sb_str(&b, ", ");
        put_token_json(&b, t, i);
        snprintf(num, sizeof num, ": %u", i);
        sb_str(&b, num);
    }
    sb_str(&b, "}\n");
    return finish(&b, len, err);
}

char *rt_tok_merges_text(const rt_tok *t, size_t *len, stg_err *err) {
    sbuf b = {0};
    sb_str(&b, "#version: 0.2\n");
    for (uint32_t r = 0; r < t->n_merges; r++) {
        put_token_plain(&b, t, t->merges[r][0]);
        sb_str(&b, " ");
        put_token_plain(&b, t, t->merges[r][1]);
        sb_str(&b, "\n");
    }
    return finish(&b, len, err);
}

char *rt_tok_hf_json_text(const rt_tok *t, size_t *len, stg_err *err) {
    if (check_specials_utf8(t, err)) return NULL;
    sbuf b = {0};
    sb_str(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    for (uint32_t i = 0, k = 0; i < t->n; i++) {
        if (!t->special[i]) continue;
        char num[64];
        snprintf(num, sizeof num, "%s\n    {\"id\": %u, \"content\": ", k++ ? "," : "", i);
        sb_str(&b, num);
        put_token_json(&b, t, i);
        sb_str(&b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}");
    }
    sb_str(&b, t->n_special ? "\n  ],\n" : "],\n");
    sb_str(&b, "  \"normalizer\": null,\n"
               "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
               "  \"post_processor\": null,\n"
               "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
               "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
               "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
               "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {");
    for (uint32_t i = 0; i < t->n; i++) {
        char num[32];
        sb_str(&b, i ? ",\n      " : "\n      ");
        put_token_json(&b, t, i);
        snprintf(num, sizeof num, ": %u", i);
        sb_str(&b, num);
    }
    sb_str(&b, "\n    },\n    \"merges\": [");
    for (uint32_t r = 0; r < t->n_merges; r++) {
        sb_str(&b, r ? ",\n      \"" : "\n      \"");
        // Byte-alphabet strings never hold '"' (0x22 stands for itself, so escape it) nor a space.
        sbuf tmp = {0};
        put_token_plain(&tmp, t, t->merges[r][0]);
        sb_str(&tmp, " ");
        put_token_plain(&tmp, t, t->merges[r][1]);
        for (size_t i = 0; i < tmp.n && !tmp.bad; i++) {
            if (tmp.p[i] == '"' || tmp.p[i] == '\\') sb_put(&b, "\\", 1);
            sb_put(&b, tmp.p + i, 1);
        }
        if (tmp.bad) b.bad = 1;
        free(tmp.p);
        sb_str(&b, "\"");
    }
    sb_str(&b, "\n    ]\n  }\n}\n");
    return finish(&b, len, err);
}

// ---- by path -----------------------------------------------------------------------------------------

static int read_whole(const char *path, stg_mmap *m, stg_err *err) {
    if (stg_mmap_open(path, m, err)) return -1;
    if (m->size > TOK_FILE_MAX) {
        stg_mmap_close(m);
        return stg_errf(err, "%s: %zu bytes is too large for a tokenizer file", path, m->size);
    }
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int load_gpt2(const char *vocab_path, const char *merges_path, rt_tok **out, stg_err *err) {
    stg_mmap v, m;
    if (read_whole(vocab_path, &v, err)) return -1;
    if (read_whole(merges_path, &m, err)) {
        stg_mmap_close(&v);
        return stg_err_prefix(err, "the merges beside %s", vocab_path);
    }
    int rc = rt_tok_parse_gpt2(v.data ? v.data : "", v.size, m.data ? m.data : "", m.size, out, err);
    if (rc) stg_err_prefix(err, "%s", vocab_path);
    stg_mmap_close(&v);
    stg_mmap_close(&m);
    return rc;
}

int rt_tok_load(const char *path, rt_tok **out, stg_err *err) {
    *out = NULL;
    char a[4096], b[4096];
    if (is_dir(path)) {
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (file_exists(a)) return rt_tok_load(a, out, err);
        snprintf(a, sizeof a, "%s/vocab.json", path);
        snprintf(b, sizeof b, "%s/merges.txt", path);
        if (!file_exists(a)) return stg_errf(err, "%s: a tokenizer directory needs tokenizer.json or vocab.json + merges.txt", path);
        return load_gpt2(a, b, out, err);
    }
    stg_mmap m;
    if (read_whole(path, &m, err)) return -1;
    const char *s = m.data ? m.data : "";
    // A tokenizer.json has a top-level "model"; anything else is taken for a vocab.json.
    int hf = 0;
    {
        jdoc d;
        // Not JSON at all (truncated, say): that is the message, whatever the file was meant to be.
        if (jparse(&d, s, m.size, path, err)) {
            jfree(&d);
            stg_mmap_close(&m);
            return -1;
        }
        // (a vocab.json may well have a token "model": it maps to a number, not an object)
        if (d.nodes[0].type == J_OBJ) {
            uint32_t mo = jget(&d, 0, "model");
            hf = mo != JNONE && d.nodes[mo].type == J_OBJ;
        }
        jfree(&d);
    }
    int rc;
    if (hf) {
        rc = rt_tok_parse_hf_json(s, m.size, out, err);
        if (rc) stg_err_prefix(err, "%s", path);
        stg_mmap_close(&m);
        return rc;
    }
    stg_mmap_close(&m);
    snprintf(a, sizeof a, "%s", path);
    char *slash = strrchr(a, '/');
    if (slash) snprintf(slash + 1, sizeof a - (size_t)(slash + 1 - a), "merges.txt");
    else snprintf(a, sizeof a, "merges.txt");
    return load_gpt2(path, a, out, err);
}

static int write_file(const char *path, const char *text, size_t n, const char *const *inputs, int n_inputs, stg_err *err) {
    if (stg_check_output(path, "output", inputs, NULL, n_inputs, err)) return -1;
    return stg_afile_write_all(path, text, n, err);
}

int rt_tok_save(const rt_tok *t, const char *path, const char *const *inputs, int n_inputs, stg_err *err) {
    size_t pl = strlen(path);
    int dir = (pl && path[pl - 1] == '/') || is_dir(path);
    size_t n;
    if (!dir) {
        char *s = rt_tok_hf_json_text(t, &n, err);
        if (!s) return -1;
        int rc = write_file(path, s, n, inputs, n_inputs, err);
        free(s);
        return rc;
    }
    if (!is_dir(path) && mkdir(path, 0777) != 0) return stg_errf(err, "%s: cannot create the directory: %s", path, strerror(errno));
    const char *names[3] = {"tokenizer.json", "vocab.json", "merges.txt"};
    char *texts[3];
    size_t lens[3];
    texts[0] = rt_tok_hf_json_text(t, &lens[0], err);
    texts[1] = texts[0] ? rt_tok_vocab_json_text(t, &lens[1], err) : NULL;
    texts[2] = texts[1] ? rt_tok_merges_text(t, &lens[2], err) : NULL;
    int rc = texts[2] ? 0 : -1;
    for (int i = 0; i < 3 && rc == 0; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s%s%s", path, path[pl - 1] == '/' ? "" : "/", names[i]);
        rc = write_file(p, texts[i], lens[i], inputs, n_inputs, err);
    }
    for (int i = 0; i < 3; i++) free(texts[i]);
    return rc;
}
