// Tensor maps of K and V for the warp-specialised attention kernels (host side; attention_ws.cu builds them).
#ifndef STG_OPS_ATTENTION_SM90A_TMA_MAP_H
#define STG_OPS_ATTENTION_SM90A_TMA_MAP_H

#include <cuda.h>

extern "C" {
#include "ops/base/err.h"
}

// k, v (B, S, Hkv, D) bf16 as 4-D maps (D, Hkv, S, B) with boxes of 64 dims x 1 x BK rows x 1 in the 128-byte
// swizzle (tk, tv), and, at head dim 64 NP + 16, of the 16 tail dims in the 32-byte swizzle (tkt, tvt; zeroed
// otherwise): the layout wgmma.cuh's descriptors read. Returns 0, or -1 with err set.
int tm_kv_maps(CUtensorMap *tk, CUtensorMap *tv, CUtensorMap *tkt, CUtensorMap *tvt, const void *k, const void *v, int B,
               int S, int Hkv, int D, int BK, stg_err *err);

#endif
