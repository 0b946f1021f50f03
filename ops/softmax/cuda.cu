// The causal mask and softmax over the last dim (forward and backward). Softmax: one block per
// row, max and sum reduced in fp32 in a fixed order. Every kernel reads an element before the same
// thread writes it, and a row's reductions finish before any of it is written, so the output may
// alias the input (in place).
#include "ops/cuda/common.cuh"

// x (outer, Sq, Sk) -> y: fill where j > i + (Sk - Sq), else x.
template <typename T>
__global__ void causal_mask_kernel(const T *x, T *y, int64_t n, int64_t Sq, int64_t Sk, float fill) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        int64_t j = idx % Sk, i = (idx / Sk) % Sq;
        if (j > i + (Sk - Sq))
            cu_st(y, idx, fill);
        else
            y[idx] = x[idx];
    }
}

extern "C" int cuda_run_causal_mask(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int b = cuda_same_float(g, o, o->out[0], o->in[0], err);
    if (b < 0) return -1;
    if (x->ndim < 2) return stg_errf(err, "tensor %s must be (..., Sq, Sk)", x->name);
    int64_t n = cuda_numel(x), Sq = x->shape[x->ndim - 2], Sk = x->shape[x->ndim - 1];
    if (n == 0) return 0;
    float fill = (float)o->a.mask.fill;
    unsigned blocks = cuda_blocks(c, n, 256);
    if (b)
        causal_mask_kernel<bf16><<<blocks, 256, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], (bf16 *)ptr[o->out[0]], n,
                                                                Sq, Sk, fill);
    else
        causal_mask_kernel<float><<<blocks, 256, 0, c->stream>>>((const float *)ptr[o->in[0]],
                                                                 (float *)ptr[o->out[0]], n, Sq, Sk, fill);
    CUDA_LAUNCH_CHECK(err, "causal_mask_kernel");
    return 0;
}

// x (rows, N) -> y (rows, N). A row of only -inf gives zeros.
template <typename T> __global__ void softmax_kernel(const T *x, T *y, int64_t N) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * N;
    T *yr = y + r * N;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) mx = fmaxf(mx, cu_ld(xr, j));
    mx = cu_block_max(mx);
    if (mx == -INFINITY) {
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) cu_st(yr, j, 0.0f);
        return;
    }
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) s += expf(cu_ld(xr, j) - mx);
    float inv = 1.0f / cu_block_sum(s);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) cu_st(yr, j, expf(cu_ld(xr, j) - mx) * inv);
}

// y, dy (rows, N) -> dx = y (dy - sum(dy y))
template <typename T> __global__ void softmax_bwd_kernel(const T *y, const T *dy, T *dx, int64_t N) {
    int64_t r = blockIdx.x;
    const T *yr = y + r * N, *dyr = dy + r * N;
    T *dxr = dx + r * N;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) dot += cu_ld(yr, j) * cu_ld(dyr, j);
    dot = cu_block_sum(dot);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) cu_st(dxr, j, cu_ld(yr, j) * (cu_ld(dyr, j) - dot));
}

static int softmax_check(const stg_graph *g, const stg_op *o, stg_err *err) {
    int b = cuda_is_bf16(g, o, o->in[0], err);
    if (b < 0) return -1;
    int64_t n = cuda_numel(&g->t[o->in[0]]);
    for (int i = 0; i < o->n_in + o->n_out; i++) {
        int t = i < o->n_in ? o->in[i] : o->out[i - o->n_in];
        if (cuda_same_float(g, o, t, o->in[0], err) < 0) return -1;
        if (cuda_numel(&g->t[t]) != n) return stg_errf(err, "tensor %s does not match %s", g->t[t].name, g->t[o->in[0]].name);
    }
    return b;
}

extern "C" int cuda_run_softmax(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = softmax_check(g, o, err);
    if (b < 0) return -1;
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), N = cuda_last(x);
    if (rows == 0 || N == 0) return 0;
    int threads = cu_row_threads(N, 8);
    if (b)
        softmax_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>((const bf16 *)ptr[o->in[0]],
                                                                        (bf16 *)ptr[o->out[0]], N);
    else
        softmax_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>((const float *)ptr[o->in[0]],
                                                                         (float *)ptr[o->out[0]], N);
    CUDA_LAUNCH_CHECK(err, "softmax_kernel");
    return 0;
}

extern "C" int cuda_run_softmax_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = softmax_check(g, o, err);
    if (b < 0) return -1;
    const stg_tensor *y = &g->t[o->in[0]];
    int64_t rows = cuda_rows(y), N = cuda_last(y);
    if (rows == 0 || N == 0) return 0;
    int threads = cu_row_threads(N, 8);
    if (b)
        softmax_bwd_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const bf16 *)ptr[o->in[0]], (const bf16 *)ptr[o->in[1]], (bf16 *)ptr[o->out[0]], N);
    else
        softmax_bwd_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const float *)ptr[o->in[0]], (const float *)ptr[o->in[1]], (float *)ptr[o->out[0]], N);
    CUDA_LAUNCH_CHECK(err, "softmax_bwd_kernel");
    return 0;
}

// ---- records ------------------------------------------------------------------------------------

const cuda_rec stg_cuda_causal_mask = {cuda_run_causal_mask, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_softmax = {cuda_run_softmax, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_softmax_bwd = {cuda_run_softmax_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
