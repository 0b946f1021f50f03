// The tokenizer object (built and checked from its parts), encoding (pre-tokens merged by rank,
// with a per-thread cache of pre-tokens already seen), parallel and streamed encoding of files,
// decoding, and the UTF-8 repair used when decoded bytes are shown as text.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ops/base/file.h"
#include "runtime/npy.h"
#include "runtime/tokenizer/tokenizer_internal.h"

// ---- the tokenizer object ---------------------------------------------------------------------------

void rt_tok_free(rt_tok *t) {
    if (!t) return;
    free(t->pool);
    free(t->off);
    free(t->special);
    free(t->merges);
    free(t->pairs.keys);
    free(t->pairs.vals);
    free(t->special_ids);
    free(t->sp_ptr);
    free(t->sp_len);
    free(t);
}

uint32_t rt_tok_vocab_size(const rt_tok *t) { return t->n; }
uint32_t rt_tok_merge_count(const rt_tok *t) { return t->n_merges; }
int rt_tok_special_count(const rt_tok *t) { return t->n_special; }

uint32_t rt_tok_special_at(const rt_tok *t, int i, const uint8_t **s, size_t *len) {
    uint32_t id = t->special_ids[i];
    *s = tok_bytes(t, id);
    *len = tok_len(t, id);
    return id;
}

int64_t rt_tok_special_id(const rt_tok *t, const char *s) {
    size_t l = strlen(s);
    for (int i = 0; i < t->n_special; i++) {
        uint32_t id = t->special_ids[i];
        if (tok_len(t, id) == l && memcmp(tok_bytes(t, id), s, l) == 0) return id;
    }
    return -1;
}

const uint8_t *rt_tok_token_bytes(const rt_tok *t, uint32_t id, size_t *len) {
    *len = tok_len(t, id);
    return tok_bytes(t, id);
}

void rt_tok_merge_at(const rt_tok *t, uint32_t i, uint32_t *left, uint32_t *right, uint32_t *result) {
    *left = t->merges[i][0];
    *right = t->merges[i][1];
    *result = t->merges[i][2];
}

static int special_order(const rt_tok *t, uint32_t a, uint32_t b) {
    size_t la = tok_len(t, a), lb = tok_len(t, b);
    if (la != lb) return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

int rt_tok_build(uint32_t n, const uint8_t *const *tokens, const size_t *lens, const uint8_t *is_special,
                 uint32_t n_merges, const uint32_t (*merges)[3], rt_tok **out, stg_err *err) {
    *out = NULL;
    if (n < 256) return stg_errf(err, "a byte-level vocabulary needs at least the 256 byte tokens; this one has %u tokens", n);
    rt_tok *t = stg_calloc(1, sizeof *t, err);
    if (!t) return -1;
    t->n = n;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (lens[i] == 0) {
            rt_tok_free(t);
            return stg_errf(err, "token %u is empty", i);
        }
        total += lens[i];
    }
    t->pool = stg_malloc(total, err);
    t->off = stg_malloc(((size_t)n + 1) * sizeof *t->off, err);
    t->special = stg_calloc(n, 1, err);
    t->merges = stg_malloc((n_merges ? n_merges : 1) * sizeof *t->merges, err);
    if (!t->pool || !t->off || !t->special || !t->merges) {
        rt_tok_free(t);
        return -1;
    }
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        t->off[i] = at;
        memcpy(t->pool + at, tokens[i], lens[i]);
        at += lens[i];
        t->special[i] = is_special && is_special[i];
        if (t->special[i]) t->n_special++;
    }
    t->off[n] = at;
    // The byte tokens: exactly one non-special single-byte token per byte value.
    uint8_t seen[256] = {0};
    for (uint32_t i = 0; i < n; i++) {
        if (t->special[i] || tok_len(t, i) != 1) continue;
        uint8_t b = tok_bytes(t, i)[0];
        if (seen[b]) {
            stg_errf(err, "two tokens stand for byte 0x%02X (ids %u and %u)", b, t->byte_id[b], i);
            rt_tok_free(t);
            return -1;
        }
        seen[b] = 1;
        t->byte_id[b] = i;
    }
    for (int b = 0; b < 256; b++)
        if (!seen[b]) {
            stg_errf(err, "no token stands for byte 0x%02X: a byte-level vocabulary needs all 256", b);
            rt_tok_free(t);
            return -1;
        }
    // Merges, and the (left, right) -> rank, result map.
    size_t cap = 1024;
    while (cap < (size_t)n_merges * 2) cap <<= 1;
    t->pairs.cap = cap;
    t->pairs.keys = stg_calloc(cap, sizeof *t->pairs.keys, err);
    t->pairs.vals = stg_malloc(cap * sizeof *t->pairs.vals, err);
    if (!t->pairs.keys || !t->pairs.vals) {
        rt_tok_free(t);
        return -1;
    }
    for (uint32_t r = 0; r < n_merges; r++) {
        uint32_t a = merges[r][0], b = merges[r][1], c = merges[r][2];
        if (a >= n || b >= n || c >= n) {
            stg_errf(err, "merge %u names token id %u, outside the vocabulary of %u", r + 1, a >= n ? a : b >= n ? b : c, n);
            rt_tok_free(t);
            return -1;
        }
        if (t->special[a] || t->special[b] || t->special[c]) {
            stg_errf(err, "merge %u involves special token %u: special tokens are never merged", r + 1,
                     t->special[a] ? a : t->special[b] ? b : c);
            rt_tok_free(t);
            return -1;
        }
        size_t la = tok_len(t, a), lb = tok_len(t, b);
        if (tok_len(t, c) != la + lb || memcmp(tok_bytes(t, c), tok_bytes(t, a), la) || memcmp(tok_bytes(t, c) + la, tok_bytes(t, b), lb)) {
            stg_errf(err, "merge %u: token %u is not the concatenation of tokens %u and %u", r + 1, c, a, b);
            rt_tok_free(t);
            return -1;
        }
        uint64_t k = tok_pair_key(a, b);
        size_t i = (size_t)tok_mix(k) & (cap - 1);
        while (t->pairs.keys[i] && t->pairs.keys[i] != k) i = (i + 1) & (cap - 1);
        if (t->pairs.keys[i]) {
            stg_errf(err, "merge %u repeats merge %u (tokens %u and %u)", r + 1, (uint32_t)(t->pairs.vals[i] >> 32) + 1, a, b);
            rt_tok_free(t);
            return -1;
        }
        t->pairs.keys[i] = k;
        t->pairs.vals[i] = (uint64_t)r << 32 | c;
        memcpy(t->merges[r], merges[r], sizeof t->merges[r]);
    }
    t->n_merges = n_merges;
    // Special tokens, longest first (a longer one wins where two start at the same place).
    int ns = t->n_special;
    t->special_ids = stg_malloc((size_t)(ns ? ns : 1) * sizeof *t->special_ids, err);
    t->sp_ptr = stg_malloc((size_t)(ns ? ns : 1) * sizeof *t->sp_ptr, err);
    t->sp_len = stg_malloc((size_t)(ns ? ns : 1) * sizeof *t->sp_len, err);
    if (!t->special_ids || !t->sp_ptr || !t->sp_len) {
        rt_tok_free(t);
        return -1;
    }
    int k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!t->special[i]) continue;
        int j = k++;
        while (j > 0 && special_order(t, i, t->special_ids[j - 1]) < 0) {
            t->special_ids[j] = t->special_ids[j - 1];
            j--;
        }
        t->special_ids[j] = i;
    }
    for (int j = 0; j < ns; j++) {
        uint32_t id = t->special_ids[j];
        for (int q = 0; q < j; q++)
            if (tok_len(t, t->special_ids[q]) == tok_len(t, id) && !memcmp(tok_bytes(t, t->special_ids[q]), tok_bytes(t, id), tok_len(t, id))) {
                stg_errf(err, "special tokens %u and %u are the same text", t->special_ids[q], id);
                rt_tok_free(t);
                return -1;
            }
        t->sp_ptr[j] = (const char *)tok_bytes(t, id);
        t->sp_len[j] = tok_len(t, id);
        if (t->sp_len[j] > t->sp_max) t->sp_max = t->sp_len[j];
        t->special_first[tok_bytes(t, id)[0]] = 1;
    }
    *out = t;
    return 0;
}

// ---- id vectors ------------------------------------------------------------------------------------

void rt_tok_ids_free(rt_tok_ids *ids) {
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

static int ids_reserve(rt_tok_ids *ids, size_t more, stg_err *err) {
    if (ids->n + more <= ids->cap) return 0;
    size_t nc = ids->cap ? ids->cap : 1024;
    while (nc < ids->n + more) nc *= 2;
    uint32_t *nv = stg_realloc(ids->v, nc * sizeof *nv, err);
    if (!nv) return -1;
    ids->v = nv;
    ids->cap = nc;
    return 0;
}

int rt_tok_ids_push(rt_tok_ids *ids, uint32_t id, stg_err *err) {
    if (ids_reserve(ids, 1, err)) return -1;
    ids->v[ids->n++] = id;
    return 0;
}

// ---- merging one pre-token ------------------------------------------------------------------------

typedef struct {
    uint64_t key; // rank << 32 | position
} qent;

typedef struct {
    tok_bmap cache;      // pre-token bytes -> offset << 20 | id count, into cids
    uint32_t *cids;
    size_t ncids, capcids;
    uint32_t *w;         // work: ids of the pre-token being merged
    uint32_t *prev, *next;
    qent *q;
    size_t capw, capq;
} enc_ctx;

#define CACHE_MAX_ENTRIES (1u << 20)
#define CACHE_MAX_IDS (1u << 24)
#define CACHE_MAX_COUNT ((1u << 20) - 1)

static int ctx_init(enc_ctx *c, stg_err *err) {
    memset(c, 0, sizeof *c);
    return tok_bmap_init(&c->cache, 1 << 14, err);
}

static void ctx_free(enc_ctx *c) {
    tok_bmap_free(&c->cache);
    free(c->cids);
    free(c->w);
    free(c->prev);
    free(c->next);
    free(c->q);
}

static int ctx_work(enc_ctx *c, size_t n, stg_err *err) {
    if (n <= c->capw) return 0;
    size_t nc = c->capw ? c->capw : 256;
    while (nc < n) nc *= 2;
    uint32_t *w = stg_realloc(c->w, nc * sizeof *w, err);
    if (!w) return -1;
    c->w = w;
    uint32_t *p = stg_realloc(c->prev, nc * sizeof *p, err);
    if (!p) return -1;
    c->prev = p;
    uint32_t *x = stg_realloc(c->next, nc * sizeof *x, err);
    if (!x) return -1;
    c->next = x;
    c->capw = nc;
    return 0;
}

// The rank (and result) of merging ids a and b, or UINT64_MAX when they do not merge.
static inline uint64_t pair_rank(const rt_tok *t, uint32_t a, uint32_t b) {
    const uint64_t *v = tok_pmap_find(&t->pairs, a, b);
    return v ? *v : UINT64_MAX;
}

// Short pre-tokens: repeatedly merge the adjacent pair of lowest rank (the leftmost of equal
// ranks), as GPT-2's encoder and Hugging Face's BPE do. Quadratic, but pre-tokens are short.
static size_t merge_small(const rt_tok *t, uint32_t *w, size_t n) {
    while (n > 1) {
        uint64_t best = UINT64_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            uint64_t r = pair_rank(t, w[i], w[i + 1]);
            if (r < best) {
                best = r;
                at = i;
            }
        }
        if (best == UINT64_MAX) break;
        w[at] = (uint32_t)best;
        memmove(w + at + 1, w + at + 2, (n - at - 2) * sizeof *w);
        n--;
    }
    return n;
}

// Long pre-tokens (runs of spaces, long words in some scripts): the same merges in the same order,
// from a min-heap of (rank, position) over a linked list of parts. An entry is current when both
// its parts are still alive and still form a pair of that rank (a rank names one pair).
static int heap_less(qent a, qent b) { return a.key < b.key; }

static int q_push(enc_ctx *c, size_t *nq, qent e, stg_err *err) {
    if (*nq == c->capq) {
        size_t nc = c->capq ? c->capq * 2 : 256;
        qent *nq2 = stg_realloc(c->q, nc * sizeof *nq2, err);
        if (!nq2) return -1;
        c->q = nq2;
        c->capq = nc;
    }
    size_t i = (*nq)++;
    while (i > 0 && heap_less(e, c->q[(i - 1) / 2])) {
        c->q[i] = c->q[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    c->q[i] = e;
    return 0;
}

static qent q_pop(enc_ctx *c, size_t *nq) {
    qent top = c->q[0], last = c->q[--*nq];
    size_t i = 0, n = *nq;
    for (;;) {
        size_t ch = 2 * i + 1;
        if (ch >= n) break;
        if (ch + 1 < n && heap_less(c->q[ch + 1], c->q[ch])) ch++;
        if (!heap_less(c->q[ch], last)) break;
        c->q[i] = c->q[ch];
        i = ch;
    }
    if (n) c->q[i] = last;
    return top;
}

#define DEAD UINT32_MAX

static int merge_large(const rt_tok *t, enc_ctx *c, size_t n, size_t *out_n, stg_err *err) {
    uint32_t *w = c->w, *prev = c->prev, *next = c->next;
    size_t nq = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = i ? (uint32_t)(i - 1) : DEAD;
        next[i] = i + 1 < n ? (uint32_t)(i + 1) : DEAD;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint64_t r = pair_rank(t, w[i], w[i + 1]);
        if (r != UINT64_MAX && q_push(c, &nq, (qent){(r >> 32) << 32 | i}, err)) return -1;
    }
    while (nq) {
        qent e = q_pop(c, &nq);
        uint32_t i = (uint32_t)e.key, rank = (uint32_t)(e.key >> 32);
        if (w[i] == DEAD || next[i] == DEAD) continue;
        uint32_t j = next[i];
        uint64_t r = pair_rank(t, w[i], w[j]);
        if (r == UINT64_MAX || (uint32_t)(r >> 32) != rank) continue;
        w[i] = (uint32_t)r;
        w[j] = DEAD;
        next[i] = next[j];
        if (next[j] != DEAD) prev[next[j]] = i;
        if (prev[i] != DEAD) {
            uint64_t rl = pair_rank(t, w[prev[i]], w[i]);
            if (rl != UINT64_MAX && q_push(c, &nq, (qent){(rl >> 32) << 32 | prev[i]}, err)) return -1;
        }
        if (next[i] != DEAD) {
            uint64_t rr = pair_rank(t, w[i], w[next[i]]);
            if (rr != UINT64_MAX && q_push(c, &nq, (qent){(rr >> 32) << 32 | i}, err)) return -1;
        }
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i] != DEAD) w[o++] = w[i];
    *out_n = o;
    return 0;
}

#define SMALL_PRETOKEN 48

// Encodes one pre-token p[0..n) into c->w[0..*out_n).
static int encode_word(const rt_tok *t, enc_ctx *c, const uint8_t *p, size_t n, size_t *out_n, stg_err *err) {
    if (n > (size_t)UINT32_MAX - 1) return stg_errf(err, "a pre-token of %zu bytes is too long", n);
    if (ctx_work(c, n, err)) return -1;
    for (size_t i = 0; i < n; i++) c->w[i] = t->byte_id[p[i]];
    if (n <= SMALL_PRETOKEN) {
        *out_n = merge_small(t, c->w, n);
        return 0;
    }
    return merge_large(t, c, n, out_n, err);
}

// Encodes one pre-token, through the cache.
static int encode_pretoken(const rt_tok *t, enc_ctx *c, const uint8_t *p, size_t n, rt_tok_ids *ids, stg_err *err) {
    if (n == 1) return rt_tok_ids_push(ids, t->byte_id[p[0]], err);
    uint64_t h = tok_hash_bytes(p, n);
    int64_t *v = tok_bmap_find(&c->cache, p, n, h);
    if (v) {
        size_t off = (size_t)((uint64_t)*v >> 20), k = (size_t)(*v & CACHE_MAX_COUNT);
        if (ids_reserve(ids, k, err)) return -1;
        memcpy(ids->v + ids->n, c->cids + off, k * sizeof *ids->v);
        ids->n += k;
        return 0;
    }
    size_t k = 0;
    if (encode_word(t, c, p, n, &k, err)) return -1;
    if (ids_reserve(ids, k, err)) return -1;
    memcpy(ids->v + ids->n, c->w, k * sizeof *ids->v);
    ids->n += k;
    if (n > 256 || k > CACHE_MAX_COUNT) return 0; // long ones are rare: not worth keeping
    if (c->cache.n >= CACHE_MAX_ENTRIES || c->ncids + k > CACHE_MAX_IDS) {
        tok_bmap_clear(&c->cache);
        c->ncids = 0;
    }
    if (c->ncids + k > c->capcids) {
        size_t nc = c->capcids ? c->capcids * 2 : 65536;
        while (nc < c->ncids + k) nc *= 2;
        uint32_t *nv = stg_realloc(c->cids, nc * sizeof *nv, err);
        if (!nv) return -1;
        c->cids = nv;
        c->capcids = nc;
    }
    int added;
    int64_t *slot = tok_bmap_upsert(&c->cache, p, n, h, &added, err);
    if (!slot) return -1;
    memcpy(c->cids + c->ncids, c->w, k * sizeof *c->cids);
    *slot = (int64_t)((uint64_t)c->ncids << 20 | k);
    c->ncids += k;
    return 0;
}

// Encodes s[0..n), a whole text: special tokens found, the rest pre-tokenised and merged.
static int encode_text(const rt_tok *t, enc_ctx *c, const uint8_t *s, size_t n, rt_tok_ids *ids, stg_err *err) {
    size_t pos = 0;
    while (pos < n) {
        int which;
        size_t e = tok_find_special(t, s, n, pos, &which);
        while (pos < e) {
            size_t q = rt_tok_pretok_next(s, e, pos);
            if (encode_pretoken(t, c, s + pos, q - pos, ids, err)) return -1;
            pos = q;
        }
        if (which >= 0) {
            if (rt_tok_ids_push(ids, t->special_ids[which], err)) return -1;
            pos = e + tok_len(t, t->special_ids[which]);
        }
    }
    return 0;
}

int rt_tok_encode(const rt_tok *t, const uint8_t *s, size_t n, rt_tok_ids *ids, stg_err *err) {
    enc_ctx c;
    if (ctx_init(&c, err)) return -1;
    int rc = encode_text(t, &c, s, n, ids, err);
    ctx_free(&c);
    return rc;
}

// ---- parallel encoding -------------------------------------------------------------------------------

typedef struct {
    tok_job h; // first: tok_run_jobs reads it
    const rt_tok *t;
    enc_ctx ctx;
    const uint8_t *s;
    size_t n;
    rt_tok_ids ids;
} enc_job;

static void *enc_worker(void *arg) {
    enc_job *j = arg;
    j->ids.n = 0;
    j->h.rc = encode_text(j->t, &j->ctx, j->s, j->n, &j->ids, &j->h.err);
    return NULL;
}

// Cuts s[0..n) into up to nj pieces at safe cuts and encodes them on nj threads (jobs[0] on this
// one). jobs[i].ids receive the pieces' ids in order.
static int encode_pieces(const rt_tok *t, enc_job *jobs, int nj, const uint8_t *s, size_t n, int *used, stg_err *err) {
    size_t cuts[258];
    int np = tok_cuts(s, n, nj, t->sp_ptr, t->sp_len, t->n_special, cuts);
    for (int i = 0; i < np; i++) {
        jobs[i].s = s + cuts[i];
        jobs[i].n = cuts[i + 1] - cuts[i];
    }
    *used = np;
    return tok_run_jobs(jobs, sizeof *jobs, np, enc_worker, err);
}

static enc_job *jobs_new(const rt_tok *t, int *nj, stg_err *err) {
    if (*nj <= 0) *nj = tok_cores();
    if (*nj > 256) *nj = 256;
    enc_job *jobs = stg_calloc((size_t)*nj, sizeof *jobs, err);
    if (!jobs) return NULL;
    for (int i = 0; i < *nj; i++) {
        jobs[i].t = t;
        if (ctx_init(&jobs[i].ctx, err)) {
            for (int k = 0; k < i; k++) ctx_free(&jobs[k].ctx);
            free(jobs);
            return NULL;
        }
    }
    return jobs;
}

static void jobs_free(enc_job *jobs, int nj) {
    if (!jobs) return;
    for (int i = 0; i < nj; i++) {
        ctx_free(&jobs[i].ctx);
        rt_tok_ids_free(&jobs[i].ids);
    }
    free(jobs);
}

int rt_tok_encode_parallel(const rt_tok *t, const uint8_t *s, size_t n, int threads, rt_tok_ids *ids, stg_err *err) {
    int nj = threads;
    enc_job *jobs = jobs_new(t, &nj, err);
    if (!jobs) return -1;
    int used = 0;
    int rc = encode_pieces(t, jobs, nj, s, n, &used, err);
    for (int i = 0; i < used && rc == 0; i++) {
        if (jobs[i].ids.n == 0) continue;
        if (ids_reserve(ids, jobs[i].ids.n, err)) rc = -1;
        else {
            memcpy(ids->v + ids->n, jobs[i].ids.v, jobs[i].ids.n * sizeof *ids->v);
            ids->n += jobs[i].ids.n;
        }
    }
    jobs_free(jobs, nj);
    return rc;
}

// ---- decoding ------------------------------------------------------------------------------------

int rt_tok_decode(const rt_tok *t, const uint32_t *ids, size_t n, uint8_t **out, size_t *len, size_t *cap, stg_err *err) {
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n) return stg_errf(err, "id %u at position %zu is outside the vocabulary of %u tokens", id, i, t->n);
        size_t l = tok_len(t, id);
        if (*len + l > *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            while (nc < *len + l) nc *= 2;
            uint8_t *nb = stg_realloc(*out, nc, err);
            if (!nb) return -1;
            *out = nb;
            *cap = nc;
        }
        memcpy(*out + *len, tok_bytes(t, id), l);
        *len += l;
    }
    return 0;
}

size_t rt_tok_utf8_sanitize(const uint8_t *s, size_t n, int final, uint8_t *out, size_t *held) {
    size_t o = 0, i = 0;
    *held = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_decode(s, n, i, &cp);
        if (cp != TOK_INVALID_CP) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
            continue;
        }
        // The maximal subpart: the lead byte and the continuation bytes that still fit a
        // well-formed sequence (the second byte's range depends on the lead, table 3-7).
        uint8_t c = s[i];
        size_t need = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
        size_t k = 1;
        while (k <= need && i + k < n) {
            uint8_t x = s[i + k], lo = 0x80, hi = 0xBF;
            if (k == 1) {
                if (c == 0xE0) lo = 0xA0;
                else if (c == 0xED) hi = 0x9F;
                else if (c == 0xF0) lo = 0x90;
                else if (c == 0xF4) hi = 0x8F;
            }
            if (x < lo || x > hi) break;
            k++;
        }
        if (!final && need && i + k == n) { // a sequence cut short by the end of this piece
            *held = k;
            return o;
        }
        out[o++] = 0xEF, out[o++] = 0xBF, out[o++] = 0xBD; // U+FFFD
        i += k;
    }
    return o;
}

// ---- encoding files -----------------------------------------------------------------------------------

typedef struct {
    stg_afile *f;
    int wide;          // 4-byte ids
    int npy;           // keep the ids in memory for the .npy header
    rt_tok_ids all;    // .npy: every id
    uint8_t *buf;
    size_t cap;
    int64_t count;
} writer;

static int writer_put(writer *w, const uint32_t *v, size_t n, stg_err *err) {
    if (n == 0) return 0;
    w->count += (int64_t)n;
    if (w->npy) {
        if (ids_reserve(&w->all, n, err)) return -1;
        memcpy(w->all.v + w->all.n, v, n * sizeof *v);
        w->all.n += n;
        return 0;
    }
    size_t es = w->wide ? 4 : 2;
    size_t bytes = n * es;
    if (bytes > w->cap) {
        uint8_t *nb = stg_realloc(w->buf, bytes, err);
        if (!nb) return -1;
        w->buf = nb;
        w->cap = bytes;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t x = v[i];
        uint8_t *q = w->buf + i * es;
        q[0] = (uint8_t)x;
        q[1] = (uint8_t)(x >> 8);
        if (es == 4) {
            q[2] = (uint8_t)(x >> 16);
            q[3] = (uint8_t)(x >> 24);
        }
    }
    return bytes ? stg_afile_write(w->f, w->buf, bytes, err) : 0;
}

static int writer_finish(writer *w, stg_err *err) {
    if (!w->npy) return 0;
    rt_dtype dt = w->wide ? RT_DT_I32 : RT_DT_U16;
    int64_t shape[1] = {(int64_t)w->all.n};
    char *h = NULL;
    size_t hl = 0;
    if (rt_npy_header(dt, 1, shape, 0, &h, &hl, err)) return -1;
    int rc = stg_afile_write(w->f, h, hl, err);
    free(h);
    w->npy = 0;
    w->count = 0;
    if (rc == 0) rc = writer_put(w, w->all.v, w->all.n, err);
    return rc;
}

// One block of a streamed text: its pieces encoded in parallel and written in order.
typedef struct {
    const rt_tok *t;
    enc_job *jobs;
    int nj;
    writer *w;
    const rt_tok_encode_opts *o;
    const uint64_t *done; // bytes read so far, for o->progress
    uint64_t total;
} enc_stream;

static int enc_piece(void *ctx, const uint8_t *s, size_t n, stg_err *err) {
    enc_stream *e = ctx;
    int used = 0;
    if (encode_pieces(e->t, e->jobs, e->nj, s, n, &used, err)) return -1;
    for (int i = 0; i < used; i++)
        if (writer_put(e->w, e->jobs[i].ids.v, e->jobs[i].ids.n, err)) return -1;
    if (e->o->progress) e->o->progress(e->o->progress_ctx, *e->done, e->total);
    return 0;
}

int64_t rt_tok_encode_files(const rt_tok *t, const char *const *paths, int n_paths, const char *out_path,
                            const rt_tok_encode_opts *o, stg_err *err) {
    int64_t sep = -1;
    if (o->doc_sep) {
        sep = rt_tok_special_id(t, o->doc_sep);
        if (sep < 0) return stg_errf(err, "--doc-sep '%s' is not a special token of this tokenizer", o->doc_sep);
    }
    if (o->format == RT_TOK_OUT_NPY && t->n > (uint32_t)INT32_MAX)
        return stg_errf(err, "a vocabulary of %u tokens does not fit in a .npy of int32", t->n);
    if (n_paths > 256) return stg_errf(err, "at most 256 input files at once (%d given)", n_paths);
    const char *what[256] = {0};
    for (int i = 0; i < n_paths; i++) what[i] = "input";
    if (stg_check_output(out_path, "output", paths, what, n_paths, err)) return -1;
    uint64_t total = 0;
    for (int i = 0; i < n_paths; i++) {
        struct stat st;
        if (paths[i] && strcmp(paths[i], "-") && stat(paths[i], &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
    }
    writer w;
    memset(&w, 0, sizeof w);
    w.wide = t->n > 65536;
    w.npy = o->format == RT_TOK_OUT_NPY;
    int nj = o->threads;
    enc_job *jobs = jobs_new(t, &nj, err);
    if (!jobs) return -1;
    size_t cap = o->chunk_bytes ? o->chunk_bytes : (size_t)16 << 20;
    if (cap < 4096) cap = 4096;
    uint8_t *buf = stg_malloc(cap, err);
    int rc = buf ? stg_afile_open(out_path, &w.f, err) : -1;
    if (rc == 0 && w.wide && !w.npy) {
        uint8_t h[RT_TOK_U32_HEADER] = {0};
        memcpy(h, RT_TOK_U32_MAGIC, 8);
        h[8] = 1; // version 1, little-endian
        rc = stg_afile_write(w.f, h, sizeof h, err);
    }
    uint64_t done = 0;
    size_t margin = 8 + t->sp_max;
    // Each file is one document; within one, blocks are encoded up to their last safe cut (see
    // rt_tok_train_files for the margin) and the rest carried over.
    for (int fi = 0; fi < n_paths && rc == 0; fi++) {
        int is_stdin = !paths[fi] || strcmp(paths[fi], "-") == 0;
        const char *name = is_stdin ? "standard input" : paths[fi];
        FILE *in = is_stdin ? stdin : fopen(paths[fi], "rb");
        if (!in) {
            rc = stg_errf(err, "%s: cannot open: %s", name, strerror(errno));
            break;
        }
        if (fi > 0 && sep >= 0) {
            uint32_t s = (uint32_t)sep;
            if (writer_put(&w, &s, 1, err)) {
                rc = -1;
                if (!is_stdin) fclose(in);
                break;
            }
        }
        enc_stream es = {t, jobs, nj, &w, o, &done, total};
        rc = tok_stream_text(in, name, &buf, &cap, margin, t->sp_ptr, t->sp_len, t->n_special, enc_piece, &es, &done, err);
        if (!is_stdin && fclose(in) != 0 && rc == 0) rc = stg_errf(err, "%s: close failed: %s", name, strerror(errno));
    }
    free(buf);
    jobs_free(jobs, nj);
    if (rc == 0) rc = writer_finish(&w, err);
    int64_t count = w.count;
    free(w.buf);
    rt_tok_ids_free(&w.all);
    if (rc == 0) rc = stg_afile_commit(w.f, err);
    else stg_afile_abort(w.f);
    return rc ? -1 : count;
}
