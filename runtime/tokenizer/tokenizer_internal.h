// Internals shared by the tokenizer's sources (runtime/tokenizer/*.c): the rt_tok layout, UTF-8
// decoding and character classes, hashing, and the two hash tables (pairs of ids; byte strings).
#ifndef STG_RUNTIME_TOKENIZER_INTERNAL_H
#define STG_RUNTIME_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/tokenizer/tokenizer.h"

// ---- Unicode ---------------------------------------------------------------------------------------

extern const char tok_unicode_version[];
extern const uint32_t tok_letter_ranges[][2];
extern const size_t tok_letter_nranges;
extern const uint32_t tok_number_ranges[][2];
extern const size_t tok_number_nranges;

enum { TOK_C_OTHER = 0, TOK_C_LETTER = 1, TOK_C_NUMBER = 2, TOK_C_SPACE = 3 };

#define TOK_INVALID_CP 0xFFFFFFFFu

// Decodes the character at s[i] (i < n): returns its length in bytes and its code point in *cp,
// or 1 and TOK_INVALID_CP when s[i] does not start a well-formed sequence within s[0..n).
static inline size_t tok_utf8_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t left = n - i;
    if (c >= 0xC2 && c <= 0xDF) {
        if (left >= 2 && (s[i + 1] & 0xC0) == 0x80) {
            *cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F);
            return 2;
        }
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (left >= 3 && (s[i + 2] & 0xC0) == 0x80) {
            uint8_t c1 = s[i + 1];
            // E0: A0..BF (no overlongs); ED: 80..9F (no surrogates); others 80..BF.
            uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
            if (c1 >= lo && c1 <= hi) {
                *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(c1 & 0x3F) << 6 | (s[i + 2] & 0x3F);
                return 3;
            }
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (left >= 4 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
            uint8_t c1 = s[i + 1];
            // F0: 90..BF (no overlongs); F4: 80..8F (nothing past U+10FFFF).
            uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
            if (c1 >= lo && c1 <= hi) {
                *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(c1 & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 |
                      (s[i + 3] & 0x3F);
                return 4;
            }
        }
    }
    *cp = TOK_INVALID_CP;
    return 1;
}

// The class of a code point (TOK_C_*); TOK_INVALID_CP is TOK_C_OTHER.
int tok_class(uint32_t cp);

// ---- hashing ----------------------------------------------------------------------------------------

static inline uint64_t tok_mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

// A hash of a byte string: 8 bytes at a time (unaligned loads through memcpy), length mixed in.
static inline uint64_t tok_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n * 0x100000001b3ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
    }
    return tok_mix(h);
}

// ---- a map from byte strings to int64 values ----------------------------------------------------------
//
// Open addressing, linear probing, power-of-two capacity; keys are copied into an arena.

typedef struct tok_bslot {
    uint64_t hash;
    uint64_t off;   // key offset in the arena
    uint32_t len;   // key length
    uint32_t used;
    int64_t val;
} tok_bslot;

typedef struct tok_bmap {
    tok_bslot *slots;
    size_t cap, n;
    uint8_t *arena;
    size_t arena_len, arena_cap;
} tok_bmap;

int tok_bmap_init(tok_bmap *m, size_t cap, stg_err *err);
void tok_bmap_free(tok_bmap *m);
void tok_bmap_clear(tok_bmap *m);
// The value slot of key p[0..n) with hash h, added with value 0 when absent (*added set). NULL on
// allocation failure (err set). The pointer is valid until the next add.
int64_t *tok_bmap_upsert(tok_bmap *m, const uint8_t *p, size_t n, uint64_t h, int *added, stg_err *err);
// The value slot of the key, or NULL when absent.
int64_t *tok_bmap_find(const tok_bmap *m, const uint8_t *p, size_t n, uint64_t h);

// ---- a map from id pairs to uint64 values (the merge table) -------------------------------------------

typedef struct tok_pmap {
    uint64_t *keys; // (left << 32 | right) + 1; 0 = empty
    uint64_t *vals;
    size_t cap;     // power of two
} tok_pmap;

static inline uint64_t tok_pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32 | b) + 1; }

static inline const uint64_t *tok_pmap_find(const tok_pmap *m, uint32_t a, uint32_t b) {
    uint64_t k = tok_pair_key(a, b);
    size_t mask = m->cap - 1, i = (size_t)tok_mix(k) & mask;
    for (;;) {
        uint64_t x = m->keys[i];
        if (x == k) return &m->vals[i];
        if (x == 0) return NULL;
        i = (i + 1) & mask;
    }
}

// ---- the tokenizer --------------------------------------------------------------------------------

struct rt_tok {
    uint32_t n;          // vocabulary size (ids 0 .. n-1)
    uint8_t *pool;       // every token's bytes
    uint64_t *off;       // (n + 1) offsets into pool
    uint8_t *special;    // (n) nonzero for special tokens
    uint32_t byte_id[256];
    uint32_t n_merges;
    uint32_t (*merges)[3]; // (left, right, result) by rank
    tok_pmap pairs;        // (left, right) -> rank << 32 | result
    int n_special;
    uint32_t *special_ids; // by decreasing length (longest match first), then id
    uint8_t special_first[256]; // bytes that start a special token
    const char **sp_ptr;        // the specials' bytes and lengths (same order), for rt_tok_safe_cut
    size_t *sp_len;
    size_t sp_max;              // the longest special's length
};

static inline size_t tok_len(const rt_tok *t, uint32_t id) { return (size_t)(t->off[id + 1] - t->off[id]); }
static inline const uint8_t *tok_bytes(const rt_tok *t, uint32_t id) { return t->pool + t->off[id]; }

// The first special token occurrence at or after `from` in s[0..n) (leftmost, then longest):
// returns its position (n when none) and its index in t->special_ids through *which.
size_t tok_find_special(const rt_tok *t, const uint8_t *s, size_t n, size_t from, int *which);
// Same over a plain list of strings (training, cutting).
size_t tok_find_string(const char *const *ss, const size_t *lens, int k, const uint8_t *s, size_t n, size_t from, int *which);

// The number of online cores (at least 1).
int tok_cores(void);

// Cuts s[0..n) into up to `parts` pieces (at most 256) at safe cuts (rt_tok_safe_cut, searching up
// to 1 MiB past each even share): cuts[0] = 0 < cuts[1] < ... < cuts[np] = n. Returns np.
int tok_cuts(const uint8_t *s, size_t n, int parts, const char *const *sp, const size_t *sl, int k, size_t *cuts);

// A job run by tok_run_jobs: its struct begins with this header; the worker sets rc and err.
typedef struct {
    int rc;
    stg_err err;
} tok_job;

// Runs work(job i) for the n jobs (each `stride` bytes, from `jobs`): job 0 on this thread, the others
// on their own threads (on this one where a thread cannot start). Returns -1 with the first failed
// job's error, else 0.
int tok_run_jobs(void *jobs, size_t stride, int n, void *(*work)(void *), stg_err *err);

// Reads the text `in` (named `name` in messages) in blocks through *buf (*cap bytes; doubled when a
// block holds no safe cut) and hands each block, up to its last safe cut at least `margin` bytes
// before its end (the whole rest at the end of the text), to piece(ctx, bytes, n); the bytes after
// the cut are carried into the next block. *bytes_read grows by what is read. Returns -1 with the
// first error (reading, memory, or piece's), else 0. Does not close `in`.
int tok_stream_text(FILE *in, const char *name, uint8_t **buf, size_t *cap, size_t margin, const char *const *sp,
                    const size_t *sl, int k, int (*piece)(void *ctx, const uint8_t *s, size_t n, stg_err *err), void *ctx,
                    uint64_t *bytes_read, stg_err *err);

// Peak resident memory of this process in bytes (getrusage), 0 when unknown.
uint64_t tok_peak_rss(void);

#endif
