// Decoding over a KV cache, and sampling, on the CPU. Layouts: q, k, v, o (B, S, H, Dh) as the
// model's projections make them; the caches (B, Hkv, C, Dh), head-major, so position j of head h of
// sequence b is at ((b Hkv + h) C + j) Dh (a decoding step reads each head's positions contiguously). Dot products and softmax sums in double, as the attention op's.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/real.h"
#include "ops/decode/kernels.h"
#include "ops/decode/uniform.h"

// x (Dh) rotated at position p into y (Dh): the rope op's formula (ops/rope/real.c), rounded to real
// as the rope op's output is. y may alias x.
static void rotate(const real *x, real *y, int64_t Dh, int64_t p, double theta) {
    for (int64_t i = 0; i < Dh / 2; i++) {
        double angle = (double)p * pow(theta, -2.0 * (double)i / (double)Dh);
        double c = cos(angle), s = sin(angle);
        double x0 = (double)x[2 * i], x1 = (double)x[2 * i + 1];
        y[2 * i] = (real)(x0 * c - x1 * s);
        y[2 * i + 1] = (real)(x0 * s + x1 * c);
    }
}

// per thread: the scores (C), an output accumulator (Dh) and the rotated query (Dh)
static size_t cached_per(int64_t C, int64_t Dh) { return cpu_pad((size_t)(C + 2 * Dh)); }

size_t RFN(cpu_attention_cached_scratch)(int64_t C, int64_t Dh) {
    if (C <= 0 || Dh <= 0) return 0;
    return (size_t)cpu_max_threads() * cached_per(C, Dh) * sizeof(double);
}

int RFN(cpu_attention_cached)(const real *q, const real *k, const real *v, real *kc, real *vc, int64_t pos, real *o, int64_t B,
                              int64_t C, int64_t Hq, int64_t Hkv, int64_t Dh, double scale, double rope_theta, void *scratch_mem,
                              size_t scratch_bytes, stg_err *err) {
    if (pos < 0 || pos >= C)
        return stg_errf(err, "attention_cached: position %lld is outside the cache's %lld positions", (long long)pos, (long long)C);
    if (Hkv <= 0 || Hq % Hkv != 0) return stg_errf(err, "attention_cached: %lld query heads over %lld kv heads", (long long)Hq, (long long)Hkv);
    if (cpu_scratch_check("attention_cached", scratch_mem, scratch_bytes, RFN(cpu_attention_cached_scratch)(C, Dh), cpu_max_threads(), err))
        return -1;
    if (scale == 0.0) scale = 1.0 / sqrt((double)Dh);
    const int64_t G = Hq / Hkv, L = pos + 1;
    // the new key (rotated) and value at pos
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++) {
            const real *kb = k + (b * Hkv + h) * Dh, *vb = v + (b * Hkv + h) * Dh;
            real *kd = kc + ((b * Hkv + h) * C + pos) * Dh, *vd = vc + ((b * Hkv + h) * C + pos) * Dh;
            if (rope_theta > 0) rotate(kb, kd, Dh, pos, rope_theta);
            else memcpy(kd, kb, sizeof(real) * (size_t)Dh);
            memcpy(vd, vb, sizeof(real) * (size_t)Dh);
        }
    size_t per = cached_per(C, Dh);
    double *scratch = scratch_mem;
    CPU_PARALLEL_FOR(B * Hq * L * Dh)
    for (int64_t r = 0; r < B * Hq; r++) {
        int64_t b = r / Hq, h = r % Hq, hk = h / G;
        double *sc = scratch + (size_t)cpu_thread_id() * per; // (C)
        double *acc = sc + C;                                 // (Dh)
        real *qr = (real *)(acc + Dh);                        // (Dh) real values in a row of Dh doubles
        const real *qi = q + r * Dh;
        if (rope_theta > 0) rotate(qi, qr, Dh, pos, rope_theta);
        else memcpy(qr, qi, sizeof(real) * (size_t)Dh);
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
            const real *kj = kc + ((b * Hkv + hk) * C + j) * Dh;
            double d = 0.0;
            CPU_SIMD_SUM(d)
            for (int64_t e = 0; e < Dh; e++) d += (double)qr[e] * (double)kj[e];
            sc[j] = scale * d;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < L; j++) {
            sc[j] = exp(sc[j] - mx);
            sum += sc[j];
        }
        double inv = 1.0 / sum;
        for (int64_t e = 0; e < Dh; e++) acc[e] = 0.0;
        for (int64_t j = 0; j < L; j++) {
            double p = sc[j] * inv;
            const real *vj = vc + ((b * Hkv + hk) * C + j) * Dh;
            CPU_SIMD
            for (int64_t e = 0; e < Dh; e++) acc[e] += p * (double)vj[e];
        }
        real *oi = o + r * Dh;
        for (int64_t e = 0; e < Dh; e++) oi[e] = (real)acc[e];
    }
    return 0;
}

int RFN(cpu_kv_write)(const real *k, const real *v, real *kc, real *vc, int64_t pos, int64_t B, int64_t S, int64_t C, int64_t H,
                      int64_t Dh, stg_err *err) {
    if (pos < 0 || pos + S > C)
        return stg_errf(err, "kv_write: positions %lld to %lld are outside the cache's %lld", (long long)pos, (long long)(pos + S - 1),
                        (long long)C);
    size_t row = sizeof(real) * (size_t)Dh; // one position of one head
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++) {
                memcpy(kc + ((b * H + h) * C + pos + s) * Dh, k + ((b * S + s) * H + h) * Dh, row);
                memcpy(vc + ((b * H + h) * C + pos + s) * Dh, v + ((b * S + s) * H + h) * Dh, row);
            }
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// The sampling rule, one row:
//   temperature 0: the first index of the largest logit.
//   else z_i = logit_i / temperature (NaN counts as -inf), w_i = exp(z_i - max z); top_k > 0 keeps
//   the tokens with z_i >= the k-th largest z (ties kept); top_p < 1 then keeps those with
//   w_i >= tau, tau the largest weight such that the kept weights >= tau sum to at least top_p times
//   all kept weight (the smallest top set of probability top_p, ties kept); the token is the
//   inverse CDF at u in token-id order: the first kept i whose running sum of kept weights exceeds
//   u times their total (the last kept one if rounding leaves none).
int64_t RFN(cpu_sample_row)(const real *row, int64_t V, double temperature, int64_t top_k, double top_p, double u, double *work) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if ((double)row[i] > (double)row[best] || (isnan((double)row[best]) && !isnan((double)row[i]))) best = i;
    if (temperature == 0.0) return best;
    double *w = work, *tmp = work + V, m = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        double z = (double)row[i] / temperature;
        w[i] = isnan(z) ? -INFINITY : z;
        if (w[i] > m) m = w[i];
    }
    if (m == -INFINITY) return best;
    double zk = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(tmp, w, sizeof(double) * (size_t)V);
        qsort(tmp, (size_t)V, sizeof(double), cmp_desc);
        zk = tmp[top_k - 1];
    }
    for (int64_t i = 0; i < V; i++) w[i] = w[i] >= zk ? exp(w[i] - m) : 0.0;
    if (top_p < 1.0) {
        double total = 0.0;
        int64_t n = 0;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > 0) total += w[i], tmp[n++] = w[i];
        qsort(tmp, (size_t)n, sizeof(double), cmp_desc);
        double c = 0.0, tau = n ? tmp[n - 1] : 0.0;
        for (int64_t r = 0; r < n; r++) {
            c += tmp[r];
            if (c >= top_p * total) {
                tau = tmp[r];
                break;
            }
        }
        for (int64_t i = 0; i < V; i++)
            if (w[i] < tau) w[i] = 0.0;
    }
    double total = 0.0;
    for (int64_t i = 0; i < V; i++) total += w[i];
    double target = u * total, c = 0.0;
    int64_t last = best;
    for (int64_t i = 0; i < V; i++) {
        if (!(w[i] > 0)) continue;
        last = i;
        c += w[i];
        if (c > target) return i;
    }
    return last;
}

size_t RFN(cpu_sample_scratch)(int64_t V) { return V > 0 ? sizeof(double) * (size_t)(2 * V) : 0; }

int RFN(cpu_sample)(const real *logits, int64_t B, int64_t rows, int64_t V, int32_t *token, int32_t *pos, int32_t *ids, int64_t C,
                    const stg_sample_attrs *a, void *scratch, size_t scratch_bytes, stg_err *err) {
    if (cpu_scratch_check("sample", scratch, scratch_bytes, RFN(cpu_sample_scratch)(V), 0, err)) return -1;
    int64_t p = *pos, np = p + a->advance;
    if (p < 0 || np >= C)
        return stg_errf(err, "sample: the token after position %lld does not fit the context of %lld tokens", (long long)p, (long long)C);
    for (int64_t b = 0; b < B; b++) {
        const real *row = logits + (b * rows + rows - 1) * V;
        double u = stg_sample_uniform((uint64_t)a->seed, np, b);
        int64_t t = RFN(cpu_sample_row)(row, V, a->temperature, a->top_k, a->top_p, u, scratch);
        token[b] = (int32_t)t;
        ids[b * C + np] = (int32_t)t;
    }
    *pos = (int32_t)np;
    return 0;
}
