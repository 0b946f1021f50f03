// The loss family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/loss/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_LOSS_KERNELS_H
#define STG_OPS_LOSS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_LOSS_KERNELS(T, S)                                                                \
    /* logits (rows, V), tgt (rows) i32 -> loss (1) = mean(lse - logit[tgt]), lse (rows); rows */ \
    /* whose target is -1 are ignored (not in the mean; zero gradient).                       */ \
    int cpu_cross_entropy_fwd_##S(const T *logits, const int32_t *tgt, T *loss, T *lse,           \
                                  int64_t rows, int64_t V, stg_err *err);                         \
    /* logits, tgt, lse -> dlogits (rows, V) = (softmax - onehot) / kept rows; may alias logits. */\
    int cpu_cross_entropy_bwd_##S(const T *logits, const int32_t *tgt, const T *lse, T *dlogits,  \
                                  int64_t rows, int64_t V, stg_err *err);

STG_CPU_LOSS_KERNELS(float, f32)
STG_CPU_LOSS_KERNELS(double, f64)

#endif
