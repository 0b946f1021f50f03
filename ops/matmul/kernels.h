// The matmul family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/matmul/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_MATMUL_KERNELS_H
#define STG_OPS_MATMUL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_MATMUL_KERNELS(T, S)                                                               \
    /* C (batch, m, n) = op(A) op(B). A (batch, m, k), or (batch, k, m) when ta. B (k, n), or */   \
    /* (n, k) when tb; with b_batched one such matrix per batch, else one shared by all. */        \
    /* accumulate: C += op(A) op(B) (the sum in double, rounded once). */                         \
    int cpu_matmul_##S(const T *A, const T *B, T *C, int64_t batch, int64_t m, int64_t n,          \
                       int64_t k, int ta, int tb, int b_batched, int accumulate, void *scratch,    \
                       size_t scratch_bytes, stg_err *err);                                        \
    size_t cpu_matmul_scratch_##S(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb,  \
                                  int b_batched);                                                  \
    /* y (rows, n) += b (n) on every row (linear's bias). */                                       \
    void cpu_add_bias_##S(T *y, const T *b, int64_t rows, int64_t n);                              \
    /* y (n) = the sum of x's rows, x (rows, n), in double in row order (a bias gradient). */      \
    void cpu_sum_rows_##S(const T *x, T *y, int64_t rows, int64_t n);

STG_CPU_MATMUL_KERNELS(float, f32)
STG_CPU_MATMUL_KERNELS(double, f64)

#endif
