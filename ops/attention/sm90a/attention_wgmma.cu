// Causal flash attention forward, bf16, on Hopper's warpgroup matrix instructions (wgmma; compiled
// for sm_90a only, see CMakeLists.txt). Same function as att_tc_fwd_kernel in ../attention.cu:
// o_i = sum_j softmax_j(scale q_i . k_j) v_j over j <= i, lse_i = log sum_j exp(scale q_i . k_j).
//
// Block: NWG warpgroups (4 warps each) of 64 rows; grid (row tiles, H / G, B). Grouped-query
// attention: the rows of a block are the S G rows of the G query heads sharing kv head hk (position
// R / G of head hk G + R % G; ../rows.cuh), so one K/V tile load serves the whole group; the blocks of
// one kv head run together (its K and V stay in L2), the longest rows first. Packed documents
// (docs): the key loop starts at the first tile the block's first document makes visible. Q goes to registers once
// (ldmatrix; the A operand of every S = Q K^T). The block streams key tiles of BK keys through NST
// shared stages with cp.async, NST - 2 tiles ahead. Per tile and warpgroup:
//   S(t) = Q K(t)^T issued (wgmma, async), then O += P(t-1) V(t-1) issued behind it;
//   wait for S(t); online softmax on S(t) in f32 (row max, exp2 with the scale folded into one FMA,
//   row sums, rescale factor alpha); wait for the P V product; O *= alpha; P(t) -> bf16 registers,
//   the A operand of the next P V product (written only after that wait: the compiler serializes
//   the wgmma otherwise).
// So the softmax of one tile overlaps the P V product of the previous one on the tensor cores.
// K and V tiles sit in shared memory in the 128-byte swizzled form (a tile is D / 64 panels of BK
// rows x 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r % 8); at head dim 80 a 16-dim tail
// panel in the 32-byte swizzle follows, with m64n16 products for it: wgmma.cuh): K is read as B in
// K-major form, V as B in MN-major form (transposed by the instruction). Unswizzled 8 x 8 core matrices
// measured 207 TFLOP/s against 259 for this layout (B4 H16 Dh64 S4096; docs/PERF.md).
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"
#include "ops/attention/sm90a/attention_wgmma.h"
#include "ops/attention/sm90a/wgmma.cuh"

// QA: Q's padded rows in the last stage's space (below), not a region of their own.
template <int D, int NWG, int BK, int NST, bool QA>
static size_t wg_fwd_smem(void) {
    return sizeof(wg_bf16) * ((QA ? 0 : (size_t)64 * NWG * (D + 8)) + (size_t)2 * NST * BK * D) + 1024; // + alignment
}

// Grid (tiles of 64 NWG of the S G rows, H / G, B); block 128 NWG threads; NST shared stages of K and V, the loads
// running NST - 2 tiles ahead (one stage holds the V of the previous tile, read by its P V product).
// MINB: blocks per multiprocessor the registers must allow. QA: Q lands in stage NST - 1, which the first
// load into it (tile NST - 1, issued at t = 1 after the loop's barrier) overwrites only once every warp has
// read Q into registers at t = 0; this saves Q's region (a second block on a multiprocessor at head dim 128).
template <int D, int NWG, int BK, int NST, int MINB, bool QA>
__global__ void __launch_bounds__(128 * NWG, MINB)
    att_wg_fwd_kernel(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                      const int *__restrict__ docs, wg_bf16 *__restrict__ o, float *__restrict__ lse, int S, int H, int G,
                      float scale2) {
    constexpr int BQ = 64 * NWG, NT = 128 * NWG, LDQ = D + 8, KD = D / 16, NSC = BK / 64, NDC = D / 64;
    constexpr bool TL = D % 64 == 16; // head dim 80: a 16-dim tail panel (wgmma.cuh)
    constexpr int TILE = BK * D; // elements of one K or V stage
    constexpr int PF = NST - 2;   // tiles loaded ahead
    static_assert(NST >= 3, "three stages at least");
    static_assert((D % 64 == 0 || D % 64 == 16) && BK % 64 == 0, "head dim 64 NP (+ 16), key tile in chunks of 64");
    extern __shared__ __align__(128) unsigned char wg_smraw[];
    static_assert(!QA || (BQ * LDQ <= 2 * TILE && NST - 2 >= 1), "Q fits in a stage, which is loaded first at t = 1");
    // stage s: K at kv0 + 2 s TILE, V at kv0 + (2 s + 1) TILE (elements; bytes / 2), 1024-byte aligned
    const uint32_t sm0 = wg_smem(wg_smraw);
    const uint32_t kv0 = ((QA ? sm0 : wg_smem((wg_bf16 *)wg_smraw + BQ * LDQ)) + 1023u) & ~1023u;
    wg_bf16 *Qs = QA ? (wg_bf16 *)(wg_smraw + (kv0 - sm0)) + 2 * (NST - 1) * TILE : (wg_bf16 *)wg_smraw;
    const int hk = blockIdx.y, b = blockIdx.z;
    const int tile = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, warp / 4, 0); // provably warp-uniform: wgmma is not serialized
    const int RN = S * G, q0 = tile * BQ, rw0 = q0 + 64 * wg, rwarp = rw0 + 16 * (warp % 4); // rows
    const int64_t qstride = (int64_t)H * D, kstride = (int64_t)(H / G) * D;
    const int64_t qhead0 = ((int64_t)b * S * H + (int64_t)hk * G) * D; // row 0 of the group
    const int64_t khead0 = (int64_t)b * S * kstride + (int64_t)hk * D;
    const int *dc = docs ? docs + (int64_t)b * S : nullptr;
    const int last = (min(q0 + BQ, RN) - 1) / G;                        // the block's last position
    const int kt0 = att_doc0(dc, q0 / G) / BK;                          // its first visible key tile
    const int ntiles = last / BK + 1 - kt0;                             // key tiles of the block
    const int wtiles = rw0 < RN ? (min(rw0 + 63, RN - 1) / G) / BK + 1 - kt0 : 0; // key tiles of this warpgroup
    int pos[2], first[2]; // this thread's rows rwarp + g + 8 i: position (-1 past the end), first visible key
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int R = rwarp + g + 8 * i;
        pos[i] = R < RN ? R / G : -1;
        first[i] = R < RN ? att_doc0(dc, pos[i]) : 0;
    }

    // Q (padded rows, for ldmatrix) and the first K, V tile.
    {
        constexpr int NC8 = D / 8;
        for (int idx = threadIdx.x; idx < BQ * NC8; idx += NT) {
            const int r = idx / NC8, c = (idx % NC8) * 8;
            const bool ok = q0 + r < RN;
            wg_cp16(wg_smem(Qs + r * LDQ + c), q + qhead0 + (ok ? att_row_off(q0 + r, G, qstride, D) + c : 0), ok);
        }
    }
    // One commit group per tile (empty past the last), tile t (key tile kt0 + t) in stage t % NST.
    auto load_kv = [&](int t) {
        if (t < ntiles) {
            const int kn = (kt0 + t) * BK;
            const uint32_t st = kv0 + (uint32_t)(2 * (t % NST) * TILE * 2);
            wg_load_rows<D, BK, NT>(st, k + khead0 + (int64_t)kn * kstride, kstride, S - kn);
            wg_load_rows<D, BK, NT>(st + TILE * 2, v + khead0 + (int64_t)kn * kstride, kstride, S - kn);
        }
        wg_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < PF; t++) load_kv(t);

    uint32_t qf[KD][4];
    float oacc[NDC][32], otl[8]; // otl: the tail panel's 16 dims (head dim 80)
    uint32_t pf[BK / 16][4]; // P of the previous tile: the A operand of its P V product
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < NDC; c++)
#pragma unroll
        for (int e = 0; e < 32; e++) oacc[c][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) otl[e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0u;

    // O += P(t) V(t) on the stage of tile t (issued, not waited for).
    auto issue_pv = [&](int t) {
        wg_arrive();
        const uint32_t vb = kv0 + (uint32_t)((2 * (t % NST) + 1) * TILE * 2);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
#pragma unroll
            for (int dc = 0; dc < NDC; dc++) // k: keys, n: dims
                wg_mma_n64<1>(oacc[dc], pf[kk], wg_desc_mnmaj(vb, BK, kk, dc), 1);
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
        for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) wg_keep(pf[kk][e]);
    };

    for (int t = 0; t < ntiles; t++) {
        wg_cp_wait<PF - 1>(); // this thread's copies of tile t have landed
        wg_fence_proxy();
        __syncthreads(); // tile t has landed for everyone; every warpgroup is done with tile t - 2's stage
        if (t == 0) {
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                wg_ldsm4(qf[kd], wg_smem(Qs + (16 * warp + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8));
            }
        }
        load_kv(t + PF); // into stage (t - 2) % NST
        if (t < wtiles) {
            const int k0 = (kt0 + t) * BK;
            const uint32_t kb = kv0 + (uint32_t)(2 * (t % NST) * TILE * 2);
            float s[NSC][32];
            wg_arrive();
#pragma unroll
            for (int kd = 0; kd < KD; kd++)
#pragma unroll
                for (int c = 0; c < NSC; c++) // k: dims, n: keys
                    if (kd == 0)
                        wg_mma_n64_set<0>(s[c], qf[kd], wg_kdesc<NDC>(kb, BK, kd, 64 * c));
                    else
                        wg_mma_n64<0>(s[c], qf[kd], wg_kdesc<NDC>(kb, BK, kd, 64 * c), 1);
            wg_commit();
            if (t > 0) {
                keep_o();
                keep_p();
                issue_pv(t - 1);
                wg_commit();
                wg_wait<1>();
            } else {
                wg_wait<0>();
            }
#pragma unroll
            for (int c = 0; c < NSC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) wg_keep(s[c][e]);

            // Online softmax on this thread's rows rwarp + g (i = 0) and rwarp + g + 8 (i = 1).
            // Some row of the warp needs masking (a key past a row, past S or before its document): decided
            // once a tile for the warp, so the unmasked tiles run a loop without the mask's instructions (a
            // test inside the element loop was compiled to predicated code that every tile issued).
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
            // The P V product must be complete before its A registers (pf) and O are written
            // (unconditional: the compiler's analysis does not follow t > 0).
            wg_wait<0>();
            keep_o();
            keep_p();
#pragma unroll
            for (int c = 0; c < NDC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) oacc[c][e] *= alpha[(e >> 1) & 1];
            if constexpr (TL)
#pragma unroll
                for (int e = 0; e < 8; e++) otl[e] *= alpha[(e >> 1) & 1];
#pragma unroll
            for (int c = 0; c < NSC; c++)
#pragma unroll
                for (int e = 0; e < 32; e += 2) {
                    // n8 block j = 8 c + e / 4 of the keys: k-step j / 2, A register (row half i, j % 2).
                    const int j = c * 8 + (e >> 2), i = (e >> 1) & 1;
                    pf[j >> 1][(j & 1) * 2 + i] = wg_pack(s[c][e], s[c][e + 1]);
                }
        } else if (t == wtiles && t > 0) { // this warpgroup is past its diagonal: finish its last tile
            keep_o();
            keep_p();
            issue_pv(t - 1);
            wg_commit();
            wg_wait<0>();
            keep_o();
        }
    }
    if (wtiles == ntiles && ntiles > 0) {
        keep_o();
        keep_p();
        issue_pv(ntiles - 1);
        wg_commit();
        wg_wait<0>();
        keep_o();
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
}

// Shapes at head dim 64 (overridable for tuning builds). Measured on an H100 at B4 H16 S4096
// (docs/PERF.md): 2 warpgroups, key tiles of 64, 5 stages, 2 blocks per multiprocessor (127
// registers) 259 TFLOP/s; 3 warpgroups of 1 block 195-217; key tiles of 128 (187 registers) 218.
#ifndef WG_FWD_NWG
#define WG_FWD_NWG 2 // warpgroups per block
#endif
#ifndef WG_FWD_BK64
#define WG_FWD_BK64 64 // key tile
#endif
#ifndef WG_FWD_NST
#define WG_FWD_NST 5 // shared stages
#endif
#ifndef WG_FWD_MINB
#define WG_FWD_MINB 2 // blocks per multiprocessor
#endif
#ifndef WG_FWD_QA
#define WG_FWD_QA 0 // Q in the last stage's space (att_wg_fwd_kernel's QA)
#endif
// Head dim 80 (the 2.7B model; STG_NO_WGMMA_FWD80 keeps it on mma.sync, for comparisons). Measured on
// an H100 at B4 H32 S1024 (docs/PERF.md): one warpgroup, 4 stages, 3 blocks per multiprocessor (154
// registers) 0.121 ms; 2 warpgroups, 5 stages, one block (144 registers) 0.130; mma.sync 0.156.
#ifndef WG_FWD80_NWG
#define WG_FWD80_NWG 1
#endif
#ifndef WG_FWD80_NST
#define WG_FWD80_NST 4
#endif
#ifndef WG_FWD80_MINB
#define WG_FWD80_MINB 3
#endif

// Head dim 128: 2 warpgroups, key tiles of 64, 5 stages, one block a multiprocessor (194 registers; 198 KB of
// shared memory). Key tiles of 128 in 3 stages fill the 227 KB a block may have to the byte (sweep with
// tools/attn_tiles.sh: -DWG_FWD128_BK=128 -DWG_FWD128_NST=3); with Q in the last stage (WG_FWD128_QA=1), one
// warpgroup, 3 stages of 64 keys and 2 blocks a multiprocessor fit (97 KB each: -DWG_FWD128_NWG=1
// -DWG_FWD128_NST=3 -DWG_FWD128_MINB=2 -DWG_FWD128_QA=1), two blocks whose barriers do not wait for each other.
#ifndef WG_FWD128_NWG
#define WG_FWD128_NWG 2
#endif
#ifndef WG_FWD128_BK
#define WG_FWD128_BK 64
#endif
#ifndef WG_FWD128_NST
#define WG_FWD128_NST 5
#endif
#ifndef WG_FWD128_MINB
#define WG_FWD128_MINB 1
#endif
#ifndef WG_FWD128_QA
#define WG_FWD128_QA 0
#endif

template <int D, int NWG, int BK, int NST, int MINB, bool QA>
static int wg_fwd_launch(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, void *o,
                         float *lse, int B, int S, int H, int G, float scale2, stg_err *err) {
    const size_t smem = wg_fwd_smem<D, NWG, BK, NST, QA>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_wg_fwd_kernel<D, NWG, BK, NST, MINB, QA>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int nq = (S * G + 64 * NWG - 1) / (64 * NWG);
    dim3 grid((unsigned)nq, (unsigned)(H / G), (unsigned)B); // H, B <= 65535: checked below
    att_wg_fwd_kernel<D, NWG, BK, NST, MINB, QA><<<grid, 128 * NWG, smem, st>>>(
        (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, docs, (wg_bf16 *)o, lse, S, H, G, scale2);
    CUDA_LAUNCH_CHECK(err, "attention forward (wgmma)");
    return 0;
}

bool att_wgmma_fwd_supported(int D, float scale) {
#ifdef STG_NO_WGMMA_FWD80
    if (D == 80) return false;
#endif
    return (D == 64 || D == 80 || D == 128) && scale > 0.0f;
}

int att_wgmma_fwd(cudaStream_t st, const void *q, const void *k, const void *v, const int *docs, void *o, float *lse,
                  int B, int S, int H, int G, int D, float scale2, stg_err *err) {
    if (B > 65535 || H > 65535) return stg_errf(err, "attention forward (wgmma): B %d or H %d over 65535", B, H);
    if (G < 1 || H % G) return stg_errf(err, "attention forward (wgmma): %d query heads in groups of %d", H, G);
    if (att_ws_fwd_supported(D, k, v)) return att_ws_fwd(st, q, k, v, docs, o, lse, B, S, H, G, D, scale2, err);
    switch (D) {
    case 64:
        return wg_fwd_launch<64, WG_FWD_NWG, WG_FWD_BK64, WG_FWD_NST, WG_FWD_MINB, WG_FWD_QA != 0>(st, q, k, v, docs, o, lse, B, S, H, G, scale2, err);
    case 80:
        return wg_fwd_launch<80, WG_FWD80_NWG, 64, WG_FWD80_NST, WG_FWD80_MINB, false>(st, q, k, v, docs, o, lse, B, S, H, G, scale2, err);
    case 128:
        return wg_fwd_launch<128, WG_FWD128_NWG, WG_FWD128_BK, WG_FWD128_NST, WG_FWD128_MINB, WG_FWD128_QA != 0>(st, q, k, v, docs, o, lse, B, S, H, G,
                                                                                         scale2, err);
    }
    return stg_errf(err, "attention forward (wgmma): head dim %d not supported", D);
}
