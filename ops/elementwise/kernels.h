// The elementwise family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/elementwise/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_ELEMENTWISE_KERNELS_H
#define STG_OPS_ELEMENTWISE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_ELEMENTWISE_KERNELS(T, S)                                                     \
    /* Elementwise over n elements. Outputs may alias inputs (the element is read first). */  \
    void cpu_silu_fwd_##S(const T *x, T *y, int64_t n);                                       \
    void cpu_silu_bwd_##S(const T *x, const T *dy, T *dx, int64_t n);                         \
    void cpu_relu_fwd_##S(const T *x, T *y, int64_t n);                                       \
    /* reads relu's output y */                                                               \
    void cpu_relu_bwd_##S(const T *y, const T *dy, T *dx, int64_t n);                         \
    /* GELU, tanh approximation (GPT-2); the backward reads x */                              \
    void cpu_gelu_fwd_##S(const T *x, T *y, int64_t n);                                       \
    void cpu_gelu_bwd_##S(const T *x, const T *dy, T *dx, int64_t n);                         \
    void cpu_swiglu_fwd_##S(const T *a, const T *b, T *y, int64_t n);                         \
    void cpu_swiglu_bwd_##S(const T *a, const T *b, const T *dy, T *da, T *db, int64_t n);    \
    void cpu_mul_##S(const T *a, const T *b, T *y, int64_t n);                                \
    void cpu_add_##S(const T *a, const T *b, T *y, int64_t n);                                \
    void cpu_scale_##S(const T *x, T *y, int64_t n, double factor);                           \
    /* Gradient accumulation: y += a + b, and y += factor x (sums in double, rounded once). */ \
    void cpu_add_acc_##S(const T *a, const T *b, T *y, int64_t n);                            \
    void cpu_scale_acc_##S(const T *x, T *y, int64_t n, double factor);

STG_CPU_ELEMENTWISE_KERNELS(float, f32)
STG_CPU_ELEMENTWISE_KERNELS(double, f64)

#endif
