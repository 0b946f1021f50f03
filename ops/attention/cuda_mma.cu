// The bf16 attention kernels on tensor cores through mma.sync (the algorithm: ops/attention/cuda.cu),
// and the hand-off to the wgmma kernels of ops/attention/sm90a/ on compute capability 9.0.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/attention/cuda.cuh"
#ifdef STG_ATT_WGMMA
#include "ops/attention/sm90a/attention_wgmma.h"
#endif

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

// The A fragment (16 x 16, bf16) of k-step kk from accumulators x of n-blocks 2 kk and 2 kk + 1 (the
// m16n8 accumulator layout is the A operand's: a P or dS tile feeds the next product from registers).
template <int NB> __device__ __forceinline__ void att_a_of(uint32_t (&a)[4], const float (&x)[NB][4], int kk) {
    a[0] = att_pack(x[2 * kk][0], x[2 * kk][1]);
    a[1] = att_pack(x[2 * kk][2], x[2 * kk][3]);
    a[2] = att_pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    a[3] = att_pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
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
__device__ __forceinline__ void att_tc_load_rows(att_bf16 *sh, const att_bf16 *base, int64_t stride, att_grp gr, int D, int R0,
                                                 int RN) {
    constexpr int NC8 = DP / 8, LDS = DP + 8;
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * NC8; idx += NT) {
        int r = idx / NC8, c = (idx % NC8) * 8;
        bool ok = R0 + r < RN && c < D;
        att_cp16(sh + r * LDS + c, base + (ok ? att_row_off(R0 + r, gr, stride, D) + c : 0), ok);
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

// s = A1 B1ᵀ and dp = A2 B2ᵀ over KD k-steps of 16 (the backward's two score products: Sᵀ and dPᵀ in
// the dk/dv blocks, S and dP in the dq blocks), the warp's 16 rows of A1 and A2 from row 16 warp,
// NB n-blocks of 8 of B1 and B2; s and dp are zeroed first.
template <int LDS, int KD, int NB>
__device__ __forceinline__ void att_two_products(float (&s)[NB][4], float (&dp)[NB][4], const att_bf16 *A1, const att_bf16 *A2,
                                                 const att_bf16 *B1, const att_bf16 *B2, int warp, int lane) {
#pragma unroll
    for (int n = 0; n < NB; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kd = 0; kd < KD; kd++) {
        uint32_t a1[4], a2[4];
        att_frag_a<LDS>(a1, A1, 16 * warp, kd * 16, lane);
        att_frag_a<LDS>(a2, A2, 16 * warp, kd * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < NB / 2; n2++) {
            uint32_t bb[4];
            att_frag_bt<LDS>(bb, B1, n2 * 16, kd * 16, lane);
            att_mma(s[2 * n2], a1, bb[0], bb[1]);
            att_mma(s[2 * n2 + 1], a1, bb[2], bb[3]);
            att_frag_bt<LDS>(bb, B2, n2 * 16, kd * 16, lane);
            att_mma(dp[2 * n2], a2, bb[0], bb[1]);
            att_mma(dp[2 * n2 + 1], a2, bb[2], bb[3]);
        }
    }
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

    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, att_grp_of(G), D, q0, RN);
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
                for (int mt = 0; mt < MT; mt++) att_a_of(a[mt], s[mt], kk);
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
    const att_grp gr = att_grp_of(G); // R / G and R % G in the loop without a division (rows.cuh)
    const int ntiles = (RN - RS + BQ - 1) / BQ;

    // Row stats of a stage: lse (inf past RN: p = 0), D, position and first visible key.
    auto load_stats = [&](int st, int R0) {
        for (int i = threadIdx.x; i < BQ; i += NT) {
            const int R = R0 + i;
            const bool in = R < RN;
            lse_s[st * BQ + i] = in ? lse[att_stat_idx(R, gr, b, H, hk, S)] * (float)ATT_LOG2E : INFINITY;
            D_s[st * BQ + i] = in ? Dsum[att_stat_idx(R, gr, b, H, hk, S)] : 0.0f;
            pos_s[st * BQ + i] = in ? att_div(gr, R) : -1;
            first_s[st * BQ + i] = in ? att_doc0(dc, att_div(gr, R)) : 0;
        }
    };
    att_tc_load<DP, BKB, NT>(Ks, k + khead0 + (int64_t)k0 * kstride, kstride, S - k0, D);
    att_tc_load<DP, BKB, NT>(Vs, v + khead0 + (int64_t)k0 * kstride, kstride, S - k0, D);
    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, gr, D, RS, RN);
    att_tc_load_rows<DP, BQ, NT>(dOs, dout + qhead0, qstride, gr, D, RS, RN);
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
            att_tc_load_rows<DP, BQ, NT>(Qs + st * BQ * LDS, q + qhead0, qstride, gr, D, qn, RN);
            att_tc_load_rows<DP, BQ, NT>(dOs + st * BQ * LDS, dout + qhead0, qstride, gr, D, qn, RN);
            att_cp_commit();
            load_stats(st, qn);
            att_cp_wait<1>();
        } else {
            att_cp_wait<0>();
        }
        __syncthreads();
        const int st = t & 1;
        const int qlast = att_div(gr, min(q0 + BQ, RN) - 1); // the tile's last position
        // some row of the tile sees some key of the warp (first keys do not decrease along the rows)
        if (qlast >= kw0 && kw0 < S && first_s[st * BQ] <= kw0 + 15) {
            const att_bf16 *Qt = Qs + st * BQ * LDS, *dOt = dOs + st * BQ * LDS;
            const float *ls = lse_s + st * BQ, *Ds = D_s + st * BQ;
            const int *ps = pos_s + st * BQ, *fs = first_s + st * BQ;
            float s[NB][4], dp[NB][4];
            att_two_products<LDS, KD, NB>(s, dp, Ks, Vs, Qt, dOt, warp, lane); // Sᵀ = K Qᵀ, dPᵀ = V dOᵀ
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
                uint32_t pa[4], da[4];
                att_a_of(pa, s, kk);
                att_a_of(da, dp, kk);
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

    att_tc_load_rows<DP, BQ, NT>(Qs, q + qhead0, qstride, att_grp_of(G), D, q0, RN);
    att_tc_load_rows<DP, BQ, NT>(dOs, dout + qhead0, qstride, att_grp_of(G), D, q0, RN);
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
            att_two_products<LDS, KD, NB>(s, dp, Qs, dOs, Kt, Vt, warp, lane); // S = Q Kᵀ, dP = dO Vᵀ
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
                uint32_t a[4];
                att_a_of(a, s, kk);
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

size_t att_tc_bwd_ws_bytes(stg_cuda *c, const att_shape *s, stg_err *err, int *fail) {
    *fail = 0;
#ifdef STG_ATT_WGMMA
    if (s->bf16 && att_wgmma_bwd_supported(s->D)) {
        bool sm90 = false;
        if (att_on_sm90(c, &sm90, err)) {
            *fail = 1;
            return 0;
        }
        if (sm90) return att_ws_bwd_ws_bytes(s->B, s->S, s->H, s->G, s->D);
    }
#else
    (void)c, (void)s, (void)err;
#endif
    return 0;
}

template <int DP, bool PAD>
int att_tc_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
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
int att_tc_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, const float *Dsum,
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
        if (sm90) {
            const att_side side = {c->side, c->side_ev[0], c->side_ev[1]};
            return att_wgmma_bwd(c->stream, &side, q, k, v, s->docs, lse, dout, Dsum, dq, dk, dv, s->B, s->S, s->H, s->G,
                                 s->D, s->scale, scale2, s->ws, s->ws_bytes, err);
        }
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

#define ATT_TC_INST(DP)                                                                                        \
    template int att_tc_fwd_launch<DP, false>(stg_cuda *, const att_shape *, void *const *, const stg_op *, stg_err *); \
    template int att_tc_fwd_launch<DP, true>(stg_cuda *, const att_shape *, void *const *, const stg_op *, stg_err *);  \
    template int att_tc_bwd_launch<DP, false>(stg_cuda *, const att_shape *, void *const *, const stg_op *,            \
                                              const float *, stg_err *);                                             \
    template int att_tc_bwd_launch<DP, true>(stg_cuda *, const att_shape *, void *const *, const stg_op *,             \
                                             const float *, stg_err *);
ATT_HEAD_DIMS(ATT_TC_INST)
#undef ATT_TC_INST
