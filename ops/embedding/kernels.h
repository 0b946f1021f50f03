// The embedding family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/embedding/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_EMBEDDING_KERNELS_H
#define STG_OPS_EMBEDDING_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_EMBEDDING_KERNELS(T, S)                                                         \
    /* embedding: tok (n) i32, W (V, D) -> y (n, D). Fails on a token outside [0, V). */        \
    int cpu_embedding_fwd_##S(const int32_t *tok, const T *W, T *y, int64_t n, int64_t V,       \
                              int64_t D, stg_err *err);                                         \
    /* tok (n), dy (n, D) -> dW (V, D): zeroed, then every dy row added to its token's row; */  \
    /* accumulate: added to what dW holds (not zeroed first). */                                \
    int cpu_embedding_bwd_##S(const int32_t *tok, const T *dy, T *dW, int64_t n, int64_t V,     \
                              int64_t D, int accumulate, void *scratch, size_t scratch_bytes,   \
                              stg_err *err);                                                    \
    size_t cpu_embedding_bwd_scratch_##S(int64_t n, int64_t V, int64_t D);                     \
    /* x (outer, S, D), W (P >= S, D) -> y = x + W[s]; y may alias x. */                        \
    void cpu_pos_embedding_fwd_##S(const T *x, const T *W, T *y, int64_t outer, int64_t S,       \
                                   int64_t D);                                                  \
    /* dy (outer, S, D) -> dW (P, D): rows s < S the sum over outer in order, rows past S 0. */  \
    void cpu_pos_embedding_bwd_##S(const T *dy, T *dW, int64_t outer, int64_t S, int64_t P,      \
                                   int64_t D);

STG_CPU_EMBEDDING_KERNELS(float, f32)
STG_CPU_EMBEDDING_KERNELS(double, f64)

#endif
