// The decode family on CUDA. Every kernel reads the position from its device tensor, so one
// captured decode step serves every position (the host never passes it).
//
// attention_cached: split-K ("flash-decoding"): the cache's C positions are cut into `nsplit` chunks;
// block (split, b, kv head) scores the positions of its chunk below the current length against the
// G = Hq / Hkv query heads that read this kv head, with an online softmax per head (running max m,
// sum l and unnormalised output), and writes (m, l, output) to scratch. The last block of a
// (b, kv head) to finish (an atomic count per pair, reset by that block) combines the splits in
// split order (o = sum_s e^(m_s - M) out_s / sum_s e^(m_s - M) l_s): no float atomics, the same
// bits in every run and in a captured graph. The block whose chunk holds the current position
// first rotates (RoPE) and stores the new key and value there. The kernel is launched with programmatic
// dependent launch: before its wait it reads the position, makes the rotation at it and loads (or starts
// copying) its first rows of the cache, none of which a kernel of the same step writes, so the launch,
// those round trips and the cache's DRAM latency fall under the end of the product of q, k and v before it.
// A row of the cache is NC = Dh / (16 / sizeof(T)) 16-byte chunks; R lanes share a row (R a power of
// two), lane c of them taking chunks c, c + R, ... (CPL of them), so a warp covers 32 / R rows at a
// time and a lane's score needs log2 R shuffles. A pass over the chunk serves GB query heads at once
// (each key and value read once for all of them), with at most 32 accumulator floats a lane
// (GB CPL N <= 32, CPL <= 6): R is the least power of two that fits the row in that many chunks a
// lane. It replaced one chunk a lane, which at head dim 80 in bf16 left 6 of 16 lanes idle and took
// 4 shuffles a row: Nsight Compute had that kernel half issue-bound at 2.35 TB/s at batch 64
// (docs/perf/2026-11-28g-call4/ncu-dec-b64.txt); this one is 6% faster there a step, and reads a
// group's cache once where that one read it once a query head (Llama 3.2-1B decoding 1.47 -> 1.03 ms).
// A warp walks its rows in trips of 32 / R rows, one row a lane group. Over a chunk of at least as
// many trips as the ring has stages (batch 64) each lane copies the chunks it reads into its own slots
// of a ring of NS trips in shared memory (cp.async), NS - 1 trips ahead of the one it scores; over a
// shorter chunk (batch 1) it loads 1 to 4 trips' rows straight into registers (a ring's shared memory
// made the batch-1 step 1.3% slower). With the cache head-major the batch-64 step went 7.15 -> 6.89 ms
// on an H200 (docs/perf/LOG.md, 2026-11-29).
//
// sample: one block per sequence, over the last row of its logits: greedy is an argmax; else the
// k-th largest logit (top-k) and the top-p threshold are found by bisection over the logits' order-
// preserving 32-bit keys (counts and sums reduced in a fixed order), and the token is the inverse
// CDF at the uniform in token-id order: each thread sums its contiguous piece, a block scan places
// the pieces, and the thread whose piece crosses u x total walks it. A second one-thread kernel
// then advances the position (after every block has read it).
#include "ops/cuda/common.cuh"
#include "ops/decode/uniform.h"
#include "ops/rope/angle.cuh" // the rotation with the rope op's bits

#define DEC_THREADS 128 // attention_cached: 4 warps
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_MINB 4 // attention_cached: blocks a multiprocessor its registers allow (the split counts what fits: dec_split)
#define SAMPLE_THREADS 512

// ---- attention over the cache ---------------------------------------------------------------------

struct dec_attn_args {
    const void *q, *k, *v; // (B, 1, Hq, Dh), (B, 1, Hkv, Dh)
    void *kc, *vc;         // (B, Hkv, C, Dh)
    const int32_t *pos;
    void *o;               // (B, 1, Hq, Dh)
    float *part;           // (B, Hq, nsplit, Dh + 2): unnormalised output, m, l
    int *count;            // (B, Hkv)
    int64_t C;
    int Hq, Hkv, Dh, nsplit, chunk;
    int R;                 // lanes a row (a power of two)
    float scale;
    double log_theta;      // 0: no rotation
};

// Merges (m2, l2) into (m, l) and returns the factors the two outputs take.
__device__ __forceinline__ void dec_merge(float &m, float &l, float m2, float l2, float &c1, float &c2) {
    float M = fmaxf(m, m2);
    c1 = m == -INFINITY ? 0.f : __expf(m - M);
    c2 = m2 == -INFINITY ? 0.f : __expf(m2 - M);
    l = l * c1 + l2 * c2;
    m = M;
}

// Chunk slots a lane holds at most: GB heads x CPL chunks x N elements of accumulator <= 32 floats, and
// at most 6 (7 and 8 spilled in fp32).
template <typename T, int GB> constexpr int dec_cplmax() {
    return 32 / (GB * CU_VEC<T>::N) < 1 ? 1 : 32 / (GB * CU_VEC<T>::N) > 6 ? 6 : 32 / (GB * CU_VEC<T>::N);
}

// Stages of a warp's ring of trips, for SL 16-byte slots a lane a stage: as many as fit DEC_RING bytes
// a block (so DEC_MINB blocks fit a multiprocessor's shared memory), from 2 to 8.
#define DEC_RING (48 * 1024)
__host__ __device__ constexpr int dec_stages(int sl) {
    return DEC_RING / (DEC_WARPS * 512 * sl) < 2 ? 2 : DEC_RING / (DEC_WARPS * 512 * sl) > 8 ? 8 : DEC_RING / (DEC_WARPS * 512 * sl);
}

// A 16-byte chunk as N floats.
template <typename T> __device__ __forceinline__ void dec_unpack(const uint4 &r, float *x) {
    if constexpr (sizeof(T) == 2) {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            x[2 * i] = __uint_as_float(w[i] << 16);
            x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else {
        x[0] = __uint_as_float(r.x), x[1] = __uint_as_float(r.y), x[2] = __uint_as_float(r.z), x[3] = __uint_as_float(r.w);
    }
}

// The combine's splits in flight at once (a thread's loads of m, l and its output element of each).
#define DEC_CB 16

// Before the kernel's wait: a bulk prefetch into L2 of the block's rows [from, j1) of the cache (K and V,
// each a contiguous run of its head's rows): those past the trips a lane loads into registers before the
// wait, so their DRAM latency too falls under the end of the kernel before.
template <typename T> __device__ __forceinline__ void dec_prefetch_rows(const T *kb, const T *vb, int64_t from, int64_t j1, int Dh) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x != 0 || from >= j1) return;
    const uint32_t bytes = (uint32_t)((j1 - from) * Dh * (int64_t)sizeof(T)); // a multiple of 16: Dh is of 16-byte chunks
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(kb + from * Dh), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(vb + from * Dh), "r"(bytes) : "memory");
#else
    (void)kb, (void)vb, (void)from, (void)j1, (void)Dh;
#endif
}

// Rows a lane loads at once when it reads the cache directly (no ring: a chunk of a few trips).
__host__ __device__ constexpr int dec_rows(int cpl, int gb) { return cpl == 1 && gb < 4 ? 4 : cpl <= 3 ? 2 : 1; }

template <typename T, int GB, int CPL, bool RING>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB) attention_cached_kernel(dec_attn_args a) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    constexpr int N = CU_VEC<T>::N;              // elements per 16-byte load
    constexpr int E = CPL * N;                   // elements of a row a lane holds
    constexpr int SL = 2 * CPL, NS = RING ? dec_stages(SL) : 0; // a lane's ring slots a stage (its K chunks, then V's); stages
    constexpr int U = dec_rows(CPL, GB);         // without the ring: rows a lane loads at once
    extern __shared__ __align__(16) unsigned char smem[];
    const int Dh = a.Dh, G = a.Hq / a.Hkv, NC = Dh / N, R = a.R, RPW = 32 / R, STEP = DEC_WARPS * RPW;
    const int split = blockIdx.x, bh = blockIdx.y, b = bh / a.Hkv, hk = bh % a.Hkv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    uint4 *ring = (uint4 *)smem + (warp * NS * SL) * 32 + lane; // this lane's slot 0 of stage 0; slot s of stage st: [(st SL + s) 32]
    uint4 *knew = (uint4 *)smem + DEC_WARPS * NS * SL * 32, *vnew = knew + NC; // the new row (position p), as the cache holds it
    float2 *csm = (float2 *)(vnew + NC);         // (Dh / 2) RoPE's (cos, sin) at position p
    float *qs = (float *)(csm + Dh / 2);         // (G, Dh) rotated queries
    float *wacc = qs + G * Dh;                   // (DEC_WARPS, GB, Dh)
    float *wm = wacc + DEC_WARPS * GB * Dh;      // (DEC_WARPS, GB)
    float *wl = wm + DEC_WARPS * GB;             // (DEC_WARPS, GB)
    int *last = (int *)(wl + DEC_WARPS * GB);    // this block combines
    T *kc = (T *)a.kc, *vc = (T *)a.vc;
    const int64_t rs = Dh; // between positions of the cache (head-major: a head's positions are contiguous)
    T *kb = kc + ((int64_t)b * a.Hkv + hk) * a.C * Dh, *vb = vc + ((int64_t)b * a.Hkv + hk) * a.C * Dh;
    const int64_t j0 = (int64_t)split * a.chunk;
    // Before the wait (programmatic dependent launch: the kernels before may still run) this reads only
    // what no kernel of this step writes: the position (advanced by the sampler at the end of the step
    // before) and the cache below it (this op's rows of the steps before; position p's row is this
    // kernel's, taken from knew / vnew). Those kernels are complete: a step begins with a kernel launched
    // without the programmatic attribute (the embedding), which waits for everything before it, and each
    // captured step is a graph launch that follows the last. So the position, the rotation at p and the
    // block's rows of the cache are read and made here, under the end of the product of q, k and v; after
    // the wait come only the queries and the new row.
    const int64_t p = *a.pos;
    if (p < 0 || p >= a.C) return; // the host never runs a step past the cache
    const int64_t L = p + 1, j1 = j0 + a.chunk < L ? j0 + a.chunk : L;
    const T *q = (const T *)a.q;
    const int rig = lane / R, c = lane % R;
    bool cv[CPL]; // this lane's chunk slots c + R i that lie in the row
#pragma unroll
    for (int i = 0; i < CPL; i++) cv[i] = c + R * i < NC;
    // The warp's trips: trip t holds rows r0 + t STEP + (0 .. RPW - 1), lane (rig, c) row r0 + t STEP + rig.
    // Each lane copies the chunks it will read itself (cp.async, zero-filled past j1 and past the row),
    // so a lane waits only for its own copies: no barrier between the warps or the lanes.
    const int64_t r0 = j0 + warp * RPW;
    const int nt = r0 < j1 ? (int)((j1 - r0 + STEP - 1) / STEP) : 0; // the same for every lane of the warp
    auto issue = [&](int t) {
        if (t < nt) {
            const int64_t row = r0 + (int64_t)t * STEP + rig;
            const bool ok = row < j1;
            const T *kt = kb + (ok ? row : 0) * rs + c * N, *vt = vb + (ok ? row : 0) * rs + c * N;
            uint4 *dst = ring + (t % (RING ? NS : 1)) * SL * 32;
#pragma unroll
            for (int i = 0; i < CPL; i++) {
                const bool v = ok && cv[i];
                cu_cp16(dst + 2 * i * 32, v ? kt + R * i * N : kb, v);
                cu_cp16(dst + (2 * i + 1) * 32, v ? vt + R * i * N : vb, v);
            }
        }
        cu_cp_commit(); // a group a trip, empty past the last: the waits count NS - 1 groups behind
    };
    // The first trips' rows are in flight before the wait. Position p's row may be among them, read
    // before this kernel writes it: every trip takes that row from knew / vnew instead. Without the
    // ring, a lane's rows of its first U trips (all of them at batch 1) are loaded into registers before
    // the wait: zero past j1 and at p (taken from knew / vnew once stored).
    uint4 kr[U][CPL], vr[U][CPL];
    auto load_rows = [&](int t) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t row = r0 + (int64_t)(t + u) * STEP + rig;
            const T *kt = kb + row * rs + c * N, *vt = vb + row * rs + c * N;
#pragma unroll
            for (int i = 0; i < CPL; i++) {
                kr[u][i] = vr[u][i] = make_uint4(0u, 0u, 0u, 0u);
                if (row < j1 && row != p && cv[i]) {
                    kr[u][i] = *(const uint4 *)(kt + R * i * N);
                    vr[u][i] = *(const uint4 *)(vt + R * i * N);
                }
            }
        }
    };
    if constexpr (RING) {
#pragma unroll
        for (int t = 0; t < NS - 1; t++) issue(t);
    } else {
        load_rows(0);
        dec_prefetch_rows(kb, vb, j0 + (int64_t)U * STEP, j1, Dh); // the rows past the first U trips
    }
    if (a.log_theta != 0)
        for (int e = tid; e < Dh / 2; e += DEC_THREADS) csm[e] = rope_cos_sin(p, e, Dh, a.log_theta);
    __syncthreads(); // the rotation at p
    cu_pdl_wait();   // the queries and the new row are the kernel's before
    // the queries of this group, rotated at p and rounded to T as the rope op's output is
    for (int i = tid; i < G * Dh / 2; i += DEC_THREADS) {
        int g = i / (Dh / 2), e = i % (Dh / 2);
        const T *qr = q + ((int64_t)b * a.Hq + (int64_t)hk * G + g) * Dh;
        float x0 = cu_ld(qr, 2 * e), x1 = cu_ld(qr, 2 * e + 1);
        if (a.log_theta != 0) {
            const float2 cs = csm[e];
            float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
            x0 = cu_f(cu_t<T>(y0));
            x1 = cu_f(cu_t<T>(y1));
        }
        qs[g * Dh + 2 * e] = x0;
        qs[g * Dh + 2 * e + 1] = x1;
    }
    // the new key (rotated) and value, stored by the block whose chunk holds p, and kept in knew / vnew
    const bool has_p = p >= j0 && p < j1;
    if (has_p) {
        const T *kn = (const T *)a.k + ((int64_t)b * a.Hkv + hk) * Dh, *vn = (const T *)a.v + ((int64_t)b * a.Hkv + hk) * Dh;
        T *ks = (T *)knew, *vs = (T *)vnew;
        for (int e = tid; e < Dh / 2; e += DEC_THREADS) {
            float x0 = cu_ld(kn, 2 * e), x1 = cu_ld(kn, 2 * e + 1);
            if (a.log_theta != 0) {
                const float2 cs = csm[e];
                float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
                x0 = y0, x1 = y1;
            }
            const T k0 = cu_t<T>(x0), k1 = cu_t<T>(x1);
            kb[p * rs + 2 * e] = k0, kb[p * rs + 2 * e + 1] = k1;
            ks[2 * e] = k0, ks[2 * e + 1] = k1;
            vb[p * rs + 2 * e] = vs[2 * e] = vn[2 * e];
            vb[p * rs + 2 * e + 1] = vs[2 * e + 1] = vn[2 * e + 1];
        }
    }
    __syncthreads(); // the queries and the new row
    float *part_b = a.part + ((int64_t)b * a.Hq + (int64_t)hk * G) * a.nsplit * (Dh + 2);
    for (int g0 = 0; g0 < G; g0 += GB) { // a pass: heads g0 .. g0 + GB - 1 (those below G)
        if constexpr (RING)
            if (g0 > 0) // the next pass reads the chunk again
#pragma unroll
                for (int t = 0; t < NS - 1; t++) issue(t);
        float qv[GB][E], acc[GB][E], m[GB], l[GB];
#pragma unroll
        for (int gi = 0; gi < GB; gi++) {
            m[gi] = -INFINITY, l[gi] = 0.f;
#pragma unroll
            for (int i = 0; i < CPL; i++)
#pragma unroll
                for (int e = 0; e < N; e++) {
                    qv[gi][i * N + e] = g0 + gi < G && cv[i] ? qs[(g0 + gi) * Dh + (c + R * i) * N + e] : 0.f;
                    acc[gi][i * N + e] = 0.f;
                }
        }
        // one row of the lane group: its score against each head, the online softmax, the output sums
        auto row_step = [&](const uint4 *kr, const uint4 *vr, int64_t row) {
            float kf[E], sc[GB];
#pragma unroll
            for (int i = 0; i < CPL; i++) dec_unpack<T>(kr[i], kf + i * N);
#pragma unroll
            for (int gi = 0; gi < GB; gi++) {
                float s = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) s = fmaf(qv[gi][e], kf[e], s);
                sc[gi] = s;
            }
#pragma unroll
            for (int gi = 0; gi < GB; gi++)
                for (int off = R >> 1; off > 0; off >>= 1) sc[gi] += __shfl_xor_sync(0xffffffffu, sc[gi], off);
            float vf[E];
#pragma unroll
            for (int i = 0; i < CPL; i++) dec_unpack<T>(vr[i], vf + i * N);
#pragma unroll
            for (int gi = 0; gi < GB; gi++) {
                const float s = row < j1 ? sc[gi] * a.scale : -INFINITY;
                if (s > m[gi]) { // a new maximum: the sums so far scale down (m = -inf: they are 0)
                    const float c1 = m[gi] == -INFINITY ? 0.f : __expf(m[gi] - s);
                    l[gi] *= c1;
#pragma unroll
                    for (int e = 0; e < E; e++) acc[gi][e] *= c1;
                    m[gi] = s;
                }
                const float pe = s == -INFINITY ? 0.f : __expf(s - m[gi]);
                l[gi] += pe;
#pragma unroll
                for (int e = 0; e < E; e++) acc[gi][e] = fmaf(pe, vf[e], acc[gi][e]);
            }
        };
        // every lane of a warp runs the same trips (the shuffles need all 32); rows at or past j1 score
        // nothing; position p's row comes from knew / vnew
        if constexpr (RING) {
            for (int t = 0; t < nt; t++) {
                issue(t + NS - 1);    // into the stage trip t - 1 used, which this lane has read
                cu_cp_wait<(RING ? NS : 1) - 1>(); // this lane's copies of trip t have landed
                const int64_t row = r0 + (int64_t)t * STEP + rig;
                const uint4 *src = ring + (t % (RING ? NS : 1)) * SL * 32;
                uint4 kr[CPL], vr[CPL];
#pragma unroll
                for (int i = 0; i < CPL; i++) {
                    const bool fresh = has_p && row == p && cv[i]; // (a masked row past j1 may be p in another block)
                    kr[i] = fresh ? knew[c + R * i] : src[2 * i * 32];
                    vr[i] = fresh ? vnew[c + R * i] : src[(2 * i + 1) * 32];
                }
                row_step(kr, vr, row);
            }
        } else {
            for (int t = 0; t < nt; t += U) { // U trips' rows loaded at once (the first before the rotation), then scored
                if (t > 0 || g0 > 0) load_rows(t);
#pragma unroll
                for (int u = 0; u < U; u++) // (a masked row past j1 of another block may be p: its knew is not written)
                    if (has_p && r0 + (int64_t)(t + u) * STEP + rig == p)
#pragma unroll
                        for (int i = 0; i < CPL; i++)
                            if (cv[i]) kr[u][i] = knew[c + R * i], vr[u][i] = vnew[c + R * i];
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (t + u < nt) row_step(kr[u], vr[u], r0 + (int64_t)(t + u) * STEP + rig);
            }
        }
        // the warp's row groups (lanes c, c + R, ...), then the warps
        for (int off = R; off < 32; off <<= 1)
#pragma unroll
            for (int gi = 0; gi < GB; gi++) {
                float m2 = __shfl_xor_sync(0xffffffffu, m[gi], off), l2 = __shfl_xor_sync(0xffffffffu, l[gi], off), c1, c2;
                dec_merge(m[gi], l[gi], m2, l2, c1, c2);
#pragma unroll
                for (int e = 0; e < E; e++) acc[gi][e] = acc[gi][e] * c1 + __shfl_xor_sync(0xffffffffu, acc[gi][e], off) * c2;
            }
        if (rig == 0)
#pragma unroll
            for (int gi = 0; gi < GB; gi++) {
#pragma unroll
                for (int i = 0; i < CPL; i++)
                    if (cv[i])
#pragma unroll
                        for (int e = 0; e < N; e++) wacc[(warp * GB + gi) * Dh + (c + R * i) * N + e] = acc[gi][i * N + e];
                if (lane == 0) wm[warp * GB + gi] = m[gi], wl[warp * GB + gi] = l[gi];
            }
        __syncthreads();
        for (int x = tid; x < GB * Dh; x += DEC_THREADS) {
            const int gi = x / Dh, d = x % Dh;
            if (g0 + gi >= G) break;
            float M = -INFINITY, Lsum = 0.f, s = 0.f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[w * GB + gi]);
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) {
                const float f = wm[w * GB + gi] == -INFINITY ? 0.f : __expf(wm[w * GB + gi] - M);
                Lsum += wl[w * GB + gi] * f;
                s += wacc[(w * GB + gi) * Dh + d] * f;
            }
            if (a.nsplit == 1) { // the block is the pair's only split: the output directly (the combine's bits: its
                                 // weight e^(m - M) is 1)
                cu_st((T *)a.o + ((int64_t)b * a.Hq + (int64_t)hk * G + g0 + gi) * Dh, d, s / Lsum);
                continue;
            }
            float *pp = part_b + ((int64_t)(g0 + gi) * a.nsplit + split) * (Dh + 2);
            pp[d] = s;
            if (d == 0) pp[Dh] = M, pp[Dh + 1] = Lsum;
        }
        __syncthreads(); // wacc, wm, wl reused by the next pass
    }
    if (a.nsplit == 1) return; // no partials, no combine (the whole grid: nsplit is the launch's)
    // The last block of this (b, kv head) combines the splits. The pass's last barrier ordered every
    // thread's partials before thread 0's fence, which releases them all with the count (a fence is
    // cumulative); the last block's thread 0 acquires the others' with its fence after the count, and
    // the barrier passes that on to its threads, whose loads bypass L1.
    if (tid == 0) {
        __threadfence();
        const int l = atomicAdd(&a.count[bh], 1) == a.nsplit - 1;
        if (l) __threadfence();
        *last = l;
    }
    __syncthreads();
    if (!*last) return;
    // A thread an output element: the splits' (m, l, output) in batches of DEC_CB, each batch's loads in
    // flight at once (one L2 round trip at batch 1's 16 splits: a chain of round trips made this the
    // batch-1 kernel's largest part), merged in split order: a batch's largest m first, then the running
    // sums rescaled to it. The same bits every run.
    T *o = (T *)a.o;
    const int ns = a.nsplit;
    for (int x = tid; x < G * Dh; x += DEC_THREADS) {
        const int g = x / Dh, d = x % Dh;
        const float *pg = part_b + (int64_t)g * ns * (Dh + 2);
        float M = -INFINITY, Lsum = 0.f, s = 0.f;
        for (int s0 = 0; s0 < ns; s0 += DEC_CB) {
            float mv[DEC_CB], lv[DEC_CB], yv[DEC_CB];
#pragma unroll
            for (int u = 0; u < DEC_CB; u++) {
                const float *ps = pg + (int64_t)(s0 + u) * (Dh + 2);
                const bool in = s0 + u < ns;
                mv[u] = in ? __ldcg(ps + Dh) : -INFINITY; // an empty split: m = -inf, l = 0, output 0
                lv[u] = in ? __ldcg(ps + Dh + 1) : 0.f;
                yv[u] = in ? __ldcg(ps + d) : 0.f;
            }
            float Mb = M;
#pragma unroll
            for (int u = 0; u < DEC_CB; u++) Mb = fmaxf(Mb, mv[u]);
            const float c0 = M == -INFINITY ? 0.f : __expf(M - Mb);
            Lsum *= c0, s *= c0, M = Mb;
#pragma unroll
            for (int u = 0; u < DEC_CB; u++) {
                const float f = mv[u] == -INFINITY ? 0.f : __expf(mv[u] - M);
                Lsum = fmaf(lv[u], f, Lsum);
                s = fmaf(yv[u], f, s);
            }
        }
        cu_st(o + ((int64_t)b * a.Hq + (int64_t)hk * G + g) * Dh, d, s / Lsum);
    }
    if (tid == 0) a.count[bh] = 0; // ready for the next step
}

// The split of the cache: as many blocks as fit the multiprocessors at once (`per_sm` each, from the
// kernel's registers and shared memory) over all (b, kv head) pairs, rounded down (a 17th split a pair
// on the 2.7B model's 32 heads made 544 blocks of 528 slots: a second wave for 16 of them), chunks of
// at least 32 positions. The grid is fixed at capture while the length grows, so the split is of the
// whole cache: the blocks past the current length only mark their split empty.
static void dec_split(const stg_cuda *c, int per_sm, int64_t B, int64_t Hkv, int64_t C, int *nsplit, int *chunk) {
    int64_t pairs = B * Hkv, want = (int64_t)per_sm * (c->sm_count > 0 ? c->sm_count : 132) / pairs;
    int64_t most = (C + 31) / 32;
    if (want > most) want = most;
    if (want < 1) want = 1;
    int64_t ch = (C + want - 1) / want;
    *chunk = (int)ch;
    *nsplit = (int)((C + ch - 1) / ch);
}

// Heads a pass: all of a group of 1 or 2, else 4 at a time.
static int dec_gb(int G) { return G <= 2 ? G : 4; }

// The lanes a row (R) and chunk slots a lane (CPL) for NC chunks a row with at most `most` slots a lane.
static void dec_lanes(int NC, int most, int *R, int *cpl) {
    int need = (NC + most - 1) / most, r = 1;
    while (r < need) r <<= 1;
    *R = r;
    *cpl = (NC + r - 1) / r;
}

typedef void (*dec_kernel_fn)(dec_attn_args);

template <typename T, int GB, bool RING> static dec_kernel_fn dec_kernel_cpl(int cpl) {
    static_assert(dec_cplmax<T, GB>() <= 6, "at most 6 chunk slots a lane");
    switch (cpl) { // cpl <= dec_cplmax<T, GB>() (dec_lanes)
    case 1: return &attention_cached_kernel<T, GB, 1, RING>;
    case 2: if constexpr (dec_cplmax<T, GB>() >= 2) return &attention_cached_kernel<T, GB, 2, RING>; break;
    case 3: if constexpr (dec_cplmax<T, GB>() >= 3) return &attention_cached_kernel<T, GB, 3, RING>; break;
    case 4: if constexpr (dec_cplmax<T, GB>() >= 4) return &attention_cached_kernel<T, GB, 4, RING>; break;
    case 5: if constexpr (dec_cplmax<T, GB>() >= 5) return &attention_cached_kernel<T, GB, 5, RING>; break;
    case 6: if constexpr (dec_cplmax<T, GB>() >= 6) return &attention_cached_kernel<T, GB, 6, RING>; break;
    }
    return NULL;
}

// The slots a lane at most for this element type and heads a pass.
template <typename T> static int dec_most(int gb) {
    return gb == 1 ? dec_cplmax<T, 1>() : gb == 2 ? dec_cplmax<T, 2>() : dec_cplmax<T, 4>();
}

// The kernels for one attention_cached op (fn[1] with the ring, fn[0] without), its lane layout, the
// rows a block reads a trip, the ring's stages, and each kernel's shared memory but for the split weights.
typedef struct {
    dec_kernel_fn fn[2];
    int R, G, step, stages;
    size_t smem0[2];
} dec_cfg;

template <typename T> static int dec_config_t(int Hq, int Hkv, int Dh, dec_cfg *k, stg_err *err) {
    const int NC = Dh / CU_VEC<T>::N, G = Hq / Hkv, gb = dec_gb(G), most = dec_most<T>(gb);
    int cpl;
    dec_lanes(NC, most, &k->R, &cpl);
    if (k->R > 32)
        return stg_errf(err, "attention_cached: head dim %d is too large (at most %d for this dtype and group)", Dh, 32 * most * CU_VEC<T>::N);
    k->fn[0] = gb == 1 ? dec_kernel_cpl<T, 1, false>(cpl) : gb == 2 ? dec_kernel_cpl<T, 2, false>(cpl) : dec_kernel_cpl<T, 4, false>(cpl);
    k->fn[1] = gb == 1 ? dec_kernel_cpl<T, 1, true>(cpl) : gb == 2 ? dec_kernel_cpl<T, 2, true>(cpl) : dec_kernel_cpl<T, 4, true>(cpl);
    if (!k->fn[0] || !k->fn[1]) return stg_errf(err, "attention_cached: no kernel for %d chunk slots a lane", cpl);
    k->G = G;
    k->step = DEC_WARPS * (32 / k->R);
    k->stages = dec_stages(2 * cpl);
    k->smem0[0] = 2 * (size_t)Dh * sizeof(T) + (size_t)(Dh / 2) * sizeof(float2) // the new row, the rotation at p
                  + (size_t)(G * Dh + DEC_WARPS * gb * Dh + 2 * DEC_WARPS * gb + 4) * sizeof(float);
    k->smem0[1] = k->smem0[0] + (size_t)DEC_WARPS * k->stages * 2 * cpl * 32 * 16; // and the ring
    return 0;
}

// Checks the op's shapes and types and finds its kernel.
static int dec_config(const stg_graph *g, const stg_op *o, dec_cfg *k, int *bf, stg_err *err) {
    const stg_tensor *q = &g->t[o->in[0]], *kt = &g->t[o->in[1]];
    int b = cuda_same_float(g, o, o->in[0], o->in[3], err);
    if (b < 0) return -1;
    for (int i = 1; i < 5; i++)
        if (g->t[o->in[i]].dtype != q->dtype) return stg_errf(err, "attention_cached: %s is not %s", g->t[o->in[i]].name, stg_dtype_name(q->dtype));
    const int N = b ? 8 : 4, Dh = (int)q->shape[3];
    if (Dh % N || Dh / N > 32)
        return stg_errf(err, "attention_cached: head dim %d: the kernel takes multiples of %d up to %d for %s", Dh, N, 32 * N,
                        stg_dtype_name(q->dtype));
    *bf = b;
    return b ? dec_config_t<bf16>((int)q->shape[2], (int)kt->shape[2], Dh, k, err)
             : dec_config_t<float>((int)q->shape[2], (int)kt->shape[2], Dh, k, err);
}

typedef struct {
    int *count;
    int nsplit, chunk, ring;
    dec_cfg k;
    size_t smem;
} dec_attn_state;

static size_t dec_attn_table_bytes(const stg_graph *g, int op) {
    const stg_tensor *k = &g->t[g->ops[op].in[1]];
    return (((size_t)(k->shape[0] * k->shape[2]) * sizeof(int)) + 255) & ~(size_t)255;
}

static int dec_attn_prepare(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                            stg_err *err) {
    (void)ptr;
    const stg_op *o = &g->ops[op];
    const stg_tensor *q = &g->t[o->in[0]], *k = &g->t[o->in[1]], *kc = &g->t[o->in[3]]; // kc (B, Hkv, C, Dh)
    dec_attn_state *st = (dec_attn_state *)calloc(1, sizeof *st);
    if (!st) return stg_errf(err, "cuda: out of host memory");
    *state = st;
    st->count = (int *)table;
    int bf;
    if (dec_config(g, o, &st->k, &bf, err)) return -1;
    // The split is the ring kernel's (the one with more shared memory); a chunk of fewer trips than the
    // ring has stages reads the cache directly: a ring pays off only over long chunks (batch 64), and its
    // shared memory made the batch-1 step 1.3% slower (docs/perf/LOG.md, 2026-11-29).
    size_t most[2];
    for (int r = 0; r < 2; r++) {
        most[r] = st->k.smem0[r];
        if (most[r] > 227 * 1024)
            return stg_errf(err, "attention_cached: %d query heads per kv head of dim %lld need too much shared memory", st->k.G,
                            (long long)q->shape[3]);
        CUDA_CHECK(err, cudaFuncSetAttribute(st->k.fn[r], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most[r]));
    }
    int per_sm = 0;
    CUDA_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, st->k.fn[1], DEC_THREADS, most[1]));
    if (per_sm < 1) return stg_errf(err, "attention_cached: the kernel does not fit a multiprocessor (%zu bytes of shared memory)", most[1]);
    dec_split(c, per_sm, k->shape[0], k->shape[2], kc->shape[2], &st->nsplit, &st->chunk);
    st->ring = (st->chunk + st->k.step - 1) / st->k.step >= st->k.stages;
    st->smem = st->k.smem0[st->ring];
    CUDA_CHECK(err, cudaMemsetAsync(table, 0, dec_attn_table_bytes(g, op), c->stream));
    *work = (size_t)(q->shape[0] * q->shape[2]) * (size_t)st->nsplit * (size_t)(q->shape[3] + 2) * sizeof(float);
    return 0;
}

extern "C" int cuda_run_attention_cached(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *q = &g->t[o->in[0]], *k = &g->t[o->in[1]], *kc = &g->t[o->in[3]];
    const dec_attn_state *st = c->state ? (const dec_attn_state *)c->state[op] : NULL;
    if (!st) return stg_errf(err, "attention_cached: not prepared");
    dec_cfg kk;
    int bf;
    if (dec_config(g, o, &kk, &bf, err)) return -1;
    if (kk.fn[st->ring] != st->k.fn[st->ring]) return stg_errf(err, "attention_cached: the op changed since it was prepared");
    if (!cu_aligned(ptr[o->in[3]], 16) || !cu_aligned(ptr[o->in[4]], 16))
        return stg_errf(err, "attention_cached: the cache is not 16-byte aligned");
    const int Dh = (int)q->shape[3];
    dec_attn_args a;
    a.q = ptr[o->in[0]], a.k = ptr[o->in[1]], a.v = ptr[o->in[2]], a.kc = ptr[o->in[3]], a.vc = ptr[o->in[4]];
    a.pos = (const int32_t *)ptr[o->in[5]], a.o = ptr[o->out[0]];
    a.part = (float *)c->work;
    a.count = st->count;
    a.C = kc->shape[2];
    a.Hq = (int)q->shape[2], a.Hkv = (int)k->shape[2], a.Dh = Dh, a.nsplit = st->nsplit, a.chunk = st->chunk, a.R = kk.R;
    double scale = o->a.attention_cached.scale, theta = o->a.attention_cached.rope_theta;
    a.scale = (float)(scale != 0 ? scale : 1.0 / sqrt((double)Dh));
    a.log_theta = theta > 0 ? log(theta) : 0.0;
    size_t need = (size_t)(q->shape[0] * q->shape[2]) * (size_t)a.nsplit * (size_t)(Dh + 2) * sizeof(float);
    if (!c->work || c->work_bytes < need) return stg_errf(err, "attention_cached: the scratch holds %zu bytes, needs %zu", c->work_bytes, need);
    dim3 grid((unsigned)a.nsplit, (unsigned)(q->shape[0] * a.Hkv));
    const cudaError_t e = cu_launch_pdl(c->pdl, st->k.fn[st->ring], grid, dim3(DEC_THREADS), st->smem, c->stream, a);
    if (e != cudaSuccess) return stg_errf(err, "attention_cached: launching its kernel: %s", cudaGetErrorString(e));
    return 0;
}

// ---- kv_write -------------------------------------------------------------------------------------

// x (B, S, H, Dh) into the head-major cache (B, H, C, Dh) at positions pos .. pos + S - 1, in units E
// of a head's row (`dw` of them a row: 16-byte pieces when everything is aligned, else 2-byte ones).
template <typename E>
__global__ void kv_write_kernel(const E *k, const E *v, E *kc, E *vc, const int32_t *pos, int64_t B, int64_t S, int64_t H, int64_t C,
                                int64_t dw) {
    int64_t p = *pos;
    if (p < 0 || p + S > C) return;
    const int64_t n = B * S * H * dw;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / dw, e = i % dw, h = r % H, s = (r / H) % S, b = r / (H * S);
        const int64_t dst = ((b * H + h) * C + p + s) * dw + e;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

extern "C" int cuda_run_kv_write(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *k = &g->t[o->in[0]], *kc = &g->t[o->in[2]]; // k (B, S, H, Dh), kc (B, H, C, Dh)
    int b = cuda_same_float(g, o, o->in[0], o->in[2], err);
    if (b < 0) return -1;
    int64_t B = k->shape[0], S = k->shape[1], H = k->shape[2], C = kc->shape[2], row = k->shape[3] * (b ? 2 : 4); // bytes a head's row
    const int32_t *pos = (const int32_t *)ptr[o->in[4]];
    bool v16 = row % 16 == 0;
    for (int i = 0; i < 4; i++) v16 = v16 && cu_aligned(ptr[o->in[i]], 16);
    const int64_t dw = v16 ? row / 16 : row / 2;
    if (v16)
        kv_write_kernel<uint4><<<cuda_blocks(c, B * S * H * dw, 256), 256, 0, c->stream>>>(
            (const uint4 *)ptr[o->in[0]], (const uint4 *)ptr[o->in[1]], (uint4 *)ptr[o->in[2]], (uint4 *)ptr[o->in[3]], pos, B, S, H, C, dw);
    else
        kv_write_kernel<uint16_t><<<cuda_blocks(c, B * S * H * dw, 256), 256, 0, c->stream>>>(
            (const uint16_t *)ptr[o->in[0]], (const uint16_t *)ptr[o->in[1]], (uint16_t *)ptr[o->in[2]], (uint16_t *)ptr[o->in[3]], pos, B,
            S, H, C, dw);
    CUDA_LAUNCH_CHECK(err, "kv_write_kernel");
    return 0;
}

// ---- sample ---------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smp_key(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block reductions over SAMPLE_THREADS threads, in a fixed order (every thread gets the result).
__device__ __forceinline__ int smp_sum_int(int v) { return cu_block_sum<int>(v); }

struct smp_best {
    float v;
    int i;
};

__device__ __forceinline__ smp_best smp_better(smp_best a, smp_best b) {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

__device__ smp_best smp_block_argmax(smp_best x) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        smp_best y = {__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
        x = smp_better(x, y);
    }
    __syncthreads();
    if (lane == 0) bv[w] = x.v, bi[w] = x.i;
    __syncthreads();
    smp_best r = {bv[0], bi[0]};
    for (int k = 1; k < nw; k++) r = smp_better(r, smp_best{bv[k], bi[k]});
    return r;
}

// Prefix sums of x over the block's threads, in thread order (warp scans, then the warps' totals in
// order): *before (the sum over the threads before this one) and *after (that plus x), formed so
// that one thread's `after` is bitwise the next one's `before` (the pieces tile [0, total)); *total.
// Every thread of the block calls it.
__device__ void smp_scan(float x, float *before, float *after, float *total) {
    __shared__ float wsum[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float inc = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    float exc = __shfl_up_sync(0xffffffffu, inc, 1);
    if (lane == 0) exc = 0.f;
    __syncthreads();
    if (lane == 31) wsum[w] = inc;
    __syncthreads();
    float base = 0.f, all = 0.f;
    for (int k = 0; k < nw; k++) {
        if (k == w) base = all;
        all += wsum[k];
    }
    *before = lane == 0 ? base : base + exc;
    *after = base + inc;
    *total = all;
}

template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(const T *logits, int64_t rows, int V, int32_t *token, const int32_t *pos,
                                                                 int32_t *ids, int64_t C, float temperature, int top_k, float top_p,
                                                                 uint64_t seed, int advance) {
    __shared__ int pick;
    float total;
    const int b = blockIdx.x, tid = threadIdx.x;
    const int64_t p = *pos, np = p + advance;
    if (p < 0 || np >= C) return;
    const T *row = logits + ((int64_t)b * rows + rows - 1) * V;
    // the largest logit (NaN as -inf), its first index
    smp_best best = {-INFINITY, V};
    for (int i = tid; i < V; i += SAMPLE_THREADS) {
        float x = cu_ld(row, i);
        if (x != x) x = -INFINITY;
        best = smp_better(best, smp_best{x, i});
    }
    best = smp_block_argmax(best);
    int chosen = best.i < V ? best.i : 0;
    if (temperature > 0 && best.v != -INFINITY) {
        const float inv_t = 1.f / temperature, m = best.v * inv_t;
        uint32_t kmin = 0; // keys below are dropped: top-k, then top-p
        if (top_k > 0 && top_k < V) { // the largest key with at least top_k logits at or above it
            uint32_t lo = 0, hi = 0xffffffffu;
            while (lo < hi) {
                uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2); // 64-bit: the first range is all 2^32 keys
                int cnt = 0;
                for (int i = tid; i < V; i += SAMPLE_THREADS) {
                    float x = cu_ld(row, i);
                    cnt += x == x && smp_key(x * inv_t) >= mid;
                }
                if (smp_sum_int(cnt) >= top_k) lo = mid;
                else hi = mid - 1;
            }
            kmin = lo;
        }
        if (top_p < 1.f) {
            float tot = 0.f;
            for (int i = tid; i < V; i += SAMPLE_THREADS) {
                float x = cu_ld(row, i), z = x * inv_t;
                if (x == x && smp_key(z) >= kmin) tot += __expf(z - m);
            }
            const float want = top_p * cu_block_sum<float>(tot);
            uint32_t lo = kmin, hi = 0xffffffffu; // the largest key whose top set holds top_p of the weight
            while (lo < hi) {
                uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2); // 64-bit: the first range is all 2^32 keys
                float s = 0.f;
                for (int i = tid; i < V; i += SAMPLE_THREADS) {
                    float x = cu_ld(row, i), z = x * inv_t;
                    if (x == x && smp_key(z) >= mid) s += __expf(z - m);
                }
                if (cu_block_sum<float>(s) >= want) lo = mid;
                else hi = mid - 1;
            }
            kmin = lo;
        }
        // the inverse CDF in token-id order over contiguous pieces
        const int per = (V + SAMPLE_THREADS - 1) / SAMPLE_THREADS, i0 = tid * per, i1 = i0 + per < V ? i0 + per : V;
        float own = 0.f;
        int lastk = -1;
        for (int i = i0; i < i1; i++) {
            float x = cu_ld(row, i), z = x * inv_t;
            if (x == x && smp_key(z) >= kmin) own += __expf(z - m), lastk = i;
        }
        float before, after;
        smp_scan(own, &before, &after, &total);
        const float target = (float)stg_sample_uniform(seed, np, b) * total;
        if (tid == 0) pick = -1;
        __syncthreads();
        if (lastk >= 0 && before <= target && target < after) { // the one piece that holds the target
            float cum = before;
            int hit = lastk; // rounding: the walk may end short of `after`
            for (int i = i0; i < i1; i++) {
                float x = cu_ld(row, i), z = x * inv_t;
                if (!(x == x && smp_key(z) >= kmin)) continue;
                cum += __expf(z - m);
                if (cum > target) {
                    hit = i;
                    break;
                }
            }
            pick = hit;
        }
        __syncthreads();
        if (pick >= 0) chosen = pick;
        else { // rounding left none: the last kept token (indices are below 2^24: exact as floats)
            smp_best lk = {lastk >= 0 ? (float)lastk : -1.f, 0};
            lk = smp_block_argmax(lk);
            if (lk.v >= 0) chosen = (int)lk.v;
        }
    }
    if (tid == 0) {
        token[b] = chosen;
        ids[(int64_t)b * C + np] = chosen;
    }
}

__global__ void sample_advance_kernel(int32_t *pos, int64_t C, int advance) {
    int64_t p = *pos;
    if (p >= 0 && p + advance < C) *pos = (int32_t)(p + advance);
}

extern "C" int cuda_run_sample(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *lg = &g->t[o->in[0]], *ids = &g->t[o->in[3]];
    int b = cuda_is_bf16(g, o, o->in[0], err);
    if (b < 0) return -1;
    for (int i = 1; i < 4; i++)
        if (g->t[o->in[i]].dtype != STG_I32) return stg_errf(err, "sample: %s must be i32", g->t[o->in[i]].name);
    if (lg->ndim < 2 || ids->ndim != 2) return stg_errf(err, "sample: %s must be (B, [S,] V) and %s (B, C)", lg->name, ids->name);
    const stg_sample_attrs *a = &o->a.sample;
    int64_t B = lg->shape[0], V = lg->shape[lg->ndim - 1], rows = cuda_numel(lg) / (B * V), C = ids->shape[1];
    if (V > INT32_MAX / 2 || a->top_k > V || a->advance < 1 || a->advance > INT32_MAX) return stg_errf(err, "sample: bad sizes or attributes");
    if (B > 65535 * 1024) return stg_errf(err, "sample: too many sequences");
    int32_t *tok = (int32_t *)ptr[o->in[1]], *pos = (int32_t *)ptr[o->in[2]], *idp = (int32_t *)ptr[o->in[3]];
    if (b)
        sample_kernel<bf16><<<(unsigned)B, SAMPLE_THREADS, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], rows, (int)V, tok, pos, idp, C,
                                                                           (float)a->temperature, (int)a->top_k, (float)a->top_p,
                                                                           (uint64_t)a->seed, (int)a->advance);
    else
        sample_kernel<float><<<(unsigned)B, SAMPLE_THREADS, 0, c->stream>>>((const float *)ptr[o->in[0]], rows, (int)V, tok, pos, idp, C,
                                                                            (float)a->temperature, (int)a->top_k, (float)a->top_p,
                                                                            (uint64_t)a->seed, (int)a->advance);
    CUDA_LAUNCH_CHECK(err, "sample_kernel");
    sample_advance_kernel<<<1, 1, 0, c->stream>>>(pos, C, (int)a->advance);
    CUDA_LAUNCH_CHECK(err, "sample_advance_kernel");
    return 0;
}

// ---- records ------------------------------------------------------------------------------------

static void dec_attn_free(void *s) { free(s); }

const cuda_rec stg_cuda_attention_cached = {cuda_run_attention_cached, dec_attn_prepare, dec_attn_free, dec_attn_table_bytes,
                                            CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_kv_write = {cuda_run_kv_write, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_sample = {cuda_run_sample, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
