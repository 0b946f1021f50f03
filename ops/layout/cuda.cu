// Data movement: reshape (a view; a device-to-device copy when the plan gave it its own buffer),
// the transpose of any two dims (a copy), and repeat_kv (each head repeated n times) with its
// backward (the sum over each head's n copies, in order, in f32: deterministic, no atomics).
#include "ops/cuda/common.cuh"

extern "C" int cuda_run_reshape(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]], *y = &g->t[o->out[0]];
    if (cuda_numel(x) != cuda_numel(y) || x->dtype != y->dtype)
        return stg_errf(err, "%s and %s differ in size or dtype", x->name, y->name);
    if (ptr[o->in[0]] == ptr[o->out[0]]) return 0;
    CUDA_CHECK(err, cudaMemcpyAsync(ptr[o->out[0]], ptr[o->in[0]], (size_t)stg_bytes(x), cudaMemcpyDeviceToDevice,
                                    c->stream));
    return 0;
}

// x seen as (A, N0, M, N1, C) -> y (A, N1, M, N0, C); one thread per output element.
template <typename T>
__global__ void transpose_kernel(const T *x, T *y, int64_t N0, int64_t M, int64_t N1, int64_t C, int64_t total) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t cc = idx % C, r = idx / C;
        int64_t i0 = r % N0;
        r /= N0;
        int64_t m = r % M;
        r /= M;
        int64_t i1 = r % N1, a = r / N1;
        y[idx] = x[(((a * N0 + i0) * M + m) * N1 + i1) * C + cc];
    }
}

template <typename T>
static int transpose_launch(stg_cuda *c, const void *x, void *y, int64_t N0, int64_t M, int64_t N1, int64_t C,
                            int64_t total, stg_err *err) {
    transpose_kernel<T><<<cuda_blocks(c, total, 256), 256, 0, c->stream>>>((const T *)x, (T *)y, N0, M, N1, C, total);
    CUDA_LAUNCH_CHECK(err, "transpose_kernel");
    return 0;
}

extern "C" int cuda_run_transpose(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int b = cuda_same_float(g, o, o->out[0], o->in[0], err);
    if (b < 0) return -1;
    if (ptr[o->in[0]] == ptr[o->out[0]]) return stg_errf(err, "transpose cannot run in place");
    int d0 = o->a.transpose.d0, d1 = o->a.transpose.d1;
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim)
        return stg_errf(err, "dims %d and %d out of range for %s", o->a.transpose.d0, o->a.transpose.d1, x->name);
    if (d0 > d1) {
        int t = d0;
        d0 = d1;
        d1 = t;
    }
    int64_t A = 1, M = 1, C = 1, N0 = x->shape[d0], N1 = x->shape[d1];
    for (int i = 0; i < d0; i++) A *= x->shape[i];
    for (int i = d0 + 1; i < d1; i++) M *= x->shape[i];
    for (int i = d1 + 1; i < x->ndim; i++) C *= x->shape[i];
    int64_t total = cuda_numel(x);
    if (total == 0) return 0;
    if (d0 == d1) {
        CUDA_CHECK(err, cudaMemcpyAsync(ptr[o->out[0]], ptr[o->in[0]], (size_t)stg_bytes(x),
                                        cudaMemcpyDeviceToDevice, c->stream));
        return 0;
    }
    (void)A;
    return b ? transpose_launch<bf16>(c, ptr[o->in[0]], ptr[o->out[0]], N0, M, N1, C, total, err)
             : transpose_launch<float>(c, ptr[o->in[0]], ptr[o->out[0]], N0, M, N1, C, total, err);
}

// x (rows, H, Dh) -> y (rows, H n, Dh); one thread per output element.
template <typename T>
__global__ void repeat_kv_kernel(const T *x, T *y, int64_t H, int64_t n, int64_t Dh, int64_t total) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t d = idx % Dh, r = idx / Dh;
        int64_t h = r % (H * n), row = r / (H * n);
        y[idx] = x[(row * H + h / n) * Dh + d];
    }
}

// dy (rows, H n, Dh) -> dx (rows, H, Dh); one thread per dx element, the n copies summed in order.
template <typename T>
__global__ void repeat_kv_bwd_kernel(const T *dy, T *dx, int64_t H, int64_t n, int64_t Dh, int64_t total) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t d = idx % Dh, r = idx / Dh; // r = row H + h
        const T *src = dy + (r * n) * Dh + d;
        float acc = 0.0f;
        for (int64_t c = 0; c < n; c++) acc += cu_f(src[c * Dh]);
        dx[idx] = cu_t<T>(acc);
    }
}

template <typename T>
static int repeat_kv_launch(stg_cuda *c, const void *in, void *out, int64_t H, int64_t n, int64_t Dh, int64_t total,
                            bool bwd, stg_err *err) {
    if (bwd) {
        repeat_kv_bwd_kernel<T><<<cuda_blocks(c, total, 256), 256, 0, c->stream>>>((const T *)in, (T *)out, H, n, Dh, total);
        CUDA_LAUNCH_CHECK(err, "repeat_kv_bwd_kernel");
    } else {
        repeat_kv_kernel<T><<<cuda_blocks(c, total, 256), 256, 0, c->stream>>>((const T *)in, (T *)out, H, n, Dh, total);
        CUDA_LAUNCH_CHECK(err, "repeat_kv_kernel");
    }
    return 0;
}

// Forward: x (B, S, H, Dh) -> y (B, S, H n, Dh); backward: dy (B, S, H n, Dh) -> dx (B, S, H, Dh).
static int repeat_kv_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, bool bwd, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[bwd ? o->out[0] : o->in[0]], *y = &g->t[bwd ? o->in[0] : o->out[0]];
    int b = cuda_same_float(g, o, o->out[0], o->in[0], err);
    if (b < 0) return -1;
    int64_t n = o->a.repeat_kv.n;
    if (x->ndim != 4 || y->ndim != 4 || n < 1 || y->shape[2] != x->shape[2] * n || cuda_numel(y) != cuda_numel(x) * n)
        return stg_errf(err, "repeat_kv: %s and %s do not match n=%lld", x->name, y->name, (long long)n);
    if (ptr[o->in[0]] == ptr[o->out[0]]) return stg_errf(err, "repeat_kv cannot run in place");
    int64_t total = cuda_numel(bwd ? x : y);
    if (total == 0) return 0;
    return b ? repeat_kv_launch<bf16>(c, ptr[o->in[0]], ptr[o->out[0]], x->shape[2], n, x->shape[3], total, bwd, err)
             : repeat_kv_launch<float>(c, ptr[o->in[0]], ptr[o->out[0]], x->shape[2], n, x->shape[3], total, bwd, err);
}

extern "C" int cuda_run_repeat_kv(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return repeat_kv_run(c, g, op, ptr, false, err);
}

extern "C" int cuda_run_repeat_kv_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return repeat_kv_run(c, g, op, ptr, true, err);
}

// ---- records ------------------------------------------------------------------------------------

// ---- split and concat: the last dim cut into n equal parts ----------------------------------------
// Up to STG_MAX_OUT part pointers by value; one thread per element of the whole (rows, n m), or per
// 16 bytes of it where the shapes and pointers allow.
struct cu_parts {
    void *p[STG_MAX_OUT];
};

template <typename T, bool SPLIT>
__global__ void split_kernel(T *whole, cu_parts parts, int n, int64_t m, int64_t total) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t r = idx / (n * m), c = idx % (n * m);
        int i = (int)(c / m);
        T *part = (T *)parts.p[i] + r * m + c % m;
        if (SPLIT) *part = whole[idx];
        else whole[idx] = *part;
    }
}

// The same copy 16 bytes at a time (a part's row a whole number of 16-byte pieces, every pointer
// aligned, fewer than 2^32 pieces): one thread per piece, 32-bit index arithmetic.
template <bool SPLIT> __global__ void split16_kernel(uint4 *whole, cu_parts parts, unsigned n, unsigned mv, unsigned total) {
    unsigned stride = gridDim.x * blockDim.x;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        unsigned r = idx / (n * mv), c = idx - r * (n * mv), i = c / mv;
        uint4 *part = (uint4 *)parts.p[i] + (size_t)r * mv + (c - i * mv);
        if (SPLIT) *part = whole[idx];
        else whole[idx] = *part;
    }
}

// whole (rows, n m) <-> parts[i] (rows, m); split: whole -> parts
static int split_launch(stg_cuda *c, int bf, void *whole, const cu_parts &parts, int n, int64_t m, int64_t total, bool split,
                        stg_err *err) {
    if (total == 0) return 0;
    const int64_t per = bf ? 8 : 4; // elements in 16 bytes
    bool vec = m % per == 0 && total / per < ((int64_t)1 << 32) && cu_aligned(whole, 16);
    for (int i = 0; vec && i < n; i++) vec = cu_aligned(parts.p[i], 16);
    if (vec) {
        unsigned tv = (unsigned)(total / per), blocks = cuda_blocks(c, tv, 256);
        split ? split16_kernel<true><<<blocks, 256, 0, c->stream>>>((uint4 *)whole, parts, (unsigned)n, (unsigned)(m / per), tv)
              : split16_kernel<false><<<blocks, 256, 0, c->stream>>>((uint4 *)whole, parts, (unsigned)n, (unsigned)(m / per), tv);
        CUDA_LAUNCH_CHECK(err, "split16_kernel");
        return 0;
    }
    unsigned blocks = cuda_blocks(c, total, 256);
    if (bf)
        split ? split_kernel<bf16, true><<<blocks, 256, 0, c->stream>>>((bf16 *)whole, parts, n, m, total)
              : split_kernel<bf16, false><<<blocks, 256, 0, c->stream>>>((bf16 *)whole, parts, n, m, total);
    else
        split ? split_kernel<float, true><<<blocks, 256, 0, c->stream>>>((float *)whole, parts, n, m, total)
              : split_kernel<float, false><<<blocks, 256, 0, c->stream>>>((float *)whole, parts, n, m, total);
    CUDA_LAUNCH_CHECK(err, "split_kernel");
    return 0;
}

extern "C" int cuda_run_split(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int b = cuda_is_bf16(g, o, o->in[0], err);
    if (b < 0) return -1;
    int n = o->n_out;
    if (n < 1 || n > STG_MAX_OUT || cuda_last(x) % n) return stg_errf(err, "split: %s cannot be cut in %d parts", x->name, n);
    int64_t m = cuda_last(x) / n;
    cu_parts parts;
    for (int i = 0; i < n; i++) {
        if (cuda_same_float(g, o, o->out[i], o->in[0], err) < 0) return -1;
        if (cuda_numel(&g->t[o->out[i]]) != cuda_rows(x) * m) return stg_errf(err, "split: %s has the wrong size", g->t[o->out[i]].name);
        parts.p[i] = ptr[o->out[i]];
    }
    return split_launch(c, b, ptr[o->in[0]], parts, n, m, cuda_numel(x), true, err);
}

extern "C" int cuda_run_concat(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]], *y = &g->t[o->out[0]];
    int b = cuda_is_bf16(g, o, o->out[0], err);
    if (b < 0) return -1;
    int n = o->n_in;
    if (n < 1 || n > STG_MAX_OUT || cuda_numel(y) != n * cuda_numel(x)) return stg_errf(err, "concat: %s has the wrong size", y->name);
    cu_parts parts;
    for (int i = 0; i < n; i++) {
        if (cuda_same_float(g, o, o->in[i], o->out[0], err) < 0) return -1;
        if (cuda_numel(&g->t[o->in[i]]) != cuda_numel(x)) return stg_errf(err, "concat: %s has the wrong size", g->t[o->in[i]].name);
        parts.p[i] = (void *)ptr[o->in[i]];
    }
    return split_launch(c, b, ptr[o->out[0]], parts, n, cuda_last(x), cuda_numel(y), false, err);
}

const cuda_rec stg_cuda_split = {cuda_run_split, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_concat = {cuda_run_concat, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_reshape = {cuda_run_reshape, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_transpose = {cuda_run_transpose, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_repeat_kv = {cuda_run_repeat_kv, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_repeat_kv_bwd = {cuda_run_repeat_kv_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
