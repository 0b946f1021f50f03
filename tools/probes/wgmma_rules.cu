// Probe (not part of the build; compile only, nothing to run): which loop shapes make ptxas serialize every wgmma of a
// kernel. The thirty-fifth session's pipelined attention consumers (docs/perf/2026-11-30q-pipe.patch) passed every test
// and ran 1.8-2.1x slower: ptxas had said C7514 for each pipelined kernel, and nobody read it. One warpgroup, two
// accumulator sets a and b, a loop of two steps; each step issues the next product into one set and consumes the other
// (MUFU exponentials, as a softmax does).
//   MODE 0: the product issued last in the loop body is still in flight across the back-edge; the consumer only reads.
//   MODE 1: as 0, the consumer writes its set in place.
//   MODE 2: as 1, but every step ends with wait_group 0, so nothing is in flight across the back-edge.
//   MODE 3: as 2, the product issued under a condition ptxas cannot prove uniform (an empty commit group otherwise).
// Measured here with CUDA 13.0's ptxas (2026-11-30): 0 and 1 C7514 ("non wgmma instructions reading accumulator
// registers of a wgmma between start and end of the pipeline stage"), 2 clean, 3 C7520 ("program dependence on
// compiler-inserted WG.AR in divergent path"). So: an accumulator read by non-wgmma code inside a loop may not be in
// flight across that loop's back-edge, and a product issued in a divergent branch costs the same serialization.
//   for m in 0 1 2 3; do nvcc -I. -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -DMODE=$m \
//       -c tools/probes/wgmma_rules.cu -o /tmp/wr.o 2>&1 | grep -E "C75|registers"; done
#include "ops/attention/sm90a/wgmma.cuh"

#ifndef MODE
#define MODE 0
#endif

template <int N> __device__ __forceinline__ void wr_keep(float (&x)[N]) {
#pragma unroll
    for (int e = 0; e < N; e++) wg_keep(x[e]);
}

// d = A B for k-step t % 4 of two 64 x 64 bf16 tiles in shared memory (K-major), one commit group.
__device__ __forceinline__ void wr_issue(float (&d)[32], uint32_t s, int t) {
    wg_arrive();
    wg_mma_ss_n64_set<0>(d, wg_desc_kmaj<false>(s, 64, t & 3, 0), wg_desc_kmaj<false>(s + 8192, 64, t & 3, 0));
    wg_commit();
}

__device__ __forceinline__ float wr_consume(float (&x)[32]) {
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < 32; e++) {
        if (MODE == 0) {
            sum += wg_ex2(x[e]);
        } else {
            x[e] = wg_ex2(x[e]);
            sum += x[e];
        }
    }
    return sum;
}

__device__ __forceinline__ void wr_next(float (&x)[32], uint32_t s, int t, int n) {
    if (MODE == 3 && t >= n - (int)threadIdx.y)
        wg_commit();
    else
        wr_issue(x, s, t);
}

__global__ void wr_kernel(float *out, int n) {
    extern __shared__ __align__(1024) unsigned char sm[];
    const uint32_t s = wg_smem(sm);
    float a[32], b[32], acc = 0.0f;
    wr_issue(a, s, 0);
    for (int t = 0; t < n; t += 2) {
        wr_next(b, s, t + 1, n);
        wg_wait<1>();
        wr_keep(a);
        acc += wr_consume(a);
        if (MODE >= 2) {
            wg_wait<0>();
            wr_keep(b);
        }
        wr_next(a, s, t + 2, n);
        wg_wait<1>();
        wr_keep(b);
        acc += wr_consume(b);
        if (MODE >= 2) {
            wg_wait<0>();
            wr_keep(a);
        }
    }
    wg_wait<0>();
    wr_keep(a);
    out[threadIdx.x] = acc + a[0];
}
