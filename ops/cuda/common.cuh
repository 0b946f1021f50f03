// Device helpers shared by the kernel files: element loads and stores for float and bf16 (bf16
// storage, fp32 arithmetic), 16-byte vector access, and warp / block reductions in a fixed order
// (the same bits on every run: no atomics).
#ifndef STG_OPS_CUDA_COMMON_CUH
#define STG_OPS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"

typedef __nv_bfloat16 bf16;

// ---- elements ---------------------------------------------------------------------------------

__device__ __forceinline__ float cu_f(float x) { return x; }
__device__ __forceinline__ float cu_f(bf16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T cu_t(float x);
template <> __device__ __forceinline__ float cu_t<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 cu_t<bf16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> __device__ __forceinline__ float cu_ld(const T *p, int64_t i) { return cu_f(p[i]); }
template <typename T> __device__ __forceinline__ void cu_st(T *p, int64_t i, float v) { p[i] = cu_t<T>(v); }

// Small tensors whose dtype is known only at run time (statistics, gains, weight gradients):
// bf16 != 0 means __nv_bfloat16, else float. The flag is uniform across a launch.
__device__ __forceinline__ float cu_ldd(const void *p, int bf16_, int64_t i) {
    return bf16_ ? __bfloat162float(((const bf16 *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void cu_std(void *p, int bf16_, int64_t i, float v) {
    if (bf16_)
        ((bf16 *)p)[i] = __float2bfloat16_rn(v);
    else
        ((float *)p)[i] = v;
}

// ---- asynchronous copies (sm_80) --------------------------------------------------------------
// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src is then not read). A thread's
// copies land in commit groups; cu_cp_wait<N>() returns once at most N of its newest groups are in
// flight, and the bytes of the others are then visible to that thread (to others after a barrier).
__device__ __forceinline__ void cu_cp16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cu_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cu_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// ---- programmatic dependent launch (sm_90) -----------------------------------------------------
// A kernel launched with cu_launch_pdl may begin while the kernel before it in the stream is still
// running (once that one has called cu_pdl_trigger, or at its end). Before cu_pdl_wait() it may
// read only what no kernel still running can write (a parameter of an inference step); after it,
// everything earlier in the stream is complete and visible. cu_pdl_trigger() lets the next kernel
// be scheduled early when it was launched that way, and does nothing otherwise. Both compile to
// nothing below sm_90.
__device__ __forceinline__ void cu_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void cu_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, st>>>(args...), with programmatic stream serialisation
// when pdl (the kernel must call cu_pdl_wait() as above).
template <typename... P, typename... A>
static inline cudaError_t cu_launch_pdl(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                        A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...);
}

// ---- 16-byte vectors --------------------------------------------------------------------------
// CU_VEC<T>::N elements of T in 16 bytes; load16/store16 convert to and from float[N]. The
// address must be 16-byte aligned.
template <typename T> struct CU_VEC { enum { N = 16 / (int)sizeof(T) }; };

template <typename T> __device__ __forceinline__ void cu_load16(const T *p, float *out) {
    uint4 raw = *(const uint4 *)p;
    const T *e = (const T *)&raw;
#pragma unroll
    for (int k = 0; k < CU_VEC<T>::N; k++) out[k] = cu_f(e[k]);
}

template <typename T> __device__ __forceinline__ void cu_store16(T *p, const float *in) {
    uint4 raw;
    T *e = (T *)&raw;
#pragma unroll
    for (int k = 0; k < CU_VEC<T>::N; k++) e[k] = cu_t<T>(in[k]);
    *(uint4 *)p = raw;
}

// 4 elements (float4 for float, 8 bytes for bf16); the address aligned to 4 elements.
__device__ __forceinline__ float4 cu_load4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 cu_load4(const bf16 *p) {
    uint2 raw = *(const uint2 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
    float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void cu_store4(float *p, float4 v) { *(float4 *)p = v; }
__device__ __forceinline__ void cu_store4(bf16 *p, float4 v) {
    uint2 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
    h[0] = __floats2bfloat162_rn(v.x, v.y);
    h[1] = __floats2bfloat162_rn(v.z, v.w);
    *(uint2 *)p = raw;
}

__host__ __device__ __forceinline__ bool cu_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

// ---- reductions -------------------------------------------------------------------------------
// Butterfly (xor) reductions: every lane ends with the same value, combined in a fixed order.

template <typename A> __device__ __forceinline__ A cu_warp_sum(A v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Safe to call repeatedly: it waits for the previous call's readers before reusing its buffer.
template <typename A> __device__ __forceinline__ A cu_block_sum(A v) {
    __shared__ A buf[33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads();
    if (lane == 0) buf[w] = v;
    __syncthreads();
    if (w == 0) {
        A s = lane < nw ? buf[lane] : (A)0;
        s = cu_warp_sum(s);
        if (lane == 0) buf[32] = s;
    }
    __syncthreads();
    return buf[32];
}

// Max over the block, same rules as cu_block_sum.
__device__ __forceinline__ float cu_block_max(float v) {
    __shared__ float buf[33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) buf[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < nw ? buf[lane] : -INFINITY;
        s = cu_warp_max(s);
        if (lane == 0) buf[32] = s;
    }
    __syncthreads();
    return buf[32];
}

// Threads per block for a row of n elements handled by one block: a multiple of 32, 64..1024.
static inline int cu_row_threads(int64_t n, int per_thread) {
    int64_t t = (n + per_thread - 1) / per_thread;
    t = (t + 31) / 32 * 32;
    if (t < 64) t = 64;
    if (t > 1024) t = 1024;
    return (int)t;
}

// Calls fn<T>(args...) with T = float or __nv_bfloat16 by a bf16 flag (from cuda_is_bf16).
#define CU_DISPATCH(is_bf16, fn, ...) ((is_bf16) ? fn<bf16>(__VA_ARGS__) : fn<float>(__VA_ARGS__))

#endif
