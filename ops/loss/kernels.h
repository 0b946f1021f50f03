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
                                  int64_t rows, int64_t V, stg_err *err);                         \
    /* Fused LM head: x (rows, d), w (V, d), tgt (rows) -> loss (1) = mean over rows of        */ \
    /* lse - logit[tgt] with logits = x wᵀ, lse (rows); the rows in chunks of `chunk`, each     */ \
    /* chunk's logits in `logits` (chunk, V). scratch: cpu_lce_scratch bytes.                   */ \
    int cpu_lce_fwd_##S(const T *x, const T *w, const int32_t *tgt, T *loss, T *lse, T *logits,    \
                        int64_t rows, int64_t d, int64_t V, int64_t chunk, void *scratch,         \
                        size_t scratch_bytes, stg_err *err);                                      \
    /* x, w, tgt, lse -> dx (rows, d) = dlogits w, dw (V, d) = dlogitsᵀ x with dlogits =        */ \
    /* (softmax - onehot) / rows, recomputed chunk by chunk in `dlogits` (chunk, V).           */ \
    int cpu_lce_bwd_##S(const T *x, const T *w, const int32_t *tgt, const T *lse, T *dx, T *dw,    \
                        T *dlogits, int64_t rows, int64_t d, int64_t V, int64_t chunk,            \
                        void *scratch, size_t scratch_bytes, stg_err *err);                       \
    /* Scratch bytes of both: a double per chunk row, and a row of d doubles per thread. */        \
    size_t cpu_lce_scratch_##S(int64_t d, int64_t chunk);

STG_CPU_LOSS_KERNELS(float, f32)
STG_CPU_LOSS_KERNELS(double, f64)

#endif
