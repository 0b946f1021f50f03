// The norm family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/norm/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_NORM_KERNELS_H
#define STG_OPS_NORM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_NORM_KERNELS(T, S)                                                                 \
    /* x (rows, D), w (D) -> y (rows, D), rstd (rows). */                                          \
    void cpu_rmsnorm_fwd_##S(const T *x, const T *w, T *y, T *rstd, int64_t rows, int64_t D,       \
                             double eps);                                                          \
    /* x (rows, D), w (D), rstd (rows), dy (rows, D) -> dx (rows, D), dw (D). */                   \
    void cpu_rmsnorm_bwd_##S(const T *x, const T *w, const T *rstd, const T *dy, T *dx, T *dw,     \
                             int64_t rows, int64_t D);                                             \
    /* x (rows, D), w (D), b (D) -> y (rows, D), stats (rows, 2) = [mean, rstd]. */                \
    void cpu_layernorm_fwd_##S(const T *x, const T *w, const T *b, T *y, T *stats, int64_t rows,   \
                               int64_t D, double eps);                                             \
    /* x, w, stats, dy -> dx (rows, D), dw (D), db (D). */                                         \
    void cpu_layernorm_bwd_##S(const T *x, const T *w, const T *stats, const T *dy, T *dx, T *dw,  \
                               T *db, int64_t rows, int64_t D);

STG_CPU_NORM_KERNELS(float, f32)
STG_CPU_NORM_KERNELS(double, f64)

#endif
