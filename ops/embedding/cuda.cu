// Token embedding lookup and its backward.
//
// Token ids are not checked here: reporting a bad id from a kernel would need a host sync inside
// the step. The data loader validates every id before upload; the kernels only guard against an
// id outside [0, V): the forward writes a zero row for it, the backward skips it. Neither crashes.
#include "ops/cuda/common.cuh"

#include <cub/device/device_radix_sort.cuh>

// tok (n), W (V, D) -> y (n, D)
template <typename T>
__global__ void embedding_fwd_kernel(const int32_t *tok, const T *W, T *y, int64_t n, int64_t V, int64_t D) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
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

// ---- backward through a sort ---------------------------------------------------------------------
// keys[i] = tok[i] (V for an id outside [0, V)), vals[i] = i; a stable radix sort (CUB) orders the
// token indices by id, ascending index within an id; then one warp per dW row v finds its run of
// the sorted keys by binary search and sums those dy rows in that order (zero when none). Every
// step is deterministic (a stable sort has one result), no float atomics.
struct emb_layout {
    size_t keys_in, vals_in, keys_out, vals_out, temp, temp_bytes, total;
    int end_bit;
};

static size_t emb_al(size_t n) { return (n + 255) & ~(size_t)255; }

// The scratch layout for n tokens and V rows; temp_bytes from CUB (host-only query). -1 on error.
static int emb_plan(int64_t n, int64_t V, emb_layout *L) {
    int bits = 1;
    while (bits < 31 && ((int64_t)1 << bits) <= V) bits++; // keys in [0, V]
    L->end_bit = bits;
    size_t temp = 0;
    if (cub::DeviceRadixSort::SortPairs(NULL, temp, (const int *)NULL, (int *)NULL, (const int *)NULL, (int *)NULL,
                                        (int64_t)n, 0, bits) != cudaSuccess)
        return -1;
    size_t b = emb_al((size_t)n * sizeof(int));
    L->keys_in = 0;
    L->vals_in = b;
    L->keys_out = 2 * b;
    L->vals_out = 3 * b;
    L->temp = 4 * b;
    L->temp_bytes = temp;
    L->total = 4 * b + emb_al(temp);
    return 0;
}

extern "C" size_t cuda_embedding_bwd_work_bytes(const stg_graph *g, int op) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *tok = &g->t[o->in[0]], *dW = &g->t[o->out[0]];
    if (dW->ndim != 2) return 0;
    emb_layout L;
    if (emb_plan(cuda_numel(tok), dW->shape[0], &L)) return 0;
    return L.total;
}

__global__ void emb_keys_kernel(const int32_t *tok, int *keys, int *vals, int64_t n, int64_t V) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int32_t t = tok[i];
        keys[i] = (t >= 0 && t < V) ? t : (int)V;
        vals[i] = (int)i;
    }
}

// First index in keys[0, n) (ascending) whose key is >= v.
__device__ __forceinline__ int64_t emb_lower(const int *keys, int64_t n, int v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (__ldg(keys + mid) < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// One warp per dW row. VEC: D % 4 == 0 and both pointers aligned for 4-element access. acc: add
// to what dW holds (gradient accumulation, or a tied head's gradient as the addend) instead of writing
// it; then the rows no token reads are left alone: with Llama 3's tied 128256 x 2048 head and 4096
// tokens a step at most 4096 rows change, and reading and writing back the rest was 2.1 GB a step.
template <typename T, typename TD, bool VEC>
__global__ void emb_rows_kernel(const int *keys, const int *vals, const T *dy, TD *dW, int64_t n, int64_t V,
                                int64_t D, bool acc) {
    int64_t v = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (v >= V) return;
    int64_t lo = 0, hi = 0;
    if (lane == 0) {
        lo = emb_lower(keys, n, (int)v);
        hi = emb_lower(keys + lo, n - lo, (int)v + 1) + lo;
    }
    lo = __shfl_sync(0xffffffffu, lo, 0);
    hi = __shfl_sync(0xffffffffu, hi, 0);
    if (acc && lo == hi) return; // no token has id v: the row keeps what dW holds (the same bits as adding nothing)
    TD *out = dW + v * D;
    if (VEC) {
        for (int64_t d0 = 0; d0 < D; d0 += 32 * 4 * 4) { // 4 float4-sized groups per lane per pass
            float4 sum[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int64_t d = d0 + ((int64_t)u * 32 + lane) * 4;
                sum[u] = acc && d < D ? cu_load4(out + d) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            for (int64_t j = lo; j < hi; j++) {
                const T *row = dy + (int64_t)__ldg(vals + j) * D;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    int64_t d = d0 + ((int64_t)u * 32 + lane) * 4;
                    if (d < D) {
                        float4 g = cu_load4(row + d);
                        sum[u].x += g.x, sum[u].y += g.y, sum[u].z += g.z, sum[u].w += g.w;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int64_t d = d0 + ((int64_t)u * 32 + lane) * 4;
                if (d < D) cu_store4(out + d, sum[u]);
            }
        }
    } else {
        for (int64_t d = lane; d < D; d += 32) {
            float sum = acc ? cu_ld(out, d) : 0.0f;
            for (int64_t j = lo; j < hi; j++) sum += cu_ld(dy, (int64_t)__ldg(vals + j) * D + d);
            cu_st(out, d, sum);
        }
    }
}

template <typename T, typename TD>
static int embedding_bwd_launch(stg_cuda *c, const int32_t *tok, const void *dy, void *dW, int64_t n, int64_t V,
                                int64_t D, bool acc, stg_err *err) {
    if (n > INT32_MAX || V >= INT32_MAX) return stg_errf(err, "embedding_bwd: %lld tokens or %lld rows: too many",
                                                         (long long)n, (long long)V);
    emb_layout L;
    if (n > 0) {
        if (emb_plan(n, V, &L)) return stg_errf(err, "embedding_bwd: sizing the sort failed");
        if (!c->work || c->work_bytes < L.total)
            return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
        char *w = (char *)c->work;
        int *keys_in = (int *)(w + L.keys_in), *vals_in = (int *)(w + L.vals_in);
        int *keys_out = (int *)(w + L.keys_out), *vals_out = (int *)(w + L.vals_out);
        emb_keys_kernel<<<cuda_blocks(c, n, 256), 256, 0, c->stream>>>(tok, keys_in, vals_in, n, V);
        CUDA_LAUNCH_CHECK(err, "emb_keys_kernel");
        size_t tb = L.temp_bytes;
        cudaError_t e = cub::DeviceRadixSort::SortPairs(w + L.temp, tb, keys_in, keys_out, vals_in, vals_out, n, 0,
                                                         L.end_bit, c->stream);
        if (e != cudaSuccess) return stg_errf(err, "embedding_bwd: radix sort: %s", cudaGetErrorString(e));
        CUDA_LAUNCH_CHECK(err, "cub radix sort");
        bool vec = D % 4 == 0 && cu_aligned(dy, 4 * sizeof(T)) && cu_aligned(dW, 4 * sizeof(TD));
        unsigned grid = (unsigned)((V + 7) / 8);
        if (vec)
            emb_rows_kernel<T, TD, true><<<grid, 256, 0, c->stream>>>(keys_out, vals_out, (const T *)dy, (TD *)dW, n,
                                                                     V, D, acc);
        else
            emb_rows_kernel<T, TD, false><<<grid, 256, 0, c->stream>>>(keys_out, vals_out, (const T *)dy, (TD *)dW,
                                                                      n, V, D, acc);
        CUDA_LAUNCH_CHECK(err, "emb_rows_kernel");
        return 0;
    }
    // No tokens: dW = 0, or unchanged when accumulating (the kernel with an empty run per row).
    bool vec = D % 4 == 0 && cu_aligned(dW, 4 * sizeof(TD));
    unsigned grid = (unsigned)((V + 7) / 8);
    if (vec)
        emb_rows_kernel<T, TD, true><<<grid, 256, 0, c->stream>>>(NULL, NULL, (const T *)dy, (TD *)dW, 0, V, D, acc);
    else
        emb_rows_kernel<T, TD, false><<<grid, 256, 0, c->stream>>>(NULL, NULL, (const T *)dy, (TD *)dW, 0, V, D, acc);
    CUDA_LAUNCH_CHECK(err, "emb_rows_kernel");
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
    bool acc = cuda_accumulating(c, o, 0);
    const int k = ops_addend_of(o); // an addend: dW holds it first (dW took its buffer, or a copy)
    if (k > 0) {
        if (cuda_numel(&g->t[o->in[k]]) != V * D || g->t[o->in[k]].dtype != dW->dtype)
            return stg_errf(err, "addend %s must match %s", g->t[o->in[k]].name, dW->name);
        if (ptr[o->in[k]] != ptr[o->out[0]])
            CUDA_CHECK(err, cudaMemcpyAsync(ptr[o->out[0]], ptr[o->in[k]], (size_t)(V * D) * (db ? 2 : 4), cudaMemcpyDeviceToDevice,
                                            c->stream));
        acc = true;
    }
    if (b)
        return db ? embedding_bwd_launch<bf16, bf16>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, acc, err)
                  : embedding_bwd_launch<bf16, float>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, acc, err);
    return db ? embedding_bwd_launch<float, bf16>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, acc, err)
              : embedding_bwd_launch<float, float>(c, tp, ptr[o->in[1]], ptr[o->out[0]], n, V, D, acc, err);
}

// ---- position embedding -------------------------------------------------------------------------
// pos_embedding: y (outer, S, D) = x + W[s], element by element (y may be x's buffer).
template <typename T>
__global__ void pos_embedding_kernel(const T *x, const T *W, T *y, int64_t S, int64_t D, int64_t total) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t sd = i % (S * D);
        cu_st(y, i, cu_ld(x, i) + cu_ld(W, sd));
    }
}

// pos_embedding_bwd: dW (P, D): one thread per element; rows s < S sum dy[o, s, :] over o in
// order, the rest are zero. Deterministic, no atomics.
template <typename T>
__global__ void pos_embedding_bwd_kernel(const T *dy, void *dW, int dw_bf16, int64_t outer, int64_t S, int64_t P, int64_t D) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < P * D; i += stride) {
        float acc = 0.0f;
        if (i < S * D)
            for (int64_t o = 0; o < outer; o++) acc += cu_ld(dy, o * S * D + i);
        cu_std(dW, dw_bf16, i, acc);
    }
}

extern "C" int cuda_run_pos_embedding(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]], *W = &g->t[o->in[1]];
    if (x->ndim < 2 || W->ndim != 2) return stg_errf(err, "pos_embedding: %s must be (..., S, D) and %s (P, D)", x->name, W->name);
    int b = cuda_same_float(g, o, o->in[1], o->in[0], err);
    if (b < 0 || cuda_same_float(g, o, o->out[0], o->in[0], err) < 0) return -1;
    int64_t S = x->shape[x->ndim - 2], D = cuda_last(x), n = cuda_numel(x);
    if (W->shape[1] != D || W->shape[0] < S) return stg_errf(err, "pos_embedding: table %s does not fit %s", W->name, x->name);
    if (n == 0) return 0;
    unsigned blocks = cuda_blocks(c, n, 256);
    if (b)
        pos_embedding_kernel<bf16><<<blocks, 256, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], (const bf16 *)ptr[o->in[1]],
                                                                  (bf16 *)ptr[o->out[0]], S, D, n);
    else
        pos_embedding_kernel<float><<<blocks, 256, 0, c->stream>>>((const float *)ptr[o->in[0]], (const float *)ptr[o->in[1]],
                                                                   (float *)ptr[o->out[0]], S, D, n);
    CUDA_LAUNCH_CHECK(err, "pos_embedding_kernel");
    return 0;
}

extern "C" int cuda_run_pos_embedding_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *dy = &g->t[o->in[0]], *dW = &g->t[o->out[0]];
    if (dy->ndim < 2 || dW->ndim != 2)
        return stg_errf(err, "pos_embedding_bwd: %s must be (..., S, D) and %s (P, D)", dy->name, dW->name);
    int b = cuda_is_bf16(g, o, o->in[0], err);
    int db = b < 0 ? -1 : cuda_is_bf16(g, o, o->out[0], err);
    if (db < 0) return -1;
    int64_t S = dy->shape[dy->ndim - 2], D = cuda_last(dy), P = dW->shape[0];
    if (dW->shape[1] != D || P < S) return stg_errf(err, "pos_embedding_bwd: %s does not fit %s", dW->name, dy->name);
    if (P * D == 0) return 0;
    int64_t outer = S * D ? cuda_numel(dy) / (S * D) : 0;
    unsigned blocks = cuda_blocks(c, P * D, 256);
    if (b)
        pos_embedding_bwd_kernel<bf16><<<blocks, 256, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], ptr[o->out[0]], db, outer, S,
                                                                      P, D);
    else
        pos_embedding_bwd_kernel<float><<<blocks, 256, 0, c->stream>>>((const float *)ptr[o->in[0]], ptr[o->out[0]], db, outer,
                                                                       S, P, D);
    CUDA_LAUNCH_CHECK(err, "pos_embedding_bwd_kernel");
    return 0;
}

// ---- records ------------------------------------------------------------------------------------

static int prep_embedding_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    *work = cuda_embedding_bwd_work_bytes(g, op);
    return 0;
}

const cuda_rec stg_cuda_embedding = {cuda_run_embedding, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_embedding_bwd = {cuda_run_embedding_bwd, prep_embedding_bwd, NULL, NULL, CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_pos_embedding = {cuda_run_pos_embedding, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_pos_embedding_bwd = {cuda_run_pos_embedding_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
