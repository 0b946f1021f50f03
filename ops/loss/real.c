// Mean cross-entropy over the rows whose target is not -1 (ignored: packed documents' targets that
// cross a boundary under --doc-loss-mask), with the log-sum-exp saved for the backward. Every row
// ignored: loss 0 and a zero gradient.
#include <math.h>

#include "ops/loss/kernels.h"
#include "ops/cpu/real.h"

// Targets are in [0, V) or -1; *kept gets the count of the others.
static int check_targets(const int32_t *tgt, int64_t rows, int64_t V, int64_t *kept, stg_err *err) {
    *kept = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (tgt[r] == -1) continue;
        if (tgt[r] < 0 || (int64_t)tgt[r] >= V)
            return stg_errf(err, "cross_entropy: target %d at position %lld is outside [0, %lld) (and not -1, ignored)",
                            (int)tgt[r], (long long)r, (long long)V);
        (*kept)++;
    }
    return 0;
}

// log sum_j exp(x[j]) of one row, in double (the row's max taken out first).
static double row_lse(const real *x, int64_t V) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < V; j++)
        if ((double)x[j] > mx) mx = (double)x[j];
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += exp((double)x[j] - mx);
    return mx + log(sum);
}

// logits (rows, V), tgt (rows) -> loss (1) = mean over kept rows (lse - logit[tgt]), lse (rows)
int RFN(cpu_cross_entropy_fwd)(const real *logits, const int32_t *tgt, real *loss, real *lse,
                               int64_t rows, int64_t V, stg_err *err) {
    int64_t kept;
    if (check_targets(tgt, rows, V, &kept, err)) return -1;
    double part[CPU_CHUNKS]; // loss sums of fixed row chunks, added in order below
    CPU_PARALLEL_FOR(rows * V)
    for (int c = 0; c < CPU_CHUNKS; c++) {
        double acc = 0.0;
        for (int64_t r = rows * c / CPU_CHUNKS; r < rows * (c + 1) / CPU_CHUNKS; r++) {
            const real *x = logits + r * V;
            double l = row_lse(x, V);
            lse[r] = (real)l;
            if (tgt[r] >= 0) acc += l - (double)x[tgt[r]];
        }
        part[c] = acc;
    }
    double total = 0.0;
    for (int c = 0; c < CPU_CHUNKS; c++) total += part[c];
    loss[0] = kept ? (real)(total / (double)kept) : (real)0;
    return 0;
}

// logits (rows, V), tgt (rows), lse (rows) -> dlogits (rows, V) = (softmax - onehot(tgt)) / kept rows,
// 0 on ignored rows. dlogits may alias logits.
int RFN(cpu_cross_entropy_bwd)(const real *logits, const int32_t *tgt, const real *lse,
                               real *dlogits, int64_t rows, int64_t V, stg_err *err) {
    int64_t kept;
    if (check_targets(tgt, rows, V, &kept, err)) return -1;
    double inv_rows = kept ? 1.0 / (double)kept : 0.0;
    CPU_PARALLEL_FOR(rows * V)
    for (int64_t r = 0; r < rows; r++) {
        const real *x = logits + r * V;
        real *d = dlogits + r * V;
        double l = (double)lse[r];
        int64_t t = tgt[r];
        double w = t >= 0 ? inv_rows : 0.0;
        for (int64_t j = 0; j < V; j++) {
            double p = exp((double)x[j] - l);
            d[j] = (real)((p - (j == t ? 1.0 : 0.0)) * w);
        }
    }
    return 0;
}

// ---- linear_cross_entropy: the LM head and the loss, chunk by chunk -----------------------------
// The arithmetic of linear + cross_entropy: each logit a dot product in double rounded to `real`,
// the softmax in double from the rounded logits and lse, the products in double per output row.
// Only the order of the additions differs (and dw is rounded once per chunk).

size_t RFN(cpu_lce_scratch)(int64_t d, int64_t chunk) {
    if (d <= 0 || chunk <= 0) return 0;
    return (cpu_pad((size_t)chunk) + (size_t)cpu_max_threads() * cpu_pad((size_t)d)) * sizeof(double);
}

// *kept: the rows whose target is not -1 (ignored, as cross_entropy's).
static int lce_check(const char *k, const int32_t *tgt, int64_t rows, int64_t d, int64_t V, int64_t chunk,
                     void *scratch, size_t scratch_bytes, int64_t *kept, stg_err *err) {
    if (rows < 0 || d <= 0 || V <= 0 || (rows > 0 && chunk <= 0))
        return stg_errf(err, "%s: bad sizes (rows %lld, d %lld, vocab %lld, chunk %lld)", k, (long long)rows, (long long)d,
                        (long long)V, (long long)chunk);
    if (check_targets(tgt, rows, V, kept, err)) return -1;
    return cpu_scratch_check(k, scratch, scratch_bytes, RFN(cpu_lce_scratch)(d, chunk), cpu_max_threads(), err);
}

// out (c, V) = x[r0 .. r0 + c) (c, d) · wᵀ (d, V)
static void lce_logits(const real *x, const real *w, real *out, int64_t r0, int64_t c, int64_t d, int64_t V) {
    CPU_PARALLEL_FOR(c * V * d)
    for (int64_t e = 0; e < c * V; e++) {
        const real *xr = x + (r0 + e / V) * d, *wr = w + (e % V) * d;
        double s = 0.0;
        CPU_SIMD_SUM(s)
        for (int64_t k = 0; k < d; k++) s += (double)xr[k] * (double)wr[k];
        out[e] = (real)s;
    }
}

int RFN(cpu_lce_fwd)(const real *x, const real *w, const int32_t *tgt, real *loss, real *lse, real *logits, int64_t rows,
                     int64_t d, int64_t V, int64_t chunk, void *scratch, size_t scratch_bytes, stg_err *err) {
    int64_t kept;
    if (lce_check("linear_cross_entropy", tgt, rows, d, V, chunk, scratch, scratch_bytes, &kept, err)) return -1;
    double *term = scratch; // (chunk) the chunk's loss terms, added in row order below
    double total = 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t c = rows - r0 < chunk ? rows - r0 : chunk;
        lce_logits(x, w, logits, r0, c, d, V);
        CPU_PARALLEL_FOR(c * V)
        for (int64_t i = 0; i < c; i++) {
            const real *l = logits + i * V;
            double ls = row_lse(l, V);
            lse[r0 + i] = (real)ls;
            term[i] = tgt[r0 + i] == -1 ? 0.0 : ls - (double)l[tgt[r0 + i]];
        }
        for (int64_t i = 0; i < c; i++) total += term[i];
    }
    loss[0] = (real)(kept > 0 ? total / (double)kept : 0.0);
    return 0;
}

int RFN(cpu_lce_bwd)(const real *x, const real *w, const int32_t *tgt, const real *lse, real *dx, real *dw, real *dl,
                     int64_t rows, int64_t d, int64_t V, int64_t chunk, double scale, void *scratch, size_t scratch_bytes,
                     stg_err *err) {
    int64_t kept;
    if (lce_check("linear_cross_entropy_bwd", tgt, rows, d, V, chunk, scratch, scratch_bytes, &kept, err)) return -1;
    double *acc0 = (double *)scratch + cpu_pad((size_t)chunk); // per thread a row of d doubles
    size_t row = cpu_pad((size_t)d);
    double inv_rows = kept > 0 ? scale / (double)kept : 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t c = rows - r0 < chunk ? rows - r0 : chunk;
        lce_logits(x, w, dl, r0, c, d, V);
        // dlogits = (exp(logit - lse) - onehot) / kept rows, in place; 0 on an ignored row
        CPU_PARALLEL_FOR(c * V)
        for (int64_t i = 0; i < c; i++) {
            real *l = dl + i * V;
            double ls = (double)lse[r0 + i];
            int64_t t = tgt[r0 + i];
            double f = t == -1 ? 0.0 : inv_rows;
            for (int64_t j = 0; j < V; j++) l[j] = (real)((exp((double)l[j] - ls) - (j == t ? 1.0 : 0.0)) * f);
        }
        // dx (c, d) = dlogits (c, V) · w (V, d) (none for the _dw form)
        CPU_PARALLEL_FOR(c * V * d)
        for (int64_t i = 0; i < (dx ? c : 0); i++) {
            double *acc = acc0 + (size_t)cpu_thread_id() * row;
            for (int64_t k = 0; k < d; k++) acc[k] = 0.0;
            for (int64_t v = 0; v < V; v++) {
                double a = (double)dl[i * V + v];
                const real *wr = w + v * d;
                CPU_SIMD
                for (int64_t k = 0; k < d; k++) acc[k] += a * (double)wr[k];
            }
            real *o = dx + (r0 + i) * d;
            for (int64_t k = 0; k < d; k++) o[k] = (real)acc[k];
        }
        // dw (V, d) (+)= dlogitsᵀ (V, c) · x (c, d): the first chunk writes, the others add (none for
        // the _dx form)
        CPU_PARALLEL_FOR(c * V * d)
        for (int64_t v = 0; v < (dw ? V : 0); v++) {
            double *acc = acc0 + (size_t)cpu_thread_id() * row;
            for (int64_t k = 0; k < d; k++) acc[k] = 0.0;
            for (int64_t i = 0; i < c; i++) {
                double a = (double)dl[i * V + v];
                const real *xr = x + (r0 + i) * d;
                CPU_SIMD
                for (int64_t k = 0; k < d; k++) acc[k] += a * (double)xr[k];
            }
            real *o = dw + v * d;
            if (r0 == 0)
                for (int64_t k = 0; k < d; k++) o[k] = (real)acc[k];
            else
                for (int64_t k = 0; k < d; k++) o[k] = (real)((double)o[k] + acc[k]);
        }
    }
    return 0;
}
