// The layout family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/layout/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_LAYOUT_KERNELS_H
#define STG_OPS_LAYOUT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_LAYOUT_KERNELS(T, S)                                                           \
    /* reshape: y = x (n elements); nothing when y == x, memmove otherwise. */                 \
    void cpu_copy_##S(const T *x, T *y, int64_t n);                                            \
    /* x (shape[0], ..., shape[ndim-1]) -> y with dims d0 and d1 swapped, contiguous. */       \
    void cpu_transpose_##S(const T *x, T *y, int ndim, const int64_t *shape, int d0, int d1);  \
    /* split: x (rows, n m) -> ys[0..n) (rows, m), row by row: ys[i] = x[:, i m : (i + 1) m]. */  \
    void cpu_split_##S(const T *x, T *const *ys, int n, int64_t rows, int64_t m);               \
    /* concat: xs[0..n) (rows, m) -> y (rows, n m), the inverse of split. */                    \
    void cpu_concat_##S(const T *const *xs, T *y, int n, int64_t rows, int64_t m);                \
    /* x (rows, H, Dh) -> y (rows, H n, Dh): y head h = x head h / n. */                      \
    void cpu_repeat_kv_##S(const T *x, T *y, int64_t rows, int64_t H, int64_t n, int64_t Dh); \
    /* dy (rows, H n, Dh) -> dx (rows, H, Dh): dx head h = sum of dy heads h n .. h n + n-1, */ \
    /* in that order, in double. */                                                           \
    void cpu_repeat_kv_bwd_##S(const T *dy, T *dx, int64_t rows, int64_t H, int64_t n, int64_t Dh);

STG_CPU_LAYOUT_KERNELS(float, f32)
STG_CPU_LAYOUT_KERNELS(double, f64)

#endif
