// The optim family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/optim/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_OPTIM_KERNELS_H
#define STG_OPS_OPTIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_OPTIM_KERNELS(T, S)                                                               \
    /* Sum of squares of n elements, in double (global_norm adds these over its inputs). */       \
    double cpu_sumsq_##S(const T *x, int64_t n);                                                  \
    /* AdamW on n elements in place: param, m, v updated from grad, clipped by the global */      \
    /* gradient norm; step t >= 1 and lr are the schedule state. */                               \
    void cpu_adamw_##S(T *param, const T *grad, T *m, T *v, int64_t n, double norm, double step,  \
                       double lr, const stg_adamw_attrs *a);

STG_CPU_OPTIM_KERNELS(float, f32)
STG_CPU_OPTIM_KERNELS(double, f64)

#endif
