#include "runtime/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fsutil.h"
#include "runtime/npy.h"

// ---- token files ----------------------------------------------------------------------------

struct rt_tokens {
    char *path;
    stg_mmap map;
    const unsigned char *p; // first token byte
    int64_t n;              // token count
    int width;              // 2: uint16, 4: int32, TOK_U32: uint32 (all little-endian)
};

#define TOK_U32 5 // a width code: 4 bytes, unsigned

static int64_t tok_get(const unsigned char *p, int width, int64_t i) {
    const unsigned char *q = p + (size_t)i * (width == 2 ? 2u : 4u);
    if (width == 2) return (int64_t)((uint32_t)q[0] | (uint32_t)q[1] << 8);
    uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    return width == TOK_U32 ? (int64_t)u : (int64_t)(int32_t)u;
}

// The uint32 layout written by stg tokenize for vocabularies over 65536 (runtime/tokenizer/
// tokenizer.h): "STGTOKU4", uint32 version 1, uint32 0, then the ids. Recognised only by that
// exact 16-byte header and a size of 16 + 4k; every other .bin is raw uint16, as before.
static int is_u32_bin(const unsigned char *p, size_t size) {
    static const unsigned char head[16] = {'S', 'T', 'G', 'T', 'O', 'K', 'U', '4', 1, 0, 0, 0, 0, 0, 0, 0};
    return size >= 16 && (size - 16) % 4 == 0 && memcmp(p, head, 16) == 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void rt_tokens_free(rt_tokens *t) {
    if (!t) return;
    stg_mmap_close(&t->map);
    free(t->path);
    free(t);
}

int rt_tokens_open(const char *path, int64_t vocab, rt_tokens **out, stg_err *err) {
    *out = NULL;
    if (vocab < 1 || vocab > INT32_MAX) return stg_errf(err, "%s: vocab %lld out of range [1, %d]", path, (long long)vocab, INT32_MAX);
    rt_tokens *t = stg_calloc(1, sizeof *t, err);
    if (!t) return -1;
    t->path = stg_strdup(path, err);
    if (!t->path) {
        free(t);
        return -1;
    }
    if (rt_require_regular(path, "token file", err) || stg_mmap_open(path, &t->map, err) != 0) {
        rt_tokens_free(t);
        return -1;
    }
    if (ends_with(path, ".npy")) {
        rt_npy_info info;
        if (rt_npy_parse(t->map.data, t->map.size, &info, err) != 0) {
            stg_err_prefix(err, "%s", path);
            rt_tokens_free(t);
            return -1;
        }
        if (info.dtype != RT_DT_U16 && info.dtype != RT_DT_I32) {
            stg_errf(err, "%s: token .npy has dtype %s; expected uint16 (<u2) or int32 (<i4)", path,
                     rt_dtype_npy_descr(info.dtype));
            rt_tokens_free(t);
            return -1;
        }
        if (info.ndim != 1) {
            stg_errf(err, "%s: token .npy must be 1-D, it has %d dimensions", path, info.ndim);
            rt_tokens_free(t);
            return -1;
        }
        t->p = info.data;
        t->n = info.numel;
        t->width = (int)rt_dtype_size(info.dtype);
    } else if (is_u32_bin(t->map.data, t->map.size)) {
        t->p = (const unsigned char *)t->map.data + 16;
        t->n = (int64_t)((t->map.size - 16) / 4);
        t->width = TOK_U32;
    } else {
        if (t->map.size % 2 != 0) {
            stg_errf(err, "%s: %zu bytes is not a whole number of uint16 tokens (odd size)", path, t->map.size);
            rt_tokens_free(t);
            return -1;
        }
        t->p = t->map.data;
        t->n = (int64_t)(t->map.size / 2);
        t->width = 2;
    }
    if (t->n == 0) {
        stg_errf(err, "%s: token file is empty", path);
        rt_tokens_free(t);
        return -1;
    }
    for (int64_t i = 0; i < t->n; i++) {
        int64_t v = tok_get(t->p, t->width, i);
        if (v < 0 || v >= vocab) {
            stg_errf(err, "%s: token at index %lld has value %lld, outside the vocabulary [0, %lld)", path,
                     (long long)i, (long long)v, (long long)vocab);
            rt_tokens_free(t);
            return -1;
        }
    }
    *out = t;
    return 0;
}

int64_t rt_tokens_count(const rt_tokens *t) { return t->n; }

int64_t rt_tokens_at(const rt_tokens *t, int64_t i) {
    if (i < 0 || i >= t->n) return -1;
    return tok_get(t->p, t->width, i);
}

static int check_batch_args(int64_t batch, int64_t ctx, const void *tokens, const void *targets, stg_err *err) {
    if (batch < 1 || ctx < 1) return stg_errf(err, "batch (%lld) and ctx (%lld) must be >= 1", (long long)batch, (long long)ctx);
    if (ctx >= INT64_MAX / batch) return stg_errf(err, "batch %lld x ctx %lld overflows", (long long)batch, (long long)ctx);
    if (!tokens || !targets) return stg_errf(err, "tokens and targets buffers must not be NULL");
    return 0;
}

int rt_tokens_batch(const rt_tokens *src, rt_rng *rng, int64_t batch, int64_t ctx, int32_t *tokens,
                    int32_t *targets, stg_err *err) {
    if (check_batch_args(batch, ctx, tokens, targets, err) != 0) return -1;
    if (src->n < ctx + 1)
        return stg_errf(err, "data file %s has %lld tokens; a batch row needs ctx+1 = %lld", src->path,
                        (long long)src->n, (long long)(ctx + 1));
    uint64_t starts = (uint64_t)(src->n - ctx); // s in [0, n - ctx - 1]
    for (int64_t b = 0; b < batch; b++) {
        int64_t s = (int64_t)rt_rng_below(rng, starts);
        int32_t *tk = tokens + b * ctx, *tg = targets + b * ctx;
        int32_t prev = (int32_t)tok_get(src->p, src->width, s);
        for (int64_t t = 0; t < ctx; t++) {
            int32_t next = (int32_t)tok_get(src->p, src->width, s + t + 1);
            tk[t] = prev;
            tg[t] = next;
            prev = next;
        }
    }
    return 0;
}

// ---- Markov chain ---------------------------------------------------------------------------

struct rt_markov {
    int64_t vocab;
    int k;
    rt_markov_probs probs;
    int32_t *succ;  // (vocab, k) successor symbols
    double *cum;    // (vocab, k) cumulative successor probabilities (RT_MARKOV_SEEDED)
    double *pi;     // (vocab) stationary distribution
    double *pi_cum; // (vocab) cumulative pi, for drawing row starts
    double entropy; // nats per token
};

void rt_markov_free(rt_markov *m) {
    if (!m) return;
    free(m->succ);
    free(m->cum);
    free(m->pi);
    free(m->pi_cum);
    free(m);
}

static double succ_prob(const rt_markov *m, int64_t s, int j) {
    if (m->probs == RT_MARKOV_UNIFORM) return 1.0 / m->k;
    const double *c = m->cum + s * m->k;
    return j == 0 ? c[0] : c[j] - c[j - 1];
}

rt_markov *rt_markov_new(int64_t vocab, int k, uint64_t seed, rt_markov_probs probs, stg_err *err) {
    if (vocab < 1 || vocab > INT32_MAX) {
        stg_errf(err, "markov: vocab %lld out of range [1, %d]", (long long)vocab, INT32_MAX);
        return NULL;
    }
    if (k < 1 || k > 256 || k > vocab) { // the option's name: users meet this through stg train
        stg_errf(err, "the synthetic Markov source: k = %d successors per symbol (--markov-k %d) must be in [1, min(vocab = %lld, 256)]%s",
                 k, k, (long long)vocab, k > vocab ? ": lower --markov-k or raise vocab" : "");
        return NULL;
    }
    if (probs != RT_MARKOV_UNIFORM && probs != RT_MARKOV_SEEDED) {
        stg_errf(err, "markov: unknown successor distribution %d", (int)probs);
        return NULL;
    }
    if ((uint64_t)vocab > SIZE_MAX / sizeof(double) / (size_t)k) {
        stg_errf(err, "markov: vocab %lld x k %d too large", (long long)vocab, k);
        return NULL;
    }
    rt_markov *m = stg_calloc(1, sizeof *m, err);
    if (!m) return NULL;
    m->vocab = vocab;
    m->k = k;
    m->probs = probs;
    size_t V = (size_t)vocab, K = (size_t)k;
    m->succ = stg_malloc(V * K * sizeof *m->succ, err);
    m->pi = stg_malloc(V * sizeof *m->pi, err);
    m->pi_cum = stg_malloc(V * sizeof *m->pi_cum, err);
    m->cum = probs == RT_MARKOV_SEEDED ? stg_malloc(V * K * sizeof *m->cum, err) : NULL;
    int32_t *perm = stg_malloc(V * sizeof *perm, err);
    double *next = stg_malloc(V * sizeof *next, err);
    if (!m->succ || !m->pi || !m->pi_cum || (probs == RT_MARKOV_SEEDED && !m->cum) || !perm || !next) {
        free(perm);
        free(next);
        rt_markov_free(m);
        return NULL;
    }
    rt_rng r;
    rt_rng_seed(&r, seed);
    // A random cycle through all symbols: irreducible.
    for (size_t i = 0; i < V; i++) perm[i] = (int32_t)i;
    for (size_t i = V - 1; i > 0; i--) {
        size_t j = (size_t)rt_rng_below(&r, (uint64_t)i + 1);
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (size_t i = 0; i < V; i++) {
        int32_t s = perm[i];
        int32_t *row = m->succ + (size_t)s * K;
        int n = 0;
        row[n++] = perm[(i + 1) % V];
        if (i == 0 && K >= 2) row[n++] = s; // a self-loop: aperiodic (V >= 2 here, so s != row[0])
        while (n < k) {
            int32_t c = (int32_t)rt_rng_below(&r, (uint64_t)V);
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= row[j] == c;
            if (!dup) row[n++] = c;
        }
        if (probs == RT_MARKOV_SEEDED) {
            double *c = m->cum + (size_t)s * K, sum = 0.0;
            for (size_t j = 0; j < K; j++) {
                double w = 0.05 - log(1.0 - rt_rng_uniform(&r)); // 0.05 + Exp(1)
                sum += w;
                c[j] = sum;
            }
            for (size_t j = 0; j < K; j++) c[j] /= sum;
            c[K - 1] = 1.0;
        }
    }
    free(perm);
    // Stationary distribution by power iteration from uniform.
    for (size_t s = 0; s < V; s++) m->pi[s] = 1.0 / (double)V;
    // The tolerance grows with vocab: the rounding error of the sums does too.
    const double tol = 1e-13 + 1e-15 * (double)V;
    for (int it = 0; it < 20000; it++) {
        memset(next, 0, V * sizeof *next);
        for (size_t s = 0; s < V; s++)
            for (int j = 0; j < k; j++) next[m->succ[s * K + (size_t)j]] += m->pi[s] * succ_prob(m, (int64_t)s, j);
        double diff = 0.0, total = 0.0;
        for (size_t s = 0; s < V; s++) {
            diff += fabs(next[s] - m->pi[s]);
            total += next[s];
        }
        for (size_t s = 0; s < V; s++) m->pi[s] = next[s] / total;
        if (diff < tol) break;
    }
    free(next);
    double acc = 0.0, h = 0.0;
    for (size_t s = 0; s < V; s++) {
        acc += m->pi[s];
        m->pi_cum[s] = acc;
        double hs = 0.0;
        for (int j = 0; j < k; j++) {
            double p = succ_prob(m, (int64_t)s, j);
            if (p > 0) hs -= p * log(p);
        }
        h += m->pi[s] * hs;
    }
    m->pi_cum[V - 1] = 1.0;
    m->entropy = probs == RT_MARKOV_UNIFORM ? log((double)k) : h;
    return m;
}

double rt_markov_entropy(const rt_markov *m) { return m->entropy; }
int64_t rt_markov_vocab(const rt_markov *m) { return m->vocab; }
const double *rt_markov_stationary(const rt_markov *m) { return m->pi; }

static int32_t markov_start(const rt_markov *m, rt_rng *rng) {
    double u = rt_rng_uniform(rng);
    size_t lo = 0, hi = (size_t)m->vocab - 1; // first s with pi_cum[s] > u
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->pi_cum[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return (int32_t)lo;
}

static int32_t markov_step(const rt_markov *m, rt_rng *rng, int32_t s) {
    const int32_t *row = m->succ + (size_t)s * (size_t)m->k;
    if (m->probs == RT_MARKOV_UNIFORM) return row[rt_rng_below(rng, (uint64_t)m->k)];
    const double *c = m->cum + (size_t)s * (size_t)m->k;
    double u = rt_rng_uniform(rng);
    int j = 0;
    while (j < m->k - 1 && u >= c[j]) j++;
    return row[j];
}

int rt_markov_batch(const rt_markov *m, rt_rng *rng, int64_t batch, int64_t ctx, int32_t *tokens,
                    int32_t *targets, stg_err *err) {
    if (check_batch_args(batch, ctx, tokens, targets, err) != 0) return stg_err_prefix(err, "markov batch");
    for (int64_t b = 0; b < batch; b++) {
        int32_t s = markov_start(m, rng);
        int32_t *tk = tokens + b * ctx, *tg = targets + b * ctx;
        for (int64_t t = 0; t < ctx; t++) {
            int32_t nx = markov_step(m, rng, s);
            tk[t] = s;
            tg[t] = nx;
            s = nx;
        }
    }
    return 0;
}

// ---- byte-level tokenization ----------------------------------------------------------------

int64_t rt_tokens_from_text(const char *in_path, const char *out_path, stg_err *err) {
    FILE *in = fopen(in_path, "rb");
    if (!in) {
        stg_errf(err, "%s: cannot open: %s", in_path, strerror(errno));
        return -1;
    }
    stg_afile *f;
    if (stg_afile_open(out_path, &f, err) != 0) {
        fclose(in);
        return -1;
    }
    unsigned char buf[65536];
    unsigned char tok[2 * sizeof buf];
    int64_t count = 0;
    for (;;) {
        size_t n = fread(buf, 1, sizeof buf, in);
        for (size_t i = 0; i < n; i++) {
            tok[2 * i] = buf[i];
            tok[2 * i + 1] = 0;
        }
        if (n && stg_afile_write(f, tok, 2 * n, err) != 0) {
            fclose(in);
            stg_afile_abort(f);
            return -1;
        }
        count += (int64_t)n;
        if (n < sizeof buf) break;
    }
    if (ferror(in)) {
        stg_errf(err, "%s: read failed: %s", in_path, strerror(errno));
        fclose(in);
        stg_afile_abort(f);
        return -1;
    }
    if (fclose(in) != 0) {
        stg_errf(err, "%s: close failed: %s", in_path, strerror(errno));
        stg_afile_abort(f);
        return -1;
    }
    if (stg_afile_commit(f, err) != 0) return -1;
    return count;
}

// ---- toy classifier -------------------------------------------------------------------------

struct rt_toy {
    int64_t in, classes;
    double *w; // (classes, in)
};

rt_toy *rt_toy_new(int64_t in, int64_t classes, uint64_t seed, stg_err *err) {
    if (in < 1 || classes < 2 || in > (1 << 24) || classes > (1 << 24) ||
        (uint64_t)in * (uint64_t)classes > (uint64_t)1 << 28) {
        stg_errf(err, "toy data: in = %lld must be >= 1 and classes = %lld >= 2 (in x classes <= 2^28)",
                 (long long)in, (long long)classes);
        return NULL;
    }
    rt_toy *toy = stg_calloc(1, sizeof *toy, err);
    if (!toy) return NULL;
    toy->in = in;
    toy->classes = classes;
    toy->w = stg_malloc((size_t)(in * classes) * sizeof *toy->w, err);
    if (!toy->w) {
        free(toy);
        return NULL;
    }
    rt_rng r;
    rt_rng_seed(&r, seed);
    for (int64_t i = 0; i < in * classes; i++) toy->w[i] = rt_rng_normal(&r);
    return toy;
}

void rt_toy_free(rt_toy *toy) {
    if (!toy) return;
    free(toy->w);
    free(toy);
}

int rt_toy_batch(const rt_toy *toy, rt_rng *rng, int64_t batch, float *x, int32_t *targets, stg_err *err) {
    if (batch < 1) return stg_errf(err, "toy batch: batch %lld must be >= 1", (long long)batch);
    if (!x || !targets) return stg_errf(err, "toy batch: x and targets buffers must not be NULL");
    for (int64_t b = 0; b < batch; b++) {
        float *xb = x + b * toy->in;
        for (int64_t i = 0; i < toy->in; i++) xb[i] = (float)rt_rng_normal(rng);
        int32_t best = 0;
        double best_v = -INFINITY;
        for (int64_t c = 0; c < toy->classes; c++) {
            const double *wc = toy->w + c * toy->in;
            double v = 0.0;
            for (int64_t i = 0; i < toy->in; i++) v += wc[i] * (double)xb[i];
            if (v > best_v) {
                best_v = v;
                best = (int32_t)c;
            }
        }
        targets[b] = best;
    }
    return 0;
}
