// Mean cross-entropy over the rows whose target is not -1 (ignored rows: --doc-loss-mask). Forward:
// one block per row writes the row's log-sum-exp and its loss term (in double, into c->work); one
// block then sums the terms and counts the kept rows in a fixed order. The backward counts the kept
// rows (one block, into c->work) and writes (softmax - onehot) / kept, 0 on ignored rows, one block
// per row; dlogits may alias logits. Every row ignored: loss 0, gradient 0.
//
// Targets are not checked here (the data loader validates them before upload; a kernel cannot
// report without a host sync): a target outside [0, V) other than -1 makes the loss NaN, so it
// cannot go unnoticed, and the backward leaves out that row's one-hot term. Nothing crashes.
#include "ops/cuda/common.cuh"

extern "C" size_t cuda_cross_entropy_work_bytes(const stg_graph *g, int op) {
    return (size_t)cuda_rows(&g->t[g->ops[op].in[0]]) * sizeof(double);
}

// logits (rows, V), tgt (rows) -> lse (rows), term (rows) = lse - logit[tgt]
template <typename T>
__global__ void ce_row_kernel(const T *x, const int32_t *tgt, void *lse, int lb, double *term, int64_t V) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * V;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, cu_ld(xr, j));
    mx = cu_block_max(mx);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(cu_ld(xr, j) - mx);
    s = cu_block_sum(s);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        cu_std(lse, lb, r, l);
        int64_t t = tgt[r];
        term[r] = (t >= 0 && t < V) ? (double)l - (double)cu_ld(xr, t) : t == -1 ? 0.0 : (double)NAN;
    }
}

// loss () = sum(term) / kept rows; one block, each thread sums a fixed stride, then a fixed tree.
__global__ void ce_mean_kernel(const double *term, const int32_t *tgt, void *loss, int lb, int64_t rows) {
    double s = 0.0, n = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        s += term[r];
        n += tgt[r] != -1 ? 1.0 : 0.0;
    }
    s = cu_block_sum(s);
    n = cu_block_sum(n);
    if (threadIdx.x == 0) cu_std(loss, lb, 0, n > 0.0 ? (float)(s / n) : 0.0f);
}

// *inv = 1 / kept rows (0 when none); one block.
__global__ void ce_count_kernel(const int32_t *tgt, float *inv, int64_t rows) {
    double n = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) n += tgt[r] != -1 ? 1.0 : 0.0;
    n = cu_block_sum(n);
    if (threadIdx.x == 0) *inv = n > 0.0 ? (float)(1.0 / n) : 0.0f;
}

// logits, tgt, lse -> dlogits = (exp(x - lse) - onehot(tgt)) / kept rows (0 for an ignored row)
template <typename T>
__global__ void ce_bwd_kernel(const T *x, const int32_t *tgt, const void *lse, int lb, T *dx, int64_t V,
                              const float *inv) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * V;
    T *dr = dx + r * V;
    float l = cu_ldd(lse, lb, r);
    int64_t t = tgt[r];
    const float inv_rows = t == -1 ? 0.0f : *inv;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(cu_ld(xr, j) - l);
        cu_st(dr, j, (p - (j == t ? 1.0f : 0.0f)) * inv_rows);
    }
}

static int ce_check(const stg_graph *g, const stg_op *o, stg_err *err) {
    const stg_tensor *x = &g->t[o->in[0]], *t = &g->t[o->in[1]];
    if (t->dtype != STG_I32) return stg_errf(err, "targets %s must be i32", t->name);
    if (cuda_numel(t) != cuda_rows(x)) return stg_errf(err, "targets %s must have one id per row of %s", t->name, x->name);
    return cuda_is_bf16(g, o, o->in[0], err);
}

extern "C" int cuda_run_cross_entropy(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = ce_check(g, o, err);
    int lossb = b < 0 ? -1 : cuda_is_bf16(g, o, o->out[0], err);
    int lb = lossb < 0 ? -1 : cuda_is_bf16(g, o, o->out[1], err);
    if (lb < 0) return -1;
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), V = cuda_last(x);
    if (cuda_numel(&g->t[o->out[1]]) != rows) return stg_errf(err, "%s must have one value per row", g->t[o->out[1]].name);
    if (rows == 0) return 0;
    double *term = (double *)c->work;
    if (!term || c->work_bytes < (size_t)rows * sizeof(double))
        return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
    int threads = cu_row_threads(V, 16);
    if (b)
        ce_row_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>((const bf16 *)ptr[o->in[0]],
                                                                       (const int32_t *)ptr[o->in[1]], ptr[o->out[1]],
                                                                       lb, term, V);
    else
        ce_row_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>((const float *)ptr[o->in[0]],
                                                                        (const int32_t *)ptr[o->in[1]],
                                                                        ptr[o->out[1]], lb, term, V);
    CUDA_LAUNCH_CHECK(err, "ce_row_kernel");
    ce_mean_kernel<<<1, 1024, 0, c->stream>>>(term, (const int32_t *)ptr[o->in[1]], ptr[o->out[0]], lossb, rows);
    CUDA_LAUNCH_CHECK(err, "ce_mean_kernel");
    return 0;
}

extern "C" int cuda_run_cross_entropy_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = ce_check(g, o, err);
    int lb = b < 0 ? -1 : cuda_is_bf16(g, o, o->in[2], err);
    if (lb < 0 || cuda_same_float(g, o, o->out[0], o->in[0], err) < 0) return -1;
    const stg_tensor *x = &g->t[o->in[0]];
    int64_t rows = cuda_rows(x), V = cuda_last(x);
    if (cuda_numel(&g->t[o->in[2]]) != rows) return stg_errf(err, "%s must have one value per row", g->t[o->in[2]].name);
    if (rows == 0) return 0;
    int threads = cu_row_threads(V, 16);
    float *inv = (float *)c->work;
    if (!inv || c->work_bytes < sizeof(float)) return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
    ce_count_kernel<<<1, 1024, 0, c->stream>>>((const int32_t *)ptr[o->in[1]], inv, rows);
    CUDA_LAUNCH_CHECK(err, "ce_count_kernel");
    if (b)
        ce_bwd_kernel<bf16><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const bf16 *)ptr[o->in[0]], (const int32_t *)ptr[o->in[1]], ptr[o->in[2]], lb, (bf16 *)ptr[o->out[0]], V, inv);
    else
        ce_bwd_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>(
            (const float *)ptr[o->in[0]], (const int32_t *)ptr[o->in[1]], ptr[o->in[2]], lb, (float *)ptr[o->out[0]], V,
            inv);
    CUDA_LAUNCH_CHECK(err, "ce_bwd_kernel");
    return 0;
}

// ---- records ------------------------------------------------------------------------------------

static int prep_cross_entropy(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    *work = cuda_cross_entropy_work_bytes(g, op);
    return 0;
}

static int prep_cross_entropy_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                                  size_t *work, stg_err *err) {
    *work = sizeof(float); // 1 / kept rows
    return 0;
}

const cuda_rec stg_cuda_cross_entropy = {cuda_run_cross_entropy, prep_cross_entropy, NULL, NULL, CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_cross_entropy_bwd = {cuda_run_cross_entropy_bwd, prep_cross_entropy_bwd, NULL, NULL, CUDA_REC_MAIN, NULL};
