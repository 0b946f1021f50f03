// Causal flash attention backward, bf16, warp-specialised (sm_90a only): the function of att_wg_dkdv_body and
// att_wg_dq_body (attention_wgmma_bwd.cu; their comments hold the products and the masks), scheduled as the
// warp-specialised forward (attention_ws.cu) is:
//   - dq blocks (64 NWG query rows): a producer thread streams the K and V key tiles by tensor copy (TMA) into
//     mbarrier stages (tm_kv_producer, as the forward);
//   - dk/dv blocks (64 NWG keys): a producer warpgroup streams the query tiles (Q and dO rows of the group) with
//     cp.async, which handles any group size (a tile of the S G rows of a group is a tensor box only when G
//     divides 64), and stores what the consumers would otherwise compute every tile: -lse log2 e and D (loaded a
//     tile ahead), the rows' positions and first visible keys, and each consumer warpgroup's tests of the tile
//     (nothing to do; masked). That shortened the consumers' chain, which bounds this kernel (its consumer warps
//     ran ~333 instructions a tile at 9 cycles each, the tensor pipe busy 36%; H200, twenty-first session: the
//     backward 295 -> 320 TFLOP/s at head dim 64, seq 16384). Each producer thread awaits its copies of a tile,
//     fences them to the async proxy and arrives on the stage's full barrier before it waits for the next tile's
//     stage (thirty-third session: the backward 12-15% faster than publishing a tile after the next one's wait);
//   - the NWG consumer warpgroups of a block take turns issuing their products (named barriers 1 .. NWG, a ring),
//     and release a stage on its empty barrier once their last product reading it is done; no block barrier
//     inside the loops.
// The producer is a whole warpgroup that gives its registers back (setmaxnreg 24), so the consumers have RG.
// The dq launch runs on a stream of its own (att_side) beside the dk/dv launch: one block of either fills a
// multiprocessor, so the dq blocks take the multiprocessors that the dk/dv launch's last wave leaves idle (H200,
// twenty-sixth session: the backward -11 to -14% at seq 512, -3 to -6% at 4096; STG_ATT_BWD_SIDE=0 for one stream).
// At head dims 64 and 80, given the workspace, one pass instead: the dk/dv blocks also take dQ = dS K and add it
// into an f32 sum in a fixed order (att_ws_dkdv_kernel's DQ1), so no dq block recomputes S and dP (7 tile
// products a tile pair become 5), then one pass writes dq in bf16.
#include <algorithm>
#include <cuda.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/internal.h"
#include "ops/attention/sm90a/attention_wgmma.h"
#include "ops/attention/sm90a/tma.cuh"
#include "ops/attention/sm90a/tma_map.h"
#include "ops/attention/sm90a/wgmma.cuh"

#define WS_LOG2E 1.4426950408889634f

namespace {

// The accumulator x (a 64 x 64 f32 tile, this thread's 32) as the bf16 A operand of four k-steps.
__device__ __forceinline__ void ws_to_a(uint32_t (&af)[4][4], const float (&x)[32]) {
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const int j = e >> 2, i = (e >> 1) & 1;
        af[j >> 1][(j & 1) * 2 + i] = wg_pack(x[e], x[e + 1]);
    }
}
template <int N> __device__ __forceinline__ void ws_keep_all(float (&x)[N]) {
#pragma unroll
    for (int e = 0; e < N; e++) wg_keep(x[e]);
}
__device__ __forceinline__ void ws_keep_a(uint32_t (&a)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) wg_keep(a[kk][e]);
}

// The ring of consumer warpgroups (named barriers 1 .. NWG): warpgroup w issues its products after w - 1 has
// issued its own; every warpgroup takes `turns` turns, and the ring's arrivals balance (the last warpgroup's last
// pass is left out).
template <int NWG> struct ws_ring {
    int wg, turns;
    __device__ __forceinline__ void start() const {
        if (wg == NWG - 1) tm_bar_arrive<256>(1);
    }
    __device__ __forceinline__ void wait() const { tm_bar_sync<256>(1 + wg); }
    __device__ __forceinline__ void pass(int turn) const {
        if (!(wg == NWG - 1 && turn == turns - 1)) tm_bar_arrive<256>(1 + (wg + 1) % NWG);
    }
};

// The single pass's f32 dQ tiles (64 rows x D, in shared memory and, copied as they are, in the workspace): the
// 16-byte chunk c of row r (dims 4 c .. 4 c + 3) at chunk c ^ (r % 8) among the first 16 (dims 0 .. 63), in place
// past them (head dim 80's tail), so that a warp's stores of its accumulator rows fall on distinct banks.
__host__ __device__ __forceinline__ int ws_dq_chunk(int c, int r) { return c < 16 ? c ^ (r & 7) : c; }

// The dk/dv kernel's per-stage statistics of a row tile (-lse log2 e, and D): the value of the tile's column (query
// row) c, which a consumer thread holds as element k = 2 (c / 8) + c % 2 of its 16 (t4 = (c % 8) / 2), sits at
// ws_stat_slot(t4, k): each thread's 16 contiguous, read as four 16-byte chunks, chunk q at q ^ 2 for t4 = 2, 3, so
// that the four t4 of a quarter warp fall on distinct banks.
__host__ __device__ __forceinline__ int ws_stat_slot(int t4, int k) { return t4 * 16 + (((k >> 2) ^ ((t4 >> 1) << 1)) << 2) + (k & 3); }
__host__ __device__ __forceinline__ int ws_stat_slot_of(int c) { return ws_stat_slot((c & 7) >> 1, (c >> 3) * 2 + (c & 1)); }

} // namespace

// ---- dq -----------------------------------------------------------------------------------------

// Q and dO of the block in registers (RS: the A operands of S and dP, from padded rows) or, at head dim 128 and in 3
// warpgroups (WS_DQ_W3), in swizzled tiles (a 64-row tile per warpgroup) read from shared memory by the products.
// WS_DQ64_W3: head dim 64's dq kernel in 3 consumer warpgroups at 160 registers, Q and dO in tiles read by the S and
// dP products (SS; with them in registers 3 warpgroups do not fit), as the forward's 3 warpgroups there. Measured
// (H200, 2026-11-30t call 4, B4 H16 causal, two rounds alternating): head dim 64's backward 15.09-15.11 -> 14.27-14.41
// ms at seq 16384, 1.022-1.031 -> 0.974-0.976 at 4096 against 2 warpgroups with Q and dO in registers (0, the A/B).
#ifndef WS_DQ64_W3
#define WS_DQ64_W3 1
#endif
// WS_DQ80_W3: the same at head dim 80 (its tail panel in the tiles' 32-byte swizzle). Measured (H200, 2026-11-30u
// call 1, two rounds alternating): head dim 80's backward 17.67-17.73 -> 17.37-17.40 ms at seq 16384, 1.208-1.218 ->
// 1.179-1.182 at 4096; the GPU suite, the tests at four grids and the sanitizers passed. Landed; 0 = the old form.
#ifndef WS_DQ80_W3
#define WS_DQ80_W3 1
#endif
// WS_DQ128_W3: head dim 128's in 3 warpgroups too, at 160 registers, which fit only with dS (the A operand of
// dQ += dS K) through a shared-memory tile per warpgroup instead of 16 registers (DSS; stmatrix, as the dk/dv kernel's
// Pᵀ and dSᵀ at head dim 128) and 3 stages (Q, dO, the stages and the dS tiles: 218 KB). Measured no faster (H200,
// 2026-11-30u call 1: 24.88-25.03 ms -> 25.01-25.02 at seq 16384, 1.605-1.620 -> 1.622-1.627 at 4096; its tests
// passed). Off.
#ifndef WS_DQ128_W3
#define WS_DQ128_W3 0
#endif
#define WS_DQ_W3(D) (((D) == 64 && WS_DQ64_W3) || ((D) == 80 && WS_DQ80_W3) || ((D) == 128 && WS_DQ128_W3))
#define WS_DQ_RS(D) ((D) != 128 && !WS_DQ_W3(D))
#define WS_DQ_DSS(D) ((D) == 128 && WS_DQ128_W3)

template <int D, int NWG, int NST>
static size_t ws_dq_smem(void) {
    constexpr int LDQ = WS_DQ_RS(D) ? D + 8 : D;
    // barriers, stages, Q and dO; DSS: a 64 x 64 dS tile a warpgroup
    return 2048 + sizeof(wg_bf16) * ((size_t)2 * NST * 64 * D + (size_t)2 * 64 * NWG * LDQ + (WS_DQ_DSS(D) ? (size_t)NWG * 64 * 64 : 0));
}

// Grid (row tiles of 64 NWG of the S G rows, H / G, B), or (H / G, row tiles, B) when hminor; the longest rows
// first. Block 128 NWG consumers + a producer warpgroup.
template <int D, int NWG, int NST, int RG>
__global__ void __launch_bounds__(128 * NWG + 128, 1)
    att_ws_dq_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                     const __grid_constant__ CUtensorMap tkt, const __grid_constant__ CUtensorMap tvt,
                     const wg_bf16 *__restrict__ q, const int *__restrict__ docs, const float *__restrict__ lse,
                     const wg_bf16 *__restrict__ dout, const float *__restrict__ Dsum, wg_bf16 *__restrict__ dq, int S,
                     int H, int G, int hminor, float scale, float scale2) {
    constexpr int BK = 64, BQB = 64 * NWG, KD = D / 16, NDC = D / 64, TILE = BK * D;
    constexpr bool TL = D % 64 == 16, WH = D == 128, RSQ = WS_DQ_RS(D), DSS = WS_DQ_DSS(D);
    constexpr int LDQ = RSQ ? D + 8 : D;
    static_assert(NST >= 2 && NST <= 8 && NWG >= 2 && 2 * NWG + 1 <= 15, "stages, warpgroups");
    static_assert(RG % 8 == 0 && tm_regs_fit(NWG, RG, 24), "registers: within the launch share (tm_regs_fit)");
    extern __shared__ __align__(128) unsigned char ws_smraw[];
    const uint32_t base = (wg_smem(ws_smraw) + 1023u) & ~1023u;
    const uint32_t full0 = base, empty0 = base + 8u * NST, st0 = base + 1024u; // stage s: K at st0 + 4 s TILE bytes, V after
    const uint32_t Qb = st0 + (uint32_t)(4 * NST * TILE), dOb = Qb + (uint32_t)(BQB * LDQ * 2);
    const uint32_t dSb = dOb + (uint32_t)(BQB * LDQ * 2); // DSS: warpgroup w's dS tile at + 8192 w (1024-aligned)
    const int x = hminor ? (int)blockIdx.y : (int)blockIdx.x, hk = hminor ? (int)blockIdx.x : (int)blockIdx.y;
    const int nbx = (int)(hminor ? gridDim.y : gridDim.x), b = blockIdx.z;
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x % 32; // warp-uniform
    const int RN = S * G, q0 = (nbx - 1 - x) * BQB; // the longest rows first
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int last = (min(q0 + BQB, RN) - 1) / G;
    const int kt0 = att_doc0(dc, q0 / G) / BK; // first visible key tile
    const int ntiles = last / BK + 1 - kt0;    // key tiles of the block

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < NST; s++) {
            tm_mb_init(full0 + 8u * s, 1);
            tm_mb_init(empty0 + 8u * s, 4 * NWG);
        }
        tm_mb_init_fence();
    }
    __syncthreads(); // the only block-wide barrier

    if (warp >= 4 * NWG) { // the producer warpgroup: one thread issues the copies
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (warp == 4 * NWG && lane == 0) tm_kv_producer<D, BK, NST>(&tk, &tv, &tkt, &tvt, full0, empty0, st0, kt0, ntiles, hk, b);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(RG) : "memory");

    const int g = lane >> 2, t4 = lane & 3, wg = warp / 4, tw = threadIdx.x % 128;
    const int rw0 = q0 + 64 * wg, rwarp = rw0 + 16 * (warp % 4);
    const int64_t qstride = (int64_t)H * D, qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D;
    const att_grp gr = att_grp_of(G);
    const int wtiles = rw0 < RN ? (min(rw0 + 63, RN - 1) / G) / BK + 1 - kt0 : 0; // key tiles of this warpgroup
    // This warpgroup's rows of Q and dO (one row offset for both).
    const uint32_t Qw = Qb + (uint32_t)(RSQ ? 0 : 64 * wg * D * 2), dOw = dOb + (uint32_t)(RSQ ? 0 : 64 * wg * D * 2);
    if constexpr (RSQ) {
        constexpr int NC8 = D / 8;
        for (int idx = tw; idx < 64 * NC8; idx += 128) {
            const int r = idx / NC8, c = (idx % NC8) * 8;
            const bool ok = rw0 + r < RN;
            const int64_t o = ok ? att_row_off(rw0 + r, gr, qstride, D) + c : 0;
            const uint32_t so = (uint32_t)(((64 * wg + r) * LDQ + c) * 2);
            wg_cp16(Qb + so, q + qhead0 + o, ok);
            wg_cp16(dOb + so, dout + qhead0 + o, ok);
        }
    } else {
        const uint32_t dst[2] = {Qw, dOw};
        const wg_bf16 *const src[2] = {q + qhead0, dout + qhead0};
        wg_load_rows_g<D, 64, 128, 2>(dst, src, qstride, gr, rw0, RN, tw);
    }
    wg_cp_commit();
    wg_cp_wait<0>();
    wg_fence_proxy();
    tm_bar_sync<128>(1 + NWG + wg);
    uint32_t qf[RSQ ? KD : 1][4], of[RSQ ? KD : 1][4];
    if constexpr (RSQ)
#pragma unroll
        for (int kd = 0; kd < KD; kd++) {
            const uint32_t o = (uint32_t)(((16 * warp + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8) * 2);
            wg_ldsm4(qf[kd], Qb + o);
            wg_ldsm4(of[kd], dOb + o);
        }

    float nl[2], dr[2]; // -lse log2 e and D of this thread's rows rwarp + g, rwarp + g + 8
    int pos[2], first[2]; // their positions (-1 past the end) and first visible keys
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = rwarp + g + 8 * i;
        nl[i] = row < RN ? -lse[att_stat_idx(row, gr, b, H, hk, S)] * WS_LOG2E : -INFINITY;
        dr[i] = row < RN ? Dsum[att_stat_idx(row, gr, b, H, hk, S)] : 0.0f;
        pos[i] = row < RN ? att_div(gr, row) : -1;
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
        for (int c = 0; c < NDC; c++) ws_keep_all(dqa[c]);
        if constexpr (TL) ws_keep_all(dqt);
    };
    uint32_t sa4[DSS ? 1 : 4][4]; // dS of the last tile (bf16): the A operand of dQ += dS K (DSS: its tile, dSw)
#pragma unroll
    for (int kk = 0; kk < (DSS ? 1 : 4); kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) sa4[kk][e] = 0u;
    const uint32_t dSw = dSb + (uint32_t)(wg * 64 * 64 * 2);
    auto stage = [&](int t) { return st0 + (uint32_t)(4 * (t % NST) * TILE); };
    auto release = [&](int t) { // this warp is done reading tile t's stage
        if (lane == 0) tm_mb_arrive(empty0 + 8u * (uint32_t)(t % NST));
    };
    // dQ += dS K of tile t (dS in sa4), issued as one commit group, not waited for.
    auto issue_dq = [&](int t) {
        const uint32_t ks = stage(t);
        keep_acc();
        if constexpr (DSS) {
            wg_arrive();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) // m: queries, n: dims, k: keys
                wg_mma_ss_n128<1>(dqa[0], dqa[1], wg_desc_kmaj(dSw, 64, kk, 0), wg_desc_mnmaj<WH>(ks, BK, kk, 0), 1);
            wg_commit();
            return;
        } else {
            ws_keep_a(sa4);
        }
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) { // m: queries, n: dims, k: keys
            if constexpr (NDC == 2 && !TL) { // both panels of dims in one product: one m64n128 for two m64n64
                wg_mma_n128<1>(dqa[0], dqa[1], sa4[kk], wg_desc_mnmaj<WH>(ks, BK, kk, 0), 1);
            } else {
#pragma unroll
                for (int dc2 = 0; dc2 < NDC; dc2++) wg_mma_n64<1>(dqa[dc2], sa4[kk], wg_desc_mnmaj<WH>(ks, BK, kk, dc2), 1);
            }
            if constexpr (TL) wg_mma_n16<1>(dqt, sa4[kk], wg_tdesc<NDC, WH>(ks, BK, kk));
        }
        wg_commit();
    };

    const ws_ring<NWG> ring{wg, ntiles + 1};
    ring.start();
    for (int t = 0; t <= ntiles; t++) {
        if (t < ntiles) {
            tm_mb_wait(full0 + 8u * (uint32_t)(t % NST), (uint32_t)((t / NST) & 1));
            if (t >= wtiles) release(t); // past this warpgroup's diagonal: not read
        }
        ring.wait();
        if (t >= wtiles) {
            if (t == wtiles && t > 0) { // this warpgroup's last dQ product
                issue_dq(t - 1);
                ring.pass(t);
                wg_wait<0>();
                keep_acc();
                release(t - 1);
            } else {
                ring.pass(t);
            }
            continue;
        }
        const int k0 = (kt0 + t) * BK;
        const uint32_t ks = stage(t), vs = ks + (uint32_t)(2 * TILE);
        float sc[32], dpa[32];
        if constexpr (RSQ) {
            wg_rs_product<KD, NDC, WH>(sc, qf, ks, BK); // m: queries, n: keys, k: dims
            wg_rs_product<KD, NDC, WH>(dpa, of, vs, BK);
        } else {
            wg_ss_product<KD, NDC, WH>(sc, Qw, 64, 0, ks, BK);
            wg_ss_product<KD, NDC, WH>(dpa, dOw, 64, 0, vs, BK);
        }
        if (t > 0)
            issue_dq(t - 1);
        else
            wg_commit(); // an empty group: the waits below count three groups either way
        ring.pass(t);
        wg_wait<2>(); // S is done
        ws_keep_all(sc);
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
        ws_keep_all(dpa);
#pragma unroll
        for (int e = 0; e < 32; e++) dpa[e] = sc[e] * (dpa[e] - dr[(e >> 1) & 1]);
        wg_wait<0>(); // the last tile's product is done: sa4 (DSS: the dS tile), dQ and its stage are free
        keep_acc();
        if constexpr (!DSS) ws_keep_a(sa4);
        if (t > 0) release(t - 1);
        if constexpr (DSS) {
            // dS into this warpgroup's tile by stmatrix (row r = query 16 (warp % 4) + 8 i + lane % 8 of 128 bytes,
            // 16-byte chunk c of keys at c ^ (r % 8); the warp's 16 x 64 as 2 x 8 matrices of 8 x 8, elements
            // 4 j + 2 i, + 1 of the accumulator): read by the next turn's dQ product, after the ring's wait (a barrier
            // of the warpgroup's warps), so the stores need only the proxy fence.
            const int mr = lane & 7, mi = (lane >> 3) & 1, mj = lane >> 4;
            const uint32_t rl = (uint32_t)(16 * (warp % 4) + 8 * mi + mr);
#pragma unroll
            for (int m = 0; m < 4; m++)
                wg_stmatrix4(dSw + rl * 128u + ((uint32_t)((2 * m + mj) ^ mr) << 4), wg_pack(dpa[8 * m], dpa[8 * m + 1]),
                             wg_pack(dpa[8 * m + 2], dpa[8 * m + 3]), wg_pack(dpa[8 * m + 4], dpa[8 * m + 5]),
                             wg_pack(dpa[8 * m + 6], dpa[8 * m + 7]));
            wg_fence_proxy();
        } else {
            ws_to_a(sa4, dpa);
        }
    }
    keep_acc();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = rwarp + g + 8 * i;
        if (row >= RN) continue;
        wg_store_row<NDC, TL>(dq + qhead0 + att_row_off(row, gr, qstride, D), dqa, dqt, i, t4, scale);
    }
}

// ---- dk, dv -------------------------------------------------------------------------------------

template <int D, int NWG, int NST, bool DQ1>
static size_t ws_dkdv_smem(void) {
    // 1 KiB to align the swizzled tiles; K and V of the block (a 64-row tile per warpgroup each); NST stages of Q
    // and dO (64 rows each); per stage -lse log2 e, D, first visible keys and positions of the 64 rows, and a flags
    // word per warpgroup; NST transaction barriers (TQ: the stages' tensor copies); with DQ1, 1 KiB to align, then per warpgroup its dS tile (64 rows x 64 keys, bf16) and its
    // dQ tile (64 rows x D, f32)
    return 1024 + sizeof(wg_bf16) * ((size_t)2 * 64 * NWG * D + (size_t)2 * NST * 64 * D) + (size_t)16 * NST * 64 +
           (size_t)4 * NST * NWG + 8 + (size_t)8 * NST +
           (DQ1 ? 1024 + (size_t)NWG * (64 * 64 * 2 + 64 * D * 4) : D == 128 ? 1024 + (size_t)NWG * 2 * 64 * 64 * 2 : 0);
}

// Grid (key tiles of 64 NWG, H / G, B), or (H / G, key tiles, B) when hminor, or (H / G, B, key tiles) when hminor
// is 2; key tile 0 (the most row tiles) first. Block 128 NWG consumers + a producer warpgroup.
//
// DQ1 (single pass): the block also adds its share of dQ, dS K over its keys, into f32 sums (zeroed before), so no
// dq launch recomputes S and dP. Each warpgroup stages its dS tile (bf16) in shared memory, takes dQ = dS K_w with
// its own 64 keys, writes it to its f32 tile and adds that tile with one bulk reduction into its own sum, dqacc
// + w nacc (B, H / G, RT 64, D; the S G rows of a kv head in row tiles of 64); the convert kernel adds the NWG sums
// in order. The additions into a row tile of a sum are made in a fixed order, so the result is the same bits every
// run (graph replay equal to eager): counter cnt[w nacc + (b, hk, r)] names the next turn, and key block x takes
// turn x - x0, x0 the first key block that can reach the tile's rows (the block holding the first key of the first
// row's document; 0 without documents), after waiting for the counter to reach it. One sum a warpgroup, so the
// warpgroups of a block never wait for each other's turns: with one shared sum, warpgroup 1 waited for warpgroup
// 0's addition each tile and their products no longer overlapped (half the rate, nineteenth session). Blocks visit
// their row tiles from the last one down, so every key block of a head starts at the same tile; turns are passed
// on a tile late (dq_turn), so block x trails x - 1 by a tile. The grid launches every head's key block x before
// any head's x + 1: a head's blocks that start together are few.
//
// TQ (no documents, G dividing 64): the producer loads a row tile's Q and dO by tensor copies (TMA: one thread, a box of
// 64 dims x G heads x 64 / G positions per panel, rows landing in the tile's row order R = s G + h % G) that complete on
// the stage's transaction barrier, and publishes the tile (its statistics) as soon as they are issued; each consumer
// warpgroup waits for the barrier's phase after the publication. Rows past the tensor's end are zero-filled by the
// copy, as cp.async zero-fills rows past RN (without documents RN is the tensor's end).
// 1: at head dim 64 the Sᵀ = K Qᵀ and dPᵀ = V dOᵀ products take K and V as register fragments (RS, loaded once a
// work item) instead of from shared memory (SS): an SS m64n64k16 reads 4 KB of shared memory in its 32 tensor cycles,
// the limit of 128 bytes a cycle, an RS one 2 KB. Measured (H200, 2026-11-30s call 1, B4 H16 causal, two rounds
// alternating): head dim 64's backward 14.69-14.73 -> 14.50-14.52 ms at seq 16384 and 1.039-1.044 -> 1.023-1.034 at
// 4096 against the same registers with SS; 80 and 128 unchanged. 0 keeps SS (the A/B switch).
#ifndef WS_DKDV_RSK
#define WS_DKDV_RSK 1
#endif

// WS_DQ1_NOORDER (an experiment, not for use): the single pass's additions made in whatever order the blocks reach
// them (no turns; the sums' bits then vary from run to run), to measure what the turns cost.
#ifndef WS_DQ1_NOORDER
#define WS_DQ1_NOORDER 0
#endif
// WS_DQ1_PROBE (an experiment, wrong results when set; with WS_DQ1_NOORDER): what the single pass's parts cost. 1: no
// bulk reductions (the dQ tiles computed and stored, not added); 2: neither dQ's product nor its tile (the dS tile
// stored, the barriers kept); 3: none of the single pass's work in the loop (the dk/dv kernel as the single pass
// launches it: the cp.async producer, a block an item). 0: the single pass.
#ifndef WS_DQ1_PROBE
#define WS_DQ1_PROBE 0
#endif

template <int D, int NWG, int NST, int RG, int PR, bool DQ1, bool TQ>
__global__ void __launch_bounds__(128 * NWG + 128, 1)
    att_ws_dkdv_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                       const __grid_constant__ CUtensorMap tqt, const __grid_constant__ CUtensorMap tdot, const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                       const int *__restrict__ docs, const float *__restrict__ lse, const wg_bf16 *__restrict__ dout,
                       const float *__restrict__ Dsum, wg_bf16 *__restrict__ dk, wg_bf16 *__restrict__ dv, float *dqacc,
                       unsigned *cnt, int RT, int S, int H, int G, int hminor, int defer, unsigned ns, float scale, float scale2,
                       int nkb, int B, int hg) {
    constexpr int BQ = 64, BKB = 64 * NWG, NT = 128 * NWG + 128, KD = D / 16, NDC = D / 64, TILE = BQ * D;
    constexpr bool TL = D % 64 == 16, WH = D == 128;
    // NST >= 2: the producer publishes tile t - 1 before it waits for tile t's stage (tile t - NST), which the
    // consumers release while working on tile t - NST + 1 <= t - 1, published by then
    static_assert(NST >= 2 && NWG >= 2 && 2 * NWG + (NWG + 1) * NST <= 15, "stages, warpgroups: named barriers 1 .. 2 NWG + (NWG + 1) NST");
    static_assert(RG % 8 == 0 && PR % 8 == 0 && PR >= 24 && tm_regs_fit(NWG, RG, PR), "registers: within the launch share (tm_regs_fit)");
    static_assert(!(TQ && DQ1), "tensor copies of Q and dO: the two-launch form only");
    extern __shared__ __align__(128) unsigned char ws_smraw[];
    const uint32_t raw = wg_smem(ws_smraw), base = (raw + 1023u) & ~1023u;
    // Stage s is published to consumer warpgroup w by named barrier FB + NWG s + w (the producer warpgroup arrives
    // on each, the warpgroup's warps wait: no consumer warpgroup waits for another at a stage, which DQ1's turns
    // need) and released by EB + s (every consumer warp arrives, the producer waits): barriers whose
    // ordering of the statistics' plain stores racecheck follows, where it flagged them with mbarriers.
    constexpr int FB = 2 * NWG + 1, EB = FB + NWG * NST;
    // K, V: a 64-row tile per warpgroup; stage s: Q at st0 + 4 s TILE bytes, dO after it; then the stats
    const uint32_t Kb = base, Vb = Kb + (uint32_t)(BKB * D * 2), st0 = Vb + (uint32_t)(BKB * D * 2);
    // stage s: -lse log2 e at 2 s BQ, D at (2 s + 1) BQ (each placed by ws_stat_slot_of); the rows' first visible
    // keys and positions; flags NWG s + w: warpgroup w's test of the tile (bit 0: nothing of it to do; bit 1: masked)
    float *stat = (float *)(ws_smraw + (st0 + NST * 4 * TILE - raw));
    int *fstat = (int *)(stat + 2 * NST * BQ), *pstat = fstat + NST * BQ, *flags = pstat + NST * BQ;
    // TQ: stage s's tensor copies complete on the transaction barrier at fq0 + 8 s (its phase: the tile's use of the stage)
    const uint32_t fq0 = (wg_smem(flags + NST * NWG) + 7u) & ~7u;
    const uint32_t xb = (fq0 + 8u * NST + 1023u) & ~1023u; // DQ1: the dS tiles, then the dQ tiles; SSA: Pᵀ, dSᵀ
    // SSA (head dim 128): Pᵀ and dSᵀ of the last tile wait for their products in shared memory (a 64 keys x 64 rows
    // bf16 tile each per warpgroup, rows contiguous with the 128-byte swizzle: K-major A operands), not in 32
    // registers, which head dim 128's consumers (dK and dV alone are 128) do not have: in registers they spilled.
    constexpr bool SSA = D == 128;
    constexpr bool RSK = WS_DKDV_RSK && D == 64 && !DQ1 && RG >= 240; // K, V: the A fragments of Sᵀ, dPᵀ (spills at 224)
    static_assert(!(SSA && DQ1), "the single pass is for head dims 64 and 80");
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x % 32; // warp-uniform
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const att_grp gr = att_grp_of(G);
    // Work items (key block x, kv head hk, batch b). hminor 3: nkb B H / G items, key block 0 (the most row tiles)
    // first over each group of hg head-batches (tm_item_split), block i taking items i, i + gridDim.x, ... (persistent
    // blocks, or a block an item: ws_bwd_launch); its producer and consumers walk the same items, the stages' ring and
    // its barriers continuing across them (T: the row tiles of the block's earlier items). Else a block is one item,
    // from the grid: (key tiles, H / G, B), or (H / G, key tiles, B) when hminor, or (H / G, B, key tiles) when hminor
    // is 2 (DQ1: every head's key block x before any head's x + 1; its dQ turns name blocks by the grid).
    struct kv_item {
        int x, hk, b, k0, RS, RN, ntiles;
        int64_t qhead0, khead0;
        const int *dc;
    };
    const int items = hminor == 3 ? nkb * (H / G) * B : 1, wstride = hminor == 3 ? (int)gridDim.x : 1;
    const int wfirst = hminor == 3 ? (int)blockIdx.x : 0;
    auto item = [&](int w) {
        kv_item it;
        if (hminor == 3) {
            int hb;
            it.x = tm_item_split(w, nkb, (H / G) * B, hg, &hb), it.hk = hb % (H / G), it.b = hb / (H / G);
        } else {
            it.x = hminor == 2 ? (int)blockIdx.z : hminor ? (int)blockIdx.y : (int)blockIdx.x;
            it.hk = hminor ? (int)blockIdx.x : (int)blockIdx.y, it.b = hminor == 2 ? (int)blockIdx.y : (int)blockIdx.z;
        }
        it.k0 = it.x * BKB;
        it.qhead0 = ((int64_t)it.b * S * H + (int64_t)it.hk * G) * D;
        it.khead0 = (int64_t)it.b * S * kstride + (int64_t)it.hk * D;
        it.dc = docs ? docs + (int64_t)it.b * S : nullptr;
        // rows that may see these keys (with documents every thread of the block takes part: a block an item then)
        it.RS = it.k0 * G, it.RN = (att_doc_end_block<NT>(it.dc, S, min(it.k0 + BKB, S) - 1) + 1) * G;
        it.ntiles = (it.RN - it.RS + BQ - 1) / BQ; // row tiles RS, RS + BQ, ... below RN
        return it;
    };


    if constexpr (TQ) {
        if (threadIdx.x == 0) {
#pragma unroll
            for (int i = 0; i < NST; i++) tm_mb_init(fq0 + 8u * i, 1u);
            tm_mb_init_fence();
        }
        __syncthreads(); // the barriers initialised, for every thread and the copy engine
    }

    if (warp >= 4 * NWG) { // the producer warpgroup: row tile t into stage t % NST once every warp has released it
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PR) : "memory");
        const int tp = (int)threadIdx.x - 128 * NWG;
        // Tile t - 1's copies are awaited and the tile published before tile t waits for its stage, then tile t's
        // copies are issued: this thread's writes to its stage (copies and stores) are made visible to the products
        // (async proxy) and published by this thread's arrival. One tile's copies in flight, issued a tile before
        // the consumers need them. (Issuing tile t before publishing t - 1, two tiles in flight, tied each
        // publication to the release of the stage before: tile t - 1 went out only after the consumers had
        // released tile t - NST in the middle of tile t - 2, and they waited ~1,300 of a tile pair's ~2,900 cycles
        // for it; H200, head dim 64, thirty-third session's timeline probe.)
        auto publish = [&](int u) { // u: the block's running tile count
            if constexpr (!TQ) wg_fence_proxy(); // (TQ: the tensor copies' bytes are the async proxy's; the statistics are read as plain loads)
#pragma unroll
            for (int w = 0; w < NWG; w++) tm_bar_arrive<256>(FB + NWG * (u % NST) + w);
        };
        if constexpr (TQ)
            if (tp == 0) {
                tm_prefetch_map(&tq);
                tm_prefetch_map(&tdo);
            }
        // This thread's statistic of row tile t (lse of row tp for tp < 64, else D of row tp - 64; 0 past the
        // rows), loaded a tile ahead of its use, so that the load's latency passes while the thread waits for a
        // stage; stored as -lse log2 e and D, each consumer thread's 16 together (ws_stat_slot_of).
        static_assert(2 * BQ == 128, "a statistic a producer thread");
        const int si = tp % BQ;
        int T = 0, pend = -1; // pend: the running count of the tile whose copies are in flight, not yet published
        for (int wk = wfirst; wk < items; wk += wstride) {
            const kv_item it = item(wk);
            const int k0 = it.k0, hk = it.hk, b = it.b, RS = it.RS, RN = it.RN, ntiles = it.ntiles;
            const int64_t qhead0 = it.qhead0;
            const int *dc = it.dc;
            // the first row of the t-th tile visited: upwards, or with DQ1 from the last tile down
            auto row0 = [&](int t) { return RS + (DQ1 ? ntiles - 1 - t : t) * BQ; };
            auto stat_load = [&](int t) {
                const int r = row0(t) + si;
                return r < RN ? (tp < BQ ? lse : Dsum)[att_stat_idx(r, gr, b, H, hk, S)] : 0.0f;
            };
            float sv = ntiles > 0 ? stat_load(0) : 0.0f;
            for (int t = 0; t < ntiles; t++) {
                if (!TQ && pend >= 0) { // the tile before (this item's or the last item's) out before the wait for a stage
                    wg_cp_wait<0>();
                    publish(pend);
                }
                const int s = (T + t) % NST, qn = row0(t);
                if (T + t >= NST) tm_bar_sync<NT>(EB + s); // tile T + t - NST released
                const uint32_t qs = st0 + (uint32_t)(s * 4 * TILE);
                const uint32_t dst[2] = {qs, qs + (uint32_t)(2 * TILE)};
                const wg_bf16 *const src[2] = {q + qhead0, dout + qhead0};
                if constexpr (TQ) { // the tile's rows qn .. qn + 63: positions qn / G .. of the group's G heads
                    if (tp == 0) {
                        const uint32_t fb = fq0 + 8u * (uint32_t)s;
                        tm_mb_expect_tx(fb, 4u * TILE); // Q and dO, bf16, zero-filled rows counted
#pragma unroll
                        for (int pn = 0; pn < NDC; pn++) {
                            tm_load4(dst[0] + (uint32_t)(pn * BQ * 128), &tq, 64 * pn, hk * G, qn / G, b, fb);
                            tm_load4(dst[1] + (uint32_t)(pn * BQ * 128), &tdo, 64 * pn, hk * G, qn / G, b, fb);
                        }
                        if constexpr (TL) {
                            tm_load4(dst[0] + (uint32_t)(NDC * BQ * 128), &tqt, 64 * NDC, hk * G, qn / G, b, fb);
                            tm_load4(dst[1] + (uint32_t)(NDC * BQ * 128), &tdot, 64 * NDC, hk * G, qn / G, b, fb);
                        }
                    }
                } else {
                    wg_load_rows_g<D, BQ, 128, 2>(dst, src, qstride, gr, qn, RN, tp); // Q and dO: one row offset for both
                }
                {
                    const float v = sv;
                    if (t + 1 < ntiles) sv = stat_load(t + 1);
                    stat[(2 * s + tp / BQ) * BQ + ws_stat_slot_of(si)] = tp < BQ ? -v * WS_LOG2E : v;
                }
                if (tp < BQ) { // the rows' positions (-1 past the rows) and first visible keys
                    const bool ok = qn + tp < RN;
                    const int p = ok ? att_div(gr, qn + tp) : -1;
                    pstat[s * BQ + tp] = p;
                    fstat[s * BQ + tp] = ok ? att_doc0(dc, p) : 0;
                } else if (tp == 127) { // each consumer warpgroup's tests of the tile, from its first and last rows
                    const int p0 = att_div(gr, qn), pl = att_div(gr, min(qn + BQ, RN) - 1), f0 = att_doc0(dc, p0);
                    const int fl = qn + BQ <= RN ? att_doc0(dc, att_div(gr, qn + BQ - 1)) : 0;
#pragma unroll
                    for (int w = 0; w < NWG; w++) {
                        const int kw = k0 + 64 * w;
                        // every row of the tile before every key of the warpgroup, or (docs) in documents after them
                        const bool skip = pl < kw || kw >= S || f0 > kw + 63;
                        const bool mask = kw + 63 > p0 || qn + BQ > RN || fl > kw;
                        flags[s * NWG + w] = (int)skip | (int)mask << 1;
                    }
                }
                if constexpr (TQ) {
                    publish(T + t); // the statistics now; the consumers wait for the copies on the stage's barrier
                } else {
                    wg_cp_commit();
                    pend = T + t;
                }
            }
            T += ntiles;
        } // work items
        if (!TQ && pend >= 0) {
            wg_cp_wait<0>();
            publish(pend);
        }
        for (int u = max(T - NST, 0); u < T; u++) tm_bar_sync<NT>(EB + u % NST); // the last releases: every arrival met
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(RG) : "memory");

    const int g = lane >> 2, t4 = lane & 3, wg = warp / 4, tw = threadIdx.x % 128;
    const uint32_t Kw = Kb + (uint32_t)(64 * wg * D * 2), Vw = Vb + (uint32_t)(64 * wg * D * 2);
    int T = 0;
    for (int wk = wfirst; wk < items; wk += wstride) {
        const kv_item it = item(wk);
        const int x = it.x, k0 = it.k0, RS = it.RS, ntiles = it.ntiles;
        const int64_t khead0 = it.khead0;
        const int *dc = it.dc;
        auto row0 = [&](int t) { return RS + (DQ1 ? ntiles - 1 - t : t) * BQ; };
        const int kw0 = k0 + 64 * wg, kwarp = kw0 + 16 * (warp % 4);
        // a later item: every warp of this warpgroup is past the last one's products, which read its K and V tiles
        if (wk != wfirst) tm_bar_sync<128>(1 + NWG + wg);
        wg_load_rows<D, 64, 128>(Kw, k + khead0 + (int64_t)kw0 * kstride, kstride, S - kw0, tw);
        wg_load_rows<D, 64, 128>(Vw, v + khead0 + (int64_t)kw0 * kstride, kstride, S - kw0, tw);
        wg_cp_commit();
        wg_cp_wait<0>();
        wg_fence_proxy();
        tm_bar_sync<128>(1 + NWG + wg);
        // RSK: this warp's 16 key rows of K and V as the A fragments of the four k-steps (the tiles' 128-byte swizzle:
        // the 16-byte chunk c of row r at chunk c ^ (r % 8))
        uint32_t kf[RSK ? 4 : 1][4], vf[RSK ? 4 : 1][4];
        if constexpr (RSK) {
            const uint32_t r = (uint32_t)(16 * (warp % 4) + (lane & 15));
#pragma unroll
            for (int kd = 0; kd < 4; kd++) {
                const uint32_t o = r * 128u + ((((uint32_t)(2 * kd + (lane >> 4))) ^ (r & 7u)) << 4);
                wg_ldsm4(kf[kd], Kw + o);
                wg_ldsm4(vf[kd], Vw + o);
            }
        }

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
                ws_keep_all(dka[c]);
                ws_keep_all(dva[c]);
            }
            if constexpr (TL) {
                ws_keep_all(dkt);
                ws_keep_all(dvt);
            }
        };
        auto release = [&](int t) { // this warp is done reading row tile t's stage
            tm_bar_arrive<NT>(EB + (T + t) % NST);
        };
        // DQ1: this warpgroup's dS tile (64 rows x 64 keys, the 128-byte swizzle: a K-major A operand) and dQ tile
        const uint32_t dSw = xb + (uint32_t)(wg * 64 * 64 * 2), Pw = xb + (uint32_t)(NWG * 64 * 64 * 2 + wg * 64 * D * 4);
        // row tile r of this warpgroup's sum at this kv head (B (H / G) RT row tiles a sum; grid (H / G, B, x)):
        // from the launch's constants where used (one thread), so that no register holds it through the loop
        auto tile_w = [&](int r) {
            return ((int64_t)wg * gridDim.y + blockIdx.y) * (H / G) * RT + (int64_t)blockIdx.x * RT + r;
        };
        // This warpgroup's turn at row tile q0 / 64 (one thread). The turn is passed on one tile late, so that no
        // warpgroup waits for its own addition to reach the L2: dq_turn first finishes the pending turn (waits for its
        // bulk reduction to be complete, or for a turn that had nothing to add to come), then, when `add`, waits for
        // this tile's turn and issues the reduction; dq_flush finishes the last. Blocks before x0 see none of the
        // tile's documents: not in the order, nothing to add. No wait is endless: a turn waits only for the same
        // warpgroup of lower key blocks at the same tile, which pass it at their next tile (needing only their own
        // ring turns and stages). Stages are published to each consumer warpgroup by a barrier of its own: one barrier
        // for all consumer warps, with the turns of one shared sum, made warpgroup 0 wait for warpgroup 1 at a stage
        // while 1 waited for 0's turn (a hang; docs/perf/2026-11-29b-dq1-protocol.py models the waits).
        // The pending turn (its row tile + 1, 0 when none; its turn; whether it added), kept by the warpgroup's thread
        // 0 in shared memory rather than in registers the whole warpgroup would hold through the loop.
        __shared__ unsigned ws_pend[NWG][3];
        if (DQ1 && tw == 0) ws_pend[wg][0] = 0u;
        auto dq_flush = [&]() {
            unsigned *const pd = ws_pend[wg];
            if (pd[0] == 0u) return;
            unsigned *const c = cnt + tile_w((int)pd[0] - 1);
            if (pd[2]) {
                tm_bulk_wait_all();
                tm_fence_proxy_global();
            } else if (!WS_DQ1_NOORDER) {
                while (tm_ld_acquire(c) != pd[1]) __nanosleep(ns);
            }
            tm_st_release(c, pd[1] + 1u);
            pd[0] = 0u;
        };
        auto dq_turn = [&](int q0, bool add) {
            dq_flush();
            const int r = q0 / 64, x0 = att_doc0(dc, att_div(gr, q0)) / BKB;
            if (x < x0) return;
            unsigned *const pd = ws_pend[wg];
            pd[0] = (unsigned)r + 1u;
            pd[1] = (unsigned)(x - x0);
            pd[2] = add;
            if (add) {
                if (!WS_DQ1_NOORDER)
                    while (tm_ld_acquire(cnt + tile_w(r)) != (unsigned)(x - x0)) __nanosleep(ns);
                tm_fence_proxy_global();
                tm_bulk_add_f32(dqacc + tile_w(r) * 64 * D, Pw, 64u * D * 4u);
                tm_bulk_commit();
            }
            if (!defer) dq_flush(); // STG_ATT_DQ_DEFER=0: the turn passed at once (for A/B runs)
        };
        // SSA: this warpgroup's Pᵀ and dSᵀ tiles
        const uint32_t Ptw = xb + (uint32_t)(wg * 2 * 64 * 64 * 2), dStw = Ptw + (uint32_t)(64 * 64 * 2);
        // dV += Pᵀ dO and dK += dSᵀ Q of row tile t (Pᵀ, dSᵀ in pa, sa4, or with SSA in their tiles), issued as one
        // commit group.
        auto issue_dkdv = [&](int t) {
            const uint32_t qs = st0 + (uint32_t)(((T + t) % NST) * 4 * TILE), ds = qs + (uint32_t)(2 * TILE);
            keep_acc();
            if constexpr (SSA) {
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < 4; kk++) { // m: keys, n: dims, k: queries
                    if constexpr (NDC == 2) { // both panels of dims in one product (wg_mma_ss_n128)
                        wg_mma_ss_n128<1>(dva[0], dva[1], wg_desc_kmaj(Ptw, 64, kk, 0), wg_desc_mnmaj<WH>(ds, BQ, kk, 0), 1);
                        wg_mma_ss_n128<1>(dka[0], dka[1], wg_desc_kmaj(dStw, 64, kk, 0), wg_desc_mnmaj<WH>(qs, BQ, kk, 0), 1);
                    } else {
#pragma unroll
                        for (int dc2 = 0; dc2 < NDC; dc2++) {
                            wg_mma_ss_n64<1>(dva[dc2], wg_desc_kmaj(Ptw, 64, kk, 0), wg_desc_mnmaj<WH>(ds, BQ, kk, dc2), 1);
                            wg_mma_ss_n64<1>(dka[dc2], wg_desc_kmaj(dStw, 64, kk, 0), wg_desc_mnmaj<WH>(qs, BQ, kk, dc2), 1);
                        }
                    }
                }
                wg_commit();
                return;
            }
            ws_keep_a(pa);
            ws_keep_a(sa4);
            wg_arrive();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) { // m: keys, n: dims, k: queries
#pragma unroll
                for (int dc2 = 0; dc2 < NDC; dc2++) {
                    wg_mma_n64<1>(dva[dc2], pa[kk], wg_desc_mnmaj<WH>(ds, BQ, kk, dc2), 1);
                    wg_mma_n64<1>(dka[dc2], sa4[kk], wg_desc_mnmaj<WH>(qs, BQ, kk, dc2), 1);
                }
                if constexpr (TL) {
                    wg_mma_n16<1>(dvt, pa[kk], wg_tdesc<NDC, WH>(ds, BQ, kk));
                    wg_mma_n16<1>(dkt, sa4[kk], wg_tdesc<NDC, WH>(qs, BQ, kk));
                }
            }
            wg_commit();
        };

        const ws_ring<NWG> ring{wg, ntiles + 1};
        ring.start();
        int prev = -1; // the row tile whose products wait in pa, sa4
        for (int t = 0; t <= ntiles; t++) {
            if (t < ntiles) {
                tm_bar_sync<256>(FB + NWG * ((T + t) % NST) + wg);
                if constexpr (TQ) tm_mb_wait(fq0 + 8u * (uint32_t)((T + t) % NST), (uint32_t)(((T + t) / NST) & 1));
            }
            ring.wait();
            const int q0 = row0(t), s = (T + t) % NST;
            const int *f_s = fstat + s * BQ, *p_s = pstat + s * BQ;
            const int fl = t < ntiles ? flags[s * NWG + wg] : 1; // the producer's tests (bit 0: skip, bit 1: mask)
            // past the last tile, or nothing of the tile to do: the previous tile's products, if any, are issued and
            // finished now
            if (fl & 1) {
                if (prev >= 0) {
                    issue_dkdv(prev);
                    ring.pass(t);
                    wg_wait<0>();
                    keep_acc();
                    release(prev);
                    prev = -1;
                } else {
                    ring.pass(t);
                }
                if (t < ntiles) release(t);
                if constexpr (DQ1 && WS_DQ1_PROBE < 3)
                    if (t < ntiles) {
                        if (tw == 0) dq_turn(q0, false);
                        __syncwarp(); // warp 0 whole again before the next barrier and products (they are .aligned)
                    }
                continue;
            }
            const uint32_t qs = st0 + (uint32_t)(s * 4 * TILE), ds = qs + (uint32_t)(2 * TILE);
            const float *lse_s = stat + 2 * s * BQ, *D_s = lse_s + BQ;
            float st[32], dpt[32];
            if constexpr (RSK) {
                wg_rs_product<KD, NDC, WH>(st, kf, qs, BQ); // m: keys, n: queries, k: dims
                wg_rs_product<KD, NDC, WH>(dpt, vf, ds, BQ);
            } else {
                wg_ss_product<KD, NDC, WH>(st, Kw, 64, 0, qs, BQ); // m: keys, n: queries, k: dims
                wg_ss_product<KD, NDC, WH>(dpt, Vw, 64, 0, ds, BQ);
            }
            if (prev >= 0)
                issue_dkdv(prev);
            else
                wg_commit(); // an empty group: three groups after Sᵀ's either way
            ring.pass(t);
            // -lse log2 e and D of this thread's 16 query columns (element k = 2 (e / 4) + e % 2 for accumulator
            // element e): in registers, four 16-byte loads each, or at head dim 128 (whose consumers are short of
            // registers: dK and dV alone are 128) read from shared memory where used
            constexpr bool NLR = D != 128;
            float nl[NLR ? 16 : 1] = {}, dd[NLR ? 16 : 1] = {};
            if constexpr (NLR)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const float4 l4 = *(const float4 *)(lse_s + ws_stat_slot(t4, 4 * c)), d4 = *(const float4 *)(D_s + ws_stat_slot(t4, 4 * c));
                    nl[4 * c] = l4.x, nl[4 * c + 1] = l4.y, nl[4 * c + 2] = l4.z, nl[4 * c + 3] = l4.w;
                    dd[4 * c] = d4.x, dd[4 * c + 1] = d4.y, dd[4 * c + 2] = d4.z, dd[4 * c + 3] = d4.w;
                }
            auto nlc = [&](int e) { return NLR ? nl[NLR ? 2 * (e >> 2) + (e & 1) : 0] : lse_s[ws_stat_slot(t4, 2 * (e >> 2) + (e & 1))]; };
            auto ddc = [&](int e) { return NLR ? dd[NLR ? 2 * (e >> 2) + (e & 1) : 0] : D_s[ws_stat_slot(t4, 2 * (e >> 2) + (e & 1))]; };
            wg_wait<2>(); // Sᵀ is done
            ws_keep_all(st);
            if (fl & 2) { // masked
#pragma unroll
                for (int e = 0; e < 32; e++) {
                    const int key = kwarp + wg_row(e, g), col = wg_col(e, t4);
                    const float p = wg_ex2(fmaf(st[e], scale2, nlc(e)));
                    st[e] = key > p_s[col] || key < f_s[col] ? 0.0f : p; // rows past RN: position -1
                }
            } else {
#pragma unroll
                for (int e = 0; e < 32; e++) st[e] = wg_ex2(fmaf(st[e], scale2, nlc(e)));
            }
            wg_wait<1>(); // dPᵀ is done
            ws_keep_all(dpt);
#pragma unroll
            for (int e = 0; e < 32; e++) dpt[e] = st[e] * (dpt[e] - ddc(e));
            wg_wait<0>(); // the previous tile's products are done: pa, sa4 (or the tiles), dK, dV and its stage are free
            keep_acc();
            if (prev >= 0) release(prev);
            if constexpr (SSA) {
                // Pᵀ and dSᵀ into their tiles, two rows (elements e, e + 1: columns 2 t4, 2 t4 + 1 of a k-step) a store:
                // key kl's row of 128 bytes, 16-byte chunk r / 8 at chunk (r / 8) ^ (kl % 8). The products read them
                // in the next tile's turn, after this warpgroup's ring wait (a barrier of all its warps), so the
                // writes only need the proxy fence.
                // By stmatrix: the warp's 16 keys x 64 rows are 2 x 8 matrices of 8 x 8 (key half i, row chunk j), which
                // hold elements e = 4 j + 2 i, e + 1 of the accumulator in the mma fragment's order; each x4 store takes
                // four (j = 2 m, 2 m + 1; i = 0, 1), lane l giving the address of row l % 8 of matrix l / 8.
                const int mr = lane & 7, mi = (lane >> 3) & 1, mj = lane >> 4; // this lane's row, key half, chunk (of 2)
                const uint32_t kl = (uint32_t)(16 * (warp % 4) + 8 * mi + mr);
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const uint32_t o = kl * 128u + ((uint32_t)((2 * m + mj) ^ mr) << 4);
                    wg_stmatrix4(Ptw + o, wg_pack(st[8 * m], st[8 * m + 1]), wg_pack(st[8 * m + 2], st[8 * m + 3]),
                                 wg_pack(st[8 * m + 4], st[8 * m + 5]), wg_pack(st[8 * m + 6], st[8 * m + 7]));
                    wg_stmatrix4(dStw + o, wg_pack(dpt[8 * m], dpt[8 * m + 1]), wg_pack(dpt[8 * m + 2], dpt[8 * m + 3]),
                                 wg_pack(dpt[8 * m + 4], dpt[8 * m + 5]), wg_pack(dpt[8 * m + 6], dpt[8 * m + 7]));
                }
                wg_fence_proxy();
            } else {
                ws_keep_a(pa);
                ws_keep_a(sa4);
                ws_to_a(pa, st);
                ws_to_a(sa4, dpt);
            }
            prev = t;
            if constexpr (DQ1 && WS_DQ1_PROBE < 3) {
                // dS (rows x this warpgroup's keys) into its tile: element e is key 16 (warp % 4) + wg_row(e, g), row
                // wg_col(e, t4); 16-byte chunk key / 8 of a row at chunk (key / 8) ^ (row % 8)
#pragma unroll
                for (int e = 0; e < 32; e++) {
                    const int kl = 16 * (warp % 4) + wg_row(e, g), rl = wg_col(e, t4);
                    const uint32_t a = dSw + (uint32_t)(rl * 128 + (((kl >> 3) ^ (rl & 7)) << 4) + (kl & 7) * 2);
                    *(wg_bf16 *)(ws_smraw + (a - raw)) = __float2bfloat16_rn(dpt[e]);
                }
                if (tw == 0) tm_bulk_wait_read_all(); // the dQ tile: the last tile's reduction has read it
                __syncwarp();
                wg_fence_proxy();
                tm_bar_sync<128>(1 + NWG + wg);
                if constexpr (WS_DQ1_PROBE < 2) {
                float dqa[NDC][32], dqt[8]; // dQ = dS K_w (m: rows, n: dims, k: this warpgroup's keys)
#pragma unroll
                for (int c = 0; c < NDC; c++)
#pragma unroll
                    for (int e = 0; e < 32; e++) dqa[c][e] = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) dqt[e] = 0.0f;
                wg_arrive();
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const uint64_t da = wg_desc_kmaj(dSw, 64, kk, 0);
#pragma unroll
                    for (int dc2 = 0; dc2 < NDC; dc2++) wg_mma_ss_n64<1>(dqa[dc2], da, wg_desc_mnmaj<WH>(Kw, 64, kk, dc2), 1);
                    if constexpr (TL) wg_mma_ss_n16<1>(dqt, da, wg_tdesc<NDC, WH>(Kw, 64, kk));
                }
                wg_commit();
                wg_wait<0>();
#pragma unroll
                for (int c = 0; c < NDC; c++) ws_keep_all(dqa[c]);
                ws_keep_all(dqt);
                // the dQ tile, f32 rows of D in chunks placed by ws_dq_chunk: this thread's pairs of adjacent dims
                float *P = (float *)(ws_smraw + (Pw - raw));
                auto at = [&](int rl, int d) { return P + rl * D + 4 * ws_dq_chunk(d >> 2, rl) + (d & 3); };
#pragma unroll
                for (int e = 0; e < 32; e += 2) {
                    const int rl = 16 * (warp % 4) + wg_row(e, g), cl = wg_col(e, t4);
#pragma unroll
                    for (int c = 0; c < NDC; c++) *(float2 *)at(rl, 64 * c + cl) = make_float2(dqa[c][e], dqa[c][e + 1]);
                    if constexpr (TL)
                        if (e < 8) *(float2 *)at(rl, 64 * NDC + cl) = make_float2(dqt[e], dqt[e + 1]);
                }
                wg_fence_proxy();
                tm_bar_sync<128>(1 + NWG + wg);
                if (tw == 0) dq_turn(q0, WS_DQ1_PROBE < 1);
                __syncwarp();
                }
                tm_bar_sync<128>(1 + NWG + wg); // the dS and dQ tiles are free again
            }
        }
        if constexpr (DQ1)
            if (tw == 0) dq_flush(); // the last turn, its reduction complete (its shared source too)
        __syncwarp();
        keep_acc();
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = kwarp + g + 8 * i;
            if (row >= S) continue;
            wg_store_row<NDC, TL>(dk + khead0 + (int64_t)row * kstride, dka, dkt, i, t4, scale);
            wg_store_row<NDC, TL>(dv + khead0 + (int64_t)row * kstride, dva, dvt, i, t4, 1.0f);
        }
        T += ntiles;
    } // work items
}

// ---- host side ----------------------------------------------------------------------------------

// Shapes (overridable for sweeps): consumer warpgroups, stages, the consumers' registers.
#ifndef WS_DKDV_NWG
#define WS_DKDV_NWG 2
#endif
#ifndef WS_DKDV_NST
#define WS_DKDV_NST 3
#endif
#ifndef WS_DQ_NWG
#define WS_DQ_NWG 2
#endif
#define WS_DQ_NWGD(D) (WS_DQ_W3(D) ? 3 : WS_DQ_NWG) // the dq kernel's consumer warpgroups at head dim D
#ifndef WS_DQ_NST
#define WS_DQ_NST 4
#endif
#define WS_DQ_NSTD(D) (WS_DQ_DSS(D) ? 3 : WS_DQ_NST) // the dq kernel's stages at head dim D (218 KB with DSS)
#define WS_BWD_RG(NWG) ((NWG) == 2 ? 240 : 160) // the dq consumers' registers (its producer keeps 24)
// The dk/dv producer computes its rows' addresses (cp.async), so it keeps PR registers and the consumers RG
// (tm_regs_fit: 2 x 240 + 32 is past the 3 x 168 a block of 384 threads has, and the consumers' setmaxnreg.inc
// then waited forever). Head dim 128 took 240 and 24 while its consumers held Pᵀ and dSᵀ in registers; with them
// in shared memory, 224 and 56 spill least there too (ptxas: 36 bytes, against 112 at 240 / 24, where the
// producer spills: head dim 64 at 240 / 24 spills 48 bytes, none at 224 / 56).
#ifndef WS_DKDV_PR
#define WS_DKDV_PR(D) 56
#endif
#ifndef WS_DKDV_RG
#define WS_DKDV_RG(D) 224
#endif
// The same with the producer's Q and dO by tensor copies (one thread issues them; the rest load statistics): plain
// numbers when given (for a sweep); else head dim 64 takes 240 and 24, where its Sᵀ and dPᵀ take K and V from
// registers (WS_DKDV_RSK; at 224 that spilled), and the others the cp.async producer's numbers (240 / 24 measured
// equal there, 2026-11-30s call 1).
#ifndef WS_DKDV_TQ_PR
#define WS_DKDV_TQ_PR (D == 64 && WS_DKDV_RSK ? 24 : WS_DKDV_PR(D))
#endif
#ifndef WS_DKDV_TQ_RG
#define WS_DKDV_TQ_RG (D == 64 && WS_DKDV_RSK ? 240 : WS_DKDV_RG(D))
#endif

// dq (B, S, H, D) bf16 = scale dqacc (B, H / G, RT 64, D) f32, row R = s G + h % G of kv head h / G (its chunks
// placed by ws_dq_chunk with the row's index in its tile, R % 64): a thread per 4 dims.
template <int NWG>
__global__ void att_ws_dq_convert_kernel(const float *__restrict__ dqacc, wg_bf16 *__restrict__ dq, int64_t n4, int S, int H,
                                         int G, int RT, int D, int64_t nacc, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = 4 * i; // element of dq
        const int d = (int)(e % D);
        const int64_t row = e / D; // (b S + s) H + h
        const int h = (int)(row % H), sp = (int)(row / H % S), b = (int)(row / H / S);
        const int64_t R = ((int64_t)b * (H / G) + h / G) * RT * 64 + (int64_t)sp * G + h % G;
        const int64_t at = R * D + 4 * ws_dq_chunk(d >> 2, (int)(R % 64));
        float4 a = *(const float4 *)(dqacc + at);
        for (int w = 1; w < NWG; w++) { // warpgroup w's sum after warpgroup 0's, in order
            const float4 c = *(const float4 *)(dqacc + (int64_t)w * nacc * 64 * D + at);
            a.x += c.x;
            a.y += c.y;
            a.z += c.z;
            a.w += c.w;
        }
        uint2 o;
        o.x = wg_pack(scale * a.x, scale * a.y);
        o.y = wg_pack(scale * a.z, scale * a.w);
        *(uint2 *)(dq + e) = o;
    }
}

// Single pass (dQ from the dk/dv blocks, DQ1) at head dims 64 and 80 only when STG_ATT_BWD_DQ=1: slower than the
// two launches (H200, twentieth session, call 2, seq 16384: 192 / 203 against 295 / 305 TFLOP/s at 64 / 80, with a
// sum a warpgroup; 151 / 166 with one shared sum; docs/perf/LOG.md), so the dq launch stays the default. Head dim
// 128's consumers have no registers to spare for it.
static bool ws_bwd_dq1(int D) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("STG_ATT_BWD_DQ");
        on = e && strcmp(e, "1") == 0;
    }
    return on && (D == 64 || D == 80);
}

// The single pass passes each dQ turn on a tile late unless STG_ATT_DQ_DEFER=0 (at once, after waiting for its
// reduction to be complete; for A/B runs).
static int ws_dq_defer(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("STG_ATT_DQ_DEFER");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on;
}

// The waits' back-off between polls of a turn counter, in ns (STG_ATT_DQ_NS, for A/B runs; 32 unless set).
static unsigned ws_dq_ns(void) {
    static long ns = -1;
    if (ns < 0) {
        const char *e = getenv("STG_ATT_DQ_NS");
        ns = e ? strtol(e, NULL, 10) : 32;
        if (ns < 0 || ns > 100000) ns = 32;
    }
    return (unsigned)ns;
}

// STG_ATT_DKDV_PERSIST (read at every launch; for A/B runs and tests): unset, as many dk/dv blocks as are resident;
// 0, a block a work item; N > 0, at most N blocks (the tests' way of giving every block many work items at any shape).
static int ws_dkdv_grid_cap(void) {
    const char *e = getenv("STG_ATT_DKDV_PERSIST");
    if (!e || !*e) return -1;
    const int n = atoi(e);
    return n > 0 ? n : 0;
}

// The dk/dv producer's tensor copies of Q and dO (TQ, where the rows allow them) unless STG_ATT_DKDV_TMA=0 (cp.async,
// for A/B runs and the tests of the cp.async producer).
static bool ws_dkdv_tma(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("STG_ATT_DKDV_TMA");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on > 0;
}

// The two launches on two streams (the dq blocks beside the dk/dv blocks' last wave) unless STG_ATT_BWD_SIDE=0 (one
// stream, for A/B runs).
static bool ws_bwd_side(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("STG_ATT_BWD_SIDE");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on;
}

size_t att_ws_bwd_ws_bytes(int B, int S, int H, int G, int D) {
    if (!ws_bwd_dq1(D) || G < 1 || H % G) return 0;
    const size_t RT = ((size_t)S * G + 63) / 64, heads = (size_t)B * (H / G);
    return WS_DKDV_NWG * (heads * RT * 64 * D * sizeof(float) + (heads * RT * sizeof(unsigned) + 255) / 256 * 256);
}

template <int D>
static int ws_bwd_launch(cudaStream_t st, const att_side *side, const void *q, const void *k, const void *v, const int *docs,
                         const float *lse, const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S,
                         int H, int G, float scale, float scale2, void *ws, size_t ws_bytes, stg_err *err) {
    constexpr int KW = WS_DKDV_NWG, KS = WS_DKDV_NST, QW = WS_DQ_NWGD(D), QS = WS_DQ_NSTD(D);
    const int hkv = H / G, RT = (S * G + 63) / 64;
    const size_t need = att_ws_bwd_ws_bytes(B, S, H, G, D);
    if constexpr (D == 64 || D == 80) {
        const int nk = (S + 64 * KW - 1) / (64 * KW);
        if (need > 0 && ws && ws_bytes >= need && nk <= 65535 && B <= 65535) { // single pass (key blocks in the grid's z)
            float *dqacc = (float *)ws;
            const int64_t nacc = (int64_t)B * hkv * RT; // row tiles of a warpgroup's sum
            unsigned *cnt = (unsigned *)(dqacc + (size_t)KW * nacc * 64 * D);
            CUDA_CHECK(err, cudaMemsetAsync(ws, 0, need, st));
            const size_t smem = ws_dkdv_smem<D, KW, KS, true>();
            CUDA_CHECK(err, cudaFuncSetAttribute(att_ws_dkdv_kernel<D, KW, KS, WS_DKDV_RG(D), WS_DKDV_PR(D), true, false>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            dim3 grid((unsigned)hkv, (unsigned)B, (unsigned)nk); // key blocks slowest: every head's x before any x + 1
            CUtensorMap none;
            memset(&none, 0, sizeof none); // (the cp.async producer reads no map)
            att_ws_dkdv_kernel<D, KW, KS, WS_DKDV_RG(D), WS_DKDV_PR(D), true, false><<<grid, 128 * KW + 128, smem, st>>>(
                none, none, none, none, (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, lse, (const wg_bf16 *)dout, Dsum,
                (wg_bf16 *)dk, (wg_bf16 *)dv, dqacc, cnt, RT, S, H, G, 2, ws_dq_defer(), ws_dq_ns(), scale, scale2, nk, B, 1);
            CUDA_LAUNCH_CHECK(err, "attention backward (dk, dv, dq; warp-specialised, single pass)");
            const int64_t n4 = (int64_t)B * S * H * D / 4;
            att_ws_dq_convert_kernel<KW><<<(unsigned)std::min<int64_t>((n4 + 255) / 256, 65535), 256, 0, st>>>(
                dqacc, (wg_bf16 *)dq, n4, S, H, G, RT, D, nacc, scale);
            CUDA_LAUNCH_CHECK(err, "attention backward (dq to bf16)");
            return 0;
        }
    }
    // The dq launch on side->aux, forked from st before the dk/dv launch and joined after it: the two read the same
    // inputs and write different outputs, and neither's blocks share a multiprocessor with another (registers), so
    // the second launch's blocks take the multiprocessors the first's last wave leaves idle. Everything that can fail
    // before a launch (the kernels' attributes, the tensor maps) is done before the fork, and once forked the side
    // stream is joined back whatever the launches report, so an error never leaves st's capture or order forked.
    const bool two = side && side->aux && ws_bwd_side();
    cudaStream_t sq = two ? side->aux : st;
    const int nk = (S + 64 * KW - 1) / (64 * KW);
    const size_t smem_k = ws_dkdv_smem<D, KW, KS, false>();
    // Q and dO by tensor copies where a row tile is a tensor box (G divides 64; no documents, whose rows end inside the
    // tensor and are zero-filled past RN by cp.async) and the tensors are 16-byte aligned, as TMA needs
    const bool tq = ws_dkdv_tma() && !docs && 64 % G == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)dout % 16 == 0;
    auto *const kdkdv = tq ? att_ws_dkdv_kernel<D, KW, KS, WS_DKDV_TQ_RG, WS_DKDV_TQ_PR, false, true>
                           : att_ws_dkdv_kernel<D, KW, KS, WS_DKDV_RG(D), WS_DKDV_PR(D), false, false>;
    CUDA_CHECK(err, cudaFuncSetAttribute((const void *)kdkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_k));
    // The dk/dv blocks: work items (key block, kv head, batch), key block 0 first; persistent (tm_item_plan: at two
    // waves of items or more, as many blocks as are resident, each walking items, unless the heads' Q and dO outgrow
    // the L2: then a block an item in groups of 2 head-batches) unless the rows are packed documents (their row ends
    // are found by the whole block together: a block an item) or ws_dkdv_grid_cap says otherwise.
    const int64_t items_k = (int64_t)nk * hkv * B;
    if (items_k > 0x7fffffff) return stg_errf(err, "attention backward (dk, dv): %lld work items (over 2^31 - 1)", (long long)items_k);
    int grid_k = 0, hg = 0; // a kv head's items read its query heads' Q and dO (bf16), lse and D (fp32)
    if (tm_item_plan((const void *)kdkdv, 128 * KW + 128, smem_k,
                     (long long)items_k, (long long)hkv * B, (4LL * D + 8) * S * G, docs ? 0 : ws_dkdv_grid_cap(), &grid_k, &hg, err))
        return -1;
    CUtensorMap tk, tv, tkt, tvt, mq, mdo, mqt, mdot;
    if (tm_kv_maps(&tk, &tv, &tkt, &tvt, k, v, B, S, hkv, D, 64, err)) return -1;
    if (tq) {
        if (tm_q_maps(&mq, &mdo, &mqt, &mdot, q, dout, B, S, H, G, D, err)) return -1;
    } else {
        memset(&mq, 0, sizeof mq); // (the cp.async producer reads no map)
        mdo = mqt = mdot = mq;
    }
    const int nq = (S * G + 64 * QW - 1) / (64 * QW), hminor_q = G > 1 && nq <= 65535;
    const size_t smem_q = ws_dq_smem<D, QW, QS>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_ws_dq_kernel<D, QW, QS, WS_BWD_RG(QW)>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem_q));
    if (two) {
        CUDA_CHECK(err, cudaEventRecord(side->fork, st));
        CUDA_CHECK(err, cudaStreamWaitEvent(side->aux, side->fork, 0));
    }
    kdkdv<<<(unsigned)grid_k, 128 * KW + 128, smem_k, st>>>(
        mq, mdo, mqt, mdot, (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, lse, (const wg_bf16 *)dout, Dsum, (wg_bf16 *)dk,
        (wg_bf16 *)dv, nullptr, nullptr, RT, S, H, G, 3, 0, 0u, scale, scale2, nk, B, hg);
    const cudaError_t ek = cudaGetLastError();
    dim3 grid_q(hminor_q ? (unsigned)hkv : (unsigned)nq, hminor_q ? (unsigned)nq : (unsigned)hkv, (unsigned)B);
    if (ek == cudaSuccess)
        att_ws_dq_kernel<D, QW, QS, WS_BWD_RG(QW)><<<grid_q, 128 * QW + 128, smem_q, sq>>>(
            tk, tv, tkt, tvt, (const wg_bf16 *)q, docs, lse, (const wg_bf16 *)dout, Dsum, (wg_bf16 *)dq, S, H, G, hminor_q,
            scale, scale2);
    const cudaError_t eq = ek == cudaSuccess ? cudaGetLastError() : cudaSuccess;
    if (two) { // joined whatever the launches reported
        const cudaError_t e1 = cudaEventRecord(side->join, side->aux);
        const cudaError_t e2 = e1 == cudaSuccess ? cudaStreamWaitEvent(st, side->join, 0) : cudaSuccess;
        if (ek == cudaSuccess && eq == cudaSuccess) {
            CUDA_CHECK(err, e1);
            CUDA_CHECK(err, e2);
        }
    }
    if (ek != cudaSuccess)
        return stg_errf(err, "attention backward (dk, dv; warp-specialised): %s", cudaGetErrorString(ek));
    if (eq != cudaSuccess) return stg_errf(err, "attention backward (dq; warp-specialised): %s", cudaGetErrorString(eq));
    return 0;
}

bool att_ws_bwd_supported(int D, const void *k, const void *v) {
    // STG_ATT_WS_BWD=0 in the environment runs the cp.async kernels (attention_wgmma_bwd.cu) at every head dim (for
    // A/B runs); else these kernels run at head dims 64, 80 and 128. Head dim 128 keeps Pᵀ and dSᵀ in shared memory
    // (SSA), which made it faster than the cp.async kernel (H200, 2026-11-29c call 1: 289 / 338 against 268 / 313
    // TFLOP/s at seq 4096 / 16384; docs/perf/LOG.md). "all" is accepted and means the default.
    static int mode = -1; // 0 off, 1 on
    if (mode < 0) {
        const char *e = getenv("STG_ATT_WS_BWD");
        mode = e && strcmp(e, "0") == 0 ? 0 : 1;
    }
    return mode > 0 && (D == 64 || D == 80 || D == 128) && ((uintptr_t)k % 16 == 0) && ((uintptr_t)v % 16 == 0);
}

int att_ws_bwd(cudaStream_t st, const att_side *side, const void *q, const void *k, const void *v, const int *docs,
               const float *lse, const void *dout, const float *Dsum, void *dq, void *dk, void *dv, int B, int S, int H,
               int G, int D, float scale, float scale2, void *ws, size_t ws_bytes, stg_err *err) {
    switch (D) {
    case 64: return ws_bwd_launch<64>(st, side, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, ws, ws_bytes, err);
    case 80: return ws_bwd_launch<80>(st, side, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, ws, ws_bytes, err);
    case 128: return ws_bwd_launch<128>(st, side, q, k, v, docs, lse, dout, Dsum, dq, dk, dv, B, S, H, G, scale, scale2, ws, ws_bytes, err);
    }
    return stg_errf(err, "attention backward (warp-specialised): head dim %d not supported", D);
}
