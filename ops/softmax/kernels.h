// The softmax family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/softmax/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_SOFTMAX_KERNELS_H
#define STG_OPS_SOFTMAX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_SOFTMAX_KERNELS(T, S)                                                                \
    /* x (outer, Sq, Sk) -> y: fill where j > i + (Sk - Sq), else x. y may alias x. */               \
    void cpu_causal_mask_##S(const T *x, T *y, int64_t outer, int64_t Sq, int64_t Sk, double fill);  \
    /* x (rows, N) -> y (rows, N), softmax over N. y may alias x. */                                 \
    void cpu_softmax_fwd_##S(const T *x, T *y, int64_t rows, int64_t N);                             \
    /* y, dy (rows, N) -> dx = y (dy - sum(dy y)). dx may alias dy. */                               \
    void cpu_softmax_bwd_##S(const T *y, const T *dy, T *dx, int64_t rows, int64_t N);

STG_CPU_SOFTMAX_KERNELS(float, f32)
STG_CPU_SOFTMAX_KERNELS(double, f64)

#endif
