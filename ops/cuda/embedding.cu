// Token embedding lookup and its backward.
//
// Token ids are not checked here: reporting a bad id from a kernel would need a host sync inside
// the step. The data loader validates every id before upload; the kernels only guard against an
// id outside [0, V): the forward writes a zero row for it, the backward skips it. Neither crashes.
#include "ops/cuda/common.cuh"

// tok (n), W (V, D) -> y (n, D)
template <typename T>
__global__ void embedding_fwd_kernel(const int32_t *tok, const T *W, T *y, int64_t n, int64_t V, int64_t D) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, total = n * D;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        int64_t i = idx / D, d = idx % D;
        int64_t t = tok[i];
        if (t >= 0 && t < V)
            y[idx] = W[t * D + d];
        else
            cu_st(y, idx, 0.0f);
    }
}

// tok (n), dy (n, D) -> dW (V, D). Block (column block, vocab block) owns dW rows [v0, v1) and
// columns [d0, d0 + blockDim): each thread zeroes its column of those rows, then walks all tokens
// in order and adds dy[i][d] into dW[tok[i]][d] for the tokens it owns. Each dW element is summed
// by one thread in token order from zero: deterministic, no atomics, each dy row read once.
#define EMB_TOK_TILE 1024

template <typename T, typename TD>
__global__ void embedding_bwd_kernel(const int32_t *tok, const T *dy, TD *dW, int64_t n, int64_t V, int64_t D,
                                     int64_t vblocks) {
    __shared__ int32_t st[EMB_TOK_TILE];
    int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t v0 = V * blockIdx.y / vblocks, v1 = V * (blockIdx.y + 1) / vblocks;
    if (d < D)
        for (int64_t v = v0; v < v1; v++) cu_st(dW, v * D + d, 0.0f);
    for (int64_t base = 0; base < n; base += EMB_TOK_TILE) {
        int64_t m = n - base < EMB_TOK_TILE ? n - base : EMB_TOK_TILE;
        __syncthreads();
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) st[k] = tok[base + k];
        __syncthreads();
        if (d >= D) continue;
        for (int64_t k = 0; k < m; k++) {
            int64_t t = st[k];
            if (t < v0 || t >= v1) continue; // also skips ids outside [0, V)
            int64_t o = t * D + d;
            cu_st(dW, o, cu_ld(dW, o) + cu_ld(dy, (base + k) * D + d));
        }
    }
}

extern "C" int cuda_run_embedding(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *tok = &g->t[o->in[0]], *W = &g->t[o->in[1]];
    if (tok->dtype != STG_I32) return stg_errf(err, "token ids %s must be i32", tok->name);
    if (W->ndim != 2) return stg_errf(err, "weight %s must be (V, D)", W->name);
    int b = cuda_same_float(g, o, o->out[0], o->in[1], err);
    if (b < 0) return -1;
    int64_t n = cuda_numel(tok), V = W->shape[0], D = W->shape[1];
    if (cuda_numel(&g->t[o->out[0]]) != n * D) return stg_errf(err, "output %s does not match", g->t[o->out[0]].name);
    if (n * D == 0) return 0;
    unsigned blocks = cuda_blocks(c, n * D, 256);
    if (b)
        embedding_fwd_kernel<bf16><<<blocks, 256, 0, c->stream>>>((const int32_t *)ptr[o->in[0]],
                                                                  (const bf16 *)ptr[o->in[1]], (bf16 *)ptr[o->out[0]],
                                                                  n, V, D);
    else
        embedding_fwd_kernel<float><<<blocks, 256, 0, c->stream>>>((const int32_t *)ptr[o->in[0]],
                                                                   (const float *)ptr[o->in[1]],
                                                                   (float *)ptr[o->out[0]], n, V, D);
    CUDA_LAUNCH_CHECK(err, "embedding_fwd_kernel");
    return 0;
}

template <typename T, typename TD>
static int embedding_bwd_launch(stg_cuda *c, const int32_t *tok, const void *dy, void *dW, int64_t n, int64_t V,
                                int64_t D, stg_err *err) {
    int64_t vblocks = V < 512 ? V : 512;
    dim3 grid((unsigned)((D + 127) / 128), (unsigned)vblocks);
    embedding_bwd_kernel<T, TD><<<grid, 128, 0, c->stream>>>(tok, (const T *)dy, (TD *)dW, n, V, D, vblocks);
    CUDA_LAUNCH_CHECK(err, "embedding_bwd_kernel");
    return 0;
}

extern "C" int cuda_run_embedding_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *tok = &g->t[o->in[0]], *dW = &g->t[o->out[0]];
    if (tok->dtype != STG_I32) return stg_errf(err, "token ids %s must be i32", tok->name);
    if (dW->ndim != 2) return stg_errf(err, "gradient %s must be (V, D)", dW->name);
    int b = cuda_is_bf16(g, o, o->in[1], err);
    int db = b < 0 ? -1 : cuda_is_bf16(g, o, o->out[0], err);
    if (db < 0) return -1;
    int64_t n = cuda_numel(tok), V = dW->shape[0], D = dW->shape[1];
    if (cuda_numel(&g->t[o->in[1]]) != n * D) return stg_errf(err, "gradient %s does not match", g->t[o->in[1]].name);
    if (V * D == 0) return 0;
    const int32_t *tp = (const int32_t *)ptr[o->in[0]];
    if (b)
        return db ? embedding_bwd_launch<bf16, bf16>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, err)
                  : embedding_bwd_launch<bf16, float>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, err);
    return db ? embedding_bwd_launch<float, bf16>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, err)
              : embedding_bwd_launch<float, float>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, err);
}
