// Causal flash attention backward, bf16, on Hopper's warpgroup matrix instructions (wgmma; compiled
// for sm_90a only, see CMakeLists.txt). Same function as att_tc_dkdv_kernel and att_tc_dq_kernel in
// ../attention.cu (D_i = do_i . o_i comes first, from ../attention.cu), with
// p_ij = exp2(scale2 q_i . k_j - lse_i log2 e), ds_ij = p_ij (do_i . v_j - D_i) over j <= i:
//   dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij do_i, dq_i = scale sum_j ds_ij k_j.
// No atomics: every output element is summed by one thread in a fixed order, so a graph replay is
// bitwise equal to an eager launch.
//
// Grouped-query attention (H = G Hkv) and packed documents as in ../rows.cuh: the query side of every
// block is the S G rows of the G query heads of one kv head (position R / G of head hk G + R % G).
// dk, dv: one block per 64 NWG keys of a kv head (a warpgroup per 64 keys), the blocks with the most
// row tiles first. K and V of the block stay in shared memory (the A operands); the block streams the
// row tiles (every query head of the group) at and after its first key, up to the end of the last
// document that sees its keys (Q, dO, lse, D, document starts) through NST shared stages, NST - 2
// tiles ahead, so dk and dv are summed over the group in registers.
// Per query tile and warpgroup:
//   Sᵀ = K Qᵀ and dPᵀ = V dOᵀ issued (two commit groups); wait for Sᵀ (and for the last tile's dV,
//   dK products); Pᵀ = exp2(scale2 Sᵀ - lse2) in f32, masked where key > query or query >= S; wait
//   for dPᵀ; dSᵀ = Pᵀ (dPᵀ - D); Pᵀ and dSᵀ to bf16 registers, the A operands of dV += Pᵀ dO and
//   dK += dSᵀ Q, issued and left running under the next tile's loads and products.
// dq: one block per 64 NWG rows, the longest rows first. Q and dO of the block go to registers once
// (ldmatrix from padded shared rows: the A operands of S and dP, so those products read only K or V
// from shared memory; at head dim 128 they stay in shared memory, WG_DQ_RS); the block streams the
// key tiles from the first its document makes visible up to its diagonal (K, V). Per key tile and
// warpgroup:
//   S = Q Kᵀ and dP = dO Vᵀ issued; P and dS as above with lse and D per row; dQ += dS K issued.
// Q, dO, K and V tiles are read K-major by the first products and MN-major by the second ones, from
// one layout (wgmma.cuh): 64-dim panels in the 128-byte swizzle, and at head dim 80 a 16-dim tail
// panel in the 32-byte swizzle whose products are m64n16 (so 80 costs 80, not 128).
// The dk/dv and dq blocks run in one launch (att_wg_bwd_kernel, alternating in the grid): they share
// the multiprocessors and one tail. Measured on an H100 against two launches (docs/PERF.md): B4 H25
// Dh64 S1024 0.196 -> 0.182 ms, B4 H32 Dh80 S1024 0.282 -> 0.265 ms, B4 H16 Dh64 S4096 1.247 -> 1.207 ms.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"
#include "ops/attention/sm90a/attention_wgmma.h"
#include "ops/attention/sm90a/wgmma.cuh"

#define WG_LOG2E 1.4426950408889634f

// The accumulator element e of this thread, as two A-operand halves: n8 block j = e / 4 is k-step
// j / 2, register (j % 2) * 2 + row half. Packs the 64 x 64 tile x into af (bf16).
__device__ __forceinline__ void wg_to_a(uint32_t (&af)[4][4], const float (&x)[32]) {
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const int j = e >> 2, i = (e >> 1) & 1;
        af[j >> 1][(j & 1) * 2 + i] = wg_pack(x[e], x[e + 1]);
    }
}
template <int N> __device__ __forceinline__ void wg_keep_all(float (&x)[N]) {
#pragma unroll
    for (int e = 0; e < N; e++) wg_keep(x[e]);
}
__device__ __forceinline__ void wg_keep_a(uint32_t (&a)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) wg_keep(a[kk][e]);
}

// ---- dk, dv -------------------------------------------------------------------------------------

template <int D, int NWG, int NST>
static size_t wg_dkdv_smem(void) {
    // K and V of the block, NST stages of Q and dO (64 rows each), lse and D of each stage
    return sizeof(wg_bf16) * ((size_t)2 * 64 * NWG * D + (size_t)2 * NST * 64 * D) + sizeof(float) * 4 * NST * 64 +
           1024; // + alignment (stats: lse, D, the rows' positions and first visible keys)
}

// Key tile bx (64 NWG keys) of kv head blockIdx.y, batch blockIdx.z; block 128 NWG threads.
template <int D, int NWG, int NST>
__device__ __forceinline__ void att_wg_dkdv_body(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k,
                                                 const wg_bf16 *__restrict__ v, const int *__restrict__ docs,
                                                 const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                                                 const float *__restrict__ Dsum, wg_bf16 *__restrict__ dk,
                                                 wg_bf16 *__restrict__ dv, int S, int H, int G, float scale, float scale2,
                                                 int bx, int hk) {
    constexpr int BQ = 64, BKB = 64 * NWG, NT = 128 * NWG, KD = D / 16, NDC = D / 64, TL = D % 64 == 16, PF = NST - 2;
    constexpr bool WH = D == 128; // descriptors built whole (wgmma.cuh, wg_desc_off)
    constexpr int TILE = BQ * D; // elements of one Q or dO stage (a multiple of 512: stages stay 1024-byte aligned)
    static_assert(NST >= 3, "three stages at least");
    static_assert(D % 64 == 0 || D % 64 == 16, "head dim 64 NP or 64 NP + 16");
    extern __shared__ __align__(128) unsigned char wg_smraw[];
    const uint32_t raw = wg_smem(wg_smraw), base = (raw + 1023u) & ~1023u;
    // K at Kb, V at Vb; stage s: Q at st0 + 4 s TILE bytes, dO after it; then lse and D of stage s, then
    // the rows' first visible keys and positions (-1 past the rows that see these keys) of stage s
    const uint32_t Kb = base, Vb = Kb + BKB * D * 2, st0 = Vb + BKB * D * 2;
    float *stat = (float *)(wg_smraw + (st0 + NST * 4 * TILE - raw));
    int *fstat = (int *)(stat + 2 * NST * BQ), *pstat = fstat + NST * BQ;
    const int b = blockIdx.z;
    const int k0 = bx * BKB; // tile 0 has the most row tiles
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, warp / 4, 0); // provably warp-uniform: wgmma is not serialized
    const int kw0 = k0 + 64 * wg, kwarp = kw0 + 16 * (warp % 4);
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D; // row 0 of the group
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const att_grp gr = att_grp_of(G); // R / G and R % G of the streamed rows without a division

    wg_load_rows<D, BKB, NT>(Kb, k + khead0 + (int64_t)k0 * kstride, kstride, S - k0);
    wg_load_rows<D, BKB, NT>(Vb, v + khead0 + (int64_t)k0 * kstride, kstride, S - k0);
    // rows that may see these keys (found while K and V load)
    const int RS = k0 * G, RN = (att_doc_end_block<NT>(dc, S, min(k0 + BKB, S) - 1) + 1) * G;
    const int ntiles = (RN - RS + BQ - 1) / BQ; // row tiles RS, RS + BQ, ... below RN
    // One commit group per row tile (empty past the last), tile t in stage t % NST; K and V ride
    // with tile 0.
    auto load_q = [&](int t) {
        if (t < ntiles) {
            const int qn = RS + t * BQ, s = t % NST;
            const uint32_t qs = st0 + (uint32_t)(s * 4 * TILE);
            const uint32_t dst[2] = {qs, qs + 2 * TILE};
            const wg_bf16 *const src[2] = {q + qhead0, dout + qhead0};
            wg_load_rows_g<D, BQ, NT, 2>(dst, src, qstride, gr, qn, RN); // Q and dO: one row offset for both
            for (int j = threadIdx.x; j < 2 * BQ; j += NT) { // lse by j 0 .. 63, D by 64 .. 127
                const int i = j % BQ;
                const bool ok = qn + i < RN;
                const float *src = (j < BQ ? lse : Dsum) + (ok ? att_stat_idx(qn + i, gr, b, H, hk, S) : 0);
                wg_cp4(wg_smem(stat + (2 * s + j / BQ) * BQ + i), src, ok);
            }
            for (int i = threadIdx.x; i < BQ; i += NT) { // the rows' first keys and positions (read after the barrier)
                const bool ok = qn + i < RN;
                pstat[s * BQ + i] = ok ? att_div(gr, qn + i) : -1;
                fstat[s * BQ + i] = ok ? att_doc0(dc, pstat[s * BQ + i]) : 0;
            }
        }
        wg_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < PF; t++) load_q(t);

    float dka[NDC][32], dva[NDC][32], dkt[8], dvt[8]; // dkt, dvt: the tail panel's 16 dims (head dim 80)
#pragma unroll
    for (int c = 0; c < NDC; c++)
#pragma unroll
        for (int e = 0; e < 32; e++) dka[c][e] = dva[c][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) dkt[e] = dvt[e] = 0.0f;
    uint32_t pa[4][4], sa4[4][4]; // Pᵀ and dSᵀ of the last tile (bf16): A operands, k-steps of 16 queries
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) pa[kk][e] = sa4[kk][e] = 0u;

    auto keep_acc = [&]() {
#pragma unroll
        for (int c = 0; c < NDC; c++) {
            wg_keep_all(dka[c]);
            wg_keep_all(dva[c]);
        }
        if constexpr (TL) {
            wg_keep_all(dkt);
            wg_keep_all(dvt);
        }
    };
    // dV += Pᵀ dO and dK += dSᵀ Q of the tile in pa, sa4 (stage s), issued, not waited for.
    auto issue_dkdv = [&](int s) {
        const uint32_t qs = st0 + (uint32_t)(s * 4 * TILE), ds = qs + 2 * TILE;
        keep_acc();
        wg_keep_a(pa);
        wg_keep_a(sa4);
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) { // m: keys, n: dims, k: queries
#pragma unroll
            for (int dc = 0; dc < NDC; dc++) {
                wg_mma_n64<1>(dva[dc], pa[kk], wg_desc_mnmaj<WH>(ds, BQ, kk, dc), 1);
                wg_mma_n64<1>(dka[dc], sa4[kk], wg_desc_mnmaj<WH>(qs, BQ, kk, dc), 1);
            }
            if constexpr (TL) {
                wg_mma_n16<1>(dvt, pa[kk], wg_tdesc<NDC, WH>(ds, BQ, kk));
                wg_mma_n16<1>(dkt, sa4[kk], wg_tdesc<NDC, WH>(qs, BQ, kk));
            }
        }
        wg_commit();
    };

    int prev = -1; // stage of the tile whose products wait in pa, sa4
    for (int t = 0; t < ntiles; t++) {
        wg_cp_wait<PF - 1>(); // this thread's copies of tile t have landed
        wg_fence_proxy();
        __syncthreads(); // tile t has landed for everyone; every warpgroup is done with tile t - 2's stage
        load_q(t + PF);  // into stage (t - 2) % NST
        const int q0 = RS + t * BQ, s = t % NST; // the tile's first row
        const int *f_s = fstat + s * BQ, *p_s = pstat + s * BQ;
        // every row of the tile before every key of the warpgroup, or (docs) in documents after them.
        // The second happens only after tiles this warpgroup used (with several warpgroups, the block's
        // rows run on to the end of its last key's document): the last one's products, still waiting in
        // pa and sa4, read a stage the loads above will refill, so they are issued and finished now.
        if (att_div(gr, min(q0 + BQ, RN) - 1) < kw0 || kw0 >= S || f_s[0] > kw0 + 63) {
            if (prev >= 0) { // stage prev holds tile t - 1: the load above went to tile t - 2's
                issue_dkdv(prev);
                wg_wait<0>();
                prev = -1;
            }
            continue;
        }
        const uint32_t qs = st0 + (uint32_t)(s * 4 * TILE), ds = qs + 2 * TILE;
        const float *lse_s = stat + 2 * s * BQ, *D_s = lse_s + BQ;
        float st[32], dpt[32];
        wg_ss_product<KD, NDC, WH>(st, Kb, BKB, 64 * wg, qs, BQ);  // m: keys, n: queries, k: dims
        wg_ss_product<KD, NDC, WH>(dpt, Vb, BKB, 64 * wg, ds, BQ);
        if (prev >= 0)
            issue_dkdv(prev);
        else
            wg_commit(); // an empty group: three groups after Sᵀ's either way, for the waits below
        // lse (as -lse log2 e) and D of this thread's 16 query columns
        float nl[16], dd[16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float2 l2 = *(const float2 *)(lse_s + j * 8 + 2 * t4), d2 = *(const float2 *)(D_s + j * 8 + 2 * t4);
            nl[2 * j] = -l2.x * WG_LOG2E;
            nl[2 * j + 1] = -l2.y * WG_LOG2E;
            dd[2 * j] = d2.x;
            dd[2 * j + 1] = d2.y;
        }
        wg_wait<2>(); // Sᵀ is done (the groups after it: dPᵀ, the last tile's products or an empty one)
        wg_keep_all(st);
        // masking: a row before a key of the warpgroup, past the rows, or (first keys do not decrease along
        // the rows) in a document that starts after one of its keys
        // (uniform over the warpgroup: one branch a tile, so the unmasked tiles do not issue the mask's
        // instructions, which a test inside the element loop was compiled to; not at head dim 128, whose
        // two-warpgroup blocks spill more with both loops: 284 bytes against 176)
        const bool mask = kw0 + 63 > p_s[0] || q0 + BQ > RN || f_s[BQ - 1] > kw0;
        if (D == 128) {
#pragma unroll
            for (int e = 0; e < 32; e++) {
                const int ci = 2 * (e >> 2) + (e & 1);
                float p = wg_ex2(fmaf(st[e], scale2, nl[ci]));
                if (mask) {
                    const int key = kwarp + wg_row(e, g), col = wg_col(e, t4);
                    if (key > p_s[col] || key < f_s[col]) p = 0.0f;
                }
                st[e] = p;
            }
        } else if (mask) {
#pragma unroll
            for (int e = 0; e < 32; e++) {
                const int key = kwarp + wg_row(e, g), col = wg_col(e, t4);
                const float p = wg_ex2(fmaf(st[e], scale2, nl[2 * (e >> 2) + (e & 1)]));
                st[e] = key > p_s[col] || key < f_s[col] ? 0.0f : p; // rows past RN: position -1
            }
        } else {
#pragma unroll
            for (int e = 0; e < 32; e++) st[e] = wg_ex2(fmaf(st[e], scale2, nl[2 * (e >> 2) + (e & 1)]));
        }
        wg_wait<1>(); // dPᵀ is done
        wg_keep_all(dpt);
#pragma unroll
        for (int e = 0; e < 32; e++) dpt[e] = st[e] * (dpt[e] - dd[2 * (e >> 2) + (e & 1)]);
        wg_wait<0>(); // the last tile's products are done: pa, sa4, dK and dV are free
        keep_acc();
        wg_keep_a(pa);
        wg_keep_a(sa4);
        wg_to_a(pa, st);
        wg_to_a(sa4, dpt);
        prev = s;
    }
    if (prev >= 0) {
        issue_dkdv(prev); // stage prev is not refilled: no load was issued after the last __syncthreads
        wg_wait<0>();
    }
    keep_acc();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = kwarp + g + 8 * i;
        if (row >= S) continue;
        wg_store_row<NDC, TL>(dk + khead0 + (int64_t)row * kstride, dka, dkt, i, t4, scale);
        wg_store_row<NDC, TL>(dv + khead0 + (int64_t)row * kstride, dva, dvt, i, t4, 1.0f);
    }
}

// ---- dq -----------------------------------------------------------------------------------------

// Whether the dq blocks keep Q and dO in registers (the A operands of S and dP): not at head dim 128,
// where the 64 registers raised the dq kernel from 186 to 237 and that backward measured 2% slower
// (H200, 2026-11-28f); at 64 and 80 the fused backward was 4-6% faster.
#define WG_DQ_RS(D) ((D) != 128)

template <int D, int NWG, int NST>
static size_t wg_dq_smem(void) {
    // Q and dO of the block (padded rows read once into registers, or swizzled tiles), NST stages of K
    // and V (64 rows each)
    return sizeof(wg_bf16) * ((size_t)2 * 64 * NWG * (WG_DQ_RS(D) ? D + 8 : D) + (size_t)2 * NST * 64 * D) + 2048;
}

// Row tile nbx - 1 - bx (64 NWG of the S G rows; of nbx, the longest rows for bx 0) of kv head
// blockIdx.y, batch blockIdx.z; block 128 NWG threads.
template <int D, int NWG, int NST>
__device__ __forceinline__ void att_wg_dq_body(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k,
                                               const wg_bf16 *__restrict__ v, const int *__restrict__ docs,
                                               const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                                               const float *__restrict__ Dsum, wg_bf16 *__restrict__ dq, int S, int H,
                                               int G, float scale, float scale2, int bx, int nbx, int hk) {
    constexpr int BK = 64, BQB = 64 * NWG, NT = 128 * NWG, KD = D / 16, NDC = D / 64, TL = D % 64 == 16, PF = NST - 2;
    constexpr bool WH = D == 128; // descriptors built whole (wgmma.cuh, wg_desc_off)
    constexpr int TILE = BK * D; // elements of one K or V stage
    static_assert(NST >= 3, "three stages at least");
    static_assert(D % 64 == 0 || D % 64 == 16, "head dim 64 NP or 64 NP + 16");
    extern __shared__ __align__(128) unsigned char wg_smraw[];
    const uint32_t base = (wg_smem(wg_smraw) + 1023u) & ~1023u;
    // Q at Qb, dO at dOb (rows of D + 8 elements: ldmatrix without bank conflicts); stage s: K at
    // st0 + 4 s TILE bytes, V after it
    constexpr bool RS = WG_DQ_RS(D);
    constexpr int LDQ = RS ? D + 8 : D;
    const uint32_t Qb = base, dOb = Qb + BQB * LDQ * 2, st0 = (dOb + BQB * LDQ * 2 + 1023u) & ~1023u;
    const int b = blockIdx.z;
    const int qt = nbx - 1 - bx; // the longest rows first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, warp / 4, 0);
    const int RN = S * G, q0 = qt * BQB, rw0 = q0 + 64 * wg, rwarp = rw0 + 16 * (warp % 4); // rows
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int last = (min(q0 + BQB, RN) - 1) / G;
    const int kt0 = att_doc0(dc, q0 / G) / BK;                                     // first visible key tile
    const int ntiles = last / BK + 1 - kt0;                                        // key tiles of the block
    const int wtiles = rw0 < RN ? (min(rw0 + 63, RN - 1) / G) / BK + 1 - kt0 : 0; // of this warpgroup

    if constexpr (!RS) {
        const uint32_t dst[2] = {Qb, dOb};
        const wg_bf16 *const src[2] = {q + qhead0, dout + qhead0};
        wg_load_rows_g<D, BQB, NT, 2>(dst, src, qstride, att_grp_of(G), q0, RN);
    } else { // Q and dO of the block's rows, one row offset for both
        constexpr int NC8 = D / 8;
        const att_grp gr = att_grp_of(G);
        for (int idx = threadIdx.x; idx < BQB * NC8; idx += NT) {
            const int r = idx / NC8, c = (idx % NC8) * 8;
            const bool ok = q0 + r < RN;
            const int64_t o = ok ? att_row_off(q0 + r, gr, qstride, D) + c : 0;
            const uint32_t so = (uint32_t)((r * LDQ + c) * 2);
            wg_cp16(Qb + so, q + qhead0 + o, ok);
            wg_cp16(dOb + so, dout + qhead0 + o, ok);
        }
    }
    auto load_kv = [&](int t) {
        if (t < ntiles) {
            const int kn = (kt0 + t) * BK;
            const uint32_t ks = st0 + (uint32_t)((t % NST) * 4 * TILE);
            wg_load_rows<D, BK, NT>(ks, k + khead0 + (int64_t)kn * kstride, kstride, S - kn);
            wg_load_rows<D, BK, NT>(ks + 2 * TILE, v + khead0 + (int64_t)kn * kstride, kstride, S - kn);
        }
        wg_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < PF; t++) load_kv(t);

    float nl[2], dr[2]; // -lse log2 e and D of this thread's rows rwarp + g, rwarp + g + 8
    int pos[2], first[2]; // their positions (-1 past the end) and first visible keys
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = rwarp + g + 8 * i;
        nl[i] = row < RN ? -lse[att_stat_idx(row, G, b, H, hk, S)] * WG_LOG2E : -INFINITY;
        dr[i] = row < RN ? Dsum[att_stat_idx(row, G, b, H, hk, S)] : 0.0f;
        pos[i] = row < RN ? row / G : -1;
        first[i] = row < RN ? att_doc0(dc, pos[i]) : 0;
    }
    float dqa[NDC][32], dqt[8]; // dqt: the tail panel's 16 dims (head dim 80)
#pragma unroll
    for (int c = 0; c < NDC; c++)
#pragma unroll
        for (int e = 0; e < 32; e++) dqa[c][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) dqt[e] = 0.0f;
    auto keep_acc = [&]() {
#pragma unroll
        for (int c = 0; c < NDC; c++) wg_keep_all(dqa[c]);
        if constexpr (TL) wg_keep_all(dqt);
    };
    uint32_t sa4[4][4]; // dS of the last tile (bf16): the A operand of dQ += dS K, k-steps of 16 keys
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) sa4[kk][e] = 0u;

    // dQ += dS K of the tile in sa4 (stage s), issued, not waited for.
    auto issue_dq = [&](int s) {
        const uint32_t ks = st0 + (uint32_t)(s * 4 * TILE);
        keep_acc();
        wg_keep_a(sa4);
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) { // m: queries, n: dims, k: keys
#pragma unroll
            for (int dc = 0; dc < NDC; dc++) wg_mma_n64<1>(dqa[dc], sa4[kk], wg_desc_mnmaj<WH>(ks, BK, kk, dc), 1);
            if constexpr (TL) wg_mma_n16<1>(dqt, sa4[kk], wg_tdesc<NDC, WH>(ks, BK, kk));
        }
        wg_commit();
    };

    uint32_t qf[KD][4], of[KD][4]; // Q and dO of this warp's 16 rows: the A operands of S = Q Kᵀ and dP = dO Vᵀ
    int prev = -1; // stage of the tile whose product waits in sa4
    for (int t = 0; t < ntiles; t++) {
        wg_cp_wait<PF - 1>();
        wg_fence_proxy();
        __syncthreads();
        if (RS && t == 0) // Q and dO landed with the first tile: into registers once (their shared rows are not read again)
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                const uint32_t o = (uint32_t)(((16 * warp + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8) * 2);
                wg_ldsm4(qf[kd], Qb + o);
                wg_ldsm4(of[kd], dOb + o);
            }
        load_kv(t + PF);
        if (t >= wtiles) { // past this warpgroup's diagonal: finish its last tile (its stage is not refilled yet)
            if (prev >= 0) {
                issue_dq(prev);
                wg_wait<0>();
                prev = -1;
            }
            continue;
        }
        const int k0 = (kt0 + t) * BK, s = t % NST;
        const uint32_t ks = st0 + (uint32_t)(s * 4 * TILE), vs = ks + 2 * TILE;
        float sc[32], dpa[32];
        if constexpr (RS) {
            wg_rs_product<KD, NDC, WH>(sc, qf, ks, BK); // m: queries, n: keys, k: dims
            wg_rs_product<KD, NDC, WH>(dpa, of, vs, BK);
        } else {
            wg_ss_product<KD, NDC, WH>(sc, Qb, BQB, 64 * wg, ks, BK);
            wg_ss_product<KD, NDC, WH>(dpa, dOb, BQB, 64 * wg, vs, BK);
        }
        if (prev >= 0)
            issue_dq(prev);
        else
            wg_commit(); // an empty group: the waits below count three groups either way
        wg_wait<2>(); // S is done
        wg_keep_all(sc);
        // the mask decided once a tile for the whole warp (any of its 16 rows, as the forward does), so the
        // unmasked tiles run a loop without the per-element test, which a test inside the loop is
        // compiled to on every tile
        const bool mask = __any_sync(0xffffffffu, k0 + BK - 1 > min(pos[0], pos[1]) || k0 + BK > S || k0 < max(first[0], first[1]));
        if (mask) {
#pragma unroll
            for (int e = 0; e < 32; e++) {
                const int i = (e >> 1) & 1, key = k0 + wg_col(e, t4);
                const float p = wg_ex2(fmaf(sc[e], scale2, nl[i]));
                sc[e] = key > pos[i] || key >= S || key < first[i] ? 0.0f : p;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 32; e++) sc[e] = wg_ex2(fmaf(sc[e], scale2, nl[(e >> 1) & 1]));
        }
        wg_wait<1>(); // dP is done
        wg_keep_all(dpa);
#pragma unroll
        for (int e = 0; e < 32; e++) dpa[e] = sc[e] * (dpa[e] - dr[(e >> 1) & 1]);
        wg_wait<0>(); // the last tile's product is done: sa4 and dQ are free
        keep_acc();
        wg_keep_a(sa4);
        wg_to_a(sa4, dpa);
        prev = s;
    }
    if (prev >= 0) {
        issue_dq(prev);
        wg_wait<0>();
    }
    keep_acc();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = rwarp + g + 8 * i;
        if (row >= RN) continue;
        wg_store_row<NDC, TL>(dq + qhead0 + att_row_off(row, G, qstride, D), dqa, dqt, i, t4, scale);
    }
}

// ---- the launches -------------------------------------------------------------------------------

// Grid (key tiles of 64 NWG, H / G, B). MINB: blocks per multiprocessor the registers must allow.
template <int D, int NWG, int NST, int MINB>
__global__ void __launch_bounds__(128 * NWG, MINB)
    att_wg_dkdv_kernel(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                       const int *__restrict__ docs, const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                       const float *__restrict__ Dsum, wg_bf16 *__restrict__ dk, wg_bf16 *__restrict__ dv, int S, int H,
                       int G, float scale, float scale2) {
    att_wg_dkdv_body<D, NWG, NST>(q, k, v, docs, lse, dout, Dsum, dk, dv, S, H, G, scale, scale2, (int)blockIdx.x,
                                  (int)blockIdx.y);
}

// Grid (tiles of 64 NWG of the S G rows, H / G, B).
template <int D, int NWG, int NST, int MINB>
__global__ void __launch_bounds__(128 * NWG, MINB)
    att_wg_dq_kernel(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                     const int *__restrict__ docs, const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                     const float *__restrict__ Dsum, wg_bf16 *__restrict__ dq, int S, int H, int G, float scale,
                     float scale2) {
    att_wg_dq_body<D, NWG, NST>(q, k, v, docs, lse, dout, Dsum, dq, S, H, G, scale, scale2, (int)blockIdx.x,
                                (int)gridDim.x, (int)blockIdx.y);
}

// Both in one grid (nk + nq, H / G, B) of one warpgroup per block, nk key tiles and nq = ceil(S G / 64)
// row tiles (nq >= nk): blocks 2j and 2j + 1 take key tile j (dk, dv) and row tile j (dq) for j < nk,
// the rest the remaining row tiles, the longest of both first; the two kinds share the
// multiprocessors (registers and shared memory of the larger) and one tail instead of two.
// hminor (grouped-query attention): the grid is (H / G, nk + nq, B) instead, so the longest blocks of
// every kv head are issued first (a key tile's block loops over G heads' rows: G times the longest
// block of plain attention, which must not start last).
template <int D, int NSTK, int NSTQ, int MINB>
__global__ void __launch_bounds__(128, MINB)
    att_wg_bwd_kernel(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                      const int *__restrict__ docs, const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                      const float *__restrict__ Dsum, wg_bf16 *__restrict__ dq, wg_bf16 *__restrict__ dk,
                      wg_bf16 *__restrict__ dv, int S, int H, int G, int nk, int hminor, float scale, float scale2) {
    const int x = hminor ? (int)blockIdx.y : (int)blockIdx.x, hk = hminor ? (int)blockIdx.x : (int)blockIdx.y;
    const int nq = (int)(hminor ? gridDim.y : gridDim.x) - nk;
    if (x < 2 * nk && x % 2 == 0)
        att_wg_dkdv_body<D, 1, NSTK>(q, k, v, docs, lse, dout, Dsum, dk, dv, S, H, G, scale, scale2, x / 2, hk);
    else
        att_wg_dq_body<D, 1, NSTQ>(q, k, v, docs, lse, dout, Dsum, dq, S, H, G, scale, scale2, x < 2 * nk ? x / 2 : x - nk,
                                   nq, hk);
}

// ---- host side ----------------------------------------------------------------------------------

// Shapes (overridable for tuning builds, tools/attn_tiles.sh): a warpgroup per block, 4 stages, 2 blocks
// per multiprocessor (the dk/dv kernel at head dim 80 needs the 255 registers of 2 blocks).
#ifndef WG_DKDV_NWG
#define WG_DKDV_NWG 1
#endif
#ifndef WG_DKDV_NST
#define WG_DKDV_NST 4
#endif
#ifndef WG_DKDV_MINB
#define WG_DKDV_MINB 2
#endif
#ifndef WG_DQ_NWG
#define WG_DQ_NWG 1
#endif
#ifndef WG_DQ_NST
#define WG_DQ_NST 4
#endif
#ifndef WG_DQ_MINB
#define WG_DQ_MINB 2
#endif
#ifndef WG_BWD_FUSED
#define WG_BWD_FUSED 1 // dk/dv and dq blocks in one launch (one warpgroup per block)
#endif
// Head dim 128: a stage of 64 rows of Q and dO (or K and V) is 32 KB and the block's own K and V (or
// Q and dO) another 32 KB per warpgroup, so no shape fits two blocks in a multiprocessor's 227 KB. Two
// warpgroups per block share the streamed stages instead (8 warps on the multiprocessor, 160 KB at 3
// stages), in two launches; the accumulators (dK and dV: 128 of the 255 registers) leave a few spills.
#ifndef WG128_NWG
#define WG128_NWG 2
#endif
#ifndef WG128_NST
#define WG128_NST 3
#endif
#ifndef WG128_FUSED
#define WG128_FUSED 0 // 1: one warpgroup per block, dk/dv and dq blocks in one launch (WG128_NWG ignored)
#endif

// STG_NO_WGMMA_BWD (a compile definition) keeps the backward on mma.sync, for comparisons in one lease;
// STG_NO_WGMMA_BWD128 only at head dim 128.
bool att_wgmma_bwd_supported(int D) {
#ifdef STG_NO_WGMMA_BWD
    (void)D;
    return false;
#elif defined(STG_NO_WGMMA_BWD128)
    return D == 64 || D == 80;
#else
    return D == 64 || D == 80 || D == 128;
#endif
}

// The backward in the shape given: FUSED, one launch of one-warpgroup blocks (KNWG = QNWG = 1), else
// two launches, dk/dv in blocks of KNWG warpgroups with KNST stages and dq in blocks of QNWG with QNST.
template <int D, int KNWG, int KNST, int KMINB, int QNWG, int QNST, int QMINB, bool FUSED>
static int wg_bwd_launch(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, const float *lse,
                         const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H, int G,
                         float scale, float scale2, stg_err *err) {
    const unsigned hkv = (unsigned)(H / G);
    if constexpr (FUSED) {
        static_assert(KNWG == 1 && QNWG == 1, "the fused launch has one warpgroup per block");
        constexpr int MINB = KMINB < QMINB ? KMINB : QMINB;
        const size_t sk = wg_dkdv_smem<D, 1, KNST>(), sq = wg_dq_smem<D, 1, QNST>();
        const size_t smem = sk > sq ? sk : sq;
        CUDA_CHECK(err, cudaFuncSetAttribute(att_wg_bwd_kernel<D, KNST, QNST, MINB>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        const int nk = (S + 63) / 64, nq = (S * G + 63) / 64, hminor = G > 1 && nk + nq <= 65535;
        dim3 grid(hminor ? hkv : (unsigned)(nk + nq), hminor ? (unsigned)(nk + nq) : hkv, (unsigned)B);
        att_wg_bwd_kernel<D, KNST, QNST, MINB><<<grid, 128, smem, st>>>(
            (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, lse, (const wg_bf16 *)dout, Dsum,
            (wg_bf16 *)dq, (wg_bf16 *)dk, (wg_bf16 *)dv, S, H, G, nk, hminor, scale, scale2);
        CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv and dq, wgmma)");
        return 0;
    } else {
        {
            const size_t smem = wg_dkdv_smem<D, KNWG, KNST>();
            CUDA_CHECK(err, cudaFuncSetAttribute(att_wg_dkdv_kernel<D, KNWG, KNST, KMINB>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            dim3 grid((unsigned)((S + 64 * KNWG - 1) / (64 * KNWG)), hkv, (unsigned)B);
            att_wg_dkdv_kernel<D, KNWG, KNST, KMINB><<<grid, 128 * KNWG, smem, st>>>(
                (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, lse, (const wg_bf16 *)dout, Dsum,
                (wg_bf16 *)dk, (wg_bf16 *)dv, S, H, G, scale, scale2);
            CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv, wgmma)");
        }
        {
            const size_t smem = wg_dq_smem<D, QNWG, QNST>();
            CUDA_CHECK(err, cudaFuncSetAttribute(att_wg_dq_kernel<D, QNWG, QNST, QMINB>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            dim3 grid((unsigned)((S * G + 64 * QNWG - 1) / (64 * QNWG)), hkv, (unsigned)B);
            att_wg_dq_kernel<D, QNWG, QNST, QMINB><<<grid, 128 * QNWG, smem, st>>>(
                (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, lse, (const wg_bf16 *)dout, Dsum,
                (wg_bf16 *)dq, S, H, G, scale, scale2);
            CUDA_LAUNCH_CHECK(err, "attention backward (dq, wgmma)");
        }
        return 0;
    }
}

// Head dims 64 and 80 in the WG_* shape, 128 in the WG128_* one.
template <int D>
static int wg_bwd_shaped(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, const float *lse,
                         const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H, int G,
                         float scale, float scale2, stg_err *err) {
    if constexpr (D == 128) {
        constexpr int W = WG128_FUSED ? 1 : WG128_NWG;
        return wg_bwd_launch<D, W, WG128_NST, 1, W, WG128_NST, 1, WG128_FUSED != 0>(
            st, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, err);
    } else {
        constexpr bool F = WG_BWD_FUSED && WG_DKDV_NWG == 1 && WG_DQ_NWG == 1;
        return wg_bwd_launch<D, WG_DKDV_NWG, WG_DKDV_NST, WG_DKDV_MINB, WG_DQ_NWG, WG_DQ_NST, WG_DQ_MINB, F>(
            st, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, err);
    }
}

int att_wgmma_bwd(cudaStream_t st, const att_side *side, const void *q, const void *k, const void *v, const int *docs,
                  const float *lse, const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H,
                  int G, int D, float scale, float scale2, void *ws, size_t ws_bytes, stg_err *err) {
    if (B > 65535 || H > 65535) return stg_errf(err, "attention backward (wgmma): B %d or H %d over 65535", B, H);
    if (G < 1 || H % G) return stg_errf(err, "attention backward (wgmma): %d query heads in groups of %d", H, G);
    if (att_ws_bwd_supported(D, k, v))
        return att_ws_bwd(st, side, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, D, scale, scale2, ws, ws_bytes, err);
    switch (D) {
    case 64: return wg_bwd_shaped<64>(st, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, err);
    case 80: return wg_bwd_shaped<80>(st, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, err);
    case 128: return wg_bwd_shaped<128>(st, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, err);
    }
    return stg_errf(err, "attention backward (wgmma): head dim %d not supported", D);
}
