// Fused causal attention, forward and backward. The layout is the one the model's projections
// produce: q, k, v, o (B, S, H, Dh), so element (b, s, h, d) is at ((b S + s) H + h) Dh + d.
// The backward recomputes the probabilities from q, k and the saved lse: O(S^2 Dh) per head.
#include <math.h>
#include <stdlib.h>

#include "ops/cpu/kernels.h"
#include "ops/cpu/real.h"

static double dot_dh(const real *a, const real *b, int64_t Dh) {
    double acc = 0.0;
    for (int64_t d = 0; d < Dh; d++) acc += (double)a[d] * (double)b[d];
    return acc;
}

// q, k, v (B, S, H, Dh) -> o (B, S, H, Dh), lse (B, H, S)
// s_ij = scale q_i k_j (j <= i); lse_i = log sum_j exp s_ij; o_i = sum_j exp(s_ij - lse_i) v_j
int RFN(cpu_attention_fwd)(const real *q, const real *k, const real *v, real *o, real *lse,
                           int64_t B, int64_t S, int64_t H, int64_t Dh, double scale,
                           stg_err *err) {
    if (scale == 0.0) scale = 1.0 / sqrt((double)Dh);
    int nthr = cpu_max_threads();
    int64_t per = S + Dh; // per thread: scores (S), output accumulator (Dh)
    double *scratch = stg_malloc((size_t)nthr * (size_t)per * sizeof(double), err);
    if (!scratch) return stg_err_prefix(err, "attention");
    int64_t rs = H * Dh; // stride between positions

    CPU_PARALLEL_FOR(B * H * S * S * Dh)
    for (int64_t r = 0; r < B * H * S; r++) {
        int64_t b = r / (H * S), h = (r / S) % H, i = r % S;
        double *sc = scratch + (size_t)cpu_thread_id() * (size_t)per; // (S)
        double *acc = sc + S;                                         // (Dh)
        const real *qi = q + (b * S + i) * rs + h * Dh;
        const real *kb = k + b * S * rs + h * Dh; // k_j = kb + j rs
        const real *vb = v + b * S * rs + h * Dh;
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; j++) {
            sc[j] = scale * dot_dh(qi, kb + j * rs, Dh);
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            sc[j] = exp(sc[j] - mx);
            sum += sc[j];
        }
        double inv = 1.0 / sum;
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            double p = sc[j] * inv;
            const real *vj = vb + j * rs;
            for (int64_t d = 0; d < Dh; d++) acc[d] += p * (double)vj[d];
        }
        real *oi = o + (b * S + i) * rs + h * Dh;
        for (int64_t d = 0; d < Dh; d++) oi[d] = (real)acc[d];
        lse[r] = (real)(mx + log(sum)); // r = (b H + h) S + i
    }
    free(scratch);
    return 0;
}

// q, k, v, o, dout (B, S, H, Dh), lse (B, H, S) -> dq, dk, dv (B, S, H, Dh)
// p_ij = exp(s_ij - lse_i); D_i = dout_i . o_i; ds_ij = p_ij (dout_i . v_j - D_i);
// dq_i = scale sum_{j<=i} ds_ij k_j; dk_j = scale sum_{i>=j} ds_ij q_i; dv_j = sum_{i>=j} p_ij dout_i
int RFN(cpu_attention_bwd)(const real *q, const real *k, const real *v, const real *o,
                           const real *lse, const real *dout, real *dq, real *dk, real *dv,
                           int64_t B, int64_t S, int64_t H, int64_t Dh, double scale,
                           stg_err *err) {
    if (scale == 0.0) scale = 1.0 / sqrt((double)Dh);
    int nthr = cpu_max_threads();
    int64_t nrows = B * H * S;
    // Dsum (B, H, S), then per thread two accumulators (Dh each)
    double *scratch = stg_malloc(((size_t)nrows + (size_t)nthr * 2 * (size_t)Dh) * sizeof(double), err);
    if (!scratch) return stg_err_prefix(err, "attention backward");
    double *Dsum = scratch;
    double *accs = scratch + nrows;
    int64_t rs = H * Dh;

    CPU_PARALLEL_FOR(nrows * Dh)
    for (int64_t r = 0; r < nrows; r++) {
        int64_t b = r / (H * S), h = (r / S) % H, i = r % S;
        int64_t off = (b * S + i) * rs + h * Dh;
        Dsum[r] = dot_dh(dout + off, o + off, Dh);
    }

    // dq: one query row per iteration
    CPU_PARALLEL_FOR(nrows * S * Dh)
    for (int64_t r = 0; r < nrows; r++) {
        int64_t b = r / (H * S), h = (r / S) % H, i = r % S;
        double *acc = accs + (size_t)cpu_thread_id() * 2 * (size_t)Dh; // (Dh)
        int64_t off = (b * S + i) * rs + h * Dh;
        const real *qi = q + off, *doi = dout + off;
        const real *kb = k + b * S * rs + h * Dh, *vb = v + b * S * rs + h * Dh;
        double l = (double)lse[r];
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            const real *kj = kb + j * rs;
            double p = exp(scale * dot_dh(qi, kj, Dh) - l);
            double ds = p * (dot_dh(doi, vb + j * rs, Dh) - Dsum[r]);
            for (int64_t d = 0; d < Dh; d++) acc[d] += ds * (double)kj[d];
        }
        real *dqi = dq + off;
        for (int64_t d = 0; d < Dh; d++) dqi[d] = (real)(scale * acc[d]);
    }

    // dk, dv: one key row per iteration
    CPU_PARALLEL_FOR(nrows * S * Dh)
    for (int64_t r = 0; r < nrows; r++) {
        int64_t b = r / (H * S), h = (r / S) % H, j = r % S;
        double *ak = accs + (size_t)cpu_thread_id() * 2 * (size_t)Dh; // (Dh)
        double *av = ak + Dh;                                          // (Dh)
        int64_t off = (b * S + j) * rs + h * Dh;
        const real *kj = k + off, *vj = v + off;
        const real *qb = q + b * S * rs + h * Dh, *dob = dout + b * S * rs + h * Dh;
        int64_t lrow = (b * H + h) * S; // lse and Dsum row of query 0 of this head
        for (int64_t d = 0; d < Dh; d++) ak[d] = av[d] = 0.0;
        for (int64_t i = j; i < S; i++) {
            const real *qi = qb + i * rs, *doi = dob + i * rs;
            double p = exp(scale * dot_dh(qi, kj, Dh) - (double)lse[lrow + i]);
            double ds = p * (dot_dh(doi, vj, Dh) - Dsum[lrow + i]);
            for (int64_t d = 0; d < Dh; d++) {
                ak[d] += ds * (double)qi[d];
                av[d] += p * (double)doi[d];
            }
        }
        real *dkj = dk + off, *dvj = dv + off;
        for (int64_t d = 0; d < Dh; d++) {
            dkj[d] = (real)(scale * ak[d]);
            dvj[d] = (real)av[d];
        }
    }
    free(scratch);
    return 0;
}
