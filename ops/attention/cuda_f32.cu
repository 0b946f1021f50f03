// The attention kernels on CUDA cores, for f32 storage (the algorithm: ops/attention/cuda.cu).
// Tiles are 64 x 64 with 256 threads; each thread holds a 4 x 4 block of scores (rows ty + 16a,
// columns tx + 16b) and a 4 x (DP/16) block of the output rows (dims tx + 16c). Head dims are any
// multiple of 8 up to 128; shared tiles are padded with zeros to DP, the next multiple of 16.
#include <math.h>
#include <stdint.h>

#include "ops/attention/cuda.cuh"

#define ATT_BQ 64      // queries per tile
#define ATT_BK 64      // keys per tile (equal to ATT_BQ: the diagonal tiles line up)
#define ATT_NT 256     // threads per block
#define ATT_SLD 65     // row stride of the 64 x 64 score tiles in shared memory

// ---- tiles -------------------------------------------------------------------------------------

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
__device__ void att_load_rows(float *sh, const T *base, int64_t stride, att_grp gr, int D, int R0, int RN) {
    constexpr int NC8 = DP / 8, LD = DP + 1;
    for (int idx = threadIdx.x; idx < ATT_BQ * NC8; idx += ATT_NT) {
        int r = idx / NC8, c = (idx % NC8) * 8;
        float v[8];
        if (R0 + r < RN && c < D) {
            att_load8(base + att_row_off(R0 + r, gr, stride, D) + c, v);
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

// acc[a][c] += sum_j P[ty + 16a][j] X[j][tx + 16c] over the ATT_BK columns of the (64, ATT_SLD) tile P
// and the rows of X ((ATT_BK, DP + 1)): the forward's O += P V and the dq blocks' dQ += dS K.
template <int DP>
__device__ __forceinline__ void att_acc_px(float (&acc)[4][DP / 16], const float *P, const float *X, int ty, int tx) {
    constexpr int LD = DP + 1, NC = DP / 16;
#pragma unroll 4
    for (int j = 0; j < ATT_BK; j++) {
        float p[4], x[NC];
#pragma unroll
        for (int a = 0; a < 4; a++) p[a] = P[(ty + 16 * a) * ATT_SLD + j];
#pragma unroll
        for (int c = 0; c < NC; c++) x[c] = X[j * LD + tx + 16 * c];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < NC; c++) acc[a][c] = fmaf(p[a], x[c], acc[a][c]);
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

    att_load_rows<T, DP>(Qs, q + qhead0, qstride, att_grp_of(G), D, R0, RN);
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
        att_acc_px<DP>(acc_o, Ss, Vs, ty, tx); // O += P V
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
    const att_grp gr = att_grp_of(G); // R / G and R % G in the loop without a division (rows.cuh)
    float acc_k[4][NC], acc_v[4][NC];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc_k[a][c] = acc_v[a][c] = 0.0f;

    for (int R0 = k0 * G; R0 < RN; R0 += ATT_BQ) {
        __syncthreads(); // the previous row tile is consumed
        att_load_rows<T, DP>(Qs, q + qhead0, qstride, gr, D, R0, RN);
        att_load_rows<T, DP>(dOs, dout + qhead0, qstride, gr, D, R0, RN);
        if (tid < ATT_BQ) {
            const int R = R0 + tid;
            const bool in = R < RN;
            lse_s[tid] = in ? lse[att_stat_idx(R, gr, b, H, hk, S)] * (float)ATT_LOG2E : 0.0f;
            D_s[tid] = in ? Dsum[att_stat_idx(R, gr, b, H, hk, S)] : 0.0f;
            pos_s[tid] = in ? att_div(gr, R) : -1;
        } else if (tid < 2 * ATT_BQ) {
            const int R = R0 + tid - ATT_BQ;
            first_s[tid - ATT_BQ] = R < RN ? att_doc0(dc, att_div(gr, R)) : 0;
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

    att_load_rows<T, DP>(Qs, q + qhead0, qstride, att_grp_of(G), D, R0, RN);
    att_load_rows<T, DP>(dOs, dout + qhead0, qstride, att_grp_of(G), D, R0, RN);
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
        att_acc_px<DP>(acc_q, dSs, Ks, ty, tx); // dQ += dS K
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

// ---- launchers -----------------------------------------------------------------------------------

template <typename T, int DP>
int att_f32_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
    size_t smem = att_fwd_smem<DP>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_fwd_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((s->S * s->G + ATT_BQ - 1) / ATT_BQ), (unsigned)(s->H / s->G), (unsigned)s->B);
    att_fwd_kernel<T, DP><<<grid, ATT_NT, smem, c->stream>>>(
        (const T *)ptr[op->in[0]], (const T *)ptr[op->in[1]], (const T *)ptr[op->in[2]], s->docs, (T *)ptr[op->out[0]],
        (float *)ptr[op->out[1]], s->S, s->H, s->G, s->D, (float)(s->scale * ATT_LOG2E));
    CUDA_LAUNCH_CHECK(err, "attention forward");
    return 0;
}

template <typename T, int DP>
int att_f32_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, const float *Dsum,
                       stg_err *err) {
    const T *q = (const T *)ptr[op->in[0]], *k = (const T *)ptr[op->in[1]], *v = (const T *)ptr[op->in[2]];
    const T *dout = (const T *)ptr[op->in[5]];
    const float *lse = (const float *)ptr[op->in[4]];
    T *dq = (T *)ptr[op->out[0]], *dk = (T *)ptr[op->out[1]], *dv = (T *)ptr[op->out[2]];
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

#define ATT_F32_INST(DP)                                                                                    \
    template int att_f32_fwd_launch<float, DP>(stg_cuda *, const att_shape *, void *const *, const stg_op *, stg_err *); \
    template int att_f32_bwd_launch<float, DP>(stg_cuda *, const att_shape *, void *const *, const stg_op *,            \
                                               const float *, stg_err *);
ATT_HEAD_DIMS(ATT_F32_INST)
#undef ATT_F32_INST
