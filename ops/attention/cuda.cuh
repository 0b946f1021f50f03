// What the attention CUDA files share (not for use outside ops/attention/):
//   cuda.cu      the ops' checks (att_shape_of), the dispatch over dtype and head dim, the backward's
//                first launch (D = do . o, every dtype), the records;
//   cuda_f32.cu  the CUDA-core kernels for f32 storage: forward, dk/dv, dq;
//   cuda_mma.cu  the bf16 kernels on tensor cores through mma.sync (forward, dk/dv, dq), and the
//                hand-off to the wgmma kernels of sm90a/ on devices of compute capability 9.0.
// Each launcher declared here is instantiated in its file for every padded head dim of ATT_HEAD_DIMS
// (one the dispatch asks for and the file lacks fails to link).
#ifndef STG_OPS_ATTENTION_CUDA_CUH
#define STG_OPS_ATTENTION_CUDA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/attention/rows.cuh"
#include "ops/cuda/internal.h"

#define ATT_LOG2E 1.4426950408889634
#define ATT_LN2 0.6931471805599453

// Shape, dtype, scale and documents of one ATTENTION or ATTENTION_BWD op (att_shape_of, cuda.cu).
typedef struct att_shape {
    int B, S, H, G, D, bf16; // G: query heads per kv head (H / Hkv)
    float scale;
    const int *docs; // (B, S) document starts, or NULL
    void *ws;        // the backward's workspace after D (B, H, S), ws_bytes of it (att_ws_bwd_ws_bytes); else NULL, 0
    size_t ws_bytes;
} att_shape;

// ---- loads and stores of 8 consecutive elements ----------------------------------------------

__device__ __forceinline__ void att_load8(const float *p, float *v) {
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__device__ __forceinline__ void att_load8(const __nv_bfloat16 *p, float *v) {
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float2 f = __bfloat1622float2(h[e]);
        v[2 * e] = f.x;
        v[2 * e + 1] = f.y;
    }
}

__device__ __forceinline__ float att_to_float(float x) { return x; }
__device__ __forceinline__ float att_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void att_store(float *p, float x) { *p = x; }
__device__ __forceinline__ void att_store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

// The padded head dims DP (the head dim rounded up to 16) of the dispatch (ATT_DISPATCH, cuda.cu).
#define ATT_HEAD_DIMS(X) X(16) X(32) X(48) X(64) X(80) X(96) X(112) X(128)

// ---- cuda_f32.cu: T = float --------------------------------------------------------------------
template <typename T, int DP>
int att_f32_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err);
// dk, dv and dq launches (after the D kernel).
template <typename T, int DP>
int att_f32_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, const float *Dsum,
                       stg_err *err);

// ---- cuda_mma.cu: bf16; PAD when the head dim is below DP (padded with zeros in the kernels) -----
template <int DP, bool PAD>
int att_tc_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err);
// Workspace bytes the bf16 backward wants beyond D (the warp-specialised single pass's dQ sum on sm_90a; 0 else);
// *fail = 1 with err set when the device could not be queried.
size_t att_tc_bwd_ws_bytes(stg_cuda *c, const att_shape *s, stg_err *err, int *fail);
// dk, dv and dq launches (after the D kernel).
template <int DP, bool PAD>
int att_tc_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, const float *Dsum,
                      stg_err *err);

#endif
