// Fused causal attention, forward and backward. The layout is the one the model's projections
// produce: q, o (B, S, H, Dh) and k, v (B, S, Hkv, Dh), so element (b, s, h, d) of q is at
// ((b S + s) H + h) Dh + d. Grouped-query attention: H = G Hkv, query head h reads kv head h / G.
// Packed documents: docs (B, S) gives each position's document start; query i sees keys
// docs[b][i] .. i (without docs: 0 .. i).
// The backward recomputes the probabilities from q, k and the saved lse: O(S^2 Dh) per head.
// Dot products over Dh are vectorized sums in double.
#include <inttypes.h>
#include <math.h>

#include "ops/attention/kernels.h"
#include "ops/cpu/real.h"

static double dot_dh(const real *a, const real *b, int64_t Dh) {
    double acc = 0.0;
    CPU_SIMD_SUM(acc)
    for (int64_t d = 0; d < Dh; d++) acc += (double)a[d] * (double)b[d];
    return acc;
}

// Per-thread scratch rows (doubles, padded): forward scores (S) and an output accumulator (Dh);
// backward dk and dv accumulators (S, Dh) each and a dq row (Dh).
static size_t fwd_per(int64_t S, int64_t Dh) { return cpu_pad((size_t)(S + Dh)); }
static size_t bwd_per(int64_t S, int64_t Dh) { return cpu_pad((size_t)(2 * S * Dh + Dh)); }

size_t RFN(cpu_attention_fwd_scratch)(int64_t B, int64_t S, int64_t H, int64_t Dh) {
    if (B <= 0 || S <= 0 || H <= 0 || Dh <= 0) return 0;
    return (size_t)cpu_max_threads() * fwd_per(S, Dh) * sizeof(double);
}

size_t RFN(cpu_attention_bwd_scratch)(int64_t B, int64_t S, int64_t H, int64_t Dh) {
    if (B <= 0 || S <= 0 || H <= 0 || Dh <= 0) return 0;
    return (size_t)cpu_max_threads() * bwd_per(S, Dh) * sizeof(double);
}

// The head counts and the document starts (0 <= docs[b][i] <= i) are valid.
static int check_args(const char *what, const int32_t *docs, int64_t B, int64_t S, int64_t H, int64_t Hkv,
                      stg_err *err) {
    if (Hkv <= 0 || H % Hkv)
        return stg_errf(err, "%s: query heads (%" PRId64 ") must be a multiple of kv heads (%" PRId64 ")", what, H, Hkv);
    if (docs)
        for (int64_t r = 0; r < B * S; r++) {
            int64_t i = r % S;
            if (docs[r] < 0 || docs[r] > i)
                return stg_errf(err, "%s: docs[%" PRId64 "][%" PRId64 "] = %d is not a document start at or before %" PRId64,
                                what, r / S, i, (int)docs[r], i);
        }
    return 0;
}

// q (B, S, H, Dh), k, v (B, S, Hkv, Dh) -> o (B, S, H, Dh), lse (B, H, S)
// s_ij = scale q_i k_j (j0_i <= j <= i); lse_i = log sum_j exp s_ij; o_i = sum_j exp(s_ij - lse_i) v_j
int RFN(cpu_attention_fwd)(const real *q, const real *k, const real *v, const int32_t *docs, real *o, real *lse,
                           int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, double scale,
                           void *scratch_mem, size_t scratch_bytes, stg_err *err) {
    if (check_args("attention", docs, B, S, H, Hkv, err) ||
        cpu_scratch_check("attention", scratch_mem, scratch_bytes,
                          RFN(cpu_attention_fwd_scratch)(B, S, H, Dh), cpu_max_threads(), err))
        return -1;
    if (scale == 0.0) scale = 1.0 / sqrt((double)Dh);
    size_t per = fwd_per(S, Dh); // per thread: scores (S), output accumulator (Dh)
    double *scratch = scratch_mem;
    int64_t rs = H * Dh, rk = Hkv * Dh, G = H / Hkv; // strides between positions; group size

    CPU_PARALLEL_FOR(B * H * S * S * Dh)
    for (int64_t r = 0; r < B * H * S; r++) {
        int64_t b = r / (H * S), h = (r / S) % H, i = r % S;
        int64_t j0 = docs ? docs[b * S + i] : 0;
        double *sc = scratch + (size_t)cpu_thread_id() * per; // (S)
        double *acc = sc + S;                                 // (Dh)
        const real *qi = q + (b * S + i) * rs + h * Dh;
        const real *kb = k + b * S * rk + (h / G) * Dh; // k_j = kb + j rk
        const real *vb = v + b * S * rk + (h / G) * Dh;
        double mx = -INFINITY;
        for (int64_t j = j0; j <= i; j++) {
            sc[j] = scale * dot_dh(qi, kb + j * rk, Dh);
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0.0;
        for (int64_t j = j0; j <= i; j++) {
            sc[j] = exp(sc[j] - mx);
            sum += sc[j];
        }
        double inv = 1.0 / sum;
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0.0;
        for (int64_t j = j0; j <= i; j++) {
            double p = sc[j] * inv;
            const real *vj = vb + j * rk;
            for (int64_t d = 0; d < Dh; d++) acc[d] += p * (double)vj[d];
        }
        real *oi = o + (b * S + i) * rs + h * Dh;
        for (int64_t d = 0; d < Dh; d++) oi[d] = (real)acc[d];
        lse[r] = (real)(mx + log(sum)); // r = (b H + h) S + i
    }
    return 0;
}

// acc (Dh) += c x
static void axpy_dh(double *restrict acc, double c, const real *restrict x, int64_t Dh) {
    CPU_SIMD
    for (int64_t d = 0; d < Dh; d++) acc[d] += c * (double)x[d];
}

// q, o, dout (B, S, H, Dh), k, v (B, S, Hkv, Dh), lse (B, H, S) -> dq (B, S, H, Dh), dk, dv (B, S, Hkv, Dh)
// p_ij = exp(s_ij - lse_i); D_i = dout_i . o_i; ds_ij = p_ij (dout_i . v_j - D_i);
// dq_i = scale sum_j ds_ij k_j; dk_j = scale sum_{h in group} sum_i ds_ij q_i;
// dv_j = sum_{h in group} sum_i p_ij dout_i (pairs j0_i <= j <= i)
// One kv head per iteration: a single pass over its group's query heads (in order) and the pairs,
// with dk and dv accumulated for the kv head in double scratch rows of this thread.
int RFN(cpu_attention_bwd)(const real *q, const real *k, const real *v, const int32_t *docs, const real *o,
                           const real *lse, const real *dout, real *dq, real *dk, real *dv,
                           int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, double scale,
                           void *scratch_mem, size_t scratch_bytes, stg_err *err) {
    if (check_args("attention backward", docs, B, S, H, Hkv, err) ||
        cpu_scratch_check("attention backward", scratch_mem, scratch_bytes,
                          RFN(cpu_attention_bwd_scratch)(B, S, H, Dh), cpu_max_threads(), err))
        return -1;
    if (scale == 0.0) scale = 1.0 / sqrt((double)Dh);
    size_t per = bwd_per(S, Dh); // per thread: dk and dv accumulators (S, Dh) each, dq row (Dh)
    double *scratch = scratch_mem;
    int64_t rs = H * Dh, rk = Hkv * Dh, G = H / Hkv; // strides between positions; group size

    CPU_PARALLEL_FOR(B * H * S * S * Dh)
    for (int64_t bk = 0; bk < B * Hkv; bk++) {
        int64_t b = bk / Hkv, hk = bk % Hkv;
        double *adk = scratch + (size_t)cpu_thread_id() * per; // (S, Dh)
        double *adv = adk + S * Dh;                            // (S, Dh)
        double *adq = adv + S * Dh;                            // (Dh)
        for (int64_t e = 0; e < 2 * S * Dh; e++) adk[e] = 0.0;
        int64_t kbase = b * S * rk + hk * Dh; // position 0 of this kv head
        for (int64_t h = hk * G; h < hk * G + G; h++) {
            int64_t base = b * S * rs + h * Dh; // position 0 of this query head
            for (int64_t i = 0; i < S; i++) {
                const real *qi = q + base + i * rs, *doi = dout + base + i * rs;
                double Di = dot_dh(doi, o + base + i * rs, Dh);
                double l = (double)lse[(b * H + h) * S + i];
                for (int64_t d = 0; d < Dh; d++) adq[d] = 0.0;
                for (int64_t j = docs ? docs[b * S + i] : 0; j <= i; j++) {
                    const real *kj = k + kbase + j * rk, *vj = v + kbase + j * rk;
                    double p = exp(scale * dot_dh(qi, kj, Dh) - l);
                    double ds = p * (dot_dh(doi, vj, Dh) - Di);
                    axpy_dh(adq, ds, kj, Dh);
                    axpy_dh(adk + j * Dh, ds, qi, Dh);
                    axpy_dh(adv + j * Dh, p, doi, Dh);
                }
                real *dqi = dq + base + i * rs;
                for (int64_t d = 0; d < Dh; d++) dqi[d] = (real)(scale * adq[d]);
            }
        }
        for (int64_t j = 0; j < S; j++) {
            real *dkj = dk + kbase + j * rk, *dvj = dv + kbase + j * rk;
            for (int64_t d = 0; d < Dh; d++) {
                dkj[d] = (real)(scale * adk[j * Dh + d]);
                dvj[d] = (real)adv[j * Dh + d];
            }
        }
    }
    return 0;
}
