// The rope family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/rope/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_ROPE_KERNELS_H
#define STG_OPS_ROPE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_ROPE_KERNELS(T, S)                                                                  \
    /* x (outer, S, H, Dh) -> y, same shape; y may alias x. Dh even. inverse: rotate by -angle. */  \
    void cpu_rope_##S(const T *x, T *y, int64_t outer, int64_t S, int64_t H, int64_t Dh,            \
                      double theta, int inverse);

STG_CPU_ROPE_KERNELS(float, f32)
STG_CPU_ROPE_KERNELS(double, f64)

#endif
