// Hopper warpgroup matrix primitives shared by the wgmma attention kernels (sm_90a only): cp.async
// copies into 128-byte swizzled shared tiles, wgmma issue/commit/wait, shared-memory matrix
// descriptors, and m64n64k16 products (bf16 in, f32 accumulate) with A from registers or from
// shared memory.
//
// Tile layout (every operand in shared memory): a tile of ROWS rows of DP bf16 is DP / 64 panels of
// ROWS rows x 128 bytes; the 16-byte chunk c of row r of a panel sits at chunk c ^ (r % 8) (the
// 128-byte swizzle). Rows are the M or N index of an operand read K-major (its 64 elements along a
// row are the k index), or the k index of an operand read MN-major (the elements along a row are
// the n index; the instruction transposes). Tile bases are 1024-byte aligned.
#ifndef STG_OPS_CUDA_SM90A_WGMMA_CUH
#define STG_OPS_CUDA_SM90A_WGMMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/attention/rows.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the wgmma kernels need the sm_90a target (-gencode=arch=compute_90a,code=sm_90a)"
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
// The descriptor of base + off from the descriptor d of base: off (a multiple of 16) added to the
// start-address field, the same bits as wg_desc(base + off, ...) while base + off < 2^18 (the field's
// 14 bits; shared memory ends below 228 KB). A tile's descriptors are then one add each from its base's,
// computed once: built whole, each one's address arithmetic (about six uniform-datapath instructions a
// wgmma) was a quarter of the attention loops' instructions (cuobjdump, twelfth session).
__device__ __forceinline__ uint64_t wg_desc_at(uint64_t d, uint32_t off) { return d + (uint64_t)(off >> 4); }
// The descriptor of base + off: one add from base's, or (WH) built whole. Head dim 128's backward kernels
// build theirs whole: computed once a tile, the bases' descriptors took registers there that ptxas
// spilled (the key-tile kernel 176 -> 212 bytes of spills), and that backward measured 2-5% slower
// (H200, 2026-11-28f), while the forward at every head dim and the backward at 64 and 80 were faster.
template <bool WH>
__device__ __forceinline__ uint64_t wg_desc_off(uint32_t base, uint32_t off, uint32_t lbo, uint32_t sbo, uint32_t layout) {
    if constexpr (WH)
        return wg_desc(base + off, lbo, sbo, layout);
    else
        return wg_desc_at(wg_desc(base, lbo, sbo, layout), off);
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

// ROWS rows of DP bf16 into the swizzled panels at dst[0] (and, NB = 2, the same rows of a second
// tensor into dst[1]): rows R0 .. R0 + ROWS - 1 at base[i] + off(R) (off: a row's element offset, plain
// rows or a group's, below); rows at and past RN are zero-filled. Eight consecutive threads copy one
// 128-byte row of a panel: whole sectors from global memory, no shared-memory bank conflicts. A row's
// offset is computed once for both tensors.
template <int DP, int ROWS, int NT, int NB, class Off>
__device__ __forceinline__ void wg_load_tile_x(const uint32_t (&dst)[NB], const wg_bf16 *const (&base)[NB], Off off, int R0,
                                               int RN, int tid) {
    constexpr int NC8 = DP / 8;
#pragma unroll
    for (int i0 = 0; i0 < ROWS * NC8; i0 += NT) {
        const int idx = i0 + tid;
        if (ROWS * NC8 % NT == 0 || idx < ROWS * NC8) {
            const int cc = idx & 7, r = (idx >> 3) % ROWS, pn = (idx >> 3) / ROWS;
            const bool ok = R0 + r < RN;
            const int64_t o = ok ? off(R0 + r) + pn * 64 + cc * 8 : 0;
            const uint32_t so = (uint32_t)(pn * ROWS * 128 + r * 128 + ((cc ^ (r & 7)) << 4));
#pragma unroll
            for (int b = 0; b < NB; b++) wg_cp16(dst[b] + so, base[b] + o, ok);
        }
    }
}

// The 16 dims past the last full panel of a head dim D = 64 NP + 16 (D = 80): a tail panel of ROWS
// rows x 32 bytes in the 32-byte swizzle (8-row atoms of 256 bytes; the 16-byte chunk c of row r at
// chunk c ^ (r / 4 % 2)), after the full panels. Loads dims 64 NP .. 64 NP + 15 of rows R0 .. (as
// wg_load_tile_x) into tail[i], zero-filling rows at and past RN.
template <int ROWS, int NT, int NB, class Off>
__device__ __forceinline__ void wg_load_tail_x(const uint32_t (&tail)[NB], const wg_bf16 *const (&base)[NB], Off off, int R0,
                                               int RN, int tid) {
#pragma unroll
    for (int i0 = 0; i0 < ROWS * 2; i0 += NT) {
        const int idx = i0 + tid;
        if (ROWS * 2 % NT == 0 || idx < ROWS * 2) {
            const int c = idx & 1, r = idx >> 1;
            const bool ok = R0 + r < RN;
            const int64_t o = ok ? off(R0 + r) + c * 8 : 0;
            const uint32_t so = (uint32_t)(r * 32 + ((c ^ ((r >> 2) & 1)) << 4));
#pragma unroll
            for (int b = 0; b < NB; b++) wg_cp16(tail[b] + so, base[b] + o, ok);
        }
    }
}

// A tile of ROWS rows R0 .. (rows at and past RN zero) of head dim D (64 NP, or 64 NP + 16 with a tail
// panel) at dst[i] from base[i]: D * 2 bytes a row.
// tid: this thread's index among the NT that load (threadIdx.x unless a block's warps split the work).
template <int D, int ROWS, int NT, int NB, class Off>
__device__ __forceinline__ void wg_load_rows_x(const uint32_t (&dst)[NB], const wg_bf16 *const (&base)[NB], Off off, int R0,
                                               int RN, int tid = (int)threadIdx.x) {
    constexpr int NP = D / 64;
    static_assert(D % 64 == 0 || D % 64 == 16, "head dim 64 NP or 64 NP + 16");
    if constexpr (NP > 0) wg_load_tile_x<64 * NP, ROWS, NT, NB>(dst, base, off, R0, RN, tid);
    if constexpr (D % 64 == 16) {
        uint32_t tl[NB];
        const wg_bf16 *tb[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) tl[b] = dst[b] + NP * ROWS * 128, tb[b] = base[b] + 64 * NP;
        wg_load_tail_x<ROWS, NT, NB>(tl, tb, off, R0, RN, tid);
    }
}

// Rows R0 .. of a group of query heads (ops/attention/rows.cuh: row R at base + att_row_off(R, gr,
// stride, D)), of one tensor or (NB = 2) two with the same layout (Q and dO).
template <int D, int ROWS, int NT, int NB>
__device__ __forceinline__ void wg_load_rows_g(const uint32_t (&dst)[NB], const wg_bf16 *const (&base)[NB], int64_t stride,
                                               att_grp gr, int R0, int RN, int tid = (int)threadIdx.x) {
    wg_load_rows_x<D, ROWS, NT, NB>(dst, base, [=](int R) { return att_row_off(R, gr, stride, D); }, R0, RN, tid);
}

// Plain rows [0, valid) at base + r stride.
template <int D, int ROWS, int NT>
__device__ __forceinline__ void wg_load_rows(uint32_t dst, const wg_bf16 *base, int64_t stride, int valid, int tid = (int)threadIdx.x) {
    const uint32_t d[1] = {dst};
    const wg_bf16 *const b[1] = {base};
    wg_load_rows_x<D, ROWS, NT, 1>(d, b, [=](int R) { return (int64_t)R * stride; }, 0, valid, tid);
}

// A or B operand read K-major from a swizzled tile of `rows` rows per panel: k-step kd (elements
// 16 kd .. 16 kd + 15: panel kd / 4, the start advanced 32 bytes per k-step inside it), rows r0 ..
// r0 + 63 (r0 a multiple of 8); SBO 1024 between 8-row atoms, LBO unused.
template <bool WH = false>
__device__ __forceinline__ uint64_t wg_desc_kmaj(uint32_t base, int rows, int kd, int r0) {
    return wg_desc_off<WH>(base, (uint32_t)((kd / 4) * rows * 128 + r0 * 128 + (kd % 4) * 32), 16, 1024, 1);
}
// B operand read MN-major from a swizzled tile of `rows` rows per panel: k-step kk (rows 16 kk ..
// 16 kk + 15, two 8-row atoms), n = elements 64 dc .. 64 dc + 63 (panel dc); SBO 1024 between atoms,
// LBO the panel stride (unused at N = 64).
template <bool WH = false>
__device__ __forceinline__ uint64_t wg_desc_mnmaj(uint32_t base, int rows, int kk, int dc) {
    return wg_desc_off<WH>(base, (uint32_t)(dc * rows * 128 + kk * 2 * 1024), rows * 128, 1024, 1);
}

// K-major descriptor of k-step kd of a tile of head dim D = 64 NP (+ 16) with `rows` rows: a full
// panel's, or (kd = 4 NP) the tail panel's (the whole 32-byte row; SBO 256 between 8-row atoms).
template <int NP, bool WH = false>
__device__ __forceinline__ uint64_t wg_kdesc(uint32_t base, int rows, int kd, int r0) {
    return kd < 4 * NP ? wg_desc_kmaj<WH>(base, rows, kd, r0)
                       : wg_desc_off<WH>(base, (uint32_t)(NP * rows * 128 + r0 * 32), 16, 256, 3);
}
// MN-major descriptor of k-step kk (rows 16 kk ..) of the tail panel (n = its 16 dims).
template <int NP, bool WH = false>
__device__ __forceinline__ uint64_t wg_tdesc(uint32_t base, int rows, int kk) {
    return wg_desc_off<WH>(base, (uint32_t)(NP * rows * 128 + kk * 512), 256, 256, 3);
}

// d (64 x 16 f32; this thread's 8) += a (64 x 16 bf16, registers) b (16 x 16, shared; TB: MN-major).
template <int TB>
__device__ __forceinline__ void wg_mma_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "{%8, %9, %10, %11}, %12, p, 1, 1, %13;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(1));
}

// d (64 x 64 f32; this thread's 32) (+)= a (64 x 16, shared, descriptor da; K-major) b (16 x 64,
// shared, descriptor db; TB: MN-major). acc = 0 overwrites d.
template <int TB>
__device__ __forceinline__ void wg_mma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc), "n"(TB));
}

// d (64 x 128 f32; this thread's 64: d0 the columns 0 .. 63, d1 64 .. 127, each in wg_mma_n64's order) += a (64 x 16
// bf16, fragments in registers) b (16 x 128, shared, descriptor; TB: MN-major, its two 64-column panels LBO apart, as
// wg_desc_mnmaj gives): one instruction where two m64n64 take the same a.
template <int TB>
__device__ __forceinline__ void wg_mma_n128(float (&d0)[32], float (&d1)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
                 : "+f"(d0[0]), "+f"(d0[1]), "+f"(d0[2]), "+f"(d0[3]), "+f"(d0[4]), "+f"(d0[5]), "+f"(d0[6]), "+f"(d0[7]), "+f"(d0[8]), "+f"(d0[9]), "+f"(d0[10]), "+f"(d0[11]), "+f"(d0[12]), "+f"(d0[13]), "+f"(d0[14]), "+f"(d0[15]), "+f"(d0[16]), "+f"(d0[17]), "+f"(d0[18]), "+f"(d0[19]), "+f"(d0[20]), "+f"(d0[21]), "+f"(d0[22]), "+f"(d0[23]), "+f"(d0[24]), "+f"(d0[25]), "+f"(d0[26]), "+f"(d0[27]), "+f"(d0[28]), "+f"(d0[29]), "+f"(d0[30]), "+f"(d0[31]), "+f"(d1[0]), "+f"(d1[1]), "+f"(d1[2]), "+f"(d1[3]), "+f"(d1[4]), "+f"(d1[5]), "+f"(d1[6]), "+f"(d1[7]), "+f"(d1[8]), "+f"(d1[9]), "+f"(d1[10]), "+f"(d1[11]), "+f"(d1[12]), "+f"(d1[13]), "+f"(d1[14]), "+f"(d1[15]), "+f"(d1[16]), "+f"(d1[17]), "+f"(d1[18]), "+f"(d1[19]), "+f"(d1[20]), "+f"(d1[21]), "+f"(d1[22]), "+f"(d1[23]), "+f"(d1[24]), "+f"(d1[25]), "+f"(d1[26]), "+f"(d1[27]), "+f"(d1[28]), "+f"(d1[29]), "+f"(d1[30]), "+f"(d1[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(acc));
}

// d (64 x 128 f32; this thread's 64: d0 the columns 0 .. 63, d1 64 .. 127, each in wg_mma_ss_n64's order) += a
// (64 x 16, shared, descriptor da; K-major) b (16 x 128, shared, descriptor db; TB: MN-major, its two 64-column
// panels LBO apart, as wg_desc_mnmaj gives). One instruction reads a once where two m64n64 read it twice: 6 KB of
// shared memory a k-step against 8 KB for the same 64 tensor cycles.
template <int TB>
__device__ __forceinline__ void wg_mma_ss_n128(float (&d0)[32], float (&d1)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : "+f"(d0[0]), "+f"(d0[1]), "+f"(d0[2]), "+f"(d0[3]), "+f"(d0[4]), "+f"(d0[5]), "+f"(d0[6]), "+f"(d0[7]), "+f"(d0[8]), "+f"(d0[9]), "+f"(d0[10]), "+f"(d0[11]), "+f"(d0[12]), "+f"(d0[13]), "+f"(d0[14]), "+f"(d0[15]), "+f"(d0[16]), "+f"(d0[17]), "+f"(d0[18]), "+f"(d0[19]), "+f"(d0[20]), "+f"(d0[21]), "+f"(d0[22]), "+f"(d0[23]), "+f"(d0[24]), "+f"(d0[25]), "+f"(d0[26]), "+f"(d0[27]), "+f"(d0[28]), "+f"(d0[29]), "+f"(d0[30]), "+f"(d0[31]), "+f"(d1[0]), "+f"(d1[1]), "+f"(d1[2]), "+f"(d1[3]), "+f"(d1[4]), "+f"(d1[5]), "+f"(d1[6]), "+f"(d1[7]), "+f"(d1[8]), "+f"(d1[9]), "+f"(d1[10]), "+f"(d1[11]), "+f"(d1[12]), "+f"(d1[13]), "+f"(d1[14]), "+f"(d1[15]), "+f"(d1[16]), "+f"(d1[17]), "+f"(d1[18]), "+f"(d1[19]), "+f"(d1[20]), "+f"(d1[21]), "+f"(d1[22]), "+f"(d1[23]), "+f"(d1[24]), "+f"(d1[25]), "+f"(d1[26]), "+f"(d1[27]), "+f"(d1[28]), "+f"(d1[29]), "+f"(d1[30]), "+f"(d1[31])
                 : "l"(da), "l"(db), "r"(acc), "n"(TB));
}

// d = a b with wg_mma_ss_n128's operands (d0, d1 only written: no register of them is read by the instruction).
template <int TB>
__device__ __forceinline__ void wg_mma_ss_n128_set(float (&d0)[32], float (&d1)[32], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : "=f"(d0[0]), "=f"(d0[1]), "=f"(d0[2]), "=f"(d0[3]), "=f"(d0[4]), "=f"(d0[5]), "=f"(d0[6]), "=f"(d0[7]), "=f"(d0[8]), "=f"(d0[9]), "=f"(d0[10]), "=f"(d0[11]), "=f"(d0[12]), "=f"(d0[13]), "=f"(d0[14]), "=f"(d0[15]), "=f"(d0[16]), "=f"(d0[17]), "=f"(d0[18]), "=f"(d0[19]), "=f"(d0[20]), "=f"(d0[21]), "=f"(d0[22]), "=f"(d0[23]), "=f"(d0[24]), "=f"(d0[25]), "=f"(d0[26]), "=f"(d0[27]), "=f"(d0[28]), "=f"(d0[29]), "=f"(d0[30]), "=f"(d0[31]), "=f"(d1[0]), "=f"(d1[1]), "=f"(d1[2]), "=f"(d1[3]), "=f"(d1[4]), "=f"(d1[5]), "=f"(d1[6]), "=f"(d1[7]), "=f"(d1[8]), "=f"(d1[9]), "=f"(d1[10]), "=f"(d1[11]), "=f"(d1[12]), "=f"(d1[13]), "=f"(d1[14]), "=f"(d1[15]), "=f"(d1[16]), "=f"(d1[17]), "=f"(d1[18]), "=f"(d1[19]), "=f"(d1[20]), "=f"(d1[21]), "=f"(d1[22]), "=f"(d1[23]), "=f"(d1[24]), "=f"(d1[25]), "=f"(d1[26]), "=f"(d1[27]), "=f"(d1[28]), "=f"(d1[29]), "=f"(d1[30]), "=f"(d1[31])
                 : "l"(da), "l"(db), "r"(0), "n"(TB));
}

// d (64 x 16 f32; this thread's 8) += a (64 x 16, shared, descriptor da; K-major) b (16 x 16, shared,
// descriptor db; TB: MN-major).
template <int TB>
__device__ __forceinline__ void wg_mma_ss_n16(float (&d)[8], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, "
                 "%11;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(1), "n"(TB));
}

// d = a b, same operands (d is only written: no register of it is read by the instruction).
template <int TB>
__device__ __forceinline__ void wg_mma_ss_n64_set(float (&d)[32], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
                   "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]),
                   "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]),
                   "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]),
                   "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                 : "l"(da), "l"(db), "r"(0), "n"(TB));
}

// d = a b over the KD k-steps of head dim 64 NP (+ 16), both operands read K-major from swizzled
// tiles: a = rows ar0 .. ar0 + 63 of the tile at abase (arows rows), b = the 64 rows of the tile at
// bbase (brows rows). Issued as one commit group, not waited for.
template <int KD, int NP, bool WH = false>
__device__ __forceinline__ void wg_ss_product(float (&d)[32], uint32_t abase, int arows, int ar0, uint32_t bbase, int brows) {
    wg_arrive();
#pragma unroll
    for (int kd = 0; kd < KD; kd++)
        if (kd == 0)
            wg_mma_ss_n64_set<0>(d, wg_kdesc<NP, WH>(abase, arows, kd, ar0), wg_kdesc<NP, WH>(bbase, brows, kd, 0));
        else
            wg_mma_ss_n64<0>(d, wg_kdesc<NP, WH>(abase, arows, kd, ar0), wg_kdesc<NP, WH>(bbase, brows, kd, 0), 1);
    wg_commit();
}

// d = a b over the KD k-steps of head dim 64 NP (+ 16): a in registers (KD A fragments of the warp's 16
// rows), b = the 64 rows of the tile at bbase (brows rows) read K-major. Issued as one commit group.
template <int KD, int NP, bool WH = false>
__device__ __forceinline__ void wg_rs_product(float (&d)[32], const uint32_t (&a)[KD][4], uint32_t bbase, int brows) {
    wg_arrive();
#pragma unroll
    for (int kd = 0; kd < KD; kd++)
        if (kd == 0)
            wg_mma_n64_set<0>(d, a[kd], wg_kdesc<NP, WH>(bbase, brows, kd, 0));
        else
            wg_mma_n64<0>(d, a[kd], wg_kdesc<NP, WH>(bbase, brows, kd, 0), 1);
    wg_commit();
}

// Four 8 x 8 b16 matrices from shared memory (ldmatrix .x4): lane i gives the row address of matrix i / 8.
__device__ __forceinline__ void wg_ldsm4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Row half i (rows g and g + 8 of the warp's 16) of a 64 x D accumulator (NP panels of 64 in acc, the
// 16-dim tail in tl when TL), times mul, as bf16 into the row at dst.
template <int NP, bool TL>
__device__ __forceinline__ void wg_store_row(wg_bf16 *dst, const float (&acc)[NP][32], const float (&tl)[8], int i, int t4,
                                             float mul) {
#pragma unroll
    for (int c = 0; c < NP; c++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            *(uint32_t *)(dst + c * 64 + j * 8 + 2 * t4) = wg_pack(acc[c][4 * j + 2 * i] * mul, acc[c][4 * j + 2 * i + 1] * mul);
    if constexpr (TL)
#pragma unroll
        for (int j = 0; j < 2; j++)
            *(uint32_t *)(dst + NP * 64 + j * 8 + 2 * t4) = wg_pack(tl[4 * j + 2 * i] * mul, tl[4 * j + 2 * i + 1] * mul);
}

// 4 bytes global -> shared (cp.async, L1-cached), zero-filled when !valid (src is then not read).
__device__ __forceinline__ void wg_cp4(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

// Four 8 x 8 b16 matrices to shared memory: this lane's 32-bit fragment of each (row lane / 4, columns 2 (lane % 4),
// + 1), matrix q's row r stored (16 bytes) at the address lane 8 q + r gives.
__device__ __forceinline__ void wg_stmatrix4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

// The 32 f32 of a thread in a 64 x 64 accumulator: element e is row 16 (warp % 4) + wg_row(e) and
// column wg_col(e) (g = lane / 4, t4 = lane % 4).
__device__ __forceinline__ int wg_row(int e, int g) { return g + ((e >> 1) & 1) * 8; }
__device__ __forceinline__ int wg_col(int e, int t4) { return (e >> 2) * 8 + 2 * t4 + (e & 1); }

#endif
