// RMSNorm and LayerNorm, forward and backward. One block per row for the row kernels (statistics
// in fp32, written in the stats tensor's dtype). The gain (and bias) gradients are summed over rows
// in a fixed order with no atomics: a first kernel sums fixed groups of rows per column into
// partials in c->work, a second sums the partials in order.
#include "ops/cuda/common.cuh"

// Rows per partial group of the weight gradients: rows are split into at most NORM_PARTS groups.
#define NORM_PARTS 512

static int64_t norm_parts(int64_t rows) { return rows < NORM_PARTS ? rows : NORM_PARTS; }

extern "C" size_t cuda_norm_bwd_work_bytes(const stg_graph *g, int op) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t sums = o->kind == STG_OP_LAYERNORM_BWD ? 2 : 1;
    return (size_t)(norm_parts(cuda_rows(x)) * cuda_last(x) * sums) * sizeof(float);
}

// ---- forward ------------------------------------------------------------------------------------

// x (rows, D), w (D) -> y (rows, D), rstd (rows)
template <typename T>
__global__ void rmsnorm_fwd_kernel(const T *x, const void *w, int wb, T *y, void *rstd, int sb, int64_t D,
                                   float eps) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    int64_t r = blockIdx.x;
    const T *xr = x + r * D;
    T *yr = y + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float v = cu_ld(xr, d);
        ss += v * v;
    }
    ss = cu_block_sum(ss);
    float rs = 1.0f / sqrtf(ss / (float)D + eps);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) cu_st(yr, d, cu_ld(xr, d) * rs * cu_ldd(w, wb, d));
    if (threadIdx.x == 0) cu_std(rstd, sb, r, rs);
}

// x (rows, D), w (D), b (D) -> y (rows, D), stats (rows, 2) = [mean, rstd]
template <typename T>
__global__ void layernorm_fwd_kernel(const T *x, const void *w, int wb, const void *bias, int bb, T *y, void *stats,
                                     int sb, int64_t D, float eps) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    int64_t r = blockIdx.x;
    const T *xr = x + r * D;
    T *yr = y + r * D;
    float s = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += cu_ld(xr, d);
    float mean = cu_block_sum(s) / (float)D;
    float var = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float cdev = cu_ld(xr, d) - mean;
        var += cdev * cdev;
    }
    var = cu_block_sum(var) / (float)D;
    float rs = 1.0f / sqrtf(var + eps);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        cu_st(yr, d, (cu_ld(xr, d) - mean) * rs * cu_ldd(w, wb, d) + cu_ldd(bias, bb, d));
    if (threadIdx.x == 0) {
        cu_std(stats, sb, 2 * r, mean);
        cu_std(stats, sb, 2 * r + 1, rs);
    }
}

// ---- vectorised row kernels ---------------------------------------------------------------------
// Used when D is a multiple of CU_VEC<T>::N, every tensor pointer is 16-byte aligned and the row
// fits in one block with at most NORM_VPT_MAX vectors per thread: each thread keeps its vectors of
// the row in registers (one read of x), 16-byte loads and stores.
#define NORM_VPT_MAX 4

// N consecutive elements (from i, a multiple of N) of a float or bf16 vector chosen at run time.
template <int N> __device__ __forceinline__ void norm_ldn(const void *p, int b, int64_t i, float *out) {
    if (b) {
        const bf16 *q = (const bf16 *)p + i;
        if (N == 8) {
            cu_load16(q, out);
        } else {
#pragma unroll
            for (int j = 0; j < N; j += 4) {
                float4 v = cu_load4(q + j);
                out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
            }
        }
    } else {
        const float *q = (const float *)p + i;
#pragma unroll
        for (int j = 0; j < N; j += 4) {
            float4 v = cu_load4(q + j);
            out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
        }
    }
}

// Vectors per thread for a row of D elements of T (0: the vector kernels do not apply), and the
// block size: a multiple of 32, at least 64 where the row allows.
template <typename T> static int norm_vpt(int64_t D, int max_threads, int *threads) {
    const int N = CU_VEC<T>::N;
    if (D <= 0 || D % N) return 0;
    int64_t nv = D / N;
    for (int v = 1; v <= NORM_VPT_MAX; v *= 2) {
        int64_t t = (nv + v - 1) / v;
        if (t <= max_threads) {
            t = (t + 31) / 32 * 32;
            *threads = (int)t;
            return v;
        }
    }
    return 0;
}

// One block per row. LN: layernorm (stats [mean, rstd]); else rmsnorm (stats rstd).
template <typename T, int VPT, bool LN>
__global__ void __launch_bounds__(512) norm_fwd_vec_kernel(const T *x, const void *w, int wb, const void *bias, int bb, T *y, void *st,
                                    int sb, int64_t D, float eps) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    const int N = CU_VEC<T>::N;
    int64_t r = blockIdx.x;
    int nv = (int)(D / N);
    const T *xr = x + r * D;
    T *yr = y + r * D;
    float v[VPT][N], wv[VPT][N], bv[VPT][N];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < nv) {
            cu_load16(xr + (int64_t)c * N, v[j]);
            norm_ldn<N>(w, wb, (int64_t)c * N, wv[j]);
            if (LN) norm_ldn<N>(bias, bb, (int64_t)c * N, bv[j]);
        } else {
#pragma unroll
            for (int k = 0; k < N; k++) v[j][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < N; k++) s += LN ? v[j][k] : v[j][k] * v[j][k];
    }
    float mean = 0.0f, rs;
    if (LN) {
        mean = cu_block_sum(s) / (float)D;
        float var = 0.0f;
#pragma unroll
        for (int j = 0; j < VPT; j++)
            if ((int)threadIdx.x + j * (int)blockDim.x < nv) {
#pragma unroll
                for (int k = 0; k < N; k++) {
                    float cdev = v[j][k] - mean;
                    var += cdev * cdev;
                }
            }
        var = cu_block_sum(var) / (float)D;
        rs = 1.0f / sqrtf(var + eps);
    } else {
        s = cu_block_sum(s);
        rs = 1.0f / sqrtf(s / (float)D + eps);
    }
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < nv) {
            float o[N];
            if (LN) {
#pragma unroll
                for (int k = 0; k < N; k++) o[k] = (v[j][k] - mean) * rs * wv[j][k] + bv[j][k];
            } else {
#pragma unroll
                for (int k = 0; k < N; k++) o[k] = v[j][k] * rs * wv[j][k];
            }
            cu_store16(yr + (int64_t)c * N, o);
        }
    }
    if (threadIdx.x == 0) {
        if (LN) {
            cu_std(st, sb, 2 * r, mean);
            cu_std(st, sb, 2 * r + 1, rs);
        } else {
            cu_std(st, sb, r, rs);
        }
    }
}

// Launches norm_fwd_vec_kernel when it applies; returns 1 when launched, 0 when not.
template <typename T, bool LN>
static int norm_fwd_vec(stg_cuda *c, const T *x, const void *w, int wb, const void *bias, int bb, T *y, void *st,
                        int sb, int64_t rows, int64_t D, float eps) {
    int threads = 0, vpt = norm_vpt<T>(D, 512, &threads);
    if (!vpt || !cu_aligned(x, 16) || !cu_aligned(y, 16) || !cu_aligned(w, 16) || (LN && !cu_aligned(bias, 16)))
        return 0;
    unsigned grid = (unsigned)rows;
    switch (vpt) {
    case 1: norm_fwd_vec_kernel<T, 1, LN><<<grid, threads, 0, c->stream>>>(x, w, wb, bias, bb, y, st, sb, D, eps); break;
    case 2: norm_fwd_vec_kernel<T, 2, LN><<<grid, threads, 0, c->stream>>>(x, w, wb, bias, bb, y, st, sb, D, eps); break;
    default: norm_fwd_vec_kernel<T, 4, LN><<<grid, threads, 0, c->stream>>>(x, w, wb, bias, bb, y, st, sb, D, eps); break;
    }
    return 1;
}

// Checks x and y (same dtype and size), and that small tensors are float; returns x's bf16 flag.
static int norm_check(const stg_graph *g, const stg_op *o, int x, int y, stg_err *err) {
    int b = cuda_same_float(g, o, y, x, err);
    if (b < 0) return -1;
    if (cuda_numel(&g->t[y]) != cuda_numel(&g->t[x]))
        return stg_errf(err, "tensor %s has %lld elements, expected %lld", g->t[y].name,
                        (long long)cuda_numel(&g->t[y]), (long long)cuda_numel(&g->t[x]));
    return b;
}

static int norm_need(const stg_graph *g, int t, int64_t n, stg_err *err) {
    if (cuda_numel(&g->t[t]) == n) return 0;
    return stg_errf(err, "tensor %s has %lld elements, expected %lld", g->t[t].name, (long long)cuda_numel(&g->t[t]),
                    (long long)n);
}

extern "C" int cuda_run_rmsnorm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), D = cuda_last(x);
    int b = norm_check(g, o, o->in[0], o->out[0], err);
    int wb = cuda_is_bf16(g, o, o->in[1], err), sb = wb < 0 ? -1 : cuda_is_bf16(g, o, o->out[1], err);
    if (b < 0 || wb < 0 || sb < 0 || norm_need(g, o->in[1], D, err) || norm_need(g, o->out[1], rows, err)) return -1;
    if (rows == 0) return 0;
    int threads = cu_row_threads(D, 8);
    float eps = (float)o->a.norm.eps;
    int vec = b ? norm_fwd_vec<bf16, false>(c, (const bf16 *)ptr[o->in[0]], ptr[o->in[1]], wb, NULL, 0,
                                            (bf16 *)ptr[o->out[0]], ptr[o->out[1]], sb, rows, D, eps)
                : norm_fwd_vec<float, false>(c, (const float *)ptr[o->in[0]], ptr[o->in[1]], wb, NULL, 0,
                                             (float *)ptr[o->out[0]], ptr[o->out[1]], sb, rows, D, eps);
    if (vec)
        ;
    else if (b)
        rmsnorm_fwd_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const bf16 *)ptr[o->in[0]], ptr[o->in[1]], wb, (bf16 *)ptr[o->out[0]], ptr[o->out[1]], sb, D, eps);
    else
        rmsnorm_fwd_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const float *)ptr[o->in[0]], ptr[o->in[1]], wb, (float *)ptr[o->out[0]], ptr[o->out[1]], sb, D, eps);
    CUDA_LAUNCH_CHECK(err, "rmsnorm_fwd_kernel");
    return 0;
}

extern "C" int cuda_run_layernorm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), D = cuda_last(x);
    int b = norm_check(g, o, o->in[0], o->out[0], err);
    int wb = b < 0 ? -1 : cuda_is_bf16(g, o, o->in[1], err);
    int bb = wb < 0 ? -1 : cuda_is_bf16(g, o, o->in[2], err);
    int sb = bb < 0 ? -1 : cuda_is_bf16(g, o, o->out[1], err);
    if (sb < 0 || norm_need(g, o->in[1], D, err) || norm_need(g, o->in[2], D, err) ||
        norm_need(g, o->out[1], 2 * rows, err))
        return -1;
    if (rows == 0) return 0;
    int threads = cu_row_threads(D, 8);
    float eps = (float)o->a.norm.eps;
    int vec = b ? norm_fwd_vec<bf16, true>(c, (const bf16 *)ptr[o->in[0]], ptr[o->in[1]], wb, ptr[o->in[2]], bb,
                                           (bf16 *)ptr[o->out[0]], ptr[o->out[1]], sb, rows, D, eps)
                : norm_fwd_vec<float, true>(c, (const float *)ptr[o->in[0]], ptr[o->in[1]], wb, ptr[o->in[2]], bb,
                                            (float *)ptr[o->out[0]], ptr[o->out[1]], sb, rows, D, eps);
    if (vec)
        ;
    else if (b)
        layernorm_fwd_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const bf16 *)ptr[o->in[0]], ptr[o->in[1]], wb, ptr[o->in[2]], bb, (bf16 *)ptr[o->out[0]], ptr[o->out[1]],
            sb, D, eps);
    else
        layernorm_fwd_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const float *)ptr[o->in[0]], ptr[o->in[1]], wb, ptr[o->in[2]], bb, (float *)ptr[o->out[0]],
            ptr[o->out[1]], sb, D, eps);
    CUDA_LAUNCH_CHECK(err, "layernorm_fwd_kernel");
    return 0;
}

// ---- backward -----------------------------------------------------------------------------------
// LN: layernorm (stats = [mean, rstd] per row) or rmsnorm (stats = rstd per row, mean 0).

template <bool LN> __device__ __forceinline__ void norm_row_stats(const void *st, int sb, int64_t r, float *mean,
                                                                   float *rs) {
    if (LN) {
        *mean = cu_ldd(st, sb, 2 * r);
        *rs = cu_ldd(st, sb, 2 * r + 1);
    } else {
        *mean = 0.0f;
        *rs = cu_ldd(st, sb, r);
    }
}

// Partial sums of the weight gradients: part[p][d] = sum over the rows of group p of dy xhat, and
// (LN) part[parts + p][d] = sum of dy. Grid (column blocks, parts); rows of a group in order.
template <typename T, bool LN>
__global__ void norm_dw_partial_kernel(const T *x, const void *st, int sb, const T *dy, float *part, int64_t rows,
                                       int64_t D, int64_t parts) {
    int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t p = blockIdx.y;
    if (d >= D) return;
    int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float mean, rs;
        norm_row_stats<LN>(st, sb, r, &mean, &rs);
        float gy = cu_ld(dy, r * D + d);
        aw += gy * (cu_ld(x, r * D + d) - mean) * rs;
        ab += gy;
    }
    part[p * D + d] = aw;
    if (LN) part[(parts + p) * D + d] = ab;
}

// dw[d] = sum over p of part[p][d] (and db from the second half when LN), in a fixed order: block
// (32 columns, 32 warps); warp w sums parts w, w + 32, ... in order, then lane sums the 32 warps'
// sums in order.
template <bool LN>
__global__ void norm_dw_final_kernel(const float *part, void *dw, int dwb, void *db, int dbb, int64_t D,
                                     int64_t parts) {
    __shared__ float sw[32][33], sbv[32][33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int64_t d = (int64_t)blockIdx.x * 32 + lane;
    float aw = 0.0f, ab = 0.0f;
    if (d < D) {
        // parts <= NORM_PARTS: NORM_PARTS / 32 loads per warp, all issued before the sums.
        float tw[NORM_PARTS / 32], tb[NORM_PARTS / 32];
#pragma unroll
        for (int i = 0; i < NORM_PARTS / 32; i++) {
            int64_t p = w + 32 * i;
            tw[i] = p < parts ? part[p * D + d] : 0.0f;
            if (LN) tb[i] = p < parts ? part[(parts + p) * D + d] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < NORM_PARTS / 32; i++) {
            aw += tw[i];
            if (LN) ab += tb[i];
        }
    }
    sw[w][lane] = aw;
    if (LN) sbv[w][lane] = ab;
    __syncthreads();
    if (w == 0 && d < D) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 32; k++) {
            tw += sw[k][lane];
            if (LN) tb += sbv[k][lane];
        }
        cu_std(dw, dwb, d, tw);
        if (LN) cu_std(db, dbb, d, tb);
    }
}

// Fused backward, vectorised (see norm_fwd_vec_kernel): block p takes rows [rows p / parts,
// rows (p + 1) / parts) in order; per row it computes dx as norm_dx_kernel does (plus add, the
// optional addend, when not NULL) and adds dy xhat (and dy) of its columns into registers, then
// writes its partial sums part[p][d].
#ifndef NORM_BWD_THREADS
#define NORM_BWD_THREADS 256 // most threads a backward row block may have (settable for measurements)
#endif
template <typename T, int VPT, bool LN>
__global__ void __launch_bounds__(NORM_BWD_THREADS) norm_bwd_vec_kernel(const T *x, const void *w, int wb, const void *st, int sb, const T *dy, const T *add, T *dx,
                                    float *part, int64_t rows, int64_t D, int64_t parts) {
    const int N = CU_VEC<T>::N;
    int nv = (int)(D / N);
    int64_t p = blockIdx.x;
    int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
    float wv[VPT][N], aw[VPT][N], ab[VPT][N];
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < nv) {
            norm_ldn<N>(w, wb, (int64_t)c * N, wv[j]);
        } else {
#pragma unroll
            for (int k = 0; k < N; k++) wv[j][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < N; k++) aw[j][k] = ab[j][k] = 0.0f;
    }
    // The next row's x, dy and addend are loaded (raw 16-byte vectors) before this row's reductions.
    uint4 nx[VPT], ndy[VPT], nad[VPT];
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        nx[j] = ndy[j] = nad[j] = make_uint4(0u, 0u, 0u, 0u);
        if (c < nv && r0 < r1) {
            nx[j] = *(const uint4 *)(x + r0 * D + (int64_t)c * N);
            ndy[j] = *(const uint4 *)(dy + r0 * D + (int64_t)c * N);
            if (add) nad[j] = *(const uint4 *)(add + r0 * D + (int64_t)c * N);
        }
    }
    for (int64_t r = r0; r < r1; r++) {
        T *dxr = dx + r * D;
        float xv[VPT][N], gv[VPT][N];
        uint4 av[VPT]; // this row's addend (raw)
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            const T *ex = (const T *)&nx[j], *eg = (const T *)&ndy[j];
#pragma unroll
            for (int k = 0; k < N; k++) xv[j][k] = cu_f(ex[k]), gv[j][k] = cu_f(eg[k]);
            av[j] = nad[j];
        }
        if (r + 1 < r1) {
#pragma unroll
            for (int j = 0; j < VPT; j++) {
                int c = threadIdx.x + j * blockDim.x;
                if (c < nv) {
                    nx[j] = *(const uint4 *)(x + (r + 1) * D + (int64_t)c * N);
                    ndy[j] = *(const uint4 *)(dy + (r + 1) * D + (int64_t)c * N);
                    if (add) nad[j] = *(const uint4 *)(add + (r + 1) * D + (int64_t)c * N);
                }
            }
        }
        float mean, rs;
        norm_row_stats<LN>(st, sb, r, &mean, &rs);
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            if ((int)threadIdx.x + j * (int)blockDim.x < nv) {
#pragma unroll
                for (int k = 0; k < N; k++) {
                    float xhat = (xv[j][k] - mean) * rs;
                    float g = gv[j][k] * wv[j][k];
                    sg += g;
                    sgx += g * xhat;
                    aw[j][k] += gv[j][k] * xhat;
                    if (LN) ab[j][k] += gv[j][k];
                    xv[j][k] = xhat;
                }
            }
        }
        float mg = LN ? cu_block_sum(sg) / (float)D : 0.0f;
        float mgx = cu_block_sum(sgx) / (float)D;
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            int c = threadIdx.x + j * blockDim.x;
            if (c < nv) {
                float o[N];
#pragma unroll
                for (int k = 0; k < N; k++) o[k] = rs * (gv[j][k] * wv[j][k] - mg - xv[j][k] * mgx);
                if (add) {
                    const T *ea = (const T *)&av[j];
#pragma unroll
                    for (int k = 0; k < N; k++) o[k] += cu_f(ea[k]);
                }
                cu_store16(dxr + (int64_t)c * N, o);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < nv) {
            float *pw = part + p * D + (int64_t)c * N;
#pragma unroll
            for (int k = 0; k < N; k += 4) *(float4 *)(pw + k) = make_float4(aw[j][k], aw[j][k + 1], aw[j][k + 2], aw[j][k + 3]);
            if (LN) {
                float *pb = part + (parts + p) * D + (int64_t)c * N;
#pragma unroll
                for (int k = 0; k < N; k += 4)
                    *(float4 *)(pb + k) = make_float4(ab[j][k], ab[j][k + 1], ab[j][k + 2], ab[j][k + 3]);
            }
        }
    }
}

// Blocks (partial groups) for a backward row kernel: at most NORM_PARTS and at most want, and with
// NORM_ONE_WAVE at most what the device runs at once, so there is no second, mostly empty wave (2.7B
// at ctx 1024: 512 blocks where 396 fit took 1.3 waves, 43.0 us; one wave of 396, 36.1 us; docs/PERF.md).
// oc caches the kernel's blocks per multiprocessor for
// one block shape (the caller keeps one per kernel; the GPU model is one per process).
typedef struct norm_occ {
    int threads, blocks;
    size_t smem;
} norm_occ;
#ifndef NORM_ONE_WAVE
#define NORM_ONE_WAVE 1
#endif
template <typename K>
static int norm_grid(stg_cuda *c, K kernel, int threads, size_t smem, int64_t want, norm_occ &oc, int64_t *parts,
                     stg_err *err) {
    if (NORM_ONE_WAVE && (oc.blocks == 0 || oc.threads != threads || oc.smem != smem)) {
        int n = 0;
        CUDA_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
        oc.threads = threads, oc.smem = smem, oc.blocks = n < 1 ? 1 : n;
    }
    const int occ = oc.blocks;
    int64_t n = want < NORM_PARTS ? want : NORM_PARTS;
    const int64_t wave = (int64_t)occ * (c->sm_count > 0 ? c->sm_count : 1);
    if (NORM_ONE_WAVE && n > wave) n = wave;
    *parts = n < 1 ? 1 : n;
    return 0;
}

// One block per row: g = dy w, xhat = (x - mean) rs;
// rmsnorm dx = rs (g - xhat mean(g xhat)); layernorm dx = rs (g - mean(g) - xhat mean(g xhat));
// plus add (the optional addend) when not NULL. dx may alias dy: the row is fully read (the
// reductions) before the block writes it, and each element is read again by the thread that then
// writes it.
template <typename T, bool LN>
__global__ void norm_dx_kernel(const T *x, const void *w, int wb, const void *st, int sb, const T *dy, const T *add, T *dx,
                               int64_t D) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * D, *dyr = dy + r * D;
    T *dxr = dx + r * D;
    float mean, rs;
    norm_row_stats<LN>(st, sb, r, &mean, &rs);
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float gv = cu_ld(dyr, d) * cu_ldd(w, wb, d);
        sg += gv;
        sgx += gv * (cu_ld(xr, d) - mean) * rs;
    }
    float mg = LN ? cu_block_sum(sg) / (float)D : 0.0f;
    float mgx = cu_block_sum(sgx) / (float)D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float gv = cu_ld(dyr, d) * cu_ldd(w, wb, d);
        float xhat = (cu_ld(xr, d) - mean) * rs;
        cu_st(dxr, d, rs * (gv - mg - xhat * mgx) + (add ? cu_ld(add + r * D, d) : 0.0f));
    }
}

template <typename T, bool LN>
static int norm_bwd_launch(stg_cuda *c, const stg_graph *g, const stg_op *o, void *const *ptr, int wb, int sb,
                           int dwb, int dbb, stg_err *err) {
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), D = cuda_last(x), parts = norm_parts(rows);
    if (rows == 0 || D == 0) return 0;
    float *part = (float *)c->work;
    if (!part || c->work_bytes < (size_t)(parts * D * (LN ? 2 : 1)) * sizeof(float))
        return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
    const T *xp = (const T *)ptr[o->in[0]], *dy = (const T *)ptr[o->in[3]];
    const void *w = ptr[o->in[1]], *st = ptr[o->in[2]];
    T *dx = (T *)ptr[o->out[0]];
    const T *add = o->n_in == 5 ? (const T *)ptr[o->in[4]] : NULL; // the addend (registry: addend_in 4)
    void *dw = ptr[o->out[1]], *db = LN ? ptr[o->out[2]] : NULL;
    const bool aligned = cu_aligned(xp, 16) && cu_aligned(dy, 16) && cu_aligned(dx, 16) && cu_aligned(w, 16) &&
                         cu_aligned(part, 16) && (!add || cu_aligned(add, 16));
    int threads = 0, vpt = norm_vpt<T>(D, NORM_BWD_THREADS, &threads);
    if (vpt && aligned) {
        static norm_occ occ[NORM_VPT_MAX + 1];
        // One pass: dx and the partial sums together (each thread reads its dy before writing dx).
#define NORM_VEC_CASE(V)                                                                                          \
    case V:                                                                                                       \
        if (norm_grid(c, norm_bwd_vec_kernel<T, V, LN>, threads, 0, rows, occ[V], &parts, err))                 \
            return -1;                                                                                            \
        norm_bwd_vec_kernel<T, V, LN><<<(unsigned)parts, threads, 0, c->stream>>>(xp, w, wb, st, sb, dy, add, dx, \
                                                                                  part, rows, D, parts);          \
        break;
        switch (vpt) {
            NORM_VEC_CASE(1)
            NORM_VEC_CASE(2)
            NORM_VEC_CASE(4)
        }
#undef NORM_VEC_CASE
        CUDA_LAUNCH_CHECK(err, "norm_bwd_vec_kernel");
        norm_dw_final_kernel<LN><<<(unsigned)((D + 31) / 32), 1024, 0, c->stream>>>(part, dw, dwb, db, dbb, D, parts);
        CUDA_LAUNCH_CHECK(err, "norm_dw_final_kernel");
        return 0;
    }
    // The weight gradients first: dx may overwrite dy.
    dim3 pg((unsigned)((D + 255) / 256), (unsigned)parts);
    norm_dw_partial_kernel<T, LN><<<pg, 256, 0, c->stream>>>(xp, st, sb, dy, part, rows, D, parts);
    CUDA_LAUNCH_CHECK(err, "norm_dw_partial_kernel");
    norm_dw_final_kernel<LN><<<(unsigned)((D + 31) / 32), 1024, 0, c->stream>>>(part, dw, dwb, db, dbb, D, parts);
    CUDA_LAUNCH_CHECK(err, "norm_dw_final_kernel");
    norm_dx_kernel<T, LN><<<(unsigned)rows, cu_row_threads(D, 8), 0, c->stream>>>(xp, w, wb, st, sb, dy, add, dx, D);
    CUDA_LAUNCH_CHECK(err, "norm_dx_kernel");
    return 0;
}

// (x, w, stats, dy) -> dx, dw[, db]
static int norm_bwd_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, bool ln, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), D = cuda_last(x);
    int b = norm_check(g, o, o->in[0], o->in[3], err);
    if (b < 0 || norm_check(g, o, o->in[0], o->out[0], err) < 0 || (o->n_in == 5 && norm_check(g, o, o->in[0], o->in[4], err) < 0))
        return -1;
    int wb = cuda_is_bf16(g, o, o->in[1], err);
    int sb = wb < 0 ? -1 : cuda_is_bf16(g, o, o->in[2], err);
    int dwb = sb < 0 ? -1 : cuda_is_bf16(g, o, o->out[1], err);
    int dbb = ln && dwb >= 0 ? cuda_is_bf16(g, o, o->out[2], err) : 0;
    if (dwb < 0 || dbb < 0 || norm_need(g, o->in[1], D, err) || norm_need(g, o->in[2], ln ? 2 * rows : rows, err) ||
        norm_need(g, o->out[1], D, err) || (ln && norm_need(g, o->out[2], D, err)))
        return -1;
    if (ln)
        return b ? norm_bwd_launch<bf16, true>(c, g, o, ptr, wb, sb, dwb, dbb, err)
                 : norm_bwd_launch<float, true>(c, g, o, ptr, wb, sb, dwb, dbb, err);
    return b ? norm_bwd_launch<bf16, false>(c, g, o, ptr, wb, sb, dwb, dbb, err)
             : norm_bwd_launch<float, false>(c, g, o, ptr, wb, sb, dwb, dbb, err);
}

extern "C" int cuda_run_rmsnorm_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return norm_bwd_run(c, g, op, ptr, false, err);
}

extern "C" int cuda_run_layernorm_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return norm_bwd_run(c, g, op, ptr, true, err);
}

// ---- records ------------------------------------------------------------------------------------

static int prep_norm_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    *work = cuda_norm_bwd_work_bytes(g, op);
    return 0;
}

const cuda_rec stg_cuda_rmsnorm = {cuda_run_rmsnorm, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_layernorm = {cuda_run_layernorm, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_rmsnorm_bwd = {cuda_run_rmsnorm_bwd, prep_norm_bwd, NULL, NULL, CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_layernorm_bwd = {cuda_run_layernorm_bwd, prep_norm_bwd, NULL, NULL, CUDA_REC_MAIN, NULL};
