// Causal flash attention forward, bf16, on Hopper's warpgroup matrix instructions (wgmma; compiled
// for sm_90a only, see CMakeLists.txt). Same function as att_tc_fwd_kernel in ../attention.cu:
// o_i = sum_j softmax_j(scale q_i . k_j) v_j over j <= i, lse_i = log sum_j exp(scale q_i . k_j).
//
// Block: NWG warpgroups (4 warps each) of 64 queries; grid (query tiles, H, B): the blocks of one
// head run together (its K and V stay in L2), the longest rows first. Q goes to registers once
// (ldmatrix; the A operand of every S = Q K^T). The block streams key tiles of BK keys through NST
// shared stages with cp.async, NST - 2 tiles ahead. Per tile and warpgroup:
//   S(t) = Q K(t)^T issued (wgmma, async), then O += P(t-1) V(t-1) issued behind it;
//   wait for S(t); online softmax on S(t) in f32 (row max, exp2 with the scale folded into one FMA,
//   row sums, rescale factor alpha); wait for the P V product; O *= alpha; P(t) -> bf16 registers,
//   the A operand of the next P V product (written only after that wait: the compiler serializes
//   the wgmma otherwise).
// So the softmax of one tile overlaps the P V product of the previous one on the tensor cores.
// K and V tiles sit in shared memory in the 128-byte swizzled form (a tile is DP / 64 panels of BK
// rows x 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r % 8)): K is read as B in K-major
// form, V as B in MN-major form (transposed by the instruction). Unswizzled 8 x 8 core matrices
// measured 207 TFLOP/s against 259 for this layout (B4 H16 Dh64 S4096; docs/PERF.md).
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/internal.h"
#include "ops/cuda/sm90a/attention_wgmma.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "attention_wgmma.cu needs the sm_90a target (-gencode=arch=compute_90a,code=sm_90a)"
#endif

typedef __nv_bfloat16 wg_bf16;

#define WG_LN2 0.6931471805599453

__device__ __forceinline__ uint32_t wg_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wg_cp16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void wg_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
// Shared memory written through the generic proxy (cp.async) and read next by wgmma (async proxy).
__device__ __forceinline__ void wg_fence_proxy(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wg_arrive(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving register reads and writes across the wgmma issue and wait points.
__device__ __forceinline__ void wg_keep(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void wg_keep(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }

__device__ __forceinline__ float wg_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t wg_pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

// Shared-memory matrix descriptor: start address, leading- and stride-dimension byte offsets, layout
// (0: no swizzle, 1: 128-byte swizzle).
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t layout) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)layout << 62);
}

// Descriptors of the B operands in the 128-byte swizzled layout (8-row atoms of 1024 bytes; stage
// bases 1024-byte aligned). K tile for S = Q K^T, K-major: k-step kd = dims 16 kd.. (panel kd / 4,
// the start advanced 32 bytes per k-step inside it), key chunk c = keys 64 c..; SBO 1024 between
// 8-key atoms, LBO unused. V tile for O += P V, MN-major: k-step kk = keys 16 kk.. (two atoms), dim
// chunk dc = panel dc; SBO 1024 between 8-key atoms, LBO between panels (unused at N = 64).
template <int DP, int BK>
__device__ __forceinline__ uint64_t wg_desc_k(uint32_t kst, int kd, int c) {
    return wg_desc(kst + (uint32_t)((kd / 4) * BK * 128 + c * 64 * 128 + (kd % 4) * 32), 16, 1024, 1);
}
template <int DP, int BK>
__device__ __forceinline__ uint64_t wg_desc_v(uint32_t vst, int kk, int dc) {
    return wg_desc(vst + (uint32_t)(dc * BK * 128 + kk * 2 * 1024), BK * 128, 1024, 1);
}


// d (64 x 64 f32; this thread's 32) (+)= a (64 x 16 bf16, fragments in registers) b (16 x 64, shared,
// descriptor); TB: b is MN-major (transposed). acc = 0 overwrites d.
template <int TB>
__device__ __forceinline__ void wg_mma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(acc));
}

// d = a b, same shapes (d is only written: no register of it is read by the instruction).
template <int TB>
__device__ __forceinline__ void wg_mma_n64_set(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
                   "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]),
                   "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]),
                   "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]),
                   "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(0));
}

// ROWS rows of DP bf16 from base (row stride `stride` elements) into the swizzled panels at dst;
// rows at and past `valid` are zero-filled. Eight consecutive threads copy one 128-byte row of a
// panel: whole sectors from global memory, no shared-memory bank conflicts.
template <int DP, int ROWS, int NT>
__device__ __forceinline__ void wg_load_tile(uint32_t dst, const wg_bf16 *base, int64_t stride, int valid) {
    constexpr int G = DP / 8;
#pragma unroll
    for (int i0 = 0; i0 < ROWS * G; i0 += NT) {
        const int idx = i0 + (int)threadIdx.x;
        if (ROWS * G % NT == 0 || idx < ROWS * G) {
            const int cc = idx & 7, r = (idx >> 3) % ROWS, pn = (idx >> 3) / ROWS;
            const bool ok = r < valid;
            wg_cp16(dst + (uint32_t)(pn * ROWS * 128 + r * 128 + ((cc ^ (r & 7)) << 4)),
                    base + (ok ? (int64_t)r * stride + pn * 64 + cc * 8 : 0), ok);
        }
    }
}

template <int DP, int NWG, int BK, int NST>
static size_t wg_fwd_smem(void) {
    return sizeof(wg_bf16) * ((size_t)64 * NWG * (DP + 8) + (size_t)2 * NST * BK * DP) + 1024; // + alignment
}

// Grid (query tiles of 64 NWG, H, B); block 128 NWG threads; NST shared stages of K and V, the loads
// running NST - 2 tiles ahead (one stage holds the V of the previous tile, read by its P V product).
// MINB: blocks per multiprocessor the registers must allow.
template <int DP, int NWG, int BK, int NST, int MINB>
__global__ void __launch_bounds__(128 * NWG, MINB)
    att_wg_fwd_kernel(const wg_bf16 *__restrict__ q, const wg_bf16 *__restrict__ k, const wg_bf16 *__restrict__ v,
                      wg_bf16 *__restrict__ o, float *__restrict__ lse, int S, int H, float scale2) {
    constexpr int BQ = 64 * NWG, NT = 128 * NWG, LDQ = DP + 8, KD = DP / 16, NSC = BK / 64, NDC = DP / 64;
    constexpr int TILE = BK * DP; // elements of one K or V stage
    constexpr int PF = NST - 2;   // tiles loaded ahead
    static_assert(NST >= 3, "three stages at least");
    static_assert(DP % 64 == 0 && BK % 64 == 0, "head dim and key tile in chunks of 64");
    extern __shared__ __align__(128) unsigned char wg_smraw[];
    wg_bf16 *Qs = (wg_bf16 *)wg_smraw;
    // stage s: K at kv0 + 2 s TILE, V at kv0 + (2 s + 1) TILE (elements; bytes / 2), 1024-byte aligned
    const uint32_t kv0 = (wg_smem(Qs + BQ * LDQ) + 1023u) & ~1023u;
    const int h = blockIdx.y, b = blockIdx.z;
    const int tile = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, warp / 4, 0); // provably warp-uniform: wgmma is not serialized
    const int q0 = tile * BQ, rw0 = q0 + 64 * wg, rwarp = rw0 + 16 * (warp % 4);
    const int64_t stride = (int64_t)H * DP;
    const int64_t head0 = (int64_t)b * S * stride + (int64_t)h * DP;
    const int last = min(q0 + BQ, S) - 1;
    const int ntiles = last / BK + 1;                             // key tiles of the block
    const int wtiles = rw0 < S ? min(rw0 + 63, S - 1) / BK + 1 : 0; // key tiles of this warpgroup

    // Q (padded rows, for ldmatrix) and the first K, V tile.
    {
        constexpr int G = DP / 8;
        for (int idx = threadIdx.x; idx < BQ * G; idx += NT) {
            const int r = idx / G, c = (idx % G) * 8;
            const bool ok = q0 + r < S;
            wg_cp16(wg_smem(Qs + r * LDQ + c), q + head0 + (ok ? (int64_t)(q0 + r) * stride + c : 0), ok);
        }
    }
    // One commit group per tile (empty past the last), tile t in stage t % NST.
    auto load_kv = [&](int t) {
        if (t < ntiles) {
            const int kn = t * BK;
            const uint32_t st = kv0 + (uint32_t)(2 * (t % NST) * TILE * 2);
            wg_load_tile<DP, BK, NT>(st, k + head0 + (int64_t)kn * stride, stride, S - kn);
            wg_load_tile<DP, BK, NT>(st + TILE * 2, v + head0 + (int64_t)kn * stride, stride, S - kn);
        }
        wg_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < PF; t++) load_kv(t);

    uint32_t qf[KD][4];
    float oacc[NDC][32];
    uint32_t pf[BK / 16][4]; // P of the previous tile: the A operand of its P V product
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < NDC; c++)
#pragma unroll
        for (int e = 0; e < 32; e++) oacc[c][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) pf[kk][0] = pf[kk][1] = pf[kk][2] = pf[kk][3] = 0u;

    // O += P(t) V(t) on the stage of tile t (issued, not waited for).
    auto issue_pv = [&](int t) {
        wg_arrive();
        const uint32_t vb = kv0 + (uint32_t)((2 * (t % NST) + 1) * TILE * 2);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
            for (int dc = 0; dc < NDC; dc++) // k: keys, n: dims
                wg_mma_n64<1>(oacc[dc], pf[kk], wg_desc_v<DP, BK>(vb, kk, dc), 1);
    };
    auto keep_o = [&]() {
#pragma unroll
        for (int c = 0; c < NDC; c++)
#pragma unroll
            for (int e = 0; e < 32; e++) wg_keep(oacc[c][e]);
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
                const wg_bf16 *p = Qs + (16 * (warp) + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(qf[kd][0]), "=r"(qf[kd][1]), "=r"(qf[kd][2]), "=r"(qf[kd][3])
                             : "r"(wg_smem(p)));
            }
        }
        load_kv(t + PF); // into stage (t - 2) % NST
        if (t < wtiles) {
            const int k0 = t * BK;
            const uint32_t kb = kv0 + (uint32_t)(2 * (t % NST) * TILE * 2);
            float s[NSC][32];
            wg_arrive();
#pragma unroll
            for (int kd = 0; kd < KD; kd++)
#pragma unroll
                for (int c = 0; c < NSC; c++) // k: dims, n: keys
                    if (kd == 0)
                        wg_mma_n64_set<0>(s[c], qf[kd], wg_desc_k<DP, BK>(kb, kd, c));
                    else
                        wg_mma_n64<0>(s[c], qf[kd], wg_desc_k<DP, BK>(kb, kd, c), 1);
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
            const bool mask = k0 + BK - 1 > rw0 || k0 + BK > S;
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int c = 0; c < NSC; c++)
#pragma unroll
                for (int e = 0; e < 32; e++) {
                    float x = s[c][e];
                    if (mask) {
                        const int key = k0 + c * 64 + (e >> 2) * 8 + 2 * t4 + (e & 1), row = rwarp + g + ((e >> 1) & 1) * 8;
                        if (key > row || key >= S) x = -INFINITY;
                    }
                    s[c][e] = x;
                    mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], x);
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
        if (row >= S) continue;
        const float inv = 1.0f / li;
        wg_bf16 *orow = o + head0 + (int64_t)row * stride;
#pragma unroll
        for (int c = 0; c < NDC; c++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                *(uint32_t *)(orow + c * 64 + j * 8 + 2 * t4) =
                    wg_pack(oacc[c][4 * j + 2 * i] * inv, oacc[c][4 * j + 2 * i + 1] * inv);
        if (t4 == 0) lse[((int64_t)b * H + h) * S + row] = (m[i] * scale2 + log2f(li)) * (float)WG_LN2;
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

template <int DP, int NWG, int BK, int NST, int MINB>
static int wg_fwd_launch(cudaStream_t st, const void *q, const void *k, const void *v, void *o, float *lse, int B, int S,
                         int H, float scale2, stg_err *err) {
    const size_t smem = wg_fwd_smem<DP, NWG, BK, NST>();
    CUDA_CHECK(err, cudaFuncSetAttribute(att_wg_fwd_kernel<DP, NWG, BK, NST, MINB>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int nq = (S + 64 * NWG - 1) / (64 * NWG);
    dim3 grid((unsigned)nq, (unsigned)H, (unsigned)B); // H, B <= 65535: checked below
    att_wg_fwd_kernel<DP, NWG, BK, NST, MINB><<<grid, 128 * NWG, smem, st>>>(
        (const wg_bf16 *)q, (const wg_bf16 *)k, (const wg_bf16 *)v, (wg_bf16 *)o, lse, S, H, scale2);
    CUDA_LAUNCH_CHECK(err, "attention forward (wgmma)");
    return 0;
}

bool att_wgmma_fwd_supported(int D, float scale) { return (D == 64 || D == 128) && scale > 0.0f; }

int att_wgmma_fwd(cudaStream_t st, const void *q, const void *k, const void *v, void *o, float *lse, int B, int S,
                  int H, int D, float scale2, stg_err *err) {
    if (B > 65535 || H > 65535) return stg_errf(err, "attention forward (wgmma): B %d or H %d over 65535", B, H);
    switch (D) {
    case 64:
        return wg_fwd_launch<64, WG_FWD_NWG, WG_FWD_BK64, WG_FWD_NST, WG_FWD_MINB>(st, q, k, v, o, lse, B, S, H, scale2, err);
    case 128: return wg_fwd_launch<128, 2, 64, WG_FWD_NST, 1>(st, q, k, v, o, lse, B, S, H, scale2, err);
    }
    return stg_errf(err, "attention forward (wgmma): head dim %d not supported", D);
}
