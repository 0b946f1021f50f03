// Causal flash attention forward, bf16, warp-specialised (sm_90a only, CMakeLists.txt): the function of
// att_tc_fwd_kernel (../cuda_mma.cu, the mma.sync kernel that runs on other GPUs and when this one is turned
// off), o_i = sum_j softmax_j(scale q_i . k_j) v_j over j <= i, lse_i = log sum_j exp(scale q_i . k_j), with
// grouped-query rows and packed documents as in ../rows.cuh: the rows of a block are S G rows of the G query
// heads sharing kv head hk, so one K/V tile serves the group; the key loop starts at the first tile the
// block's first document makes visible. FlashAttention-3's scheduling (Shah et al., 2024, sections 3.1-3.2):
//   - a producer warp streams the K and V tiles into NST shared stages with tensor copies (TMA), one
//     elected thread issuing a few copies a tile; a stage's "full" barrier completes when its bytes
//     have landed, its "empty" barrier when every consumer warp is done reading it. The consumer
//     warpgroups issue no loads and never wait at a block barrier, so they drift apart freely;
//   - NWG consumer warpgroups (64 query rows each) take turns on the tensor cores (ping-pong): a
//     warpgroup issues its products, S(t) = Q K(t)^T and O += P(t-1) V(t-1), only after the previous
//     warpgroup of the ring has issued its own, so one warpgroup's softmax runs while another's
//     products run (named barriers 1..NWG);
//   - inside a warpgroup, the softmax of S(t) overlaps the P V product of the previous tile: S(t) and
//     O += P(t-1) V(t-1) are issued together, S(t) awaited, its online softmax computed in f32 (row max,
//     exp2 with the scale folded into one FMA, row sums, the rescale factor), then the P V product
//     awaited, O rescaled and P(t) packed to bf16 registers, the A operand of the next P V product.
// Shared layout per stage (wgmma.cuh): D / 64 panels of BK rows x 128 bytes in
// the 128-byte swizzle, at head dim 80 a tail panel of 16 dims in the 32-byte swizzle; the tensor maps
// name the same swizzles, so each panel is one copy. Q: cp.async by each warpgroup for its own rows,
// then registers (ldmatrix), the A operand of every S product; at head dims 64 and 128 Q stays in shared memory in
// the stages' swizzled layout and the S product reads it by descriptor (ws_fwd_qs).
#include <algorithm>
#include <cuda.h>
#include <cudaTypedefs.h>
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

// Q in shared memory (head dim 128; WS_FWD128_QSS=0 for the A/B): each warpgroup's 64 rows of Q stay in shared
// memory in the K tiles' layout (D / 64 panels of 64 rows x 128 bytes, 128-byte swizzle), the A operand of every S
// product read by descriptor (SS; with 128-key tiles one m64n128 product a k-step), where at 64 and 80 they are
// ldmatrix'd into 4 D / 16 registers (RS). FlashAttention-3's form at head dim 128: it frees the 32 registers a thread
// that 128-key tiles need there (S 64, O 64, P 32). Measured (H200, 2026-11-30s call 3, B4 H16 causal, two rounds
// alternating; docs/perf/LOG.md): 64-key tiles in 4 stages with Q in registers 8.41-8.42 ms at seq 16384, 0.568-0.573
// at 4096; 128-key tiles with Q here in 3 stages 7.30-7.37 (-13%) and 0.505-0.511; in 2 stages (call 2) 10.46.
#ifndef WS_FWD128_QSS
#define WS_FWD128_QSS 1
#endif
// At head dim 64 with 3 consumer warpgroups (FlashAttention-3's 192 x 128 tile there; Q in registers, 3 warpgroups
// at 160 registers spill 96 bytes and ptxas serializes their wgmmas, C7512). Measured (H200, 2026-11-30s call 5, B4
// H16 causal, two rounds alternating): 2 warpgroups with Q in registers 5.028-5.052 ms at seq 16384, 0.386-0.388 at
// 4096; 3 with Q here 4.436-4.443 (-12%) and 0.335-0.339; 2 with Q here 5.144-5.163.
// Landed after 2026-11-30t call 1 (the GPU suite, the attention tests at four grids, memcheck and racecheck): 5.010 ->
// 4.393 ms at 16384 (500.5 TFLOP/s against cuDNN's 455.6 in the same call), 0.384 -> 0.335 at 4096. 0 = the old form.
#ifndef WS_FWD64_QSS
#define WS_FWD64_QSS 1
#endif
// Head dim 80 the same way (its 16-dim tail panel in the 32-byte swizzle, as the K tiles hold it): measured no faster
// (H200, 2026-11-30t call 2: 3 warpgroups with 64-key tiles in 6 stages, or 2 at 240 registers with 128-key tiles in
// 5 stages, against the tree's 3 with Q in registers; 3 with 128-key tiles spill at 160 registers). On since it
// carries WS_FWD80_PSS below, which is faster; 0 with WS_FWD80_PSS=0 = the old form (Q in registers).
#ifndef WS_FWD80_QSS
#define WS_FWD80_QSS 1
#endif
// P through shared memory (PSS, head dim 80): P, the A operand of O += P V, stored by stmatrix into a 64-row tile a
// warpgroup (the K tiles' layout: 64-key panels of 128-byte rows, 128-byte swizzle) and read by descriptor (SS),
// instead of BK / 4 registers a thread: what lets 3 warpgroups at 160 registers take 128-key tiles at head dim 80
// (S 64, O 40, P 32 spilled). 3 stages (Q 33 KB, a stage 40 KB, the P tiles 48 KB). Measured (H200, 2026-11-30u
// call 1, B4 H16 causal, two rounds alternating, with WS_FWD80_QSS): 6.022-6.036 -> 5.522-5.544 ms (-8.3%) at seq
// 16384, 0.428-0.430 -> 0.410-0.411 at 4096; the GPU suite, the attention tests at four grids, memcheck and racecheck
// passed. Landed; 0 (with WS_FWD80_QSS=0) = the old form.
#ifndef WS_FWD80_PSS
#define WS_FWD80_PSS 1
#endif
template <int D>
__host__ __device__ constexpr bool ws_fwd_qs(void) {
    return (D == 128 && WS_FWD128_QSS) || (D == 64 && WS_FWD64_QSS) || (D == 80 && WS_FWD80_QSS);
}
template <int D>
__host__ __device__ constexpr bool ws_fwd_ps(void) { return D == 80 && WS_FWD80_PSS; }

// Shared bytes: 16 barriers' worth of header (NST full and NST empty barriers), Q (padded rows, or with ws_fwd_qs the
// swizzled panels, 1024-byte aligned), the stages (1024-byte aligned).
template <int D, int NWG, int BK, int NST>
static size_t ws_fwd_smem(void) {
    const size_t pt = ws_fwd_ps<D>() ? sizeof(wg_bf16) * 64 * NWG * BK : 0; // PSS: the P tiles after the stages
    if (ws_fwd_qs<D>()) return 128 + 1024 + sizeof(wg_bf16) * ((size_t)64 * NWG * D + (size_t)2 * NST * BK * D) + pt;
    return 128 + sizeof(wg_bf16) * ((size_t)64 * NWG * (D + 8) + (size_t)2 * NST * BK * D) + 1024 + pt;
}

// Work items (tiles of 64 NWG of the S G rows, H / G, B), nq tiles each, the longest rows first, walked by persistent
// blocks (the grid: ws_fwd_launch); block 128 NWG + 32 PW threads:
// warpgroups 0 .. NWG - 1 consume, warp 4 NWG produces. A multiprocessor's registers are four files, one
// per quarter, and a block's warps are dealt round-robin to them, so a block of 9 warps is held to the
// registers of 12 (168 a thread for 288 threads). With RG > 0 the producer is a whole warpgroup (PW = 4)
// that gives its registers back (setmaxnreg: 24 a thread) and the consumers raise theirs to RG. tk, tv: K and V as 4-D maps (D, H / G, S, B)
// with 64 x 1 x BK x 1 boxes in the 128-byte swizzle; tkt, tvt (head dim 64 NP + 16 only): 16 x 1 x BK
// x 1 boxes in the 32-byte swizzle for the tail panel.
template <int D, int NWG, int BK, int NST, int MINB, int PW, int RG>
__global__ void __launch_bounds__(128 * NWG + 32 * PW, MINB)
    att_ws_fwd_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                      const __grid_constant__ CUtensorMap tkt, const __grid_constant__ CUtensorMap tvt,
                      const wg_bf16 *__restrict__ q, const int *__restrict__ docs, wg_bf16 *__restrict__ o,
                      float *__restrict__ lse, int S, int H, int G, float scale2, int nq, int B, int hg) {
    constexpr int BQ = 64 * NWG, LDQ = D + 8, KD = D / 16, NSC = BK / 64, NDC = D / 64;
    constexpr bool TL = D % 64 == 16; // head dim 80: a 16-dim tail panel (wgmma.cuh)
    constexpr int TILE = BK * D;      // elements of one K or V stage
    constexpr bool QS = ws_fwd_qs<D>(), PS = ws_fwd_ps<D>();
    static_assert(NST >= 2 && NST <= 8, "2 to 8 stages (the header holds 16 barriers)");
    static_assert(NWG >= 2 && 2 * NWG + 1 <= 15, "a ring of at least two warpgroups; named barriers 1 .. 2 NWG");
    static_assert((D % 64 == 0 || D % 64 == 16) && BK % 64 == 0 && BK <= 256, "head dim 64 NP (+ 16), key tile in chunks of 64");
    extern __shared__ __align__(128) unsigned char ws_smraw[];
    const uint32_t sm0 = wg_smem(ws_smraw);
    const uint32_t full0 = sm0, empty0 = sm0 + 8u * NST; // barrier s at + 8 s
    wg_bf16 *Qs = (wg_bf16 *)(ws_smraw + 128);
    const uint32_t qp0 = (wg_smem(Qs) + 1023u) & ~1023u; // QS: warpgroup w's Q panels at qp0 + 128 D w
    const uint32_t kv0 = QS ? qp0 + (uint32_t)(2 * BQ * D) : (wg_smem(Qs + BQ * LDQ) + 1023u) & ~1023u; // stage s: K at kv0 + 2 s TILE, V after it
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x % 32; // warp-uniform
    const int RN = S * G, Hkv = H / G, items = nq * Hkv * B;
    // Work item w (row tile, kv head, batch), the longest rows first over each group of hg head-batches
    // (tm_item_split); block x takes items x, x + gridDim.x, ... (ws_fwd_launch: as many blocks as are resident, or
    // one a work item). Its producer and consumers walk the same items, so the stages' ring continues across them (T:
    // the tiles of the block's earlier items).
    struct wi { int tile, hk, b, q0, kt0, ntiles; const int *dc; };
    auto item = [&](int w) {
        wi it;
        int hb;
        it.tile = nq - 1 - tm_item_split(w, nq, Hkv * B, hg, &hb), it.hk = hb % Hkv, it.b = hb / Hkv;
        it.q0 = it.tile * BQ;
        it.dc = docs ? docs + (int64_t)it.b * S : nullptr;
        const int last = (min(it.q0 + BQ, RN) - 1) / G;  // the item's last position
        it.kt0 = att_doc0(it.dc, it.q0 / G) / BK;        // its first visible key tile
        it.ntiles = last / BK + 1 - it.kt0;              // its key tiles
        return it;
    };

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < NST; s++) {
            tm_mb_init(full0 + 8u * s, 1);           // the producer's arrival (with the bytes)
            tm_mb_init(empty0 + 8u * s, 4 * NWG);    // every consumer warp's
        }
        tm_mb_init_fence();
    }
    __syncthreads(); // the only block-wide barrier

    static_assert((PW == 1 && RG == 0) || (PW == 4 && RG % 8 == 0 && tm_regs_fit(NWG, RG, 24)), "producer warps, registers");
    if (warp >= 4 * NWG) { // the producer: tile t into stage t % NST once every warp has released it
        if constexpr (RG > 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (warp == 4 * NWG && lane == 0)
            for (int w = blockIdx.x, T = 0; w < items; w += gridDim.x) {
                const wi it = item(w);
                tm_kv_producer<D, BK, NST>(&tk, &tv, &tkt, &tvt, full0, empty0, kv0, it.kt0, it.ntiles, it.hk, it.b, T);
                T += it.ntiles;
            }
        return;
    }

    // The consumers.
    if constexpr (RG > 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(RG) : "memory");
    const int g = lane >> 2, t4 = lane & 3;
    const int wg = warp / 4; // provably warp-uniform (warp is): wgmma is not serialized
    for (int w = blockIdx.x, T = 0; w < items; w += gridDim.x) {
        const wi it = item(w);
        const int hk = it.hk, b = it.b, q0 = it.q0, kt0 = it.kt0, ntiles = it.ntiles;
        const int *dc = it.dc;
        const int rw0 = q0 + 64 * wg, rwarp = rw0 + 16 * (warp % 4); // rows
        const int64_t qstride = (int64_t)H * D;
        const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D; // row 0 of the group
        const int wtiles = rw0 < RN ? (min(rw0 + 63, RN - 1) / G) / BK + 1 - kt0 : 0; // key tiles of this warpgroup
        int pos[2], first[2]; // this thread's rows rwarp + g + 8 i: position (-1 past the end), first visible key
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int R = rwarp + g + 8 * i;
            pos[i] = R < RN ? R / G : -1;
            first[i] = R < RN ? att_doc0(dc, pos[i]) : 0;
        }

        // This warpgroup's 64 rows of Q (padded, for ldmatrix), then registers; with QS into its swizzled panels, once
        // every warp is done with the last item's S products (they read the panels).
        uint32_t qf[QS ? 1 : KD][4];
        const uint32_t qw = qp0 + (uint32_t)(128 * D * wg);
        if constexpr (QS) {
            const uint32_t qd[1] = {qw};
            const wg_bf16 *const qb[1] = {q + qhead0};
            tm_bar_sync<128>(1 + NWG + wg);
            // rows rw0 .. rw0 + 63 in the K tiles' layout (panels of 64 rows x 128 bytes, then the tail panel of 80)
            wg_load_rows_x<D, 64, 128, 1>(qd, qb, [=](int R) { return att_row_off(R, G, qstride, D); }, rw0, RN,
                                          (int)threadIdx.x % 128);
            wg_cp_commit();
            wg_cp_wait<0>();
            wg_fence_proxy();
            tm_bar_sync<128>(1 + NWG + wg);
        } else {
            constexpr int NC8 = D / 8;
            const int tw = threadIdx.x % 128;
            for (int idx = tw; idx < 64 * NC8; idx += 128) {
                const int r = idx / NC8, c = (idx % NC8) * 8;
                const bool ok = rw0 + r < RN;
                wg_cp16(wg_smem(Qs + (64 * wg + r) * LDQ + c), q + qhead0 + (ok ? att_row_off(rw0 + r, G, qstride, D) + c : 0), ok);
            }
            wg_cp_commit();
            wg_cp_wait<0>();
            tm_bar_sync<128>(1 + NWG + wg);
#pragma unroll
            for (int kd = 0; kd < KD; kd++)
                wg_ldsm4(qf[kd], wg_smem(Qs + (16 * warp + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8));
        }

        float oacc[NDC][32], otl[8];     // otl: the tail panel's 16 dims (head dim 80)
        uint32_t pf[PS ? 1 : BK / 16][4]; // P of the previous tile: the A operand of its P V product (PS: its tile, pw)
        const uint32_t pw = kv0 + (uint32_t)(2 * NST * TILE * 2 + 64 * BK * 2 * wg); // PS: this warpgroup's P tile
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < NDC; c++)
#pragma unroll
            for (int e = 0; e < 32; e++) oacc[c][e] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) otl[e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < (PS ? 1 : BK / 16); kk++) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0u;

        auto stage = [&](int t) { return kv0 + (uint32_t)(2 * ((T + t) % NST) * TILE * 2); };
        // O += P(t) V(t) (issued, not waited for).
        auto issue_pv = [&](int t) {
            wg_arrive();
            const uint32_t vb = stage(t) + (uint32_t)(TILE * 2);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                if constexpr (PS) { // k: keys (panel kk / 4 of the P tile), n: dims
                    const uint64_t da = wg_desc_kmaj(pw, 64, kk, 0);
#pragma unroll
                    for (int dc = 0; dc < NDC; dc++) wg_mma_ss_n64<1>(oacc[dc], da, wg_desc_mnmaj(vb, BK, kk, dc), 1);
                    if constexpr (TL) wg_mma_ss_n16<1>(otl, da, wg_tdesc<NDC>(vb, BK, kk));
                    continue;
                }
                if constexpr (NDC == 2 && !TL) { // both panels of dims in one product
                    wg_mma_n128<1>(oacc[0], oacc[1], pf[kk], wg_desc_mnmaj(vb, BK, kk, 0), 1);
                } else {
#pragma unroll
                    for (int dc = 0; dc < NDC; dc++) // k: keys, n: dims
                        wg_mma_n64<1>(oacc[dc], pf[kk], wg_desc_mnmaj(vb, BK, kk, dc), 1);
                }
                if constexpr (TL) wg_mma_n16<1>(otl, pf[kk], wg_tdesc<NDC>(vb, BK, kk));
            }
        };
        auto keep_o = [&]() {
#pragma unroll
            for (int c = 0; c < NDC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) wg_keep(oacc[c][e]);
            if constexpr (TL)
#pragma unroll
                for (int e = 0; e < 8; e++) wg_keep(otl[e]);
        };
        auto keep_p = [&]() {
#pragma unroll
            for (int kk = 0; kk < (PS ? 1 : BK / 16); kk++)
#pragma unroll
                for (int e = 0; e < 4; e++) wg_keep(pf[kk][e]);
        };
        auto release = [&](int t) { // this warp is done reading tile t's stage
            if (lane == 0) tm_mb_arrive(empty0 + 8u * (uint32_t)((T + t) % NST));
        };

        // The ring: warpgroup w issues after w - 1 (warpgroup 0 after NWG - 1, which lets it go first).
        const int turn = 1 + wg, next = 1 + (wg + 1) % NWG;
        if (wg == NWG - 1) tm_bar_arrive<256>(1);
        // Iteration t: S(t) for t < wtiles, P V of tile t - 1 for 0 < t <= wtiles; every warpgroup takes
        // ntiles + 1 turns (the ring's arrivals balance: the last warpgroup's last one is left out).
        auto pass = [&](int t) { // hand the tensor cores to the next warpgroup
            if (!(wg == NWG - 1 && t == ntiles)) tm_bar_arrive<256>(next);
        };
        for (int t = 0; t <= ntiles; t++) {
            if (t < wtiles) {
                tm_mb_wait(full0 + 8u * (uint32_t)((T + t) % NST), (uint32_t)(((T + t) / NST) & 1));
            } else if (t < ntiles) { // a tile past this warpgroup's diagonal: released once it has landed
                tm_mb_wait(full0 + 8u * (uint32_t)((T + t) % NST), (uint32_t)(((T + t) / NST) & 1));
                release(t);
            }
            tm_bar_sync<256>(turn);
            if (t >= wtiles) {
                if (t == wtiles && t > 0) { // this warpgroup's last P V product
                    keep_o();
                    keep_p();
                    issue_pv(t - 1);
                    wg_commit();
                    pass(t);
                    wg_wait<0>();
                    keep_o();
                    release(t - 1);
                } else {
                    pass(t);
                }
                continue;
            }
            const uint32_t kb = stage(t);
            float s[NSC][32];
            wg_arrive();
#pragma unroll
            for (int kd = 0; kd < KD; kd++) { // k: dims, n: keys
                if constexpr (QS && NSC == 2) { // both 64-key chunks in one product
                    const uint64_t da = wg_kdesc<NDC>(qw, 64, kd, 0), db = wg_kdesc<NDC>(kb, BK, kd, 0);
                    if (kd == 0)
                        wg_mma_ss_n128_set<0>(s[0], s[NSC - 1], da, db);
                    else
                        wg_mma_ss_n128<0>(s[0], s[NSC - 1], da, db, 1);
                } else {
#pragma unroll
                    for (int c = 0; c < NSC; c++) {
                        if constexpr (QS) {
                            const uint64_t da = wg_kdesc<NDC>(qw, 64, kd, 0), db = wg_kdesc<NDC>(kb, BK, kd, 64 * c);
                            if (kd == 0)
                                wg_mma_ss_n64_set<0>(s[c], da, db);
                            else
                                wg_mma_ss_n64<0>(s[c], da, db, 1);
                        } else if (kd == 0) {
                            wg_mma_n64_set<0>(s[c], qf[QS ? 0 : kd], wg_kdesc<NDC>(kb, BK, kd, 64 * c));
                        } else {
                            wg_mma_n64<0>(s[c], qf[QS ? 0 : kd], wg_kdesc<NDC>(kb, BK, kd, 64 * c), 1);
                        }
                    }
                }
            }
            wg_commit();
            if (t > 0) {
                keep_o();
                keep_p();
                issue_pv(t - 1);
                wg_commit();
                pass(t);
                wg_wait<1>();
            } else {
                pass(t);
                wg_wait<0>();
            }
#pragma unroll
            for (int c = 0; c < NSC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) wg_keep(s[c][e]);

            // Online softmax on this thread's rows rwarp + g (i = 0) and rwarp + g + 8 (i = 1). Some row of the
            // warp needs masking (a key past a row, past S or before its document): decided once a tile for the
            // warp, so the unmasked tiles run a loop without the mask's instructions (a test inside the element
            // loop was compiled to predicated code that every tile issued).
            const int k0 = (kt0 + t) * BK;
            const bool mask = __any_sync(0xffffffffu, k0 + BK - 1 > min(pos[0], pos[1]) || k0 + BK > S ||
                                                           k0 < max(first[0], first[1]));
            float mx[2] = {m[0], m[1]};
            if (mask) {
#pragma unroll
                for (int c = 0; c < NSC; c++)
#pragma unroll
                    for (int e = 0; e < 32; e++) {
                        const int key = k0 + c * 64 + (e >> 2) * 8 + 2 * t4 + (e & 1), i = (e >> 1) & 1;
                        if (key > pos[i] || key >= S || key < first[i]) s[c][e] = -INFINITY;
                        mx[i] = fmaxf(mx[i], s[c][e]);
                    }
            } else {
#pragma unroll
                for (int c = 0; c < NSC; c++)
#pragma unroll
                    for (int e = 0; e < 32; e++) mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s[c][e]);
            }
            float alpha[2], base[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                base[i] = mx[i] == -INFINITY ? 0.0f : mx[i] * scale2;
                alpha[i] = wg_ex2(fmaf(m[i], scale2, -base[i])); // 0 on the first tile (m = -inf)
                m[i] = mx[i];
            }
            float sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int c = 0; c < NSC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) {
                    const float p = wg_ex2(fmaf(s[c][e], scale2, -base[(e >> 1) & 1]));
                    s[c][e] = p;
                    sum[(e >> 1) & 1] += p;
                }
#pragma unroll
            for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + sum[i];
            // The P V product must be complete before its A registers (pf) and O are written.
            wg_wait<0>();
            keep_o();
            keep_p();
            if (t > 0) release(t - 1);
#pragma unroll
            for (int c = 0; c < NDC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) oacc[c][e] *= alpha[(e >> 1) & 1];
            if constexpr (TL)
#pragma unroll
                for (int e = 0; e < 8; e++) otl[e] *= alpha[(e >> 1) & 1];
            if constexpr (PS) {
                // P into this warpgroup's tile by stmatrix: row r = query 16 (warp % 4) + 8 i + lane % 8, key chunk
                // (16 bytes) q of panel c at q ^ (r % 8); the warp's 16 x 64 of a panel as 2 x 8 matrices of 8 x 8
                // (elements 4 j + 2 i, + 1 of s[c]). Read by the next turn's P V product, after the ring's wait (a
                // barrier of the warpgroup's warps), so the stores need only the proxy fence.
                const int mr = lane & 7, mi = (lane >> 3) & 1, mj = lane >> 4;
                const uint32_t rl = (uint32_t)(16 * (warp % 4) + 8 * mi + mr);
#pragma unroll
                for (int c = 0; c < NSC; c++)
#pragma unroll
                    for (int m = 0; m < 4; m++)
                        wg_stmatrix4(pw + (uint32_t)(c * 64 * 128) + rl * 128u + ((uint32_t)((2 * m + mj) ^ mr) << 4),
                                     wg_pack(s[c][8 * m], s[c][8 * m + 1]), wg_pack(s[c][8 * m + 2], s[c][8 * m + 3]),
                                     wg_pack(s[c][8 * m + 4], s[c][8 * m + 5]), wg_pack(s[c][8 * m + 6], s[c][8 * m + 7]));
                wg_fence_proxy();
            } else {
#pragma unroll
                for (int c = 0; c < NSC; c++)
#pragma unroll
                    for (int e = 0; e < 32; e += 2) {
                        // n8 block j = 8 c + e / 4 of the keys: k-step j / 2, A register (row half i, j % 2).
                        const int j = c * 8 + (e >> 2), i = (e >> 1) & 1;
                        pf[j >> 1][(j & 1) * 2 + i] = wg_pack(s[c][e], s[c][e + 1]);
                    }
            }
        }

#pragma unroll
        for (int i = 0; i < 2; i++) {
            float li = l[i];
            li += __shfl_xor_sync(0xffffffffu, li, 1);
            li += __shfl_xor_sync(0xffffffffu, li, 2);
            const int row = rwarp + g + 8 * i;
            if (row >= RN) continue;
            const float inv = 1.0f / li;
            wg_store_row<NDC, TL>(o + qhead0 + att_row_off(row, G, qstride, D), oacc, otl, i, t4, inv);
            if (t4 == 0) lse[att_stat_idx(row, G, b, H, hk, S)] = (m[i] * scale2 + log2f(li)) * (float)WG_LN2;
        }
        T += ntiles;
    } // work items
}

// Shapes (overridable for sweeps: tools/attn_tiles.sh). NWG consumer warpgroups, key tiles of BK, NST stages,
// MINB blocks a multiprocessor, RG the consumers' registers with a producer warpgroup (0: a producer warp).
// Chosen on an H200 (docs/perf/LOG.md, seventeenth session, call 3: three builds alternating, 2 rounds, B4 H16
// S 4096 / 16384 TFLOP/s): head dim 64, 2 warpgroups with 128-key tiles and 240 registers 340 / 447 (3 warpgroups
// of 64-key tiles 333-343 / 434-438); head dim 80, 3 warpgroups at 160 registers 375-380 / 470 (2 warpgroups
// 336-347 / 413); head dim 128, 4 stages 469-484 / 584 (5 stages 463-473 / 565-570; 128-key tiles in 2 stages
// 369-372 / 440). Head dim 128 since 2026-11-30s (call 3): Q in shared memory (ws_fwd_qs), 128-key tiles in 3 stages
// 537-544 / 597-603 against 480-484 / 522-523 for the 64-key tiles in 4 stages with Q in registers.
#ifndef WS_FWD64_NWG
#define WS_FWD64_NWG (WS_FWD64_QSS ? 3 : 2)
#endif
#ifndef WS_FWD64_MINB
#define WS_FWD64_MINB 1
#endif
#ifndef WS_FWD64_RG
#define WS_FWD64_RG (WS_FWD64_QSS ? 160 : 240) // > 0: a producer warpgroup, the consumers' registers raised to this
#endif
#ifndef WS_FWD64_BK
#define WS_FWD64_BK 128
#endif
#ifndef WS_FWD64_NST
#define WS_FWD64_NST 5
#endif
#ifndef WS_FWD80_NWG
#define WS_FWD80_NWG 3
#endif
#ifndef WS_FWD80_MINB
#define WS_FWD80_MINB 1
#endif
#ifndef WS_FWD80_RG
#define WS_FWD80_RG 160
#endif
#ifndef WS_FWD80_BK
#define WS_FWD80_BK (WS_FWD80_PSS ? 128 : 64)
#endif
#ifndef WS_FWD80_NST
#define WS_FWD80_NST (WS_FWD80_PSS ? 3 : 5)
#endif
#ifndef WS_FWD128_NWG
#define WS_FWD128_NWG 2
#endif
#ifndef WS_FWD128_BK
#define WS_FWD128_BK (WS_FWD128_QSS ? 128 : 64)
#endif
#ifndef WS_FWD128_NST
#define WS_FWD128_NST (WS_FWD128_QSS ? 3 : 4) // 3 x 64 KB with Q's 32 KB: 225 KB of shared memory
#endif
#ifndef WS_FWD128_RG
#define WS_FWD128_RG 240 // the consumers' registers (a producer warpgroup of 24)
#endif

// cuTensorMapEncodeTiled from the driver (no link against libcuda: the runtime hands out the entry point).
static PFN_cuTensorMapEncodeTiled_v12000 ws_encode_fn(stg_err *err) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    PFN_cuTensorMapEncodeTiled_v12000 f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
    if (f) return f;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qr);
    if (e != cudaSuccess || qr != cudaDriverEntryPointSuccess || !p) {
        stg_errf(err, "attention forward (TMA): cuTensorMapEncodeTiled not available from the driver (%s, query %d)",
                 cudaGetErrorString(e), (int)qr);
        return nullptr;
    }
    f = (PFN_cuTensorMapEncodeTiled_v12000)p;
    __atomic_store_n(&fn, f, __ATOMIC_RELEASE);
    return f;
}

// The map of a (B, S, Hkv, D) bf16 tensor at base as (D, Hkv, S, B), boxes of box0 x box1 x BK x 1.
static int ws_map(CUtensorMap *m, const void *base, int B, int S, int Hkv, int D, int box0, int box1, int BK, CUtensorMapSwizzle sw,
                  stg_err *err) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = ws_encode_fn(err);
    if (!enc) return -1;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)Hkv, (cuuint64_t)S, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)Hkv * D * 2, (cuuint64_t)S * Hkv * D * 2}; // bytes
    const cuuint32_t box[4] = {(cuuint32_t)box0, (cuuint32_t)box1, (cuuint32_t)BK, 1}, estr[4] = {1, 1, 1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return stg_errf(err, "attention (TMA): cuTensorMapEncodeTiled failed (error %d) for (%d, %d, %d, %d), box %d x %d x %d",
                        (int)r, B, S, Hkv, D, box0, box1, BK);
    return 0;
}

int tm_kv_maps(CUtensorMap *tk, CUtensorMap *tv, CUtensorMap *tkt, CUtensorMap *tvt, const void *k, const void *v, int B,
               int S, int Hkv, int D, int BK, stg_err *err) {
    memset(tkt, 0, sizeof *tkt);
    memset(tvt, 0, sizeof *tvt);
    if (ws_map(tk, k, B, S, Hkv, D, 64, 1, BK, CU_TENSOR_MAP_SWIZZLE_128B, err) ||
        ws_map(tv, v, B, S, Hkv, D, 64, 1, BK, CU_TENSOR_MAP_SWIZZLE_128B, err))
        return -1;
    if (D % 64 == 16 && (ws_map(tkt, k, B, S, Hkv, D, 16, 1, BK, CU_TENSOR_MAP_SWIZZLE_32B, err) ||
                         ws_map(tvt, v, B, S, Hkv, D, 16, 1, BK, CU_TENSOR_MAP_SWIZZLE_32B, err)))
        return -1;
    return 0;
}

int tm_q_maps(CUtensorMap *tq, CUtensorMap *tdo, CUtensorMap *tqt, CUtensorMap *tdot, const void *q, const void *dout, int B,
              int S, int H, int G, int D, stg_err *err) {
    if (G < 1 || 64 % G != 0 || H % G != 0)
        return stg_errf(err, "attention backward (TMA): a 64-row tile of a group of %d of %d query heads is not a tensor box", G, H);
    memset(tqt, 0, sizeof *tqt);
    memset(tdot, 0, sizeof *tdot);
    if (ws_map(tq, q, B, S, H, D, 64, G, 64 / G, CU_TENSOR_MAP_SWIZZLE_128B, err) ||
        ws_map(tdo, dout, B, S, H, D, 64, G, 64 / G, CU_TENSOR_MAP_SWIZZLE_128B, err))
        return -1;
    if (D % 64 == 16 && (ws_map(tqt, q, B, S, H, D, 16, G, 64 / G, CU_TENSOR_MAP_SWIZZLE_32B, err) ||
                         ws_map(tdot, dout, B, S, H, D, 16, G, 64 / G, CU_TENSOR_MAP_SWIZZLE_32B, err)))
        return -1;
    return 0;
}

int tm_item_plan(const void *kernel, int threads, size_t smem, long long items, long long HB, long long bytes, int cap,
                 int *grid, int *hg, stg_err *err) {
    int dev = 0, sms = 0, per = 0, l2 = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    CUDA_CHECK(err, cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    const bool big = l2 > 0 && bytes > 0 && HB * bytes > 2LL * l2;
    const char *e = getenv("STG_ATT_HGROUP");
    const int n = e && *e ? atoi(e) : 0;
    *hg = (int)(n > 0 ? std::min<long long>(n, HB) : big ? std::min<long long>(2, HB) : HB);
    *grid = (int)items;
    if (cap > 0 && cap < items) *grid = cap;
    if (cap >= 0 || big) return 0;
    CUDA_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem));
    if (per > 0 && 2LL * sms * per <= items) *grid = sms * per;
    return 0;
}

// STG_ATT_FWD_PERSIST (read at every launch; for A/B runs and tests): unset, as many blocks as are resident; 0, a block a
// work item; N > 0, at most N blocks (the tests' way of giving every block many work items at any shape).
static int ws_fwd_grid_cap(void) {
    const char *e = getenv("STG_ATT_FWD_PERSIST");
    if (!e || !*e) return -1;
    const int n = atoi(e);
    return n > 0 ? n : 0;
}

template <int D, int NWG, int BK, int NST, int MINB, int PW, int RG>
static int ws_fwd_launch(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, void *o, float *lse,
                         int B, int S, int H, int G, float scale2, stg_err *err) {
    const int Hkv = H / G;
    CUtensorMap tk, tv, tkt, tvt;
    if (tm_kv_maps(&tk, &tv, &tkt, &tvt, k, v, B, S, Hkv, D, BK, err)) return -1;
    const size_t smem = ws_fwd_smem<D, NWG, BK, NST>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_ws_fwd_kernel<D, NWG, BK, NST, MINB, PW, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
    const int nq = (S * G + 64 * NWG - 1) / (64 * NWG), threads = 128 * NWG + 32 * PW;
    const int64_t items = (int64_t)nq * Hkv * B;
    if (items > 0x7fffffff) return stg_errf(err, "attention forward (wgmma): %lld work items (over 2^31 - 1)", (long long)items);
    // Persistent blocks at two waves of items or more unless the heads' K and V outgrow the L2 (tm_item_plan): as many
    // as are resident at once, each walking its work items (the kernel's comment), so a block's next K and V tiles
    // stream in while its consumers store the last item's rows and load the next one's queries (ws_fwd_grid_cap: other
    // grids, for A/B runs and tests).
    int grid = 0, hg = 0;
    if (tm_item_plan((const void *)att_ws_fwd_kernel<D, NWG, BK, NST, MINB, PW, RG>, threads, smem, (long long)items,
                     (long long)Hkv * B, 4LL * S * D, ws_fwd_grid_cap(), &grid, &hg, err)) // a kv head's K and V (bf16)
        return -1;
    att_ws_fwd_kernel<D, NWG, BK, NST, MINB, PW, RG><<<(unsigned)grid, threads, smem, st>>>(tk, tv, tkt, tvt, (const wg_bf16 *)q, docs,
                                                                               (wg_bf16 *)o, lse, S, H, G, scale2, nq, B, hg);
    CUDA_LAUNCH_CHECK(err, "attention forward (warp-specialised, TMA)");
    return 0;
}

bool att_wgmma_fwd_supported(int D, float scale) {
    static int off = -1; // STG_ATT_WS=0 in the environment: the mma.sync kernel (../cuda_mma.cu), for A/B runs
    if (off < 0) {
        const char *e = getenv("STG_ATT_WS");
        off = e && strcmp(e, "0") == 0;
    }
    return !off && (D == 64 || D == 80 || D == 128) && scale > 0.0f;
}

int att_wgmma_fwd(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, void *o, float *lse, int B,
                  int S, int H, int G, int D, float scale2, stg_err *err) {
    if (B > 65535 || H > 65535) return stg_errf(err, "attention forward (wgmma): B %d or H %d over 65535", B, H);
    if (G < 1 || H % G) return stg_errf(err, "attention forward (wgmma): %d query heads in groups of %d", H, G);
    if ((uintptr_t)k % 16 || (uintptr_t)v % 16)
        return stg_errf(err, "attention forward (wgmma): k and v must be 16-byte aligned for tensor copies");
    switch (D) {
    case 64:
        return ws_fwd_launch<64, WS_FWD64_NWG, WS_FWD64_BK, WS_FWD64_NST, WS_FWD64_MINB, WS_FWD64_RG ? 4 : 1, WS_FWD64_RG>(st, q, k, v, docs, o, lse, B, S, H, G, scale2, err);
    case 80:
        return ws_fwd_launch<80, WS_FWD80_NWG, WS_FWD80_BK, WS_FWD80_NST, WS_FWD80_MINB, WS_FWD80_RG ? 4 : 1, WS_FWD80_RG>(st, q, k, v, docs, o, lse, B, S, H, G, scale2, err);
    case 128:
        return ws_fwd_launch<128, WS_FWD128_NWG, WS_FWD128_BK, WS_FWD128_NST, 1, 4, WS_FWD128_RG>(st, q, k, v, docs, o, lse, B, S, H, G, scale2, err);
    }
    return stg_errf(err, "attention forward (wgmma): head dim %d not supported", D);
}
