// Hopper's asynchronous-copy and barrier primitives for the warp-specialised attention kernels (sm_90a):
// shared-memory transaction barriers (mbarrier), tensor copies global -> shared (TMA,
// cp.async.bulk.tensor) that complete on one, and named barriers for a subset of a block's warps.
//
// A tensor map (CUtensorMap, built on the host by cuTensorMapEncodeTiled) describes a global tensor and
// a box; one copy moves a box into shared memory in the swizzle the map names, so a K or V panel lands
// in the layout the wgmma descriptors read (wgmma.cuh: 128-byte rows, chunk c of row r at c ^ (r % 8),
// or the 32-byte swizzle of the head-dim-80 tail panel). Rows past the tensor's end are zero-filled and
// still counted in the barrier's transaction bytes.
#ifndef STG_OPS_ATTENTION_SM90A_TMA_CUH
#define STG_OPS_ATTENTION_SM90A_TMA_CUH

#include <stdint.h>

// A barrier of `count` arrivals (shared address bar, 8-byte aligned); one thread initialises it, then
// tm_mb_init_fence and a block barrier make it visible to every thread and to the copy engine.
__device__ __forceinline__ void tm_mb_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tm_mb_init_fence(void) { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also expects `bytes` more transaction bytes in the current phase (the producer's,
// before its copies).
__device__ __forceinline__ void tm_mb_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tm_mb_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` (0 for the barrier's first phase, then alternating) has
// completed.
__device__ __forceinline__ void tm_mb_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\n"
                 "TM_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra TM_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

// The box of the 4-D tensor map at map (a __grid_constant__ kernel parameter's address) whose first
// element has coordinates (c0, c1, c2, c3), innermost first, into shared memory at dst; its bytes
// complete on the barrier bar.
__device__ __forceinline__ void tm_load4(uint32_t dst, const void *map, int c0, int c1, int c2, int c3, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
                 "%5}], [%6];\n" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tm_prefetch_map(const void *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads') of n threads (a multiple of 32): sync waits for all n,
// arrive counts this warp's threads without waiting.
template <int N> __device__ __forceinline__ void tm_bar_sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void tm_bar_arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}

// Counters in global memory that order the blocks' additions (attention_ws_bwd.cu's dQ sum): an acquiring
// load, a releasing store (device scope), and the proxy fence between them and the bulk copies.
__device__ __forceinline__ unsigned tm_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void tm_st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void tm_fence_proxy_global(void) { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// dst[i] += src[i] for the bytes / 4 floats at shared address src (16-byte aligned, bytes a multiple of 16),
// performed by the copy engine at the L2 (one bulk reduction); commit, then wait for every one this thread issued
// to be complete (its additions performed in global memory).
__device__ __forceinline__ void tm_bulk_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void tm_bulk_commit(void) { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void tm_bulk_wait_all(void) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// wait until every bulk operation this thread issued has read its shared source (the source may be rewritten)
__device__ __forceinline__ void tm_bulk_wait_read_all(void) { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// setmaxnreg moves registers between the warpgroups of a block but never past what the block was launched
// with: ptxas gives each of its threads the launch bound's share of the 64 Ki registers (rounded down to 8),
// and a setmaxnreg.inc that asks for more than the other warpgroups gave back waits forever. True when
// NC consumer warpgroups at RC registers and one producer warpgroup at RP fit the block's launch share.
constexpr bool tm_regs_fit(int NC, int RC, int RP) {
    return NC * RC + RP <= (NC + 1) * ((65536 / (128 * (NC + 1))) & ~7);
}

// Work item w of a launch whose items are nl levels (row tiles or key blocks, the longest first) of HB head-batches,
// taken in groups of hg head-batches: a group's items level by level (every head-batch of the group at level 0, then
// at level 1, ...), the groups one after another. hg = HB: the longest items of every head first (the best balance);
// a smaller hg keeps fewer heads' K and V (or Q and dO) live at once (L2; tm_item_plan). Returns w's level and sets
// *hb to its head-batch (kv head + H / G batch).
__device__ __forceinline__ int tm_item_split(int w, int nl, int HB, int hg, int *hb) {
    const int g0 = w / (hg * nl) * hg, gs = min(hg, HB - g0), r = w - g0 * nl;
    *hb = g0 + r % gs;
    return r / gs;
}

// The producer of the K and V key tiles of a block (one thread): key tile kt0 + t of kv head hk, batch b into
// stage t % NST (stage s holds K at kv0 + 4 s BK D bytes and V after it, each D / 64
// panels of BK rows x 128 bytes and at head dim 64 NP + 16 a tail panel), once every consumer warp has released the
// stage (its empty barrier, at empty0 + 8 s); the stage's full barrier (full0 + 8 s) completes with the bytes.
// T0: the tiles this block's producer streamed before (a persistent block's earlier work items): the ring's stages
// and phases continue from there.
template <int D, int BK, int NST>
__device__ __forceinline__ void tm_kv_producer(const void *tk, const void *tv, const void *tkt, const void *tvt, uint32_t full0,
                                               uint32_t empty0, uint32_t kv0, int kt0, int ntiles, int hk, int b, int T0 = 0) {
    constexpr int TILE = BK * D, NDC = D / 64;
    constexpr bool TL = D % 64 == 16;
    constexpr uint32_t TXB = 4u * TILE; // bytes of K and V (bf16) a tile
    if (T0 == 0) {
        tm_prefetch_map(tk);
        tm_prefetch_map(tv);
    }
    for (int t = 0; t < ntiles; t++) {
        const int u = T0 + t, s = u % NST;
        if (u >= NST) tm_mb_wait(empty0 + 8u * s, (uint32_t)((u / NST - 1) & 1));
        const uint32_t fb = full0 + 8u * s, st = kv0 + (uint32_t)(4 * s * TILE);
        const int kn = (kt0 + t) * BK;
        tm_mb_expect_tx(fb, TXB);
#pragma unroll
        for (int p = 0; p < NDC; p++) {
            tm_load4(st + (uint32_t)(p * BK * 128), tk, 64 * p, hk, kn, b, fb);
            tm_load4(st + (uint32_t)(2 * TILE + p * BK * 128), tv, 64 * p, hk, kn, b, fb);
        }
        if constexpr (TL) {
            tm_load4(st + (uint32_t)(NDC * BK * 128), tkt, 64 * NDC, hk, kn, b, fb);
            tm_load4(st + (uint32_t)(2 * TILE + NDC * BK * 128), tvt, 64 * NDC, hk, kn, b, fb);
        }
    }
}

#endif
