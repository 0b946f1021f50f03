// GPT-2's pre-tokenisation pattern as a hand-written scanner, special token search, safe cut
// points for splitting a text into independently encodable pieces, and the byte-string hash map.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/tokenizer/tokenizer_internal.h"

// ---- character classes ----------------------------------------------------------------------------

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

// Unicode's White_Space property (PropList.txt): stable since Unicode 6.3, so written out here.
static int is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ASCII classes, the common case, by table.
static const uint8_t ascii_class[128] = {
    ['\t'] = TOK_C_SPACE, ['\n'] = TOK_C_SPACE, ['\v'] = TOK_C_SPACE, ['\f'] = TOK_C_SPACE, ['\r'] = TOK_C_SPACE,
    [' '] = TOK_C_SPACE,
    ['0'] = TOK_C_NUMBER, ['1'] = TOK_C_NUMBER, ['2'] = TOK_C_NUMBER, ['3'] = TOK_C_NUMBER, ['4'] = TOK_C_NUMBER,
    ['5'] = TOK_C_NUMBER, ['6'] = TOK_C_NUMBER, ['7'] = TOK_C_NUMBER, ['8'] = TOK_C_NUMBER, ['9'] = TOK_C_NUMBER,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1,
    ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1,
    ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1,
    ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1,
    ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

int tok_class(uint32_t cp) {
    if (cp < 128) return ascii_class[cp];
    if (cp == TOK_INVALID_CP) return TOK_C_OTHER;
    if (is_white_space(cp)) return TOK_C_SPACE;
    if (in_ranges(tok_letter_ranges, tok_letter_nranges, cp)) return TOK_C_LETTER;
    if (in_ranges(tok_number_ranges, tok_number_nranges, cp)) return TOK_C_NUMBER;
    return TOK_C_OTHER;
}

// The class and length of the character at s[i].
static inline int class_at(const uint8_t *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
    }
    uint32_t cp;
    *len = tok_utf8_decode(s, n, i, &cp);
    return tok_class(cp);
}

// The end of the run of characters of class k starting at i.
static inline size_t run_end(const uint8_t *s, size_t n, size_t i, int k) {
    while (i < n) {
        size_t l;
        if (class_at(s, n, i, &l) != k) break;
        i += l;
    }
    return i;
}

// The pattern's alternatives are tried in order at pos (leftmost-first, as the regex engines of
// GPT-2, tiktoken and Hugging Face do), each greedy:
//   1. '(?:[sdmt]|ll|ve|re)      a contraction (case-sensitive)
//   2-4. ` ?X+` for X = letters, numbers, other (neither space, letter nor number)
//   5. \s+(?!\S)                 a run of white space not followed by a non-space: the whole run at
//                                the end of the text, else the run less its last character
//   6. \s+                       the rest: a single white-space character before a non-space
size_t rt_tok_pretok_next(const uint8_t *s, size_t n, size_t pos) {
    uint8_t c0 = s[pos];
    if (c0 == '\'' && pos + 1 < n) {
        uint8_t c1 = s[pos + 1];
        if (c1 == 's' || c1 == 'd' || c1 == 'm' || c1 == 't') return pos + 2;
        if (pos + 2 < n) {
            uint8_t c2 = s[pos + 2];
            if ((c1 == 'l' && c2 == 'l') || (c1 == 'v' && c2 == 'e') || (c1 == 'r' && c2 == 'e')) return pos + 3;
        }
    }
    size_t l0;
    int k0 = class_at(s, n, pos, &l0);
    if (c0 == ' ' && pos + 1 < n) {
        size_t l1;
        int k1 = class_at(s, n, pos + 1, &l1);
        if (k1 != TOK_C_SPACE) return run_end(s, n, pos + 1 + l1, k1);
    }
    if (k0 != TOK_C_SPACE) return run_end(s, n, pos + l0, k0);
    // White space: find the run and the start of its last character.
    size_t last = pos, i = pos + l0;
    while (i < n) {
        size_t l;
        if (class_at(s, n, i, &l) != TOK_C_SPACE) break;
        last = i;
        i += l;
    }
    if (i == n) return n;      // 5: the run ends the text
    if (last > pos) return last; // 5: followed by a non-space, so all but the last character
    return i;                  // 6: one character
}

// ---- special tokens -------------------------------------------------------------------------------

size_t tok_find_string(const char *const *ss, const size_t *lens, int k, const uint8_t *s, size_t n, size_t from,
                       int *which) {
    *which = -1;
    if (k == 0 || from >= n) return n;
    uint8_t first[256] = {0};
    int distinct = 0, one = -1;
    for (int j = 0; j < k; j++) {
        uint8_t b = (uint8_t)ss[j][0];
        if (!first[b]) distinct++, one = b;
        first[b] = 1;
    }
    for (size_t i = from; i < n;) {
        if (distinct == 1) {
            const uint8_t *q = memchr(s + i, one, n - i);
            if (!q) return n;
            i = (size_t)(q - s);
        } else if (!first[s[i]]) {
            i++;
            continue;
        }
        size_t best = 0;
        for (int j = 0; j < k; j++)
            if (lens[j] > best && lens[j] <= n - i && memcmp(s + i, ss[j], lens[j]) == 0) {
                best = lens[j];
                *which = j;
            }
        if (best) return i;
        i++;
    }
    return n;
}

size_t tok_find_special(const rt_tok *t, const uint8_t *s, size_t n, size_t from, int *which) {
    *which = -1;
    if (t->n_special == 0) return n;
    for (size_t i = from; i < n; i++) {
        if (!t->special_first[s[i]]) continue;
        // special_ids are sorted longest first: the first match is the longest.
        for (int j = 0; j < t->n_special; j++) {
            uint32_t id = t->special_ids[j];
            size_t l = tok_len(t, id);
            if (l <= n - i && memcmp(s + i, tok_bytes(t, id), l) == 0) {
                *which = j;
                return i;
            }
        }
    }
    return n;
}

// ---- safe cuts ------------------------------------------------------------------------------------
//
// Cutting s at p gives the same pre-tokens as the whole text when a pre-token of the whole text ends
// at p, because the scanner keeps no state between pre-tokens. Two local rules guarantee that:
//   A. s[p-1] is a printable ASCII character other than space and s[p] is ASCII white space: no
//      pre-token contains a non-space followed by white space (the only space a pre-token takes
//      before other characters is its optional leading one);
//   B. the character before p is a letter and the one at p is neither a letter nor white space: a
//      letter run stops there, and a contraction ends with its letters.
// (Two letters' boundary is never safe, nor is the one after an apostrophe: "'s" is one pre-token.)
// The cut must also not fall inside an occurrence of a special token.

static int straddles(const uint8_t *s, size_t n, size_t p, const char *const *sp, const size_t *sl, int k) {
    for (int j = 0; j < k; j++) {
        size_t L = sl[j];
        if (L < 2) continue;
        size_t a = p >= L - 1 ? p - (L - 1) : 0;
        for (size_t i = a; i < p && i + L <= n; i++)
            if (memcmp(s + i, sp[j], L) == 0) return 1;
    }
    return 0;
}

size_t rt_tok_safe_cut(const uint8_t *s, size_t n, size_t lo, size_t hi, int last, const char *const *sp,
                       const size_t *sl, int k) {
    if (hi >= n) hi = n - 1; // a cut needs a character at p
    if (lo >= hi || n < 2) return 0;
    size_t i = lo;
    while (i < hi && (s[i] & 0xC0) == 0x80) i++; // resynchronise on a character start
    size_t best = 0;
    int prev_letter = 0;
    while (i <= hi) {
        size_t l;
        int k1 = class_at(s, n, i, &l);
        if (i > lo && i > 0) {
            int ok = 0;
            uint8_t a = s[i - 1], b = s[i];
            if (a > 0x20 && a < 0x7F && (b == ' ' || b == '\n' || b == '\t' || b == '\r' || b == '\v' || b == '\f'))
                ok = 1; // A
            else if (prev_letter && k1 != TOK_C_LETTER && k1 != TOK_C_SPACE)
                ok = 1; // B
            if (ok && !straddles(s, n, i, sp, sl, k)) {
                best = i;
                if (!last) return best;
            }
        }
        prev_letter = k1 == TOK_C_LETTER;
        i += l;
    }
    return best;
}

int tok_cuts(const uint8_t *s, size_t n, int parts, const char *const *sp, const size_t *sl, int k, size_t *cuts) {
    int np = 0;
    cuts[np++] = 0;
    if (parts > 256) parts = 256;
    for (int i = 1; i < parts; i++) {
        size_t target = n / (size_t)parts * (size_t)i;
        if (target <= cuts[np - 1]) continue;
        size_t hi = target + (1u << 20) < n ? target + (1u << 20) : n;
        size_t p = rt_tok_safe_cut(s, n, target, hi, 0, sp, sl, k);
        if (p > cuts[np - 1] && p < n) cuts[np++] = p;
    }
    cuts[np] = n;
    return np;
}

int tok_run_jobs(void *jobs, size_t stride, int n, void *(*work)(void *), stg_err *err) {
    pthread_t th[256];
    int started[256] = {0};
    if (n > 256) return stg_errf(err, "tokenizer: %d jobs (at most 256)", n);
    for (int i = 1; i < n; i++) {
        void *j = (char *)jobs + (size_t)i * stride;
        started[i] = pthread_create(&th[i], NULL, work, j) == 0;
        if (!started[i]) work(j); // no thread: run it here
    }
    if (n > 0) work(jobs);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const tok_job *j = (const tok_job *)((const char *)jobs + (size_t)i * stride);
        if (started[i]) pthread_join(th[i], NULL);
        if (j->rc && !rc) {
            *err = j->err;
            rc = -1;
        }
    }
    return rc;
}

int tok_stream_text(FILE *in, const char *name, uint8_t **buf, size_t *cap, size_t margin, const char *const *sp,
                    const size_t *sl, int k, int (*piece)(void *ctx, const uint8_t *s, size_t n, stg_err *err), void *ctx,
                    uint64_t *bytes_read, stg_err *err) {
    size_t len = 0;
    int eof = 0;
    for (;;) {
        if (!eof) {
            size_t got = fread(*buf + len, 1, *cap - len, in);
            len += got;
            *bytes_read += got;
            if (len < *cap) {
                if (ferror(in)) return stg_errf(err, "%s: read failed: %s", name, strerror(errno));
                eof = 1;
            }
        }
        size_t cut = len;
        if (!eof) {
            size_t hi = len > margin ? len - margin : 0, lo = hi > (1u << 20) ? hi - (1u << 20) : 0;
            cut = rt_tok_safe_cut(*buf, len, lo, hi, 1, sp, sl, k);
            if (!cut && lo) cut = rt_tok_safe_cut(*buf, len, 0, lo, 1, sp, sl, k);
            if (!cut) {
                // No safe cut in the whole block (one enormous pre-token): read more.
                if (*cap > SIZE_MAX / 2) return stg_errf(err, "%s: no place to cut the text in %zu bytes", name, *cap);
                uint8_t *nb = stg_realloc(*buf, *cap * 2, err);
                if (!nb) return -1;
                *buf = nb;
                *cap *= 2;
                continue;
            }
        }
        if (cut && piece(ctx, *buf, cut, err)) return -1;
        memmove(*buf, *buf + cut, len - cut);
        len -= cut;
        if (eof) return 0;
    }
}

// ---- byte-string map ----------------------------------------------------------------------------

int tok_bmap_init(tok_bmap *m, size_t cap, stg_err *err) {
    memset(m, 0, sizeof *m);
    size_t c = 1024;
    while (c < cap) c <<= 1;
    m->slots = stg_calloc(c, sizeof *m->slots, err);
    if (!m->slots) return -1;
    m->cap = c;
    m->arena_cap = 1 << 16;
    m->arena = stg_malloc(m->arena_cap, err);
    if (!m->arena) {
        free(m->slots);
        m->slots = NULL;
        return -1;
    }
    return 0;
}

void tok_bmap_free(tok_bmap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void tok_bmap_clear(tok_bmap *m) {
    memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->n = 0;
    m->arena_len = 0;
}

static int bmap_grow(tok_bmap *m, stg_err *err) {
    size_t nc = m->cap * 2;
    tok_bslot *ns = stg_calloc(nc, sizeof *ns, err);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        size_t j = (size_t)m->slots[i].hash & (nc - 1);
        while (ns[j].used) j = (j + 1) & (nc - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = nc;
    return 0;
}

int64_t *tok_bmap_find(const tok_bmap *m, const uint8_t *p, size_t n, uint64_t h) {
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        tok_bslot *s = &m->slots[i];
        if (!s->used) return NULL;
        if (s->hash == h && s->len == n && memcmp(m->arena + s->off, p, n) == 0) return &s->val;
        i = (i + 1) & mask;
    }
}

int64_t *tok_bmap_upsert(tok_bmap *m, const uint8_t *p, size_t n, uint64_t h, int *added, stg_err *err) {
    *added = 0;
    if (n > UINT32_MAX) {
        stg_errf(err, "a pre-token of %zu bytes is too long (at most 4 GiB)", n);
        return NULL;
    }
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        tok_bslot *s = &m->slots[i];
        if (!s->used) break;
        if (s->hash == h && s->len == n && memcmp(m->arena + s->off, p, n) == 0) return &s->val;
        i = (i + 1) & mask;
    }
    // Absent: keep the load below 1/2 so probes stay short.
    if ((m->n + 1) * 2 > m->cap) {
        if (bmap_grow(m, err)) return NULL;
        mask = m->cap - 1;
        i = (size_t)h & mask;
        while (m->slots[i].used) i = (i + 1) & mask;
    }
    if (m->arena_len + n > m->arena_cap) {
        size_t nc = m->arena_cap * 2;
        while (nc < m->arena_len + n) nc *= 2;
        uint8_t *na = stg_realloc(m->arena, nc, err);
        if (!na) return NULL;
        m->arena = na;
        m->arena_cap = nc;
    }
    if (n) memcpy(m->arena + m->arena_len, p, n);
    tok_bslot *s = &m->slots[i];
    s->hash = h;
    s->off = m->arena_len;
    s->len = (uint32_t)n;
    s->used = 1;
    s->val = 0;
    m->arena_len += n;
    m->n++;
    *added = 1;
    return &s->val;
}

// ---- the machine ------------------------------------------------------------------------------------

int tok_cores(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > 256 ? 256 : (int)c;
}

uint64_t tok_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024; // Linux reports kilobytes
}
