// BPE training: pre-tokens counted in parallel over a streamed corpus, then the merge loop with
// incremental pair counts (only the words that hold the merged pair are touched) and a lazy max-heap.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/tokenizer/tokenizer_internal.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- counting pre-tokens ------------------------------------------------------------------------

typedef struct {
    const char *const *sp; // special tokens
    const size_t *sl;
    int k;
    size_t max_sl;
} specials;

// Counts the pre-tokens of s[0..n) (a whole text: specials split it, and are not counted) into m.
static int count_text(tok_bmap *m, const uint8_t *s, size_t n, const specials *sp, uint64_t *npre, stg_err *err) {
    size_t pos = 0;
    while (pos < n) {
        int which;
        size_t e = tok_find_string(sp->sp, sp->sl, sp->k, s, n, pos, &which);
        while (pos < e) {
            size_t q = rt_tok_pretok_next(s, e, pos);
            int added;
            int64_t *v = tok_bmap_upsert(m, s + pos, q - pos, tok_hash_bytes(s + pos, q - pos), &added, err);
            if (!v) return -1;
            (*v)++;
            (*npre)++;
            pos = q;
        }
        if (which >= 0) pos = e + sp->sl[which];
    }
    return 0;
}

typedef struct {
    tok_job h; // first: tok_run_jobs reads it
    tok_bmap map;
    const uint8_t *s;
    size_t n;
    const specials *sp;
    uint64_t pretokens;
} counter;

static void *count_worker(void *arg) {
    counter *c = arg;
    c->h.rc = count_text(&c->map, c->s, c->n, c->sp, &c->pretokens, &c->h.err);
    return NULL;
}

// Counts s[0..n) (a whole text, or a prefix ending at a safe cut) split into up to nc pieces at
// safe cuts, one thread each.
static int count_parallel(counter *cs, int nc, const uint8_t *s, size_t n, stg_err *err) {
    size_t cuts[257];
    int np = tok_cuts(s, n, nc, cs[0].sp->sp, cs[0].sp->sl, cs[0].sp->k, cuts);
    for (int i = 0; i < np; i++) {
        cs[i].s = s + cuts[i];
        cs[i].n = cuts[i + 1] - cuts[i];
        cs[i].h.rc = 0;
    }
    return tok_run_jobs(cs, sizeof *cs, np, count_worker, err);
}

typedef struct {
    counter *cs;
    int nc;
} count_stream;

static int count_piece(void *ctx, const uint8_t *s, size_t n, stg_err *err) {
    count_stream *c = ctx;
    return count_parallel(c->cs, c->nc, s, n, err);
}

// ---- the merge loop -------------------------------------------------------------------------------

typedef struct {
    int64_t count;
    uint32_t *w; // words that hold (or held) the pair; may repeat a word, may be stale
    uint32_t nw, capw;
    uint32_t touched; // the merge step that last raised the count
} pinfo;

typedef struct {
    uint64_t *keys; // tok_pair_key; 0 empty
    pinfo *v;
    size_t cap, n;
} ptable;

typedef struct {
    int64_t count;
    uint32_t a, b;
} hentry;

typedef struct {
    // vocabulary
    uint8_t *pool;
    size_t pool_len, pool_cap;
    uint64_t *off; // (vocab + 1)
    uint32_t n_tok;
    uint32_t (*merges)[3];
    uint32_t n_merges;
    // words
    uint32_t *seq;
    uint64_t *wstart;
    uint32_t *wlen;
    int64_t *wcount;
    uint32_t *stamp;
    size_t nw;
    // pairs
    ptable pt;
    hentry *heap;
    size_t nh, caph;
    uint64_t *touched;
    size_t ntouched, captouched;
    uint32_t step;
} trainer;

static int pt_init(ptable *t, size_t cap, stg_err *err) {
    size_t c = 1024;
    while (c < cap * 2) c <<= 1;
    t->keys = stg_calloc(c, sizeof *t->keys, err);
    t->v = stg_calloc(c, sizeof *t->v, err);
    t->cap = c;
    t->n = 0;
    return t->keys && t->v ? 0 : -1;
}

static void pt_free(ptable *t) {
    if (t->v)
        for (size_t i = 0; i < t->cap; i++) free(t->v[i].w);
    free(t->keys);
    free(t->v);
}

static pinfo *pt_find(const ptable *t, uint64_t k) {
    size_t mask = t->cap - 1, i = (size_t)tok_mix(k) & mask;
    for (;;) {
        if (t->keys[i] == k) return &t->v[i];
        if (t->keys[i] == 0) return NULL;
        i = (i + 1) & mask;
    }
}

static pinfo *pt_upsert(ptable *t, uint64_t k, stg_err *err) {
    size_t mask = t->cap - 1, i = (size_t)tok_mix(k) & mask;
    for (;;) {
        if (t->keys[i] == k) return &t->v[i];
        if (t->keys[i] == 0) break;
        i = (i + 1) & mask;
    }
    if ((t->n + 1) * 2 > t->cap) {
        ptable nt;
        size_t nc = t->cap * 2;
        nt.keys = stg_calloc(nc, sizeof *nt.keys, err);
        nt.v = stg_malloc(nc * sizeof *nt.v, err);
        if (!nt.keys || !nt.v) {
            free(nt.keys);
            free(nt.v);
            return NULL;
        }
        for (size_t j = 0; j < t->cap; j++) {
            if (!t->keys[j]) continue;
            size_t q = (size_t)tok_mix(t->keys[j]) & (nc - 1);
            while (nt.keys[q]) q = (q + 1) & (nc - 1);
            nt.keys[q] = t->keys[j];
            nt.v[q] = t->v[j];
        }
        free(t->keys);
        free(t->v);
        t->keys = nt.keys;
        t->v = nt.v;
        t->cap = nc;
        mask = nc - 1;
        i = (size_t)tok_mix(k) & mask;
        while (t->keys[i]) i = (i + 1) & mask;
    }
    t->keys[i] = k;
    memset(&t->v[i], 0, sizeof t->v[i]);
    t->n++;
    return &t->v[i];
}

static int lexcmp(const trainer *tr, uint32_t x, uint32_t y) {
    const uint8_t *p = tr->pool + tr->off[x], *q = tr->pool + tr->off[y];
    size_t lp = (size_t)(tr->off[x + 1] - tr->off[x]), lq = (size_t)(tr->off[y + 1] - tr->off[y]);
    int c = memcmp(p, q, lp < lq ? lp : lq);
    if (c) return c;
    return lp < lq ? -1 : lp > lq;
}

// The heap's order: higher count first; on a tie, the lexicographically greater pair of byte
// strings (compare the left tokens' bytes, then the right tokens'), as CS336's max() over
// (count, (bytes_a, bytes_b)) does.
static int above(const trainer *tr, const hentry *x, const hentry *y) {
    if (x->count != y->count) return x->count > y->count;
    int c = lexcmp(tr, x->a, y->a);
    if (c) return c > 0;
    return lexcmp(tr, x->b, y->b) > 0;
}

static int heap_push(trainer *tr, hentry e, stg_err *err) {
    if (tr->nh == tr->caph) {
        size_t nc = tr->caph ? tr->caph * 2 : 4096;
        hentry *nh = stg_realloc(tr->heap, nc * sizeof *nh, err);
        if (!nh) return -1;
        tr->heap = nh;
        tr->caph = nc;
    }
    size_t i = tr->nh++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!above(tr, &e, &tr->heap[p])) break;
        tr->heap[i] = tr->heap[p];
        i = p;
    }
    tr->heap[i] = e;
    return 0;
}

static hentry heap_pop(trainer *tr) {
    hentry top = tr->heap[0], last = tr->heap[--tr->nh];
    size_t i = 0, n = tr->nh;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(tr, &tr->heap[c + 1], &tr->heap[c])) c++;
        if (!above(tr, &tr->heap[c], &last)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n) tr->heap[i] = last;
    return top;
}

// Adds delta to pair (x, y)'s count; a raise also records word w and marks the pair for the heap.
static int pair_add(trainer *tr, uint32_t x, uint32_t y, int64_t delta, uint32_t w, stg_err *err) {
    uint64_t k = tok_pair_key(x, y);
    pinfo *p = pt_upsert(&tr->pt, k, err);
    if (!p) return -1;
    p->count += delta;
    if (delta > 0) {
        if (p->nw == 0 || p->w[p->nw - 1] != w) {
            if (p->nw == p->capw) {
                uint32_t nc = p->capw ? p->capw * 2 : 4;
                uint32_t *nwv = stg_realloc(p->w, (size_t)nc * sizeof *nwv, err);
                if (!nwv) return -1;
                p->w = nwv;
                p->capw = nc;
            }
            p->w[p->nw++] = w;
        }
        if (p->touched != tr->step) {
            p->touched = tr->step;
            if (tr->ntouched == tr->captouched) {
                size_t nc = tr->captouched ? tr->captouched * 2 : 1024;
                uint64_t *nt = stg_realloc(tr->touched, nc * sizeof *nt, err);
                if (!nt) return -1;
                tr->touched = nt;
                tr->captouched = nc;
            }
            tr->touched[tr->ntouched++] = k;
        }
    }
    return 0;
}

static int add_token(trainer *tr, const uint8_t *a, size_t la, const uint8_t *b, size_t lb, stg_err *err) {
    if (tr->pool_len + la + lb > tr->pool_cap) {
        size_t nc = tr->pool_cap ? tr->pool_cap * 2 : 4096;
        while (nc < tr->pool_len + la + lb) nc *= 2;
        uint8_t *np = stg_realloc(tr->pool, nc, err);
        if (!np) return -1;
        tr->pool = np;
        tr->pool_cap = nc;
    }
    // a and b may point into the pool: memmove-safe order (the pool may have moved: callers pass
    // offsets through tok_at after growth)
    memcpy(tr->pool + tr->pool_len, a, la);
    if (lb) memcpy(tr->pool + tr->pool_len + la, b, lb);
    tr->pool_len += la + lb;
    tr->off[++tr->n_tok] = tr->pool_len;
    return 0;
}

static void trainer_free(trainer *tr) {
    free(tr->pool);
    free(tr->off);
    free(tr->merges);
    free(tr->seq);
    free(tr->wstart);
    free(tr->wlen);
    free(tr->wcount);
    free(tr->stamp);
    pt_free(&tr->pt);
    free(tr->heap);
    free(tr->touched);
}

// Applies merge (a, b) -> c to word w, updating the pair counts of its neighbours as it goes.
// In place: the output index never passes the input index. The left neighbour is taken from the
// merged output, so consecutive occurrences (a b a b -> c c) net out right: the (c, a) raised by
// the first occurrence is lowered again by the second.
static int merge_word(trainer *tr, uint32_t w, uint32_t a, uint32_t b, uint32_t c, stg_err *err) {
    uint32_t *s = tr->seq + tr->wstart[w];
    uint32_t n = tr->wlen[w], o = 0, i = 0;
    int64_t f = tr->wcount[w];
    while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (o > 0 && (pair_add(tr, s[o - 1], a, -f, w, err) || pair_add(tr, s[o - 1], c, f, w, err))) return -1;
            if (pair_add(tr, a, b, -f, w, err)) return -1;
            if (i + 2 < n && (pair_add(tr, b, s[i + 2], -f, w, err) || pair_add(tr, c, s[i + 2], f, w, err))) return -1;
            s[o++] = c;
            i += 2;
        } else {
            s[o++] = s[i++];
        }
    }
    tr->wlen[w] = o;
    return 0;
}

// Runs the merges on the counted pre-tokens; fills the vocabulary and the merge list.
static int train_merges(trainer *tr, const tok_bmap *words, uint64_t vocab, const specials *sp, stg_err *err) {
    // Words: every distinct pre-token of two bytes or more (one byte has no pair).
    size_t nw = 0, total = 0;
    for (size_t i = 0; i < words->cap; i++)
        if (words->slots[i].used && words->slots[i].len >= 2) nw++, total += words->slots[i].len;
    if (nw > UINT32_MAX - 1) return stg_errf(err, "more than 2^32 distinct pre-tokens");
    tr->nw = nw;
    tr->seq = stg_malloc((total ? total : 1) * sizeof *tr->seq, err);
    tr->wstart = stg_malloc((nw ? nw : 1) * sizeof *tr->wstart, err);
    tr->wlen = stg_malloc((nw ? nw : 1) * sizeof *tr->wlen, err);
    tr->wcount = stg_malloc((nw ? nw : 1) * sizeof *tr->wcount, err);
    tr->stamp = stg_calloc(nw ? nw : 1, sizeof *tr->stamp, err);
    if (!tr->seq || !tr->wstart || !tr->wlen || !tr->wcount || !tr->stamp) return -1;
    size_t w = 0, at = 0;
    for (size_t i = 0; i < words->cap; i++) {
        const tok_bslot *s = &words->slots[i];
        if (!s->used || s->len < 2) continue;
        tr->wstart[w] = at;
        tr->wlen[w] = s->len;
        tr->wcount[w] = s->val;
        for (uint32_t j = 0; j < s->len; j++) tr->seq[at + j] = words->arena[s->off + j]; // byte b is id b
        at += s->len;
        w++;
    }
    // Vocabulary: the 256 bytes, then the specials, then the merges.
    // Never more tokens than the bytes, the specials and one merge per adjacent pair in the words.
    uint64_t n_max = 256 + (uint64_t)sp->k + total;
    if (n_max > vocab) n_max = vocab;
    tr->off = stg_malloc((size_t)(n_max + 1) * sizeof *tr->off, err);
    if (!tr->off) return -1;
    tr->off[0] = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (add_token(tr, &c, 1, NULL, 0, err)) return -1;
    }
    for (int j = 0; j < sp->k; j++)
        if (add_token(tr, (const uint8_t *)sp->sp[j], sp->sl[j], NULL, 0, err)) return -1;
    uint64_t want = n_max - tr->n_tok;
    tr->merges = stg_malloc((size_t)(want ? want : 1) * sizeof *tr->merges, err);
    if (!tr->merges) return -1;

    if (pt_init(&tr->pt, total / 4 + 1024, err)) return -1;
    tr->step = 1;
    for (size_t i = 0; i < nw; i++) {
        const uint32_t *s = tr->seq + tr->wstart[i];
        for (uint32_t j = 0; j + 1 < tr->wlen[i]; j++)
            if (pair_add(tr, s[j], s[j + 1], tr->wcount[i], (uint32_t)i, err)) return -1;
    }
    for (size_t i = 0; i < tr->ntouched; i++) {
        const pinfo *p = pt_find(&tr->pt, tr->touched[i]);
        uint64_t k = tr->touched[i] - 1;
        if (heap_push(tr, (hentry){p->count, (uint32_t)(k >> 32), (uint32_t)k}, err)) return -1;
    }
    tr->ntouched = 0;

    while (tr->n_tok < n_max) {
        // The best pair: entries are upper bounds of their pair's count (raised counts are pushed
        // again, lowered ones are not), so a popped entry that disagrees is pushed back corrected.
        hentry e;
        pinfo *p = NULL;
        int found = 0;
        while (tr->nh) {
            e = heap_pop(tr);
            p = pt_find(&tr->pt, tok_pair_key(e.a, e.b));
            int64_t cur = p ? p->count : 0;
            if (cur <= 0) continue;
            if (cur == e.count) {
                found = 1;
                break;
            }
            if (cur < e.count && heap_push(tr, (hentry){cur, e.a, e.b}, err)) return -1;
        }
        if (!found) break; // no pair left: a smaller vocabulary
        uint32_t a = e.a, b = e.b, c = tr->n_tok;
        size_t la = (size_t)(tr->off[a + 1] - tr->off[a]), lb = (size_t)(tr->off[b + 1] - tr->off[b]);
        // Copy a's and b's bytes out first: growing the pool may move them.
        uint8_t small[256];
        uint8_t *tmp = la + lb <= sizeof small ? small : stg_malloc(la + lb, err);
        if (!tmp) return -1;
        memcpy(tmp, tr->pool + tr->off[a], la);
        memcpy(tmp + la, tr->pool + tr->off[b], lb);
        int r = add_token(tr, tmp, la + lb, NULL, 0, err);
        if (tmp != small) free(tmp);
        if (r) return -1;
        tr->merges[tr->n_merges][0] = a;
        tr->merges[tr->n_merges][1] = b;
        tr->merges[tr->n_merges][2] = c;
        tr->n_merges++;
        // Detach the pair's word list: (a, b) cannot appear again (new adjacencies all involve c).
        uint32_t *list = p->w, nlist = p->nw;
        p->w = NULL;
        p->nw = p->capw = 0;
        tr->step++;
        for (uint32_t i = 0; i < nlist; i++) {
            uint32_t wi = list[i];
            if (tr->stamp[wi] == tr->step) continue;
            tr->stamp[wi] = tr->step;
            if (merge_word(tr, wi, a, b, c, err)) {
                free(list);
                return -1;
            }
        }
        free(list);
        pinfo *pm = pt_find(&tr->pt, tok_pair_key(a, b));
        if (pm) pm->count = 0;
        for (size_t i = 0; i < tr->ntouched; i++) {
            const pinfo *q = pt_find(&tr->pt, tr->touched[i]);
            uint64_t k = tr->touched[i] - 1;
            if (q->count > 0 && heap_push(tr, (hentry){q->count, (uint32_t)(k >> 32), (uint32_t)k}, err)) return -1;
        }
        tr->ntouched = 0;
    }
    return 0;
}

// ---- putting it together ------------------------------------------------------------------------

typedef struct {
    counter *cs;
    int nc;
    specials sp;
    size_t lens[1024];
} train_state;

static int state_init(train_state *st, const rt_tok_train_opts *o, stg_err *err) {
    memset(st, 0, sizeof *st);
    if (o->n_specials < 0 || o->n_specials > 1024) return stg_errf(err, "%d special tokens: at most 1024", o->n_specials);
    uint64_t min_vocab = 256 + (uint64_t)o->n_specials;
    if (o->vocab < min_vocab || o->vocab > (UINT64_C(1) << 32))
        return stg_errf(err, "vocabulary size %llu is out of range: at least 256 bytes + %d special tokens = %llu, at most 2^32",
                        (unsigned long long)o->vocab, o->n_specials, (unsigned long long)min_vocab);
    for (int j = 0; j < o->n_specials; j++) {
        st->lens[j] = strlen(o->specials[j]);
        if (st->lens[j] == 0) return stg_errf(err, "special token %d is empty", j + 1);
        for (int i = 0; i < j; i++)
            if (strcmp(o->specials[i], o->specials[j]) == 0) return stg_errf(err, "special token '%s' is given twice", o->specials[j]);
        if (st->lens[j] > st->sp.max_sl) st->sp.max_sl = st->lens[j];
    }
    st->sp.sp = o->specials;
    st->sp.sl = st->lens;
    st->sp.k = o->n_specials;
    st->nc = o->threads > 0 ? o->threads : tok_cores();
    if (st->nc > 256) st->nc = 256;
    st->cs = stg_calloc((size_t)st->nc, sizeof *st->cs, err);
    if (!st->cs) return -1;
    for (int i = 0; i < st->nc; i++) {
        st->cs[i].sp = &st->sp;
        if (tok_bmap_init(&st->cs[i].map, 1 << 16, err)) return -1;
    }
    return 0;
}

static void state_free(train_state *st) {
    if (!st->cs) return;
    for (int i = 0; i < st->nc; i++) tok_bmap_free(&st->cs[i].map);
    free(st->cs);
}

// Merges every counter's map into the first; frees the others' memory as it goes.
static int state_reduce(train_state *st, rt_tok_train_stats *stats, stg_err *err) {
    tok_bmap *m0 = &st->cs[0].map;
    stats->pretokens = st->cs[0].pretokens;
    for (int i = 1; i < st->nc; i++) {
        tok_bmap *m = &st->cs[i].map;
        for (size_t j = 0; j < m->cap; j++) {
            const tok_bslot *s = &m->slots[j];
            if (!s->used) continue;
            int added;
            int64_t *v = tok_bmap_upsert(m0, m->arena + s->off, s->len, s->hash, &added, err);
            if (!v) return -1;
            *v += s->val;
        }
        stats->pretokens += st->cs[i].pretokens;
        tok_bmap_free(m);
        if (tok_bmap_init(m, 1024, err)) return -1;
    }
    stats->unique = m0->n;
    return 0;
}

static int state_finish(train_state *st, const rt_tok_train_opts *o, rt_tok **out, rt_tok_train_stats *stats,
                        double t0, stg_err *err) {
    if (state_reduce(st, stats, err)) return -1;
    if (stats->pretokens == 0)
        return stg_errf(err, "the corpus is empty: no text to learn from (%llu bytes, all of them special tokens or none)",
                        (unsigned long long)stats->bytes);
    double t1 = now_s();
    stats->count_s = t1 - t0;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    int rc = train_merges(&tr, &st->cs[0].map, o->vocab, &st->sp, err);
    stats->merge_s = now_s() - t1;
    if (rc == 0) {
        // Hand the vocabulary to rt_tok_build, which checks it.
        uint32_t n = tr.n_tok;
        const uint8_t **toks = stg_malloc((size_t)n * sizeof *toks, err);
        size_t *lens = stg_malloc((size_t)n * sizeof *lens, err);
        uint8_t *spec = stg_calloc(n, 1, err);
        if (!toks || !lens || !spec) rc = -1;
        else {
            for (uint32_t i = 0; i < n; i++) {
                toks[i] = tr.pool + tr.off[i];
                lens[i] = (size_t)(tr.off[i + 1] - tr.off[i]);
            }
            for (int j = 0; j < st->sp.k; j++) spec[256 + j] = 1;
            rc = rt_tok_build(n, toks, lens, spec, tr.n_merges, (const uint32_t(*)[3])tr.merges, out, err);
        }
        free(toks);
        free(lens);
        free(spec);
    }
    trainer_free(&tr);
    return rc;
}

int rt_tok_train_buffer(const uint8_t *s, size_t n, const rt_tok_train_opts *o, rt_tok **out, rt_tok_train_stats *stats,
                        stg_err *err) {
    rt_tok_train_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    *out = NULL;
    double t0 = now_s();
    train_state st;
    int rc = state_init(&st, o, err);
    if (rc == 0) {
        stats->bytes = n;
        rc = count_parallel(st.cs, st.nc, s, n, err);
    }
    if (rc == 0) rc = state_finish(&st, o, out, stats, t0, err);
    state_free(&st);
    return rc;
}

int rt_tok_train_files(const char *const *paths, int n_paths, const rt_tok_train_opts *o, rt_tok **out,
                       rt_tok_train_stats *stats, stg_err *err) {
    rt_tok_train_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    *out = NULL;
    if (n_paths < 1) return stg_errf(err, "no corpus file given");
    double t0 = now_s();
    train_state st;
    if (state_init(&st, o, err)) {
        state_free(&st);
        return -1;
    }
    size_t cap = o->chunk_bytes ? o->chunk_bytes : (size_t)64 << 20;
    if (cap < 4096) cap = 4096;
    uint8_t *buf = stg_malloc(cap, err);
    int rc = buf ? 0 : -1;
    // Each file is one text: pre-tokens never span two files. Within a file, a block is counted up
    // to its last safe cut at least `margin` bytes before its end (so that the scanner's lookahead
    // of two characters and any special token starting there are inside the block); the rest is
    // carried into the next block.
    size_t margin = 8 + st.sp.max_sl;
    for (int f = 0; f < n_paths && rc == 0; f++) {
        FILE *in = fopen(paths[f], "rb");
        if (!in) {
            rc = stg_errf(err, "%s: cannot open: %s", paths[f], strerror(errno));
            break;
        }
        count_stream cst = {st.cs, st.nc};
        rc = tok_stream_text(in, paths[f], &buf, &cap, margin, st.sp.sp, st.sp.sl, st.sp.k, count_piece, &cst,
                             &stats->bytes, err);
        if (fclose(in) != 0 && rc == 0) rc = stg_errf(err, "%s: close failed: %s", paths[f], strerror(errno));
    }
    free(buf);
    if (rc == 0) rc = state_finish(&st, o, out, stats, t0, err);
    state_free(&st);
    return rc;
}
