// The decode family's CPU reference kernels: raw pointers and explicit sizes, no graph, each over
// float (suffix _f32) and double (suffix _f64), written once over `real` in ops/decode/real.c.
// The conventions of every CPU kernel (accumulation in double, scratch, aliasing) are in
// ops/cpu/kernels.h. The shapes and the sampling rule are in ops/decode/rules.c.
#ifndef STG_OPS_DECODE_KERNELS_H
#define STG_OPS_DECODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"

#define STG_CPU_DECODE_KERNELS(T, S)                                                                     \
    /* q (B, 1, Hq, Dh), k, v (B, 1, Hkv, Dh) -> kc, vc (B, Hkv, C, Dh) at pos, o (B, 1, Hq, Dh).     */ \
    /* rope_theta > 0: q and k rotated at position pos first (pairs (2i, 2i+1), as the rope op).       */ \
    /* Fails when pos is outside [0, C). scale 0 means 1/sqrt(Dh).                                     */ \
    int cpu_attention_cached_##S(const T *q, const T *k, const T *v, T *kc, T *vc, int64_t pos, T *o,     \
                                 int64_t B, int64_t C, int64_t Hq, int64_t Hkv, int64_t Dh, double scale,  \
                                 double rope_theta, void *scratch, size_t scratch_bytes, stg_err *err);    \
    size_t cpu_attention_cached_scratch_##S(int64_t C, int64_t Dh);                                      \
    /* k, v (B, S, H, Dh) -> kc, vc (B, H, C, Dh) at positions pos .. pos + S - 1 (fails past C).      */ \
    int cpu_kv_write_##S(const T *k, const T *v, T *kc, T *vc, int64_t pos, int64_t B, int64_t S,         \
                         int64_t C, int64_t H, int64_t Dh, stg_err *err);                                 \
    /* One row of V logits -> the token the sampling rule picks for uniform u (ops/decode/real.c).    */ \
    /* work: 2 V doubles.                                                                              */ \
    int64_t cpu_sample_row_##S(const T *row, int64_t V, double temperature, int64_t top_k, double top_p,  \
                               double u, double *work);                                                   \
    /* logits (B, rows, V): the last row of each b -> token (B), ids (B, C) at pos + advance;          */ \
    /* pos += advance. Fails when pos + advance is past C - 1.                                         */ \
    int cpu_sample_##S(const T *logits, int64_t B, int64_t rows, int64_t V, int32_t *token, int32_t *pos, \
                       int32_t *ids, int64_t C, const stg_sample_attrs *a, void *scratch,                 \
                       size_t scratch_bytes, stg_err *err);                                               \
    size_t cpu_sample_scratch_##S(int64_t V);

STG_CPU_DECODE_KERNELS(float, f32)
STG_CPU_DECODE_KERNELS(double, f64)

#endif
