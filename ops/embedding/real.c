// Token embedding lookup and its backward (scatter-add of gradient rows).
#include <string.h>

#include "ops/embedding/kernels.h"
#include "ops/cpu/real.h"

// Reports the first token outside [0, V) with its position.
static int check_tokens(const int32_t *tok, int64_t n, int64_t V, stg_err *err) {
    for (int64_t i = 0; i < n; i++)
        if (tok[i] < 0 || (int64_t)tok[i] >= V)
            return stg_errf(err, "embedding: token id %d at position %lld is outside [0, %lld)",
                            (int)tok[i], (long long)i, (long long)V);
    return 0;
}

// tok (n) i32, W (V, D) -> y (n, D)
int RFN(cpu_embedding_fwd)(const int32_t *tok, const real *W, real *y, int64_t n, int64_t V,
                           int64_t D, stg_err *err) {
    if (check_tokens(tok, n, V, err)) return -1;
    CPU_PARALLEL_FOR(n * D)
    for (int64_t i = 0; i < n; i++)
        memcpy(y + i * D, W + (int64_t)tok[i] * D, (size_t)D * sizeof(real));
    return 0;
}

// Scratch: (V + 1) bucket starts, then (n) positions by token, int64 each.
size_t RFN(cpu_embedding_bwd_scratch)(int64_t n, int64_t V, int64_t D) {
    if (n < 0 || V < 0) return 0;
    return (size_t)(V + 1 + n) * sizeof(int64_t);
}

// tok (n), dy (n, D) -> dW (V, D). The positions are bucketed by token (a counting sort), then
// each vocabulary row sums its positions' gradient rows in double: deterministic, no races.
int RFN(cpu_embedding_bwd)(const int32_t *tok, const real *dy, real *dW, int64_t n, int64_t V,
                           int64_t D, int accumulate, void *scratch, size_t scratch_bytes, stg_err *err) {
    if (check_tokens(tok, n, V, err)) return -1;
    if (cpu_scratch_check("embedding backward", scratch, scratch_bytes,
                          RFN(cpu_embedding_bwd_scratch)(n, V, D), 0, err))
        return -1;
    int64_t *start = scratch;       // (V + 1) bucket starts
    int64_t *pos = start + (V + 1); // (n) positions by token
    memset(start, 0, (size_t)(V + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) start[tok[i] + 1]++;
    for (int64_t t = 0; t < V; t++) start[t + 1] += start[t];
    for (int64_t i = 0; i < n; i++) pos[start[tok[i]]++] = i; // start[t] now ends bucket t
    for (int64_t t = V; t > 0; t--) start[t] = start[t - 1];   // shift back to bucket starts
    start[0] = 0;

    CPU_PARALLEL_FOR(V * D + n * D)
    for (int64_t t = 0; t < V; t++) {
        real *row = dW + t * D;
        for (int64_t d = 0; d < D; d++) {
            double acc = accumulate ? (double)row[d] : 0.0;
            for (int64_t j = start[t]; j < start[t + 1]; j++) acc += (double)dy[pos[j] * D + d];
            row[d] = (real)acc;
        }
    }
    return 0;
}

// x (outer, S, D) + W[s] -> y; y may alias x (each element read once, then written)
void RFN(cpu_pos_embedding_fwd)(const real *x, const real *W, real *y, int64_t outer, int64_t S,
                                int64_t D) {
    CPU_PARALLEL_FOR(outer * S * D)
    for (int64_t r = 0; r < outer * S; r++) {
        const real *w = W + (r % S) * D;
        CPU_SIMD
        for (int64_t d = 0; d < D; d++) y[r * D + d] = (real)((double)x[r * D + d] + (double)w[d]);
    }
}

// dy (outer, S, D) -> dW (P, D)
void RFN(cpu_pos_embedding_bwd)(const real *dy, real *dW, int64_t outer, int64_t S, int64_t P,
                                int64_t D) {
    CPU_PARALLEL_FOR(outer * S * D)
    for (int64_t s = 0; s < P; s++) {
        real *row = dW + s * D;
        for (int64_t d = 0; d < D; d++) {
            double acc = 0.0;
            for (int64_t o = 0; s < S && o < outer; o++) acc += (double)dy[(o * S + s) * D + d];
            row[d] = (real)acc;
        }
    }
}
