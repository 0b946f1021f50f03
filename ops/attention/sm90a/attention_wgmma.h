// The bf16 causal attention forward and backward on Hopper's warpgroup matrix instructions (wgmma,
// sm_90a), built as their own objects for the sm_90a target (CMakeLists.txt); ops/attention/cuda_mma.cu
// calls them on devices of compute capability 9.0 and keeps the mma.sync kernels for every other case.
#ifndef STG_OPS_CUDA_SM90A_ATTENTION_WGMMA_H
#define STG_OPS_CUDA_SM90A_ATTENTION_WGMMA_H

#include <cuda_runtime.h>

extern "C" {
#include "ops/base/err.h" // C: stg_errf has C linkage
}

// Whether att_wgmma_fwd (attention_ws.cu: warp-specialised, tensor copies) handles head dim D with this scale
// (D 64, 80 or 128, scale > 0), and it is not turned off (STG_ATT_WS=0 in the environment: mma.sync, for A/B runs).
bool att_wgmma_fwd_supported(int D, float scale);

// q (B, S, H, D), k, v (B, S, H / G, D) bf16 [, docs (B, S) i32 or NULL: packed documents,
// ops/attention/rows.cuh] -> o (B, S, H, D) bf16, lse (B, H, S) f32 (natural log), causal; query
// head h reads kv head h / G; scale2 = scale log2(e). Pointers 16-byte aligned (docs 4; k, v checked). Returns 0,
// or -1 with err set.
int att_wgmma_fwd(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, void *o, float *lse,
                  int B, int S, int H, int G, int D, float scale2, stg_err *err);

// The same backward, warp-specialised (attention_ws_bwd.cu): whether it handles head dim D with k, v where they are
// (head dims 64, 80 and 128; none with STG_ATT_WS_BWD=0); then
// att_ws_bwd as att_wgmma_bwd. With att_ws_bwd_ws_bytes of workspace at ws (ws_bytes at least that; it may be
// more than 0 only at head dims 64 and 80), dq comes from the dk/dv blocks in a single pass; else from a launch of
// its own.
// side (NULL: none): a second stream for the dq launch, so that its blocks take the multiprocessors that the dk/dv
// launch's last wave leaves idle; side->fork is recorded on st before both launches and side->join on side->aux
// after the dq launch, and st waits for it, so the work after the call on st sees both (also inside a capture).
typedef struct att_side {
    cudaStream_t aux;
    cudaEvent_t fork, join;
} att_side;
bool att_ws_bwd_supported(int D, const void *k, const void *v);
int att_ws_bwd(cudaStream_t st, const att_side *side, const void *q, const void *k, const void *v, const int *docs,
               const float *lse, const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H,
               int G, int D, float scale, float scale2, void *ws, size_t ws_bytes, stg_err *err);
size_t att_ws_bwd_ws_bytes(int B, int S, int H, int G, int D);

// Whether att_wgmma_bwd handles head dim D (64, 80 or 128).
bool att_wgmma_bwd_supported(int D);

// dq (B, S, H, D), dk, dv (B, S, H / G, D) bf16 of the causal attention above (dk, dv summed over each
// kv head's group of query heads, no atomics), from q, k, v, docs, lse, dout and Dsum (B, H, S) f32 =
// sum_d dout . o (computed before); scale2 = scale log2(e); ws, ws_bytes: workspace (att_ws_bwd's). Returns 0,
// or -1 with err set.
int att_wgmma_bwd(cudaStream_t st, const att_side *side, const void *q, const void *k, const void *v, const int *docs,
                  const float *lse, const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H,
                  int G, int D, float scale, float scale2, void *ws, size_t ws_bytes, stg_err *err);

#endif
