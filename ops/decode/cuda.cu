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
// first rotates (RoPE) and stores the new key and value there. Rows are read with 16-byte loads:
// R lanes per row (R the power of two >= Dh / (16 / sizeof(T))), 32 / R rows per warp at a time.
//
// sample: one block per sequence, over the last row of its logits: greedy is an argmax; else the
// k-th largest logit (top-k) and the top-p threshold are found by bisection over the logits' order-
// preserving 32-bit keys (counts and sums reduced in a fixed order), and the token is the inverse
// CDF at the uniform in token-id order: each thread sums its contiguous piece, a block scan places
// the pieces, and the thread whose piece crosses u x total walks it. A second one-thread kernel
// then advances the position (after every block has read it).
#include "ops/cuda/common.cuh"
#include "ops/decode/uniform.h"

#define DEC_THREADS 128 // attention_cached: 4 warps
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_U 4 // attention_cached: rows per row group and trip
#define SAMPLE_THREADS 512

// ---- RoPE at a position ---------------------------------------------------------------------------

// (cos, sin) of position p, pair i: the angle formed and reduced modulo 2 pi in double, then sincosf
// (as ops/rope/cuda.cu's table, so a rotation here has the rope op's bits).
__device__ __forceinline__ float2 dec_cos_sin(int64_t p, int i, int Dh, double log_theta) {
    double a = (double)p * exp(-2.0 * (double)i / (double)Dh * log_theta);
    const double two_pi = 6.283185307179586476925286766559;
    double n = rint(a * (1.0 / two_pi));
    float r = (float)fma(-n, two_pi, a);
    float sn, co;
    sincosf(r, &sn, &co);
    return make_float2(co, sn);
}

// ---- attention over the cache ---------------------------------------------------------------------

struct dec_attn_args {
    const void *q, *k, *v; // (B, 1, Hq, Dh), (B, 1, Hkv, Dh)
    void *kc, *vc;         // (B, C, Hkv, Dh)
    const int32_t *pos;
    void *o;               // (B, 1, Hq, Dh)
    float *part;           // (B, Hq, nsplit, Dh + 2): unnormalised output, m, l
    int *count;            // (B, Hkv)
    int64_t C;
    int Hq, Hkv, Dh, nsplit, chunk;
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

template <typename T, int R>
__global__ void __launch_bounds__(DEC_THREADS) attention_cached_kernel(dec_attn_args a) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    constexpr int N = CU_VEC<T>::N; // elements per 16-byte load
    constexpr int RPW = 32 / R;     // rows per warp at a time
    extern __shared__ float sm[];
    const int Dh = a.Dh, G = a.Hq / a.Hkv, NC = Dh / N;
    float *qs = sm;                         // (G, Dh) rotated queries
    float *wacc = qs + G * Dh;              // (DEC_WARPS, Dh)
    float *wm = wacc + DEC_WARPS * Dh;      // (DEC_WARPS)
    float *wl = wm + DEC_WARPS;             // (DEC_WARPS)
    int *last = (int *)(wl + DEC_WARPS);    // this block combines
    const int split = blockIdx.x, bh = blockIdx.y, b = bh / a.Hkv, hk = bh % a.Hkv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t p = *a.pos;
    if (p < 0 || p >= a.C) return; // the host never runs a step past the cache
    const int64_t L = p + 1, j0 = (int64_t)split * a.chunk, j1 = j0 + a.chunk < L ? j0 + a.chunk : L;
    const T *q = (const T *)a.q;
    T *kc = (T *)a.kc, *vc = (T *)a.vc;
    const int64_t rs = (int64_t)a.Hkv * Dh; // between positions of the cache
    T *kb = kc + (int64_t)b * a.C * rs + (int64_t)hk * Dh, *vb = vc + (int64_t)b * a.C * rs + (int64_t)hk * Dh;
    // the queries of this group, rotated at p and rounded to T as the rope op's output is
    for (int i = tid; i < G * Dh / 2; i += DEC_THREADS) {
        int g = i / (Dh / 2), e = i % (Dh / 2);
        const T *qr = q + ((int64_t)b * a.Hq + (int64_t)hk * G + g) * Dh;
        float x0 = cu_ld(qr, 2 * e), x1 = cu_ld(qr, 2 * e + 1);
        if (a.log_theta != 0) {
            float2 cs = dec_cos_sin(p, e, Dh, a.log_theta);
            float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
            x0 = cu_f(cu_t<T>(y0));
            x1 = cu_f(cu_t<T>(y1));
        }
        qs[g * Dh + 2 * e] = x0;
        qs[g * Dh + 2 * e + 1] = x1;
    }
    // the new key (rotated) and value, stored by the block whose chunk holds p
    if (p >= j0 && p < j1) {
        const T *kn = (const T *)a.k + ((int64_t)b * a.Hkv + hk) * Dh, *vn = (const T *)a.v + ((int64_t)b * a.Hkv + hk) * Dh;
        for (int e = tid; e < Dh / 2; e += DEC_THREADS) {
            float x0 = cu_ld(kn, 2 * e), x1 = cu_ld(kn, 2 * e + 1);
            if (a.log_theta != 0) {
                float2 cs = dec_cos_sin(p, e, Dh, a.log_theta);
                float y0 = x0 * cs.x - x1 * cs.y, y1 = x0 * cs.y + x1 * cs.x;
                x0 = y0, x1 = y1;
            }
            cu_st(kb + p * rs, 2 * e, x0);
            cu_st(kb + p * rs, 2 * e + 1, x1);
            vb[p * rs + 2 * e] = vn[2 * e];
            vb[p * rs + 2 * e + 1] = vn[2 * e + 1];
        }
    }
    __syncthreads(); // the queries, and the new row for this block's reads
    const int rig = lane / R, c = lane % R;
    const bool on = c < NC;
    float *part_b = a.part + ((int64_t)b * a.Hq + (int64_t)hk * G) * a.nsplit * (Dh + 2);
    for (int g = 0; g < G; g++) {
        float qv[N], acc[N];
#pragma unroll
        for (int e = 0; e < N; e++) {
            qv[e] = on ? qs[g * Dh + c * N + e] : 0.f;
            acc[e] = 0.f;
        }
        float m = -INFINITY, l = 0.f;
        // every lane of a warp runs the same trips (the shuffles need all 32); rows past j1 score nothing.
        // A trip takes DEC_U rows per row group: their keys and their values are loaded together, raw
        // (2 DEC_U 16-byte loads in flight per lane; the values no longer wait for the scores: one memory
        // round trip a trip instead of two).
        constexpr int STEP = DEC_WARPS * RPW;
        for (int64_t jb = j0 + warp * RPW; jb < j1; jb += STEP * DEC_U) {
            uint4 kr[DEC_U], vr[DEC_U];
            float kv[DEC_U][N], sc[DEC_U];
#pragma unroll
            for (int u = 0; u < DEC_U; u++) {
                const int64_t j = jb + u * STEP + rig;
                sc[u] = 0.f;
                if (on && j < j1) {
                    kr[u] = *(const uint4 *)(kb + j * rs + c * N);
                    vr[u] = *(const uint4 *)(vb + j * rs + c * N);
                }
            }
#pragma unroll
            for (int u = 0; u < DEC_U; u++) {
                if (on && jb + u * STEP + rig < j1) {
                    const T *ke = (const T *)&kr[u];
#pragma unroll
                    for (int e = 0; e < N; e++) sc[u] += qv[e] * cu_f(ke[e]);
                }
#pragma unroll
                for (int off = R / 2; off > 0; off >>= 1) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
            }
            float mn = m;
#pragma unroll
            for (int u = 0; u < DEC_U; u++) {
                const int64_t j = jb + u * STEP + rig;
                sc[u] = j < j1 ? sc[u] * a.scale : -INFINITY;
                mn = fmaxf(mn, sc[u]);
                if (on && j < j1) {
                    const T *ve = (const T *)&vr[u];
#pragma unroll
                    for (int e = 0; e < N; e++) kv[u][e] = cu_f(ve[e]);
                }
            }
            if (mn == -INFINITY) continue; // no row of this group in the trip
            const float c1 = m == -INFINITY ? 0.f : __expf(m - mn);
            l *= c1;
#pragma unroll
            for (int e = 0; e < N; e++) acc[e] *= c1;
#pragma unroll
            for (int u = 0; u < DEC_U; u++) {
                if (sc[u] == -INFINITY) continue;
                const float pe = __expf(sc[u] - mn);
                l += pe;
                if (on)
#pragma unroll
                    for (int e = 0; e < N; e++) acc[e] += pe * kv[u][e];
            }
            m = mn;
        }
        // the warp's row groups, then the warps
#pragma unroll
        for (int off = R; off < 32; off <<= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off), l2 = __shfl_xor_sync(0xffffffffu, l, off), c1, c2;
            dec_merge(m, l, m2, l2, c1, c2);
#pragma unroll
            for (int e = 0; e < N; e++) acc[e] = acc[e] * c1 + __shfl_xor_sync(0xffffffffu, acc[e], off) * c2;
        }
        if (lane < R && on)
#pragma unroll
            for (int e = 0; e < N; e++) wacc[warp * Dh + c * N + e] = acc[e];
        if (lane == 0) wm[warp] = m, wl[warp] = l;
        __syncthreads();
        float M = -INFINITY, Lsum = 0.f, f[DEC_WARPS];
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[w]);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            f[w] = wm[w] == -INFINITY ? 0.f : __expf(wm[w] - M);
            Lsum += wl[w] * f[w];
        }
        float *pp = part_b + ((int64_t)g * a.nsplit + split) * (Dh + 2);
        for (int d = tid; d < Dh; d += DEC_THREADS) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) s += wacc[w * Dh + d] * f[w];
            pp[d] = s;
        }
        if (tid == 0) pp[Dh] = M, pp[Dh + 1] = Lsum;
        __syncthreads(); // wacc, wm, wl reused by the next head
    }
    // the last block of this (b, kv head) combines the splits
    __threadfence();
    if (tid == 0) *last = atomicAdd(&a.count[bh], 1) == a.nsplit - 1;
    __syncthreads();
    if (!*last) return;
    __threadfence();
    T *o = (T *)a.o;
    for (int g = 0; g < G; g++) {
        const float *pg = part_b + (int64_t)g * a.nsplit * (Dh + 2);
        float M = -INFINITY, Lsum = 0.f;
        for (int s = 0; s < a.nsplit; s++) M = fmaxf(M, __ldcg(pg + (int64_t)s * (Dh + 2) + Dh));
        for (int s = 0; s < a.nsplit; s++) {
            float ms = __ldcg(pg + (int64_t)s * (Dh + 2) + Dh);
            if (ms != -INFINITY) Lsum += __ldcg(pg + (int64_t)s * (Dh + 2) + Dh + 1) * __expf(ms - M);
        }
        T *og = o + ((int64_t)b * a.Hq + (int64_t)hk * G + g) * Dh;
        for (int d = tid; d < Dh; d += DEC_THREADS) {
            float s = 0.f;
            for (int sp = 0; sp < a.nsplit; sp++) {
                float ms = __ldcg(pg + (int64_t)sp * (Dh + 2) + Dh);
                if (ms != -INFINITY) s += __ldcg(pg + (int64_t)sp * (Dh + 2) + d) * __expf(ms - M);
            }
            cu_st(og, d, s / Lsum);
        }
    }
    if (tid == 0) a.count[bh] = 0; // ready for the next step
}

// The split of the cache: about four blocks per SM over all (b, kv head) pairs, chunks of at least
// 32 positions (a block's trip covers DEC_WARPS x rows-per-warp x DEC_U of them). The grid is fixed
// at capture while the length grows, so the split is of the whole cache: the blocks past the
// current length only mark their split empty.
static void dec_split(const stg_cuda *c, int64_t B, int64_t Hkv, int64_t C, int *nsplit, int *chunk) {
    int64_t pairs = B * Hkv, want = (4 * (int64_t)(c->sm_count > 0 ? c->sm_count : 132) + pairs - 1) / pairs;
    int64_t most = (C + 31) / 32;
    if (want > most) want = most;
    if (want < 1) want = 1;
    int64_t ch = (C + want - 1) / want;
    *chunk = (int)ch;
    *nsplit = (int)((C + ch - 1) / ch);
}

typedef struct {
    int *count;
    int nsplit, chunk;
} dec_attn_state;

static size_t dec_attn_table_bytes(const stg_graph *g, int op) {
    const stg_tensor *k = &g->t[g->ops[op].in[1]];
    return (((size_t)(k->shape[0] * k->shape[2]) * sizeof(int)) + 255) & ~(size_t)255;
}

static int dec_attn_prepare(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                            stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *q = &g->t[o->in[0]], *k = &g->t[o->in[1]], *kc = &g->t[o->in[3]];
    dec_attn_state *st = (dec_attn_state *)calloc(1, sizeof *st);
    if (!st) return stg_errf(err, "cuda: out of host memory");
    *state = st;
    st->count = (int *)table;
    dec_split(c, k->shape[0], k->shape[2], kc->shape[1], &st->nsplit, &st->chunk);
    CUDA_CHECK(err, cudaMemsetAsync(table, 0, dec_attn_table_bytes(g, op), c->stream));
    *work = (size_t)(q->shape[0] * q->shape[2]) * (size_t)st->nsplit * (size_t)(q->shape[3] + 2) * sizeof(float);
    return 0;
}

template <typename T, int R> static void dec_attn_launch(const dec_attn_args &a, dim3 grid, size_t smem, cudaStream_t s) {
    attention_cached_kernel<T, R><<<grid, DEC_THREADS, smem, s>>>(a);
}

template <typename T> static int dec_attn_dispatch(const dec_attn_args &a, dim3 grid, size_t smem, cudaStream_t s, stg_err *err) {
    const int NC = a.Dh / CU_VEC<T>::N;
    int R = 1;
    while (R < NC) R <<= 1;
    switch (R) {
    case 1: dec_attn_launch<T, 1>(a, grid, smem, s); break;
    case 2: dec_attn_launch<T, 2>(a, grid, smem, s); break;
    case 4: dec_attn_launch<T, 4>(a, grid, smem, s); break;
    case 8: dec_attn_launch<T, 8>(a, grid, smem, s); break;
    case 16: dec_attn_launch<T, 16>(a, grid, smem, s); break;
    case 32: dec_attn_launch<T, 32>(a, grid, smem, s); break;
    default: return stg_errf(err, "attention_cached: head dim %d is too large (at most %d for this dtype)", a.Dh, 32 * CU_VEC<T>::N);
    }
    CUDA_LAUNCH_CHECK(err, "attention_cached_kernel");
    return 0;
}

extern "C" int cuda_run_attention_cached(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *q = &g->t[o->in[0]], *k = &g->t[o->in[1]], *kc = &g->t[o->in[3]];
    const dec_attn_state *st = c->state ? (const dec_attn_state *)c->state[op] : NULL;
    if (!st) return stg_errf(err, "attention_cached: not prepared");
    int b = cuda_same_float(g, o, o->in[0], o->in[3], err);
    if (b < 0) return -1;
    for (int i = 1; i < 5; i++)
        if (g->t[o->in[i]].dtype != q->dtype) return stg_errf(err, "attention_cached: %s is not %s", g->t[o->in[i]].name, stg_dtype_name(q->dtype));
    const int N = b ? 8 : 4, Dh = (int)q->shape[3];
    if (Dh % N || Dh / N > 32)
        return stg_errf(err, "attention_cached: head dim %d: the kernel takes multiples of %d up to %d for %s", Dh, N, 32 * N,
                        stg_dtype_name(q->dtype));
    if (!cu_aligned(ptr[o->in[3]], 16) || !cu_aligned(ptr[o->in[4]], 16))
        return stg_errf(err, "attention_cached: the cache is not 16-byte aligned");
    dec_attn_args a;
    a.q = ptr[o->in[0]], a.k = ptr[o->in[1]], a.v = ptr[o->in[2]], a.kc = ptr[o->in[3]], a.vc = ptr[o->in[4]];
    a.pos = (const int32_t *)ptr[o->in[5]], a.o = ptr[o->out[0]];
    a.part = (float *)c->work;
    a.count = st->count;
    a.C = kc->shape[1];
    a.Hq = (int)q->shape[2], a.Hkv = (int)k->shape[2], a.Dh = Dh, a.nsplit = st->nsplit, a.chunk = st->chunk;
    double scale = o->a.attention_cached.scale, theta = o->a.attention_cached.rope_theta;
    a.scale = (float)(scale != 0 ? scale : 1.0 / sqrt((double)Dh));
    a.log_theta = theta > 0 ? log(theta) : 0.0;
    size_t need = (size_t)(q->shape[0] * q->shape[2]) * (size_t)a.nsplit * (size_t)(Dh + 2) * sizeof(float);
    if (!c->work || c->work_bytes < need) return stg_errf(err, "attention_cached: the scratch holds %zu bytes, needs %zu", c->work_bytes, need);
    int G = a.Hq / a.Hkv;
    size_t smem = (size_t)(G * Dh + DEC_WARPS * Dh + 2 * DEC_WARPS + 4) * sizeof(float);
    if (smem > 48 * 1024) return stg_errf(err, "attention_cached: %d query heads per kv head of dim %d need too much shared memory", G, Dh);
    dim3 grid((unsigned)a.nsplit, (unsigned)(q->shape[0] * a.Hkv));
    return b ? dec_attn_dispatch<bf16>(a, grid, smem, c->stream, err) : dec_attn_dispatch<float>(a, grid, smem, c->stream, err);
}

// ---- kv_write -------------------------------------------------------------------------------------

// x (B, S*H*Dh) into cache (B, C*H*Dh) at row offset pos*H*Dh, element by element (bytes: 16-byte
// pieces when everything is aligned: `vec` elements of 4 bytes, else 2-byte elements).
template <typename E>
__global__ void kv_write_kernel(const E *k, const E *v, E *kc, E *vc, const int32_t *pos, int64_t B, int64_t S, int64_t C, int64_t row) {
    int64_t p = *pos;
    if (p < 0 || p + S > C) return;
    int64_t per = S * row, n = B * per;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t bb = i / per, r = i % per, dst = bb * C * row + p * row + r;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

extern "C" int cuda_run_kv_write(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *k = &g->t[o->in[0]], *kc = &g->t[o->in[2]];
    int b = cuda_same_float(g, o, o->in[0], o->in[2], err);
    if (b < 0) return -1;
    int64_t B = k->shape[0], S = k->shape[1], C = kc->shape[1], row = k->shape[2] * k->shape[3] * (b ? 2 : 4); // bytes per position
    const int32_t *pos = (const int32_t *)ptr[o->in[4]];
    bool v16 = row % 16 == 0;
    for (int i = 0; i < 4; i++) v16 = v16 && cu_aligned(ptr[o->in[i]], 16);
    if (v16) {
        int64_t r = row / 16;
        kv_write_kernel<uint4><<<cuda_blocks(c, B * S * r, 256), 256, 0, c->stream>>>(
            (const uint4 *)ptr[o->in[0]], (const uint4 *)ptr[o->in[1]], (uint4 *)ptr[o->in[2]], (uint4 *)ptr[o->in[3]], pos, B, S, C, r);
    } else {
        int64_t r = row / 2;
        kv_write_kernel<uint16_t><<<cuda_blocks(c, B * S * r, 256), 256, 0, c->stream>>>(
            (const uint16_t *)ptr[o->in[0]], (const uint16_t *)ptr[o->in[1]], (uint16_t *)ptr[o->in[2]], (uint16_t *)ptr[o->in[3]], pos, B,
            S, C, r);
    }
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
