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
    /* Causal attention. q (B, S, H, Dh), k, v (B, S, Hkv, Dh) -> o (B, S, H, Dh), lse (B, H, S). */ \
    /* H is a multiple of Hkv; query head h reads kv head h / (H / Hkv) (grouped-query). docs   */  \
    /* (B, S) or NULL: the first position of each position's document (packed rows; query s     */  \
    /* sees keys docs[b][s] .. s; NULL: 0 .. s). scale 0 means 1/sqrt(Dh).                      */  \
    int cpu_attention_fwd_##S(const T *q, const T *k, const T *v, const int32_t *docs, T *o,       \
                              T *lse, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t Dh,   \
                              double scale, void *scratch, size_t scratch_bytes, stg_err *err);   \
    size_t cpu_attention_fwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);              \
    /* q, o, dout (B, S, H, Dh), k, v (B, S, Hkv, Dh), lse (B, H, S), docs as above -> dq (B, S, */ \
    /* H, Dh), dk, dv (B, S, Hkv, Dh): each kv head's gradient summed over its group.           */  \
    int cpu_attention_bwd_##S(const T *q, const T *k, const T *v, const int32_t *docs,             \
                              const T *o, const T *lse, const T *dout, T *dq, T *dk, T *dv,        \
                              int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t Dh,            \
                              double scale, void *scratch, size_t scratch_bytes, stg_err *err);   \
    size_t cpu_attention_bwd_scratch_##S(int64_t B, int64_t S, int64_t H, int64_t Dh);

STG_CPU_ATTENTION_KERNELS(float, f32)
STG_CPU_ATTENTION_KERNELS(double, f64)

#endif
