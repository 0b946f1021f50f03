// Fused causal attention, flash style. bf16 storage runs on tensor cores: the forward on wgmma
// (ops/attention/sm90a/attention_wgmma.cu) at head dims 64, 80 and 128 and the backward on wgmma
// (ops/attention/sm90a/attention_wgmma_bwd.cu) at head dims 64 and 80 on compute capability 9.0, else the
// att_tc_* kernels below (mma.sync m16n8k16, f32 accumulation and softmax, the same three-launch
// deterministic backward; head dims that are multiples of 8 but not 16 are padded with zeros to the
// next multiple of 16 inside the kernels). f32 storage runs the CUDA-core kernels described here.
//
// Layout (B, S, H, Dh) for q, o, do, dq and (B, S, Hkv, Dh) for k, v, dk, dv (H = G Hkv: grouped-query
// attention, query head h reads kv head h / G): head h of token s of batch b starts at
// ((b S + s) H + h) Dh. lse (B, H, S) f32. scale = attrs scale, or 1/sqrt(Dh) when 0. Optional docs
// (B, S) i32: packed documents, query s sees keys docs[b][s] .. s. Every kernel works on the S G
// "rows" of a kv head (position R / G of query head hk G + R % G; ops/attention/rows.cuh), so a K/V
// tile load serves the whole group, and starts its key loop at the first tile a document makes
// visible (the backward's key-tile blocks stop where the last document touching their keys ends).
//
// Forward: one block per (64 rows, kv head, batch) keeps its queries in shared memory and streams
// over the key tiles up to the diagonal with a running row max and sum (the S x S scores are never
// stored), then writes o and lse = log sum_j exp(scale q_i k_j).
// Backward, three launches, no atomics (replay is bitwise equal to eager launch):
//   1. D_i = do_i . o_i into the scratch (B, H, S) f32;
//   2. one block per key tile of a kv head loops over the row tiles (every query head of its group)
//      at and below the diagonal and accumulates dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij do_i
//      in registers;
//   3. one block per row tile loops over the key tiles up to the diagonal and accumulates
//      dq_i = scale sum_j ds_ij k_j.
//   with p_ij = exp(scale q_i k_j - lse_i), ds_ij = p_ij (do_i . v_j - D_i).
// Tiles are 64 x 64 with 256 threads; each thread holds a 4 x 4 block of scores (rows ty + 16a,
// columns tx + 16b) and a 4 x (DP/16) block of the output rows (dims tx + 16c). Head dims are any
// multiple of 8 up to 128; shared tiles are padded with zeros to DP, the next multiple of 16.
// Exponentials are taken base 2 on log2(e)-scaled scores.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/attention/rows.cuh"
#include "ops/cuda/internal.h"
#ifdef STG_ATT_WGMMA
#include "ops/attention/sm90a/attention_wgmma.h"
#endif

#define ATT_BQ 64      // queries per tile
#define ATT_BK 64      // keys per tile (equal to ATT_BQ: the diagonal tiles line up)
#define ATT_NT 256     // threads per block
#define ATT_SLD 65     // row stride of the 64 x 64 score tiles in shared memory
#define ATT_LOG2E 1.4426950408889634
#define ATT_LN2 0.6931471805599453

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

// sh (64, DP + 1) <- rows [0, rows) of the tile starting at base (row stride `stride` elements),
// dims [0, D); zeros elsewhere.
template <typename T, int DP>
__device__ void att_load_tile(float *sh, const T *base, int64_t stride, int rows, int D) {
    constexpr int G = DP / 8, LD = DP + 1;
    for (int idx = threadIdx.x; idx < ATT_BQ * G; idx += ATT_NT) {
        int r = idx / G, c = (idx % G) * 8;
        float v[8];
        if (r < rows && c < D) {
            att_load8(base + (int64_t)r * stride + c, v);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = 0.0f;
        }
        float *dst = sh + r * LD + c;
#pragma unroll
        for (int e = 0; e < 8; e++) dst[e] = v[e];
    }
}

// sh (64, DP + 1) <- rows R0 .. R0 + 63 of a group (ops/attention/rows.cuh; row R at
// base + att_row_off(R)), those at and past RN and dims past D zero.
template <typename T, int DP>
__device__ void att_load_rows(float *sh, const T *base, int64_t stride, int G, int D, int R0, int RN) {
    constexpr int NC8 = DP / 8, LD = DP + 1;
    for (int idx = threadIdx.x; idx < ATT_BQ * NC8; idx += ATT_NT) {
        int r = idx / NC8, c = (idx % NC8) * 8;
        float v[8];
        if (R0 + r < RN && c < D) {
            att_load8(base + att_row_off(R0 + r, G, stride, D) + c, v);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = 0.0f;
        }
        float *dst = sh + r * LD + c;
#pragma unroll
        for (int e = 0; e < 8; e++) dst[e] = v[e];
    }
}

// acc[a][b] = sum_d A[ty + 16a][d] B[tx + 16b][d] over the (64, DP + 1) tiles A and B.
template <int DP>
__device__ __forceinline__ void att_dot_tile(const float *A, const float *B, int ty, int tx, float acc[4][4]) {
    constexpr int LD = DP + 1;
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < DP; d++) {
        float x[4], y[4];
#pragma unroll
        for (int a = 0; a < 4; a++) x[a] = A[(ty + 16 * a) * LD + d];
#pragma unroll
        for (int b = 0; b < 4; b++) y[b] = B[(tx + 16 * b) * LD + d];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) acc[a][b] = fmaf(x[a], y[b], acc[a][b]);
    }
}

__device__ __forceinline__ float att_warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float att_warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// ---- forward ----------------------------------------------------------------------------------

template <int DP>
static size_t att_fwd_smem(void) {
    return sizeof(float) * (3 * ATT_BQ * (DP + 1) + ATT_BQ * ATT_SLD + 3 * ATT_BQ);
}

// q (B, S, H, D), k, v (B, S, H / G, D) [, docs (B, S)] -> o (B, S, H, D), lse (B, H, S).
// Grid (tiles of 64 of the S G rows, H / G, B).
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_fwd_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                         const T *__restrict__ v, const int *__restrict__ docs,
                                                         T *__restrict__ o, float *__restrict__ lse, int S, int H, int G,
                                                         int D, float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + ATT_BQ * LD, *Vs = Ks + ATT_BK * LD, *Ss = Vs + ATT_BK * LD;
    float *m_s = Ss + ATT_BQ * ATT_SLD, *l_s = m_s + ATT_BQ, *a_s = l_s + ATT_BQ;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16, warp = tid / 32, lane = tid % 32;
    const int R0 = qt * ATT_BQ, RN = S * G;
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D; // row 0 of the group
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D; // token 0 of the kv head
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;

    att_load_rows<T, DP>(Qs, q + qhead0, qstride, G, D, R0, RN);
    if (tid < ATT_BQ) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    float acc_o[4][NC];
    int pos[4], first[4]; // this thread's rows: position and first visible key
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int R = R0 + ty + 16 * a;
        pos[a] = R < RN ? R / G : -1; // rows past the end see no key
        first[a] = R < RN ? att_doc0(dc, pos[a]) : 0;
#pragma unroll
        for (int c = 0; c < NC; c++) acc_o[a][c] = 0.0f;
    }

    const int last = (min(R0 + ATT_BQ, RN) - 1) / G;                   // the last position of the tile
    const int kfirst = att_doc0(dc, R0 / G) / ATT_BK * ATT_BK;          // the first key tile visible
    for (int k0 = kfirst; k0 <= last; k0 += ATT_BK) {
        __syncthreads(); // the previous tile's K, V and P are consumed
        att_load_tile<T, DP>(Ks, k + khead0 + k0 * kstride, kstride, S - k0, D);
        att_load_tile<T, DP>(Vs, v + khead0 + k0 * kstride, kstride, S - k0, D);
        __syncthreads();
        float s[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int kj = k0 + tx + 16 * c;
                Ss[(ty + 16 * a) * ATT_SLD + tx + 16 * c] =
                    kj <= pos[a] && kj >= first[a] && kj < S ? s[a][c] * scale2 : -INFINITY;
            }
        __syncthreads();
        // Row statistics: warp w owns rows 8w .. 8w + 7.
        for (int r = warp * 8; r < warp * 8 + 8; r++) {
            float x0 = Ss[r * ATT_SLD + lane], x1 = Ss[r * ATT_SLD + lane + 32];
            float m_old = m_s[r];
            float m_new = fmaxf(m_old, att_warp_max(fmaxf(x0, x1)));
            float base = m_new == -INFINITY ? 0.0f : m_new;
            float p0 = exp2f(x0 - base), p1 = exp2f(x1 - base);
            float sum = att_warp_sum(p0 + p1);
            float alpha = exp2f(m_old - base);
            Ss[r * ATT_SLD + lane] = p0;
            Ss[r * ATT_SLD + lane + 32] = p1;
            __syncwarp();
            if (lane == 0) {
                m_s[r] = m_new;
                l_s[r] = l_s[r] * alpha + sum;
                a_s[r] = alpha;
            }
        }
        __syncthreads();
        float al[4];
#pragma unroll
        for (int a = 0; a < 4; a++) {
            al[a] = a_s[ty + 16 * a];
#pragma unroll
            for (int c = 0; c < NC; c++) acc_o[a][c] *= al[a];
        }
#pragma unroll 4
        for (int j = 0; j < ATT_BK; j++) {
            float p[4], x[NC];
#pragma unroll
            for (int a = 0; a < 4; a++) p[a] = Ss[(ty + 16 * a) * ATT_SLD + j];
#pragma unroll
            for (int c = 0; c < NC; c++) x[c] = Vs[j * LD + tx + 16 * c];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < NC; c++) acc_o[a][c] = fmaf(p[a], x[c], acc_o[a][c]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int r = ty + 16 * a, R = R0 + r;
        if (R >= RN) continue;
        float l = l_s[r], inv = 1.0f / l;
        T *orow = o + qhead0 + att_row_off(R, G, qstride, D);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int d = tx + 16 * c;
            if (d < D) att_store(orow + d, acc_o[a][c] * inv);
        }
        if (tx == 0) lse[att_stat_idx(R, G, b, H, hk, S)] = (m_s[r] + log2f(l)) * (float)ATT_LN2;
    }
}

// ---- backward ---------------------------------------------------------------------------------

// Dsum (B, H, S) = sum_d do . o: one thread per (b, s, h) row, 16-byte loads (head dims are multiples
// of 8 and the tensors 16-byte aligned: checked by att_shape_of), the sum in d order; 32-bit index
// arithmetic (B S H < 2^31: checked there too). A warp per row, with its shuffles and 64-bit
// division, took the 2.7B step 0.3-0.4 ms longer (docs/PERF.md).
template <typename T>
__global__ void att_bwd_dot_kernel(const T *__restrict__ o, const T *__restrict__ dout, float *__restrict__ Dsum,
                                       int rows, int S, int H, int D) {
    constexpr int N = 16 / (int)sizeof(T);
    for (int r = (int)(blockIdx.x * blockDim.x + threadIdx.x); r < rows; r += (int)(gridDim.x * blockDim.x)) {
        const uint4 *a = (const uint4 *)(o + (int64_t)r * D), *g = (const uint4 *)(dout + (int64_t)r * D);
        float acc = 0.0f;
#pragma unroll 4
        for (int v = 0; v < D / N; v++) {
            const uint4 x = a[v], y = g[v];
            const T *ex = (const T *)&x, *ey = (const T *)&y;
#pragma unroll
            for (int e = 0; e < N; e++) acc = fmaf(att_to_float(ex[e]), att_to_float(ey[e]), acc);
        }
        const int hh = r % H, t = r / H, sq = t % S, bb = t / S;
        Dsum[((int64_t)bb * H + hh) * S + sq] = acc;
    }
}

template <int DP>
static size_t att_dkdv_smem(void) {
    return sizeof(float) * (4 * ATT_BQ * (DP + 1) + 2 * ATT_BQ * ATT_SLD + 2 * ATT_BQ) + sizeof(int) * 2 * ATT_BQ;
}

// One block per (key tile, kv head, batch): dk, dv of its keys over every row (query of the group's
// heads) at or after them, up to the end of the last document that sees them.
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_dkdv_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                          const T *__restrict__ v, const int *__restrict__ docs,
                                                          const float *__restrict__ lse, const T *__restrict__ dout,
                                                          const float *__restrict__ Dsum, T *__restrict__ dk,
                                                          T *__restrict__ dv, int S, int H, int G, int D, float scale,
                                                          float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_BK * LD, *Qs = Vs + ATT_BK * LD, *dOs = Qs + ATT_BQ * LD;
    float *Ps = dOs + ATT_BQ * LD, *dSs = Ps + ATT_BQ * ATT_SLD, *lse_s = dSs + ATT_BQ * ATT_SLD, *D_s = lse_s + ATT_BQ;
    int *pos_s = (int *)(D_s + ATT_BQ), *first_s = pos_s + ATT_BQ; // per row: position (-1: none), first key
    const int kt = blockIdx.x; // the first key tiles see the most queries: launched first
    const int hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int k0 = kt * ATT_BK;
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;

    att_load_tile<T, DP>(Ks, k + khead0 + k0 * kstride, kstride, S - k0, D);
    att_load_tile<T, DP>(Vs, v + khead0 + k0 * kstride, kstride, S - k0, D);
    const int RN = (att_doc_end_block<ATT_NT>(dc, S, min(k0 + ATT_BK, S) - 1) + 1) * G; // rows past RN see none of these keys
    float acc_k[4][NC], acc_v[4][NC];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_k[a][c] = acc_v[a][c] = 0.0f;

    for (int R0 = k0 * G; R0 < RN; R0 += ATT_BQ) {
        __syncthreads(); // the previous row tile is consumed
        att_load_rows<T, DP>(Qs, q + qhead0, qstride, G, D, R0, RN);
        att_load_rows<T, DP>(dOs, dout + qhead0, qstride, G, D, R0, RN);
        if (tid < ATT_BQ) {
            const int R = R0 + tid;
            const bool in = R < RN;
            lse_s[tid] = in ? lse[att_stat_idx(R, G, b, H, hk, S)] * (float)ATT_LOG2E : 0.0f;
            D_s[tid] = in ? Dsum[att_stat_idx(R, G, b, H, hk, S)] : 0.0f;
            pos_s[tid] = in ? R / G : -1;
        } else if (tid < 2 * ATT_BQ) {
            const int R = R0 + tid - ATT_BQ;
            first_s[tid - ATT_BQ] = R < RN ? att_doc0(dc, R / G) : 0;
        }
        __syncthreads();
        float s[4][4], dp[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);   // rows: queries, columns: keys
        att_dot_tile<DP>(dOs, Vs, ty, tx, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int i = ty + 16 * a, j = tx + 16 * c, kj = k0 + j;
                float p = kj <= pos_s[i] && kj >= first_s[i] && kj < S ? exp2f(s[a][c] * scale2 - lse_s[i]) : 0.0f;
                Ps[i * ATT_SLD + j] = p;
                dSs[i * ATT_SLD + j] = p * (dp[a][c] - D_s[i]);
            }
        __syncthreads();
        // This thread's keys are ty + 16a, its dims tx + 16c.
#pragma unroll 2
        for (int i = 0; i < ATT_BQ; i++) {
            float p[4], ds[4], x[NC], y[NC];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                p[a] = Ps[i * ATT_SLD + ty + 16 * a];
                ds[a] = dSs[i * ATT_SLD + ty + 16 * a];
            }
#pragma unroll
            for (int c = 0; c < NC; c++) {
                x[c] = dOs[i * LD + tx + 16 * c];
                y[c] = Qs[i * LD + tx + 16 * c];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    acc_v[a][c] = fmaf(p[a], x[c], acc_v[a][c]);
                    acc_k[a][c] = fmaf(ds[a], y[c], acc_k[a][c]);
                }
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int kj = k0 + ty + 16 * a;
        if (kj >= S) continue;
        T *krow = dk + khead0 + kj * kstride, *vrow = dv + khead0 + kj * kstride;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int d = tx + 16 * c;
            if (d < D) {
                att_store(krow + d, acc_k[a][c] * scale);
                att_store(vrow + d, acc_v[a][c]);
            }
        }
    }
}

template <int DP>
static size_t att_dq_smem(void) {
    return sizeof(float) * (4 * ATT_BQ * (DP + 1) + ATT_BQ * ATT_SLD + 2 * ATT_BQ);
}

// One block per (64 rows, kv head, batch): dq of its rows over every key visible to them.
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_dq_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                        const T *__restrict__ v, const int *__restrict__ docs,
                                                        const float *__restrict__ lse, const T *__restrict__ dout,
                                                        const float *__restrict__ Dsum, T *__restrict__ dq, int S, int H,
                                                        int G, int D, float scale, float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + ATT_BQ * LD, *Ks = dOs + ATT_BQ * LD, *Vs = Ks + ATT_BK * LD;
    float *dSs = Vs + ATT_BK * LD, *lse_s = dSs + ATT_BQ * ATT_SLD, *D_s = lse_s + ATT_BQ;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int R0 = qt * ATT_BQ, RN = S * G;
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;

    att_load_rows<T, DP>(Qs, q + qhead0, qstride, G, D, R0, RN);
    att_load_rows<T, DP>(dOs, dout + qhead0, qstride, G, D, R0, RN);
    if (tid < ATT_BQ) {
        const int R = R0 + tid;
        const bool in = R < RN;
        lse_s[tid] = in ? lse[att_stat_idx(R, G, b, H, hk, S)] * (float)ATT_LOG2E : 0.0f;
        D_s[tid] = in ? Dsum[att_stat_idx(R, G, b, H, hk, S)] : 0.0f;
    }
    float acc_q[4][NC];
    int pos[4], first[4]; // this thread's rows: position and first visible key
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int R = R0 + ty + 16 * a;
        pos[a] = R < RN ? R / G : -1;
        first[a] = R < RN ? att_doc0(dc, pos[a]) : 0;
#pragma unroll
        for (int c = 0; c < NC; c++) acc_q[a][c] = 0.0f;
    }

    const int last = (min(R0 + ATT_BQ, RN) - 1) / G;
    const int kfirst = att_doc0(dc, R0 / G) / ATT_BK * ATT_BK;
    for (int k0 = kfirst; k0 <= last; k0 += ATT_BK) {
        __syncthreads();
        att_load_tile<T, DP>(Ks, k + khead0 + k0 * kstride, kstride, S - k0, D);
        att_load_tile<T, DP>(Vs, v + khead0 + k0 * kstride, kstride, S - k0, D);
        __syncthreads();
        float s[4][4], dp[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);
        att_dot_tile<DP>(dOs, Vs, ty, tx, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int i = ty + 16 * a, j = tx + 16 * c, kj = k0 + j;
                float p = kj <= pos[a] && kj >= first[a] && kj < S ? exp2f(s[a][c] * scale2 - lse_s[i]) : 0.0f;
                dSs[i * ATT_SLD + j] = p * (dp[a][c] - D_s[i]);
            }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < ATT_BK; j++) {
            float ds[4], x[NC];
#pragma unroll
            for (int a = 0; a < 4; a++) ds[a] = dSs[(ty + 16 * a) * ATT_SLD + j];
#pragma unroll
            for (int c = 0; c < NC; c++) x[c] = Ks[j * LD + tx + 16 * c];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < NC; c++) acc_q[a][c] = fmaf(ds[a], x[c], acc_q[a][c]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int R = R0 + ty + 16 * a;
        if (R >= RN) continue;
        T *row = dq + qhead0 + att_row_off(R, G, qstride, D);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int d = tx + 16 * c;
            if (d < D) att_store(row + d, acc_q[a][c] * scale);
        }
    }
}

// ---- host side --------------------------------------------------------------------------------

typedef struct att_shape {
    int B, S, H, G, D, bf16; // G: query heads per kv head (H / Hkv)
    float scale;
    const int *docs; // (B, S) document starts, or NULL
} att_shape;

// Shape, dtype and scale of an ATTENTION or ATTENTION_BWD op; checks what the kernels assume.
static int att_shape_of(const stg_graph *g, int id, void *const *ptr, att_shape *sh, stg_err *err) {
    const stg_op *op = &g->ops[id];
    const stg_tensor *q = &g->t[op->in[0]], *kt = &g->t[op->in[1]];
    if (q->ndim != 4 || kt->ndim != 4)
        return stg_errf_at(err, op->loc, "%s: '%s' and '%s' must be (B, S, H, Dh)", ops_name(op->kind), q->name, kt->name);
    const bool bwd = op->kind == STG_OP_ATTENTION_BWD;
    int lse_in = bwd ? 4 : -1, docs_in = bwd ? 6 : 3;
    if (op->n_in <= docs_in) docs_in = -1;
    int bf16 = cuda_is_bf16(g, op, op->in[0], err);
    if (bf16 < 0) return -1;
    for (int i = 1; i < op->n_in; i++)
        if (i != lse_in && i != docs_in && cuda_same_float(g, op, op->in[i], op->in[0], err) < 0) return -1;
    for (int i = 0; i < op->n_out; i++) {
        int t = op->out[i];
        if (op->kind == STG_OP_ATTENTION && i == 1) {
            if (g->t[t].dtype != STG_F32)
                return stg_errf_at(err, op->loc, "attention: log-sum-exp '%s' must be f32", g->t[t].name);
        } else if (cuda_same_float(g, op, t, op->in[0], err) < 0) {
            return -1;
        }
    }
    if (lse_in >= 0 && g->t[op->in[lse_in]].dtype != STG_F32)
        return stg_errf_at(err, op->loc, "attention_bwd: log-sum-exp '%s' must be f32", g->t[op->in[lse_in]].name);
    int64_t Dh = q->shape[3], Hkv = kt->shape[2];
    if (Dh <= 0 || Dh > 128 || Dh % 8)
        return stg_errf_at(err, op->loc, "%s: head dim %lld is not supported on CUDA (a multiple of 8 up to 128)",
                           ops_name(op->kind), (long long)Dh);
    if (Hkv <= 0 || q->shape[2] % Hkv || kt->shape[0] != q->shape[0] || kt->shape[1] != q->shape[1] || kt->shape[3] != Dh)
        return stg_errf_at(err, op->loc, "%s: '%s' does not match '%s' (query heads a multiple of kv heads)",
                           ops_name(op->kind), kt->name, q->name);
    if (q->shape[0] > 65535 || q->shape[2] > 65535 || q->shape[1] > INT32_MAX / 2 ||
        q->shape[0] * q->shape[1] * q->shape[2] >= INT32_MAX)
        return stg_errf_at(err, op->loc, "%s: shape of '%s' too large for the CUDA kernel", ops_name(op->kind), q->name);
    for (int i = 0; i < op->n_in; i++)
        if (i != docs_in && (uintptr_t)ptr[op->in[i]] % 16)
            return stg_errf_at(err, op->loc, "%s: '%s' is not 16-byte aligned", ops_name(op->kind), g->t[op->in[i]].name);
    sh->docs = NULL;
    if (docs_in >= 0) {
        const stg_tensor *d = &g->t[op->in[docs_in]];
        if (d->dtype != STG_I32 || d->ndim != 2 || d->shape[0] != q->shape[0] || d->shape[1] != q->shape[1])
            return stg_errf_at(err, op->loc, "%s: docs '%s' must be i32 (B, S)", ops_name(op->kind), d->name);
        if ((uintptr_t)ptr[op->in[docs_in]] % 4)
            return stg_errf_at(err, op->loc, "%s: docs '%s' is not 4-byte aligned", ops_name(op->kind), d->name);
        sh->docs = (const int *)ptr[op->in[docs_in]];
    }
    sh->B = (int)q->shape[0];
    sh->S = (int)q->shape[1];
    sh->H = (int)q->shape[2];
    sh->G = (int)(q->shape[2] / Hkv);
    sh->D = (int)Dh;
    sh->bf16 = bf16;
    double sc = op->a.attention.scale;
    sh->scale = (float)(sc == 0.0 ? 1.0 / sqrt((double)Dh) : sc);
    return 0;
}

size_t cuda_attention_scratch_bytes(const stg_graph *g, int op) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION_BWD) return 0;
    const stg_tensor *q = &g->t[o->in[0]];
    if (q->ndim != 4) return 0;
    size_t n = (size_t)q->shape[0] * (size_t)q->shape[1] * (size_t)q->shape[2]; // D (B, H, S) f32
    return (n * sizeof(float) + 255) / 256 * 256;
}

// ---- bf16 on tensor cores (head dims that are multiples of 16) --------------------------------
//
// mma.sync m16n8k16 (bf16 in, f32 accumulate), operands fetched from shared memory with ldmatrix.
// Each warp owns 16 rows of the output tile (queries for the forward and dq, keys for dk and dv)
// and streams over the other side's tiles, which the block loads with cp.async into two shared
// stages (the next tile's copy overlaps this tile's math). Shared rows are DP + 8 elements long
// (16 bytes of padding: ldmatrix reads of 8 rows hit distinct banks). Rows past S are zero-filled.
// Fragment layouts (g = lane / 4, t = lane % 4): A (16 x 16) a0: (g, 2t..2t+1), a1: (g+8, 2t..),
// a2: (g, 2t+8..), a3: (g+8, 2t+8..); B (16 x 8) b0: (2t..2t+1, g), b1: (2t+8.., g);
// C (16 x 8) c0,c1: (g, 2t..2t+1), c2,c3: (g+8, 2t..2t+1).
// Probabilities and dS are rounded to bf16 for the second matmul of each pair (as FlashAttention
// does); the softmax statistics, lse and every accumulator stay f32. No atomics: deterministic.

typedef __nv_bfloat16 att_bf16;

// The backward's tile shapes, for tools/attn_tiles.sh: key and query tiles of ATT_TC_BWD_T1 up to head
// dim 64 (32 past it); ATT_TC_BWD_MINB, when defined, the blocks per SM asked of the register
// allocator (__launch_bounds__'s second value; even 1 changes ptxas's choice against none).
#ifndef ATT_TC_BWD_T1
#define ATT_TC_BWD_T1 64
#endif
#ifdef ATT_TC_BWD_MINB
#define ATT_BWD_BOUNDS(nt) __launch_bounds__(nt, ATT_TC_BWD_MINB)
#else
#define ATT_BWD_BOUNDS(nt) __launch_bounds__(nt)
#endif

__device__ __forceinline__ uint32_t att_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void att_cp16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(att_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void att_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void att_cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void att_ldm4(uint32_t r[4], const att_bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p)));
}
__device__ __forceinline__ void att_ldm4t(uint32_t r[4], const att_bf16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(att_smem_addr(p)));
}

// c (16 x 8) += a (16 x 16) b (16 x 8)
__device__ __forceinline__ void att_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t att_pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

// sh (ROWS, DP + 8) <- rows [0, valid) of the tile at base (row stride `stride`); zeros below.
template <int DP, int ROWS, int NT>
__device__ __forceinline__ void att_tc_load(att_bf16 *sh, const att_bf16 *base, int64_t stride, int valid, int D) {
    constexpr int G = DP / 8, LDS = DP + 8;
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * G; idx += NT) {
        int r = idx / G, c = (idx % G) * 8;
        bool ok = r < valid && c < D; // D is a multiple of 8: 8-element chunks are all in or all out
        att_cp16(sh + r * LDS + c, base + (ok ? (int64_t)r * stride + c : 0), ok);
    }
}

// sh (ROWS, DP + 8) <- rows R0 .. R0 + ROWS - 1 of a group (row R at base + att_row_off(R)); rows at
// and past RN zero.
template <int DP, int ROWS, int NT>
__device__ __forceinline__ void att_tc_load_rows(att_bf16 *sh, const att_bf16 *base, int64_t stride, int G, int D, int R0,
                                                 int RN) {
    constexpr int NC8 = DP / 8, LDS = DP + 8;
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * NC8; idx += NT) {
        int r = idx / NC8, c = (idx % NC8) * 8;
        bool ok = R0 + r < RN && c < D;
        att_cp16(sh + r * LDS + c, base + (ok ? att_row_off(R0 + r, G, stride, D) + c : 0), ok);
    }
}

// A fragment of rows [r0, r0 + 16), cols [c0, c0 + 16) of a (., DP + 8) shared tile.
template <int LDS>
__device__ __forceinline__ void att_frag_a(uint32_t a[4], const att_bf16 *sh, int r0, int c0, int lane) {
    att_ldm4(a, sh + (r0 + (lane & 15)) * LDS + c0 + (lane >> 4) * 8);
}
// B fragments of two n-blocks (rows n0 .. n0 + 15 of the tile are the n index), k = cols c0 .. c0 + 15:
// b[0], b[1] for n0 .. n0 + 7 and b[2], b[3] for n0 + 8 .. n0 + 15 (the tile holds B transposed).
template <int LDS>
__device__ __forceinline__ void att_frag_bt(uint32_t b[4], const att_bf16 *sh, int n0, int c0, int lane) {
    att_ldm4(b, sh + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LDS + c0 + ((lane >> 3) & 1) * 8);
}
// B fragments with k = rows k0 .. k0 + 15 and n = cols n0 .. n0 + 15 of the tile (B stored as is).
template <int LDS>
__device__ __forceinline__ void att_frag_b(uint32_t b[4], const att_bf16 *sh, int k0, int n0, int lane) {
    att_ldm4t(b, sh + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + n0 + (lane >> 4) * 8);
}

template <int DP, int NW, int MT, int BK>
static size_t att_tc_fwd_smem(void) {
    return sizeof(att_bf16) * (size_t)(DP + 8) * (16 * MT * NW + 4 * BK);
}

// Forward. Grid (tiles of 16 MT NW of the S G rows, H / G, B); NW warps of MT m-tiles of 16 rows (the
// K and V fragments loaded from shared memory serve all MT); key tiles of BK from the first one a
// document makes visible.
template <int DP, int NW, int MT, int BK, bool PAD>
__global__ void __launch_bounds__(NW * 32) att_tc_fwd_kernel(const att_bf16 *__restrict__ q, const att_bf16 *__restrict__ k,
                                                             const att_bf16 *__restrict__ v, const int *__restrict__ docs,
                                                             att_bf16 *__restrict__ o, float *__restrict__ lse, int S, int H,
                                                             int G, int Dr, float scale2) {
    const int D = PAD ? Dr : DP; // head dim (padded with zeros to DP in shared memory when PAD)
    constexpr int BQ = 16 * MT * NW, NT = 32 * NW, LDS = DP + 8, KD = DP / 16, NB = BK / 8, ND = DP / 8;
    extern __shared__ __align__(16) unsigned char att_smraw[];
    att_bf16 *Qs = (att_bf16 *)att_smraw, *Ks = Qs + BQ * LDS, *Vs = Ks + 2 * BK * LDS;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int hk = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int RN = S * G, q0 = qt * BQ, r0 = q0 + 16 * MT * warp; // first row of the block, of the warp
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int last = (min(q0 + BQ, RN) - 1) / G;       // the last position of the block
    const int kt0 = att_doc0(dc, q0 / G) / BK;          // the first key tile visible to the block
    const int ntiles = last / BK + 1 - kt0;
    // the warp's positions and the first key visible to its first row (docs do not decrease)
    const int wlast = r0 < RN ? (min(r0 + 16 * MT, RN) - 1) / G : -1, wfirst = r0 < RN ? att_doc0(dc, r0 / G) : 0;
    int pos[MT][2], first[MT][2]; // this thread's rows: position (-1 past the end) and first visible key
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int R = r0 + 16 * mt + g + 8 * i;
            pos[mt][i] = R < RN ? R / G : -1;
            first[mt][i] = R < RN ? att_doc0(dc, pos[mt][i]) : 0;
        }

    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, G, D, q0, RN);
    att_tc_load<DP, BK, NT>(Ks, k + khead0 + (int64_t)kt0 * BK * kstride, kstride, S - kt0 * BK, D);
    att_tc_load<DP, BK, NT>(Vs, v + khead0 + (int64_t)kt0 * BK * kstride, kstride, S - kt0 * BK, D);
    att_cp_commit();

    uint32_t qf[MT][KD][4];
    float acc[MT][ND][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < ND; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int t = 0; t < ntiles; t++) {
        const int k0 = (kt0 + t) * BK;
        if (t + 1 < ntiles) {
            const int st = (t + 1) & 1;
            att_tc_load<DP, BK, NT>(Ks + st * BK * LDS, k + khead0 + (int64_t)(k0 + BK) * kstride, kstride, S - k0 - BK, D);
            att_tc_load<DP, BK, NT>(Vs + st * BK * LDS, v + khead0 + (int64_t)(k0 + BK) * kstride, kstride, S - k0 - BK, D);
            att_cp_commit();
            att_cp_wait<1>();
        } else {
            att_cp_wait<0>();
        }
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kd = 0; kd < KD; kd++) att_frag_a<LDS>(qf[mt][kd], Qs, 16 * (MT * warp + mt), kd * 16, lane);
        }
        if (k0 <= wlast && k0 + BK > wfirst) { // some key of the tile is visible to some row of the warp
            const att_bf16 *Kt = Ks + (t & 1) * BK * LDS, *Vt = Vs + (t & 1) * BK * LDS;
            float s[MT][NB][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NB; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
            for (int kd = 0; kd < KD; kd++)
#pragma unroll
                for (int n2 = 0; n2 < NB / 2; n2++) {
                    uint32_t bb[4];
                    att_frag_bt<LDS>(bb, Kt, n2 * 16, kd * 16, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        att_mma(s[mt][2 * n2], qf[mt][kd], bb[0], bb[1]);
                        att_mma(s[mt][2 * n2 + 1], qf[mt][kd], bb[2], bb[3]);
                    }
                }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                // this thread's rows need masking: a key past a row, past S or before its document
                const bool mask = k0 + BK - 1 > min(pos[mt][0], pos[mt][1]) || k0 + BK > S ||
                                  k0 < max(first[mt][0], first[mt][1]);
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][n][e] * scale2;
                        if (mask) {
                            int key = k0 + n * 8 + 2 * t4 + (e & 1), i = e >> 1;
                            if (key > pos[mt][i] || key >= S || key < first[mt][i]) x = -INFINITY;
                        }
                        s[mt][n][e] = x;
                        mx[e >> 1] = fmaxf(mx[e >> 1], x);
                    }
                float alpha[2], base[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                    float mn = fmaxf(m[mt][i], mx[i]);
                    base[i] = mn == -INFINITY ? 0.0f : mn;
                    alpha[i] = exp2f(m[mt][i] - base[i]);
                    m[mt][i] = mn;
                }
                float sum[2] = {0.0f, 0.0f};
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = exp2f(s[mt][n][e] - base[e >> 1]);
                        s[mt][n][e] = p;
                        sum[e >> 1] += p;
                    }
#pragma unroll
                for (int i = 0; i < 2; i++) l[mt][i] = l[mt][i] * alpha[i] + sum[i];
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    acc[mt][n][0] *= alpha[0];
                    acc[mt][n][1] *= alpha[0];
                    acc[mt][n][2] *= alpha[1];
                    acc[mt][n][3] *= alpha[1];
                }
            }
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = att_pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = att_pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = att_pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = att_pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int d2 = 0; d2 < KD; d2++) {
                    uint32_t bb[4];
                    att_frag_b<LDS>(bb, Vt, kk * 16, d2 * 16, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        att_mma(acc[mt][2 * d2], a[mt], bb[0], bb[1]);
                        att_mma(acc[mt][2 * d2 + 1], a[mt], bb[2], bb[3]);
                    }
                }
            }
        }
        __syncthreads(); // this stage is consumed before the next iteration refills it
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float li = l[mt][i];
            li += __shfl_xor_sync(0xffffffffu, li, 1);
            li += __shfl_xor_sync(0xffffffffu, li, 2);
            const int row = r0 + 16 * mt + g + 8 * i;
            if (row >= RN) continue;
            const float inv = 1.0f / li;
            att_bf16 *orow = o + qhead0 + att_row_off(row, G, qstride, D);
#pragma unroll
            for (int n = 0; n < ND; n++)
                if (n * 8 < D) *(uint32_t *)(orow + n * 8 + 2 * t4) = att_pack(acc[mt][n][2 * i] * inv, acc[mt][n][2 * i + 1] * inv);
            if (t4 == 0) lse[att_stat_idx(row, G, b, H, hk, S)] = (m[mt][i] + log2f(li)) * (float)ATT_LN2;
        }
}

template <int DP, int NW, int BQ>
static size_t att_tc_dkdv_smem(void) {
    return sizeof(att_bf16) * (size_t)(DP + 8) * (2 * 16 * NW + 4 * BQ) + sizeof(float) * 4 * BQ + sizeof(int) * 4 * BQ;
}

// dk, dv. Grid (key tiles of 16 NW, H / G, B); NW warps of 16 keys; tiles of BQ rows (the group's
// queries) from the block's first key on, up to the end of the last document that sees its keys.
// Per warp and row tile: sT = K Qᵀ, pT = exp2(scale2 sT - lse2), dpT = V dOᵀ, dsT = pT (dpT - D);
// dv += pT dO, dk += dsT Q.
template <int DP, int NW, int BQ, bool PAD>
__global__ void ATT_BWD_BOUNDS(NW * 32) att_tc_dkdv_kernel(const att_bf16 *__restrict__ q, const att_bf16 *__restrict__ k,
                                                              const att_bf16 *__restrict__ v, const int *__restrict__ docs,
                                                              const float *__restrict__ lse,
                                                              const att_bf16 *__restrict__ dout,
                                                              const float *__restrict__ Dsum, att_bf16 *__restrict__ dk,
                                                              att_bf16 *__restrict__ dv, int S, int H, int G, int Dr,
                                                              int hminor, float scale, float scale2) {
    const int D = PAD ? Dr : DP; // head dim (padded with zeros to DP in shared memory when PAD)
    constexpr int BKB = 16 * NW, NT = 32 * NW, LDS = DP + 8, KD = DP / 16, NB = BQ / 8, ND = DP / 8;
    extern __shared__ __align__(16) unsigned char att_smraw[];
    att_bf16 *Ks = (att_bf16 *)att_smraw, *Vs = Ks + BKB * LDS, *Qs = Vs + BKB * LDS, *dOs = Qs + 2 * BQ * LDS;
    float *lse_s = (float *)(dOs + 2 * BQ * LDS), *D_s = lse_s + 2 * BQ;
    int *pos_s = (int *)(D_s + 2 * BQ), *first_s = pos_s + 2 * BQ; // per row of each stage: position, first key
    // hminor (grouped-query attention): grid (H / G, key tiles, B), every kv head's longest blocks first
    const int hk = hminor ? blockIdx.x : blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int k0 = (hminor ? blockIdx.y : blockIdx.x) * BKB, kw0 = k0 + 16 * warp;
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int RS = k0 * G, RN = (att_doc_end_block<NT>(dc, S, min(k0 + BKB, S) - 1) + 1) * G; // rows that see these keys
    const int ntiles = (RN - RS + BQ - 1) / BQ;

    // Row stats of a stage: lse (inf past RN: p = 0), D, position and first visible key.
    auto load_stats = [&](int st, int R0) {
        for (int i = threadIdx.x; i < BQ; i += NT) {
            const int R = R0 + i;
            const bool in = R < RN;
            lse_s[st * BQ + i] = in ? lse[att_stat_idx(R, G, b, H, hk, S)] * (float)ATT_LOG2E : INFINITY;
            D_s[st * BQ + i] = in ? Dsum[att_stat_idx(R, G, b, H, hk, S)] : 0.0f;
            pos_s[st * BQ + i] = in ? R / G : -1;
            first_s[st * BQ + i] = in ? att_doc0(dc, R / G) : 0;
        }
    };
    att_tc_load<DP, BKB, NT>(Ks, k + khead0 + (int64_t)k0 * kstride, kstride, S - k0, D);
    att_tc_load<DP, BKB, NT>(Vs, v + khead0 + (int64_t)k0 * kstride, kstride, S - k0, D);
    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, G, D, RS, RN);
    att_tc_load_rows<DP, BQ, NT>(dOs, dout + qhead0, qstride, G, D, RS, RN);
    att_cp_commit();
    load_stats(0, RS);

    float acc_k[ND][4], acc_v[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_k[n][e] = acc_v[n][e] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        const int q0 = RS + t * BQ; // first row of the tile
        if (t + 1 < ntiles) {
            const int st = (t + 1) & 1, qn = q0 + BQ;
            att_tc_load_rows<DP, BQ, NT>(Qs + st * BQ * LDS, q + qhead0, qstride, G, D, qn, RN);
            att_tc_load_rows<DP, BQ, NT>(dOs + st * BQ * LDS, dout + qhead0, qstride, G, D, qn, RN);
            att_cp_commit();
            load_stats(st, qn);
            att_cp_wait<1>();
        } else {
            att_cp_wait<0>();
        }
        __syncthreads();
        const int st = t & 1;
        const int qlast = (min(q0 + BQ, RN) - 1) / G; // the tile's last position
        // some row of the tile sees some key of the warp (first keys do not decrease along the rows)
        if (qlast >= kw0 && kw0 < S && first_s[st * BQ] <= kw0 + 15) {
            const att_bf16 *Qt = Qs + st * BQ * LDS, *dOt = dOs + st * BQ * LDS;
            const float *ls = lse_s + st * BQ, *Ds = D_s + st * BQ;
            const int *ps = pos_s + st * BQ, *fs = first_s + st * BQ;
            float s[NB][4], dp[NB][4];
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                uint32_t ka[4], va[4];
                att_frag_a<LDS>(ka, Ks, 16 * warp, kd * 16, lane);
                att_frag_a<LDS>(va, Vs, 16 * warp, kd * 16, lane);
#pragma unroll
                for (int n2 = 0; n2 < NB / 2; n2++) {
                    uint32_t bb[4];
                    att_frag_bt<LDS>(bb, Qt, n2 * 16, kd * 16, lane);
                    att_mma(s[2 * n2], ka, bb[0], bb[1]);
                    att_mma(s[2 * n2 + 1], ka, bb[2], bb[3]);
                    att_frag_bt<LDS>(bb, dOt, n2 * 16, kd * 16, lane);
                    att_mma(dp[2 * n2], va, bb[0], bb[1]);
                    att_mma(dp[2 * n2 + 1], va, bb[2], bb[3]);
                }
            }
            // masking: a row before a key of the warp, past the rows, or (first keys do not decrease along the
            // rows) in a document that starts after one of its keys
            const bool mask = ps[0] < kw0 + 15 || q0 + BQ > RN || fs[BQ - 1] > kw0;
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qc = n * 8 + 2 * t4 + (e & 1); // row column in the tile
                    float p = exp2f(s[n][e] * scale2 - ls[qc]);
                    const int key = kw0 + g + (e >> 1) * 8;
                    if (mask && (ps[qc] < key || key < fs[qc])) p = 0.0f;
                    s[n][e] = p;
                    dp[n][e] = p * (dp[n][e] - Ds[qc]);
                }
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
                uint32_t pa[4] = {att_pack(s[2 * kk][0], s[2 * kk][1]), att_pack(s[2 * kk][2], s[2 * kk][3]),
                                  att_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  att_pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                uint32_t da[4] = {att_pack(dp[2 * kk][0], dp[2 * kk][1]), att_pack(dp[2 * kk][2], dp[2 * kk][3]),
                                  att_pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                                  att_pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
                for (int d2 = 0; d2 < KD; d2++) {
                    uint32_t bb[4];
                    att_frag_b<LDS>(bb, dOt, kk * 16, d2 * 16, lane);
                    att_mma(acc_v[2 * d2], pa, bb[0], bb[1]);
                    att_mma(acc_v[2 * d2 + 1], pa, bb[2], bb[3]);
                    att_frag_b<LDS>(bb, Qt, kk * 16, d2 * 16, lane);
                    att_mma(acc_k[2 * d2], da, bb[0], bb[1]);
                    att_mma(acc_k[2 * d2 + 1], da, bb[2], bb[3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int key = kw0 + g + 8 * i;
        if (key >= S) continue;
        att_bf16 *krow = dk + khead0 + (int64_t)key * kstride, *vrow = dv + khead0 + (int64_t)key * kstride;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            if (n * 8 < D) {
                *(uint32_t *)(krow + n * 8 + 2 * t4) = att_pack(acc_k[n][2 * i] * scale, acc_k[n][2 * i + 1] * scale);
                *(uint32_t *)(vrow + n * 8 + 2 * t4) = att_pack(acc_v[n][2 * i], acc_v[n][2 * i + 1]);
            }
        }
    }
}

template <int DP, int NW, int BK>
static size_t att_tc_dq_smem(void) {
    return sizeof(att_bf16) * (size_t)(DP + 8) * (2 * 16 * NW + 4 * BK);
}

// dq. Grid (tiles of 16 NW of the S G rows, H / G, B); NW warps of 16 rows; key tiles of BK from the
// first one a document makes visible up to the diagonal. Per warp and key tile: s = Q Kᵀ,
// p = exp2(scale2 s - lse2), dp = dO Vᵀ, ds = p (dp - D); dq += ds K.
template <int DP, int NW, int BK, bool PAD>
__global__ void ATT_BWD_BOUNDS(NW * 32) att_tc_dq_kernel(const att_bf16 *__restrict__ q, const att_bf16 *__restrict__ k,
                                                            const att_bf16 *__restrict__ v, const int *__restrict__ docs,
                                                            const float *__restrict__ lse,
                                                            const att_bf16 *__restrict__ dout, const float *__restrict__ Dsum,
                                                            att_bf16 *__restrict__ dq, int S, int H, int G, int Dr, float scale,
                                                            float scale2) {
    const int D = PAD ? Dr : DP; // head dim (padded with zeros to DP in shared memory when PAD)
    constexpr int BQ = 16 * NW, NT = 32 * NW, LDS = DP + 8, KD = DP / 16, NB = BK / 8, ND = DP / 8;
    extern __shared__ __align__(16) unsigned char att_smraw[];
    att_bf16 *Qs = (att_bf16 *)att_smraw, *dOs = Qs + BQ * LDS, *Ks = dOs + BQ * LDS, *Vs = Ks + 2 * BK * LDS;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int hk = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int RN = S * G, q0 = qt * BQ, r0 = q0 + 16 * warp;
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int last = (min(q0 + BQ, RN) - 1) / G;
    const int kt0 = att_doc0(dc, q0 / G) / BK;
    const int ntiles = last / BK + 1 - kt0;
    const int wlast = r0 < RN ? (min(r0 + 16, RN) - 1) / G : -1, wfirst = r0 < RN ? att_doc0(dc, r0 / G) : 0;

    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, G, D, q0, RN);
    att_tc_load_rows<DP, BQ, NT>(dOs, dout + qhead0, qstride, G, D, q0, RN);
    att_tc_load<DP, BK, NT>(Ks, k + khead0 + (int64_t)kt0 * BK * kstride, kstride, S - kt0 * BK, D);
    att_tc_load<DP, BK, NT>(Vs, v + khead0 + (int64_t)kt0 * BK * kstride, kstride, S - kt0 * BK, D);
    att_cp_commit();
    float lrow[2], drow[2];
    int pos[2], first[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = r0 + g + 8 * i;
        lrow[i] = row < RN ? lse[att_stat_idx(row, G, b, H, hk, S)] * (float)ATT_LOG2E : INFINITY;
        drow[i] = row < RN ? Dsum[att_stat_idx(row, G, b, H, hk, S)] : 0.0f;
        pos[i] = row < RN ? row / G : -1;
        first[i] = row < RN ? att_doc0(dc, pos[i]) : 0;
    }
    float acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        const int k0 = (kt0 + t) * BK;
        if (t + 1 < ntiles) {
            const int st = (t + 1) & 1;
            att_tc_load<DP, BK, NT>(Ks + st * BK * LDS, k + khead0 + (int64_t)(k0 + BK) * kstride, kstride, S - k0 - BK, D);
            att_tc_load<DP, BK, NT>(Vs + st * BK * LDS, v + khead0 + (int64_t)(k0 + BK) * kstride, kstride, S - k0 - BK, D);
            att_cp_commit();
            att_cp_wait<1>();
        } else {
            att_cp_wait<0>();
        }
        __syncthreads();
        if (k0 <= wlast && k0 + BK > wfirst) {
            const att_bf16 *Kt = Ks + (t & 1) * BK * LDS, *Vt = Vs + (t & 1) * BK * LDS;
            float s[NB][4], dp[NB][4];
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                uint32_t qa[4], da[4];
                att_frag_a<LDS>(qa, Qs, 16 * warp, kd * 16, lane);
                att_frag_a<LDS>(da, dOs, 16 * warp, kd * 16, lane);
#pragma unroll
                for (int n2 = 0; n2 < NB / 2; n2++) {
                    uint32_t bb[4];
                    att_frag_bt<LDS>(bb, Kt, n2 * 16, kd * 16, lane);
                    att_mma(s[2 * n2], qa, bb[0], bb[1]);
                    att_mma(s[2 * n2 + 1], qa, bb[2], bb[3]);
                    att_frag_bt<LDS>(bb, Vt, n2 * 16, kd * 16, lane);
                    att_mma(dp[2 * n2], da, bb[0], bb[1]);
                    att_mma(dp[2 * n2 + 1], da, bb[2], bb[3]);
                }
            }
            const bool mask = k0 + BK - 1 > min(pos[0], pos[1]) || k0 + BK > S || k0 < max(first[0], first[1]);
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(s[n][e] * scale2 - lrow[e >> 1]);
                    if (mask) {
                        const int key = k0 + n * 8 + 2 * t4 + (e & 1), i = e >> 1;
                        if (key > pos[i] || key >= S || key < first[i]) p = 0.0f;
                    }
                    s[n][e] = p * (dp[n][e] - drow[e >> 1]);
                }
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t a[4] = {att_pack(s[2 * kk][0], s[2 * kk][1]), att_pack(s[2 * kk][2], s[2 * kk][3]),
                                 att_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), att_pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int d2 = 0; d2 < KD; d2++) {
                    uint32_t bb[4];
                    att_frag_b<LDS>(bb, Kt, kk * 16, d2 * 16, lane);
                    att_mma(acc[2 * d2], a, bb[0], bb[1]);
                    att_mma(acc[2 * d2 + 1], a, bb[2], bb[3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = r0 + g + 8 * i;
        if (row >= RN) continue;
        att_bf16 *qrow = dq + qhead0 + att_row_off(row, G, qstride, D);
#pragma unroll
        for (int n = 0; n < ND; n++)
            if (n * 8 < D) *(uint32_t *)(qrow + n * 8 + 2 * t4) = att_pack(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
    }
}

// Tile shapes: forward 8 warps of one m-tile (128 queries) up to head dim 64 and 4 warps (64 queries)
// past it (registers: one block of 8 such warps per SM), key tiles of 64; dk/dv 4 warps (64 keys) x
// 64 queries (32 past head dim 64, for registers); dq 4 warps (64 queries) x 64 keys (32 past 64).
// Measured on an H100 (B4 H16 Dh64 S4096): 2 m-tiles per warp (4 warps) ran no faster than 1 (178
// against 181 TFLOP/s); at Dh80 S512, 4 warps ran the forward at 92 TFLOP/s against 79 with 8.
#ifndef ATT_TC_FWD_NW
#define ATT_TC_FWD_NW 8
#endif
#ifndef ATT_TC_FWD_MT
#define ATT_TC_FWD_MT 1
#endif
#ifndef ATT_TC_FWD_NW_BIG
#define ATT_TC_FWD_NW_BIG 4
#endif
#define ATT_TC_FWD_BK 64
#ifndef ATT_TC_BWD_NW
#define ATT_TC_BWD_NW 4
#endif

#ifdef STG_ATT_WGMMA
// Whether the device runs the sm_90a wgmma kernels (compute capability 9.0): *yes, or -1 with err set.
static int att_on_sm90(stg_cuda *c, bool *yes, stg_err *err) {
    int major = 0, minor = 0;
    CUDA_CHECK(err, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->device));
    CUDA_CHECK(err, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c->device));
    *yes = major == 9 && minor == 0;
    return 0;
}
#endif

template <int DP, bool PAD>
static int att_tc_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
#ifdef STG_ATT_WGMMA
    if (att_wgmma_fwd_supported(s->D, s->scale)) { // wgmma on compute capability 9.0 (the sm_90a build)
        bool sm90 = false;
        if (att_on_sm90(c, &sm90, err)) return -1;
        if (sm90)
            return att_wgmma_fwd(c->stream, ptr[op->in[0]], ptr[op->in[1]], ptr[op->in[2]], s->docs, ptr[op->out[0]],
                                 (float *)ptr[op->out[1]], s->B, s->S, s->H, s->G, s->D, (float)(s->scale * ATT_LOG2E), err);
    }
#endif
    constexpr int MT = DP <= 64 ? ATT_TC_FWD_MT : 1, NW = DP <= 64 ? ATT_TC_FWD_NW : ATT_TC_FWD_NW_BIG, BK = ATT_TC_FWD_BK;
    size_t smem = att_tc_fwd_smem<DP, NW, MT, BK>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_tc_fwd_kernel<DP, NW, MT, BK, PAD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
    dim3 grid((unsigned)((s->S * s->G + 16 * MT * NW - 1) / (16 * MT * NW)), (unsigned)(s->H / s->G), (unsigned)s->B);
    att_tc_fwd_kernel<DP, NW, MT, BK, PAD><<<grid, NW * 32, smem, c->stream>>>(
        (const att_bf16 *)ptr[op->in[0]], (const att_bf16 *)ptr[op->in[1]], (const att_bf16 *)ptr[op->in[2]], s->docs,
        (att_bf16 *)ptr[op->out[0]], (float *)ptr[op->out[1]], s->S, s->H, s->G, s->D, (float)(s->scale * ATT_LOG2E));
    CUDA_LAUNCH_CHECK(err, "attention forward (tensor cores)");
    return 0;
}

// dk, dv and dq launches (after the D kernel).
template <int DP, bool PAD>
static int att_tc_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, const float *Dsum,
                             stg_err *err) {
    constexpr int NW = ATT_TC_BWD_NW, BQ = DP <= 64 ? ATT_TC_BWD_T1 : 32, BK = DP <= 64 ? ATT_TC_BWD_T1 : 32;
    const att_bf16 *q = (const att_bf16 *)ptr[op->in[0]], *k = (const att_bf16 *)ptr[op->in[1]];
    const att_bf16 *v = (const att_bf16 *)ptr[op->in[2]], *dout = (const att_bf16 *)ptr[op->in[5]];
    const float *lse = (const float *)ptr[op->in[4]];
    att_bf16 *dq = (att_bf16 *)ptr[op->out[0]], *dk = (att_bf16 *)ptr[op->out[1]], *dv = (att_bf16 *)ptr[op->out[2]];
    float scale2 = (float)(s->scale * ATT_LOG2E);
#ifdef STG_ATT_WGMMA
    if (att_wgmma_bwd_supported(s->D)) { // wgmma on compute capability 9.0 (the sm_90a build)
        bool sm90 = false;
        if (att_on_sm90(c, &sm90, err)) return -1;
        if (sm90)
            return att_wgmma_bwd(c->stream, q, k, v, s->docs, lse, dout, Dsum, dq, dk, dv, s->B, s->S, s->H, s->G, s->D,
                                 s->scale, scale2, err);
    }
#endif
    const unsigned hkv = (unsigned)(s->H / s->G), nk = (unsigned)((s->S + 16 * NW - 1) / (16 * NW));
    const int hminor = s->G > 1 && nk <= 65535; // a key tile's block loops over G heads' rows: issue the longest first
    dim3 gk(hminor ? hkv : nk, hminor ? nk : hkv, (unsigned)s->B);
    dim3 gq((unsigned)((s->S * s->G + 16 * NW - 1) / (16 * NW)), hkv, (unsigned)s->B);
    size_t smem = att_tc_dkdv_smem<DP, NW, BQ>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_tc_dkdv_kernel<DP, NW, BQ, PAD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
    att_tc_dkdv_kernel<DP, NW, BQ, PAD><<<gk, NW * 32, smem, c->stream>>>(q, k, v, s->docs, lse, dout, Dsum, dk, dv, s->S,
                                                                     s->H, s->G, s->D, hminor, s->scale, scale2);
    CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv, tensor cores)");
    smem = att_tc_dq_smem<DP, NW, BK>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_tc_dq_kernel<DP, NW, BK, PAD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    att_tc_dq_kernel<DP, NW, BK, PAD><<<gq, NW * 32, smem, c->stream>>>(q, k, v, s->docs, lse, dout, Dsum, dq, s->S, s->H,
                                                                   s->G, s->D, s->scale, scale2);
    CUDA_LAUNCH_CHECK(err, "attention backward (dq, tensor cores)");
    return 0;
}

template <typename T, int DP>
static int att_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
    if constexpr (sizeof(T) == 2) { // bf16: tensor cores (head dims padded with zeros to DP in the kernels)
        return s->D == DP ? att_tc_fwd_launch<DP, false>(c, s, ptr, op, err) : att_tc_fwd_launch<DP, true>(c, s, ptr, op, err);
    } else {
        size_t smem = att_fwd_smem<DP>();
        CUDA_CHECK(err, cudaFuncSetAttribute(att_fwd_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        dim3 grid((unsigned)((s->S * s->G + ATT_BQ - 1) / ATT_BQ), (unsigned)(s->H / s->G), (unsigned)s->B);
        att_fwd_kernel<T, DP><<<grid, ATT_NT, smem, c->stream>>>(
            (const T *)ptr[op->in[0]], (const T *)ptr[op->in[1]], (const T *)ptr[op->in[2]], s->docs, (T *)ptr[op->out[0]],
            (float *)ptr[op->out[1]], s->S, s->H, s->G, s->D, (float)(s->scale * ATT_LOG2E));
        CUDA_LAUNCH_CHECK(err, "attention forward");
        return 0;
    }
}

template <typename T, int DP>
static int att_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, float *Dsum, stg_err *err) {
    const T *q = (const T *)ptr[op->in[0]], *k = (const T *)ptr[op->in[1]], *v = (const T *)ptr[op->in[2]];
    const T *o = (const T *)ptr[op->in[3]], *dout = (const T *)ptr[op->in[5]];
    const float *lse = (const float *)ptr[op->in[4]];
    T *dq = (T *)ptr[op->out[0]], *dk = (T *)ptr[op->out[1]], *dv = (T *)ptr[op->out[2]];
    int64_t rows = (int64_t)s->B * s->S * s->H;
    att_bwd_dot_kernel<T><<<cuda_blocks(c, rows, 256), 256, 0, c->stream>>>(o, dout, Dsum, (int)rows, s->S, s->H,
                                                                           s->D);
    CUDA_LAUNCH_CHECK(err, "attention backward (do . o)");
    if constexpr (sizeof(T) == 2) {
        return s->D == DP ? att_tc_bwd_launch<DP, false>(c, s, ptr, op, Dsum, err)
                          : att_tc_bwd_launch<DP, true>(c, s, ptr, op, Dsum, err);
    } else {
        const unsigned hkv = (unsigned)(s->H / s->G);
        dim3 gk((unsigned)((s->S + ATT_BK - 1) / ATT_BK), hkv, (unsigned)s->B);
        dim3 gq((unsigned)((s->S * s->G + ATT_BQ - 1) / ATT_BQ), hkv, (unsigned)s->B);
        float scale2 = (float)(s->scale * ATT_LOG2E);
        size_t smem = att_dkdv_smem<DP>();
        CUDA_CHECK(err, cudaFuncSetAttribute(att_dkdv_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        att_dkdv_kernel<T, DP><<<gk, ATT_NT, smem, c->stream>>>(q, k, v, s->docs, lse, dout, Dsum, dk, dv, s->S, s->H, s->G,
                                                                s->D, s->scale, scale2);
        CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv)");
        smem = att_dq_smem<DP>();
        CUDA_CHECK(err, cudaFuncSetAttribute(att_dq_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        att_dq_kernel<T, DP><<<gq, ATT_NT, smem, c->stream>>>(q, k, v, s->docs, lse, dout, Dsum, dq, s->S, s->H, s->G, s->D,
                                                              s->scale, scale2);
        CUDA_LAUNCH_CHECK(err, "attention backward (dq)");
        return 0;
    }
}

// Calls F<T, DP>(args...) with DP the head dim rounded up to 16.
#define ATT_DISPATCH(F, s, ...)                                                                         \
    do {                                                                                                \
        int dp_ = ((s)->D + 15) / 16 * 16;                                                              \
        if ((s)->bf16) {                                                                                \
            switch (dp_) {                                                                              \
            case 16: return F<__nv_bfloat16, 16>(__VA_ARGS__);                                          \
            case 32: return F<__nv_bfloat16, 32>(__VA_ARGS__);                                          \
            case 48: return F<__nv_bfloat16, 48>(__VA_ARGS__);                                          \
            case 64: return F<__nv_bfloat16, 64>(__VA_ARGS__);                                          \
            case 80: return F<__nv_bfloat16, 80>(__VA_ARGS__);                                          \
            case 96: return F<__nv_bfloat16, 96>(__VA_ARGS__);                                          \
            case 112: return F<__nv_bfloat16, 112>(__VA_ARGS__);                                        \
            case 128: return F<__nv_bfloat16, 128>(__VA_ARGS__);                                        \
            }                                                                                           \
        } else {                                                                                        \
            switch (dp_) {                                                                              \
            case 16: return F<float, 16>(__VA_ARGS__);                                                  \
            case 32: return F<float, 32>(__VA_ARGS__);                                                  \
            case 48: return F<float, 48>(__VA_ARGS__);                                                  \
            case 64: return F<float, 64>(__VA_ARGS__);                                                  \
            case 80: return F<float, 80>(__VA_ARGS__);                                                  \
            case 96: return F<float, 96>(__VA_ARGS__);                                                  \
            case 112: return F<float, 112>(__VA_ARGS__);                                                \
            case 128: return F<float, 128>(__VA_ARGS__);                                                \
            }                                                                                           \
        }                                                                                               \
        return stg_errf(err, "attention: head dim %d not supported", (s)->D);                          \
    } while (0)

extern "C" int cuda_attention_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION) return stg_errf(err, "cuda attention: op %d is %s", op, ops_name(o->kind));
    att_shape s;
    if (att_shape_of(g, op, ptr, &s, err)) return -1;
    (void)scratch;
    ATT_DISPATCH(att_fwd_launch, &s, c, &s, ptr, o, err);
}

extern "C" int cuda_attention_bwd_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch,
                                      stg_err *err) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION_BWD) return stg_errf(err, "cuda attention backward: op %d is %s", op, ops_name(o->kind));
    att_shape s;
    if (att_shape_of(g, op, ptr, &s, err)) return -1;
    if (!scratch) return stg_errf(err, "cuda attention backward: op %d has no scratch", op);
    float *Dsum = (float *)scratch;
    ATT_DISPATCH(att_bwd_launch, &s, c, &s, ptr, o, Dsum, err);
}

// ---- records ------------------------------------------------------------------------------------

static int prep_attention(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    *work = cuda_attention_scratch_bytes(g, op);
    return 0;
}

static int cuda_run_attention(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_attention_run(c, g, op, ptr, c->work, err);
}

static int cuda_run_attention_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_attention_bwd_run(c, g, op, ptr, c->work, err);
}

const cuda_rec stg_cuda_attention = {cuda_run_attention, prep_attention, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_attention_bwd = {cuda_run_attention_bwd, prep_attention, NULL, NULL, CUDA_REC_MAIN, NULL};
