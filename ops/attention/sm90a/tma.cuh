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

#endif
