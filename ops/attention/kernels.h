// The attention family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/attention/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h.
#ifndef STG_OPS_ATTENTION_KERNELS_H
#define STG_OPS_ATTENTION_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_ATTENTION_KERNELS(T, S)                                                             \
    /* Causal attention. q, k, v (B, S, H, Dh) -> o (B, S, H, Dh), lse (B, H, S). scale 0 means */  \
    /* 1/sqrt(Dh). */                                                                               \
    int cpu_attention_fwd_##S(const T *q, const T *k, const T *v, T *o, T *lse, int64_t B,          \
                              int64_t S, int64_t H, int64_t Dh, double scale, void *scratch,        \
                              size_t scratch_bytes, stg_err *err);                                  \
    size_t cpu_attention_fwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);              \
    /* q, k, v, o (B, S, H, Dh), lse (B, H, S), dout (B, S, H, Dh) -> dq, dk, dv (B, S, H, Dh). */  \
    int cpu_attention_bwd_##S(const T *q, const T *k, const T *v, const T *o, const T *lse,         \
                              const T *dout, T *dq, T *dk, T *dv, int64_t B, int64_t S,             \
                              int64_t H, int64_t Dh, double scale, void *scratch,                   \
                              size_t scratch_bytes, stg_err *err);                                  \
    size_t cpu_attention_bwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);

STG_CPU_ATTENTION_KERNELS(float, f32)
STG_CPU_ATTENTION_KERNELS(double, f64)

#endif
