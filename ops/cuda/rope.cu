// Rotary position embedding over adjacent pairs (x[2k], x[2k+1]) (CS336), x (..., S, H, Dh).
// One block per (outer, position) row of H*Dh elements: the block first computes the row's Dh/2
// cos/sin pairs in double (the angle p * theta^(-2k/Dh) reaches ~1e3 radians at ctx 1024, past
// fp32's accuracy), keeps them in shared memory, then rotates every pair of the row. Each thread
// reads a pair before writing it, so y may alias x (in place).
#include "ops/cuda/common.cuh"

template <typename T>
__global__ void rope_kernel(const T *x, T *y, int64_t S, int64_t H, int64_t Dh, double log_theta, double sign) {
    extern __shared__ float cs[]; // (Dh/2, 2) cos, sin
    int64_t row = blockIdx.x;      // (outer, S)
    double p = (double)(row % S);
    int64_t half = Dh / 2;
    for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
        double ang = sign * p * exp(-2.0 * (double)k / (double)Dh * log_theta);
        double s, co;
        sincos(ang, &s, &co);
        cs[2 * k] = (float)co;
        cs[2 * k + 1] = (float)s;
    }
    __syncthreads();
    const T *xr = x + row * H * Dh;
    T *yr = y + row * H * Dh;
    for (int64_t q = threadIdx.x; q < H * half; q += blockDim.x) {
        int64_t k = q % half;
        float co = cs[2 * k], s = cs[2 * k + 1];
        float x0 = cu_ld(xr, 2 * q), x1 = cu_ld(xr, 2 * q + 1);
        cu_st(yr, 2 * q, x0 * co - x1 * s);
        cu_st(yr, 2 * q + 1, x0 * s + x1 * co);
    }
}

// The offset of vector q (of the outer-index-major vectors of position s).
__device__ __forceinline__ int64_t rope_off(int q, int nvr, int N, int64_t S, int64_t s, int64_t HD) {
    const int row = q / nvr;
    return ((int64_t)row * S + s) * HD + (int64_t)(q - row * nvr) * N;
}

// Vectorised: blocks (position s, chunk): each block covers a chunk of the vectors of every outer
// index at position s and builds that position's cos/sin table in shared memory. The angle p theta^(-2k/Dh) is formed and reduced modulo 2 pi in double, then
// sincosf (full-range fp32, ~1 ulp) of the reduced angle: the same accuracy as double sincos
// rounded to float, at a fraction of the cost. Needs Dh % N == 0 and 16-byte aligned x, y; each
// thread's first vector is loaded before the table is built (its latency overlaps the table).
// 32-bit index arithmetic (a position's vectors fit an int: checked by the launch); with 64-bit
// division and remainder the kernel took 22.0 us at 2.7B's q against 20.8 (docs/PERF.md).
template <typename T>
__global__ void __launch_bounds__(256) rope_vec_kernel(const T *x, T *y, int outer, int64_t S, int64_t HD, int Dh,
                                                        double log_theta, double sign) {
    extern __shared__ float cs[]; // (Dh/2, 2) cos, sin
    const int N = CU_VEC<T>::N;
    const int64_t s = blockIdx.x;
    const int nvr = (int)(HD / N), total = outer * nvr;
    const int q0 = (int)(blockIdx.y * blockDim.x + threadIdx.x), stride = (int)(gridDim.y * blockDim.x);
    float v[N];
    if (q0 < total) cu_load16(x + rope_off(q0, nvr, N, S, s, HD), v);
    int half = Dh / 2;
    for (int k = threadIdx.x; k < half; k += blockDim.x) {
        double a = (double)s * exp(-2.0 * (double)k / (double)Dh * log_theta);
        const double two_pi = 6.283185307179586476925286766559;
        double n = rint(a * (1.0 / two_pi));
        float r = (float)fma(-n, two_pi, a);
        float sn, co;
        sincosf(r, &sn, &co);
        cs[2 * k] = co;
        cs[2 * k + 1] = (float)sign * sn;
    }
    __syncthreads();
    for (int q = q0; q < total; q += stride) {
        const int row = q / nvr, c = q - row * nvr;
        const int64_t off = ((int64_t)row * S + s) * HD + (int64_t)c * N;
        if (q != q0) cu_load16(x + off, v);
        const int k0 = (c % (Dh / N)) * (N / 2);
        float o[N];
#pragma unroll
        for (int j = 0; j < N / 2; j++) {
            float co = cs[2 * (k0 + j)], sn = cs[2 * (k0 + j) + 1];
            float x0 = v[2 * j], x1 = v[2 * j + 1];
            o[2 * j] = x0 * co - x1 * sn;
            o[2 * j + 1] = x0 * sn + x1 * co;
        }
        cu_store16(y + off, o);
    }
}

extern "C" int cuda_run_rope(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int b = cuda_same_float(g, o, o->out[0], o->in[0], err);
    if (b < 0) return -1;
    if (x->ndim < 3) return stg_errf(err, "tensor %s must be (..., S, H, Dh), has %d dims", x->name, x->ndim);
    int64_t S = x->shape[x->ndim - 3], H = x->shape[x->ndim - 2], Dh = x->shape[x->ndim - 1];
    if (Dh % 2) return stg_errf(err, "tensor %s has an odd head dim %lld", x->name, (long long)Dh);
    if (cuda_numel(&g->t[o->out[0]]) != cuda_numel(x))
        return stg_errf(err, "tensor %s does not match %s", g->t[o->out[0]].name, x->name);
    int64_t rows = cuda_numel(x) / (H * Dh);
    if (rows == 0) return 0;
    int threads = cu_row_threads(H * Dh / 2, 2);
    size_t smem = (size_t)Dh * sizeof(float);
    if (smem > 48 * 1024) return stg_errf(err, "head dim %lld is too large for the rope kernel", (long long)Dh);
    double lt = log(o->a.rope.theta), sign = o->a.rope.inverse ? -1.0 : 1.0;
    int N = b ? 8 : 4;
    if (Dh % N == 0 && cu_aligned(ptr[o->in[0]], 16) && cu_aligned(ptr[o->out[0]], 16) && S > 0 &&
        rows / S * (H * Dh / N) + (int64_t)256 * 65535 < INT32_MAX) {
        int64_t outer = rows / S, total = outer * (H * Dh / N);
        int vt = 256;
        int64_t chunks = (total + vt - 1) / vt;
        if (chunks > 65535) chunks = 65535;
        dim3 grid((unsigned)S, (unsigned)chunks);
        if (b)
            rope_vec_kernel<bf16><<<grid, vt, smem, c->stream>>>(
                (const bf16 *)ptr[o->in[0]], (bf16 *)ptr[o->out[0]], (int)outer, S, H * Dh, (int)Dh, lt, sign);
        else
            rope_vec_kernel<float><<<grid, vt, smem, c->stream>>>(
                (const float *)ptr[o->in[0]], (float *)ptr[o->out[0]], (int)outer, S, H * Dh, (int)Dh, lt, sign);
        CUDA_LAUNCH_CHECK(err, "rope_vec_kernel");
        return 0;
    }
    if (b)
        rope_kernel<bf16><<<(unsigned)rows, threads, smem, c->stream>>>((const bf16 *)ptr[o->in[0]],
                                                                        (bf16 *)ptr[o->out[0]], S, H, Dh, lt, sign);
    else
        rope_kernel<float><<<(unsigned)rows, threads, smem, c->stream>>>((const float *)ptr[o->in[0]],
                                                                         (float *)ptr[o->out[0]], S, H, Dh, lt, sign);
    CUDA_LAUNCH_CHECK(err, "rope_kernel");
    return 0;
}
