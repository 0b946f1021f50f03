// Fused causal attention, flash style, on CUDA cores (fp32 arithmetic; f32 or bf16 storage).
//
// Layout (B, S, H, Dh) for q, k, v, o, do, dq, dk, dv: head h of token s of batch b starts at
// ((b S + s) H + h) Dh. lse (B, H, S) f32. scale = attrs scale, or 1/sqrt(Dh) when 0.
//
// Forward: one block per (64 queries, head, batch) keeps its queries in shared memory and streams
// over the key tiles up to the diagonal with a running row max and sum (the S x S scores are never
// stored), then writes o and lse = log sum_j exp(scale q_i k_j).
// Backward, three launches, no atomics (replay is bitwise equal to eager launch):
//   1. D_i = do_i . o_i into the scratch (B, H, S) f32;
//   2. one block per key tile loops over the query tiles at and below the diagonal and accumulates
//      dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij do_i in registers;
//   3. one block per query tile loops over the key tiles up to the diagonal and accumulates
//      dq_i = scale sum_j ds_ij k_j.
//   with p_ij = exp(scale q_i k_j - lse_i), ds_ij = p_ij (do_i . v_j - D_i).
// Tiles are 64 x 64 with 256 threads; each thread holds a 4 x 4 block of scores (rows ty + 16a,
// columns tx + 16b) and a 4 x (DP/16) block of the output rows (dims tx + 16c). Head dims are any
// multiple of 8 up to 128; shared tiles are padded with zeros to DP, the next multiple of 16.
// Exponentials are taken base 2 on log2(e)-scaled scores.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"

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

// q, k, v (B, S, H, D) -> o (B, S, H, D), lse (B, H, S). Grid (query tiles, H, B).
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_fwd_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                         const T *__restrict__ v, T *__restrict__ o,
                                                         float *__restrict__ lse, int S, int H, int D, float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + ATT_BQ * LD, *Vs = Ks + ATT_BK * LD, *Ss = Vs + ATT_BK * LD;
    float *m_s = Ss + ATT_BQ * ATT_SLD, *l_s = m_s + ATT_BQ, *a_s = l_s + ATT_BQ;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16, warp = tid / 32, lane = tid % 32;
    const int q0 = qt * ATT_BQ;
    const int64_t stride = (int64_t)H * D;
    const int64_t head0 = (int64_t)b * S * stride + (int64_t)h * D; // token 0 of this head

    att_load_tile<T, DP>(Qs, q + head0 + q0 * stride, stride, S - q0, D);
    if (tid < ATT_BQ) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    float acc_o[4][NC];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_o[a][c] = 0.0f;

    const int last = min(q0 + ATT_BQ, S) - 1; // the last query of the tile
    for (int k0 = 0; k0 <= last; k0 += ATT_BK) {
        __syncthreads(); // the previous tile's K, V and P are consumed
        att_load_tile<T, DP>(Ks, k + head0 + k0 * stride, stride, S - k0, D);
        att_load_tile<T, DP>(Vs, v + head0 + k0 * stride, stride, S - k0, D);
        __syncthreads();
        float s[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int qi = q0 + ty + 16 * a, kj = k0 + tx + 16 * c;
                Ss[(ty + 16 * a) * ATT_SLD + tx + 16 * c] = kj <= qi && kj < S ? s[a][c] * scale2 : -INFINITY;
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
        int r = ty + 16 * a, qi = q0 + r;
        if (qi >= S) continue;
        float l = l_s[r], inv = 1.0f / l;
        T *orow = o + head0 + qi * stride;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int d = tx + 16 * c;
            if (d < D) att_store(orow + d, acc_o[a][c] * inv);
        }
        if (tx == 0) lse[((int64_t)b * H + h) * S + qi] = (m_s[r] + log2f(l)) * (float)ATT_LN2;
    }
}

// ---- backward ---------------------------------------------------------------------------------

// Dsum (B, H, S) = sum_d do . o, one warp per (b, s, h) row.
template <typename T>
__global__ void att_bwd_dot_kernel(const T *__restrict__ o, const T *__restrict__ dout, float *__restrict__ Dsum, int B,
                                   int S, int H, int D) {
    const int64_t rows = (int64_t)B * S * H;
    const int lane = threadIdx.x % 32;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        const T *a = o + r * D, *g = dout + r * D;
        float acc = 0.0f;
        for (int d = lane; d < D; d += 32) acc = fmaf(att_to_float(a[d]), att_to_float(g[d]), acc);
        acc = att_warp_sum(acc);
        if (lane == 0) {
            int64_t hh = r % H, s = (r / H) % S, bb = r / ((int64_t)H * S);
            Dsum[(bb * H + hh) * S + s] = acc;
        }
    }
}

template <int DP>
static size_t att_dkdv_smem(void) {
    return sizeof(float) * (4 * ATT_BQ * (DP + 1) + 2 * ATT_BQ * ATT_SLD + 2 * ATT_BQ);
}

// One block per (key tile, head, batch): dk, dv of its keys over every query at or after them.
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_dkdv_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                          const T *__restrict__ v, const float *__restrict__ lse,
                                                          const T *__restrict__ dout, const float *__restrict__ Dsum,
                                                          T *__restrict__ dk, T *__restrict__ dv, int S, int H, int D,
                                                          float scale, float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_BK * LD, *Qs = Vs + ATT_BK * LD, *dOs = Qs + ATT_BQ * LD;
    float *Ps = dOs + ATT_BQ * LD, *dSs = Ps + ATT_BQ * ATT_SLD, *lse_s = dSs + ATT_BQ * ATT_SLD, *D_s = lse_s + ATT_BQ;
    const int kt = blockIdx.x; // the first key tiles see the most queries: launched first
    const int h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int k0 = kt * ATT_BK;
    const int64_t stride = (int64_t)H * D;
    const int64_t head0 = (int64_t)b * S * stride + (int64_t)h * D;
    const int64_t row0 = ((int64_t)b * H + h) * S; // lse and Dsum of this head

    att_load_tile<T, DP>(Ks, k + head0 + k0 * stride, stride, S - k0, D);
    att_load_tile<T, DP>(Vs, v + head0 + k0 * stride, stride, S - k0, D);
    float acc_k[4][NC], acc_v[4][NC];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_k[a][c] = acc_v[a][c] = 0.0f;

    for (int q0 = k0; q0 < S; q0 += ATT_BQ) {
        __syncthreads(); // the previous query tile is consumed
        att_load_tile<T, DP>(Qs, q + head0 + q0 * stride, stride, S - q0, D);
        att_load_tile<T, DP>(dOs, dout + head0 + q0 * stride, stride, S - q0, D);
        if (tid < ATT_BQ) {
            bool in = q0 + tid < S;
            lse_s[tid] = in ? lse[row0 + q0 + tid] * (float)ATT_LOG2E : 0.0f;
            D_s[tid] = in ? Dsum[row0 + q0 + tid] : 0.0f;
        }
        __syncthreads();
        float s[4][4], dp[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);   // rows: queries, columns: keys
        att_dot_tile<DP>(dOs, Vs, ty, tx, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int i = ty + 16 * a, j = tx + 16 * c, qi = q0 + i, kj = k0 + j;
                float p = kj <= qi && qi < S && kj < S ? exp2f(s[a][c] * scale2 - lse_s[i]) : 0.0f;
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
        T *krow = dk + head0 + kj * stride, *vrow = dv + head0 + kj * stride;
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

// One block per (query tile, head, batch): dq of its queries over every key up to them.
template <typename T, int DP>
__global__ void __launch_bounds__(ATT_NT) att_dq_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                                        const T *__restrict__ v, const float *__restrict__ lse,
                                                        const T *__restrict__ dout, const float *__restrict__ Dsum,
                                                        T *__restrict__ dq, int S, int H, int D, float scale, float scale2) {
    constexpr int LD = DP + 1, NC = DP / 16;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + ATT_BQ * LD, *Ks = dOs + ATT_BQ * LD, *Vs = Ks + ATT_BK * LD;
    float *dSs = Vs + ATT_BK * LD, *lse_s = dSs + ATT_BQ * ATT_SLD, *D_s = lse_s + ATT_BQ;
    const int qt = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int q0 = qt * ATT_BQ;
    const int64_t stride = (int64_t)H * D;
    const int64_t head0 = (int64_t)b * S * stride + (int64_t)h * D;
    const int64_t row0 = ((int64_t)b * H + h) * S;

    att_load_tile<T, DP>(Qs, q + head0 + q0 * stride, stride, S - q0, D);
    att_load_tile<T, DP>(dOs, dout + head0 + q0 * stride, stride, S - q0, D);
    if (tid < ATT_BQ) {
        bool in = q0 + tid < S;
        lse_s[tid] = in ? lse[row0 + q0 + tid] * (float)ATT_LOG2E : 0.0f;
        D_s[tid] = in ? Dsum[row0 + q0 + tid] : 0.0f;
    }
    float acc_q[4][NC];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_q[a][c] = 0.0f;

    const int last = min(q0 + ATT_BQ, S) - 1;
    for (int k0 = 0; k0 <= last; k0 += ATT_BK) {
        __syncthreads();
        att_load_tile<T, DP>(Ks, k + head0 + k0 * stride, stride, S - k0, D);
        att_load_tile<T, DP>(Vs, v + head0 + k0 * stride, stride, S - k0, D);
        __syncthreads();
        float s[4][4], dp[4][4];
        att_dot_tile<DP>(Qs, Ks, ty, tx, s);
        att_dot_tile<DP>(dOs, Vs, ty, tx, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int i = ty + 16 * a, j = tx + 16 * c, qi = q0 + i, kj = k0 + j;
                float p = kj <= qi && qi < S && kj < S ? exp2f(s[a][c] * scale2 - lse_s[i]) : 0.0f;
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
        int qi = q0 + ty + 16 * a;
        if (qi >= S) continue;
        T *row = dq + head0 + qi * stride;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int d = tx + 16 * c;
            if (d < D) att_store(row + d, acc_q[a][c] * scale);
        }
    }
}

// ---- host side --------------------------------------------------------------------------------

typedef struct att_shape {
    int B, S, H, D, bf16;
    float scale;
} att_shape;

// Shape, dtype and scale of an ATTENTION or ATTENTION_BWD op; checks what the kernels assume.
static int att_shape_of(const stg_graph *g, int id, void *const *ptr, att_shape *sh, stg_err *err) {
    const stg_op *op = &g->ops[id];
    const stg_tensor *q = &g->t[op->in[0]];
    if (q->ndim != 4) return stg_errf_at(err, op->loc, "%s: '%s' must be (B, S, H, Dh)", ops_name(op->kind), q->name);
    int lse_in = op->kind == STG_OP_ATTENTION_BWD ? 4 : -1;
    int bf16 = cuda_is_bf16(g, op, op->in[0], err);
    if (bf16 < 0) return -1;
    for (int i = 1; i < op->n_in; i++)
        if (i != lse_in && cuda_same_float(g, op, op->in[i], op->in[0], err) < 0) return -1;
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
    int64_t Dh = q->shape[3];
    if (Dh <= 0 || Dh > 128 || Dh % 8)
        return stg_errf_at(err, op->loc, "%s: head dim %lld is not supported on CUDA (a multiple of 8 up to 128)",
                           ops_name(op->kind), (long long)Dh);
    if (q->shape[0] > 65535 || q->shape[2] > 65535 || q->shape[1] > INT32_MAX / 2)
        return stg_errf_at(err, op->loc, "%s: shape of '%s' too large for the CUDA kernel", ops_name(op->kind), q->name);
    for (int i = 0; i < op->n_in; i++)
        if ((uintptr_t)ptr[op->in[i]] % 16)
            return stg_errf_at(err, op->loc, "%s: '%s' is not 16-byte aligned", ops_name(op->kind), g->t[op->in[i]].name);
    sh->B = (int)q->shape[0];
    sh->S = (int)q->shape[1];
    sh->H = (int)q->shape[2];
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

template <typename T, int DP>
static int att_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
    size_t smem = att_fwd_smem<DP>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_fwd_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((s->S + ATT_BQ - 1) / ATT_BQ), (unsigned)s->H, (unsigned)s->B);
    att_fwd_kernel<T, DP><<<grid, ATT_NT, smem, c->stream>>>(
        (const T *)ptr[op->in[0]], (const T *)ptr[op->in[1]], (const T *)ptr[op->in[2]], (T *)ptr[op->out[0]],
        (float *)ptr[op->out[1]], s->S, s->H, s->D, (float)(s->scale * ATT_LOG2E));
    CUDA_LAUNCH_CHECK(err, "attention forward");
    return 0;
}

template <typename T, int DP>
static int att_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, float *Dsum, stg_err *err) {
    const T *q = (const T *)ptr[op->in[0]], *k = (const T *)ptr[op->in[1]], *v = (const T *)ptr[op->in[2]];
    const T *o = (const T *)ptr[op->in[3]], *dout = (const T *)ptr[op->in[5]];
    const float *lse = (const float *)ptr[op->in[4]];
    T *dq = (T *)ptr[op->out[0]], *dk = (T *)ptr[op->out[1]], *dv = (T *)ptr[op->out[2]];
    int64_t rows = (int64_t)s->B * s->S * s->H;
    unsigned nb = cuda_blocks(c, rows, 8); // 8 warps (rows) per 256-thread block
    att_bwd_dot_kernel<T><<<nb, 256, 0, c->stream>>>(o, dout, Dsum, s->B, s->S, s->H, s->D);
    CUDA_LAUNCH_CHECK(err, "attention backward (do . o)");
    dim3 grid((unsigned)((s->S + ATT_BQ - 1) / ATT_BQ), (unsigned)s->H, (unsigned)s->B);
    float scale2 = (float)(s->scale * ATT_LOG2E);
    size_t smem = att_dkdv_smem<DP>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_dkdv_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    att_dkdv_kernel<T, DP><<<grid, ATT_NT, smem, c->stream>>>(q, k, v, lse, dout, Dsum, dk, dv, s->S, s->H, s->D, s->scale,
                                                              scale2);
    CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv)");
    smem = att_dq_smem<DP>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_dq_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    att_dq_kernel<T, DP><<<grid, ATT_NT, smem, c->stream>>>(q, k, v, lse, dout, Dsum, dq, s->S, s->H, s->D, s->scale, scale2);
    CUDA_LAUNCH_CHECK(err, "attention backward (dq)");
    return 0;
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
