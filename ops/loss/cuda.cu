// Mean cross-entropy over the rows whose target is not -1 (ignored rows: --doc-loss-mask). Forward:
// one block per row writes the row's log-sum-exp (one pass, ce_row_lse) and its loss term (in double, into c->work); one
// block then sums the terms and counts the kept rows in a fixed order. The backward counts the kept
// rows (one block, into c->work) and writes (softmax - onehot) / kept, 0 on ignored rows, one block
// per row; dlogits may alias logits. Every row ignored: loss 0, gradient 0.
//
// linear_cross_entropy (the fused LM head, ops/loss/rules.c): logits made by cuBLASLt into the op's
// scratch output, a piece at a time. Forward, per chunk of rows: logits = x_c wᵀ, then the row
// kernel above (lse, loss terms); then the mean. When V is not a whole number of 16-byte pieces the
// forward's logit rows are padded to one inside the scratch (a piece then has a few rows fewer):
// cuBLASLt writes aligned rows and the row kernel reads them 16 bytes at a time (GPT-2's 50257). Backward, by blocks of vocabulary columns over all
// rows (the scratch's chunk x V elements hold (rows, vb) logits, vb = chunk x V / rows rounded down
// to a multiple of 8): logits = x w_bᵀ, dlogits in place, dw_b = dlogitsᵀ x (each row of dw written
// once), dx (+)= dlogits w_b (beta 0 for the first block, then 1; in fp32: into dx itself, or into
// the fp32 accumulator in the scratch when dx is bf16, converted at the end). Cutting rows instead
// would add into the whole (V, d) fp32 dw once per chunk: at the Llama 3.2 1B shape (128256 x
// 2048, 16 chunks) 32 GB of traffic, which made the fused step 25% slower than the plain one
// (docs/memory/2026-11-25-fused-head.txt). Only when the blocks would be narrower than 64 columns
// (a chunk= attribute of a few rows) does the backward walk row chunks, adding into dw. Every
// product is planned before the first step (two sizes at most: the full piece and the last).
// Where V >= 8 is not a multiple of 8, the last V mod 8 columns have products of their own (forward:
// per chunk; backward: a last, narrow block), so that the large products' vocabulary side is a
// multiple of 8: cuBLASLt chose kernels 5-6x slower otherwise (GPT-2's 50257).
//
// Targets are not checked here (the data loader validates them before upload; a kernel cannot
// report without a host sync): a target outside [0, V) other than -1 makes the loss NaN, so it
// cannot go unnoticed, and the backward leaves out that row's one-hot term. Nothing crashes.
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"

extern "C" size_t cuda_cross_entropy_work_bytes(const stg_graph *g, int op) {
    return (size_t)cuda_rows(&g->t[g->ops[op].in[0]]) * sizeof(double);
}

// A row's log-sum-exp in one pass: each thread keeps a running max and its sum of exponentials
// (rescaled when the max grows) over its elements, with 16-byte loads where the row is aligned (the
// last V mod N elements one by one); then
// the block's max, each thread's sum moved to it, and the block's sum in a fixed order. On every
// thread.
template <typename T> __device__ __forceinline__ float ce_row_lse(const T *xr, int64_t V) {
    constexpr int N = CU_VEC<T>::N;
    float m = -INFINITY, s = 0.0f;
    const int64_t nv = cu_aligned(xr, 16) ? V / N : 0; // 16-byte vectors, then the rest one by one
    for (int64_t j = (int64_t)threadIdx.x * N; j < nv * N; j += (int64_t)blockDim.x * N) {
        float v[N];
        cu_load16(xr + j, v);
        float lm = v[0];
#pragma unroll
        for (int e = 1; e < N; e++) lm = fmaxf(lm, v[e]);
        if (lm > m) s *= expf(m - lm), m = lm;
#pragma unroll
        for (int e = 0; e < N; e++) s += expf(v[e] - m);
    }
    for (int64_t j = nv * N + threadIdx.x; j < V; j += blockDim.x) {
        float v = cu_ld(xr, j);
        if (v > m) s *= expf(m - v), m = v;
        s += expf(v - m);
    }
    float M = cu_block_max(m);
    s = cu_block_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
    return M + logf(s);
}

// logits (rows, V; rows ld elements apart), tgt (rows) -> lse (rows), term (rows) = lse - logit[tgt]
template <typename T>
__global__ void ce_row_kernel(const T *x, const int32_t *tgt, void *lse, int lb, double *term, int64_t V, int64_t ld) {
    int64_t r = blockIdx.x;
    const T *xr = x + r * ld;
    float l = ce_row_lse(xr, V);
    if (threadIdx.x == 0) {
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

// *inv = factor / kept rows (0 when none; factor: the loss gradient, 1 / micro-batches when the
// step accumulates); one block.
__global__ void ce_count_kernel(const int32_t *tgt, float *inv, int64_t rows, float factor) {
    double n = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) n += tgt[r] != -1 ? 1.0 : 0.0;
    n = cu_block_sum(n);
    if (threadIdx.x == 0) *inv = n > 0.0 ? (float)((double)factor / n) : 0.0f;
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
    constexpr int N = CU_VEC<T>::N;
    if (V % N == 0 && cu_aligned(xr, 16) && cu_aligned(dr, 16)) { // 16-byte loads and stores (dx may be x)
        for (int64_t j = (int64_t)threadIdx.x * N; j < V; j += (int64_t)blockDim.x * N) {
            float v[N];
            cu_load16(xr + j, v);
#pragma unroll
            for (int e = 0; e < N; e++) v[e] = (expf(v[e] - l) - (j + e == t ? 1.0f : 0.0f)) * inv_rows;
            cu_store16(dr + j, v);
        }
        return;
    }
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
                                                                       lb, term, V, V);
    else
        ce_row_kernel<float><<<(unsigned)rows, threads, 0, c->stream>>>((const float *)ptr[o->in[0]],
                                                                        (const int32_t *)ptr[o->in[1]],
                                                                        ptr[o->out[1]], lb, term, V, V);
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
    double f = o->a.scale.factor != 0 ? o->a.scale.factor : 1.0; // the loss gradient (1 / micro-batches when accumulating)
    float *inv = (float *)c->work;
    if (!inv || c->work_bytes < sizeof(float)) return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
    ce_count_kernel<<<1, 1024, 0, c->stream>>>((const int32_t *)ptr[o->in[1]], inv, rows, (float)f);
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

// ---- linear_cross_entropy ------------------------------------------------------------------------

// One product of a chunk, in cuBLASLt's terms.
typedef struct lce_gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lce_gemm;

enum { LCE_LOGITS, LCE_DX, LCE_DW, LCE_NPROD };
#define LCE_TAIL_LD 8 // the backward's last vt < 8 columns of dlogits: their rows' stride in the scratch

typedef struct lce_plan {
    int bwd;                         // a backward form: _bwd (dx, dw), _dx or _dw
    int odx, odw, osc;               // the outputs dx, dw and the scratch (-1: the form makes none)
    int64_t rows, d, V, chunk, last; // last: the rows of the last chunk
    int64_t ld;                      // the forward's logits row stride in the scratch (V, or V padded to 16 bytes)
    int by_vocab;                    // backward: blocks of vb vocabulary columns (else row chunks)
    int64_t vb, vlast;               // the block width and the last block's
    int64_t vm, vt;                  // the vocabulary's first vm = V - vt columns (a multiple of 8) and the last vt < 8
    int ab, dxb, dwb, lb, lossb;     // bf16 flags: x, w and the scratch; dx; dw; lse; loss
    size_t align;                    // the byte alignment promised to cuBLASLt (checked at run)
    int t_in[4], t_out[3];           // the tensors it was prepared for
    lce_gemm g[2][LCE_NPROD];        // [full piece, last piece][product]
    lce_gemm gt[2][LCE_NPROD];       // the last vt columns' products: [full chunk, last chunk] (forward), [0] (blocks)
} lce_plan;

static void lce_gemm_free(lce_gemm *G) {
    if (G->desc) cublasLtMatmulDescDestroy(G->desc);
    if (G->la) cublasLtMatrixLayoutDestroy(G->la);
    if (G->lb) cublasLtMatrixLayoutDestroy(G->lb);
    if (G->lc) cublasLtMatrixLayoutDestroy(G->lc);
    memset(G, 0, sizeof *G);
}

static void lce_plan_free(void *state) {
    lce_plan *p = (lce_plan *)state;
    if (!p) return;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < LCE_NPROD; k++) {
            lce_gemm_free(&p->g[s][k]);
            lce_gemm_free(&p->gt[s][k]);
        }
    free(p);
}

// Row-major C (m, n) = op(A) (m, k) · op(B) (k, n), A stored (m, k) or (k, m) when ta, B stored
// (k, n) or (n, k) when tb, all dense. Column-major, that is Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt's A is our
// B, its B our A, its (m, n) our (n, m) (as in ops/matmul/cuda.cu); A's rows lda apart (0: dense), C's ldc (0: n). The
// heuristic's first algorithm for c's cuBLASLt workspace and the alignment `align`.
static int lce_gemm_make(stg_cuda *c, lce_gemm *G, int64_t m, int64_t n, int64_t k, int ta, int tb, cudaDataType_t ab,
                         cudaDataType_t ct, size_t align, int64_t lda, int64_t ldc, stg_err *err) {
    int64_t a0 = ta ? k : m, a1 = ta ? m : k, b0 = tb ? n : k, b1 = tb ? k : n;
    cublasComputeType_t ctype = ab == CUDA_R_32F && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(err, cublasLtMatmulDescCreate(&G->desc, ctype, CUDA_R_32F));
    int32_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(G->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(G->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_CHECK(err, cublasLtMatrixLayoutCreate(&G->la, ab, (uint64_t)b1, (uint64_t)b0, b1));
    CUBLAS_CHECK(err, cublasLtMatrixLayoutCreate(&G->lb, ab, (uint64_t)a1, (uint64_t)a0, lda > a1 ? lda : a1));
    CUBLAS_CHECK(err, cublasLtMatrixLayoutCreate(&G->lc, ct, (uint64_t)n, (uint64_t)m, ldc > n ? ldc : n));
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(err, cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = c->lt_workspace_bytes;
    uint32_t al = (uint32_t)align;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, G->desc, G->la, G->lb, G->lc, G->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(err, st);
    if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return stg_errf(err, "cuBLASLt has no algorithm for the chunk product (%lld x %lld x %lld, types %d/%d)", (long long)m,
                        (long long)n, (long long)k, (int)ab, (int)ct);
    if (res.workspaceSize > c->lt_workspace_bytes)
        return stg_errf(err, "cuBLASLt chose an algorithm needing %zu workspace bytes; the context has %zu", res.workspaceSize,
                        c->lt_workspace_bytes);
    G->algo = res.algo;
    return 0;
}

static int lce_gemm_run(stg_cuda *c, const lce_gemm *G, const void *A, const void *B, void *C, float beta, stg_err *err) {
    const float one = 1.0f;
    CUBLAS_CHECK(err, cublasLtMatmul(c->lt, G->desc, &one, B, G->la, A, G->lb, &beta, C, G->lc, C, G->lc, &G->algo,
                                     c->lt_workspace, c->lt_workspace_bytes, c->stream));
    return 0;
}

// The largest power of two (at most 16) dividing n.
static size_t lce_pow2(uint64_t n) {
    size_t a = 16;
    while (a > 1 && n % a) a >>= 1;
    return a;
}

// The outputs of op o's form: dx, dw (backward forms; -1 where the form makes none) and the scratch.
static void lce_outs(const stg_op *o, int *odx, int *odw, int *osc) {
    const bool bwd = o->kind != STG_OP_LINEAR_CROSS_ENTROPY;
    *odx = bwd && o->kind != STG_OP_LINEAR_CROSS_ENTROPY_DW ? 0 : -1;
    *odw = ops_lce_dw_out(o->kind);
    *osc = ops_lce_scratch_out(o->kind);
}

// The tensors the products read or write: x, w, the chunk scratch and (backward) dx, dw; -1 for none.
static void lce_operands(const stg_op *o, int t[5]) {
    int odx, odw, osc;
    lce_outs(o, &odx, &odw, &osc);
    t[0] = o->in[0];
    t[1] = o->in[1];
    t[2] = o->out[osc];
    t[3] = odx >= 0 ? o->out[odx] : -1;
    t[4] = odw >= 0 ? o->out[odw] : -1;
}

// The byte alignment every product's operands keep: the tensors' addresses (256 when not given)
// and the pieces' offsets into x, dx (row chunks) or w, dw (vocabulary blocks), and the fp32
// accumulator's in the scratch.
static size_t lce_align(const stg_op *o, void *const *ptr, const lce_plan *p) {
    size_t a = 16, b;
    int ts[5];
    lce_operands(o, ts);
    for (int i = 0; i < 5; i++)
        if (ts[i] >= 0 && ptr && (b = lce_pow2((uintptr_t)ptr[ts[i]])) < a) a = b;
    uint64_t steps[3] = {(uint64_t)(p->chunk * p->d) * (p->ab ? 2 : 4), 0, 0};
    if (p->by_vocab) {
        steps[0] = (uint64_t)(p->vb * p->d) * (p->ab ? 2 : 4);
        steps[1] = (uint64_t)(p->vb * p->d) * (p->dwb ? 2 : 4);
        steps[2] = (uint64_t)OPS_LCE_ACC_AT(p->chunk * p->V) * (p->ab ? 2 : 4);
    } else if (p->bwd) {
        steps[1] = (uint64_t)(p->chunk * p->d) * (p->dxb ? 2 : 4);
    }
    for (int i = 0; i < 3; i++)
        if (steps[i] && (b = lce_pow2(steps[i])) < a) a = b;
    return a;
}

static int lce_prepare(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                       stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]], *w = &g->t[o->in[1]];
    if (g->t[o->in[2]].dtype != STG_I32) return stg_errf(err, "targets %s must be i32", g->t[o->in[2]].name);
    if (w->ndim != 2 || w->shape[1] != cuda_last(x))
        return stg_errf(err, "head weight %s must be [vocab, %lld]", w->name, (long long)cuda_last(x));
    if (!c->lt_workspace) { // the cuBLASLt workspace (made by the first product of the graph)
        size_t ws = cuda_mm_workspace_bytes();
        CUDA_CHECK(err, cudaMalloc(&c->lt_workspace, ws));
        c->lt_workspace_bytes = ws;
    }
    lce_plan *p = (lce_plan *)calloc(1, sizeof *p);
    if (!p) return stg_errf(err, "linear_cross_entropy: out of host memory");
    p->bwd = o->kind != STG_OP_LINEAR_CROSS_ENTROPY;
    lce_outs(o, &p->odx, &p->odw, &p->osc);
    p->rows = cuda_rows(x);
    p->d = cuda_last(x);
    p->V = w->shape[0];
    p->chunk = ops_lce_chunk(p->rows, p->V, o->a.lce.chunk);
    p->last = p->chunk > 0 && p->rows % p->chunk ? p->rows % p->chunk : p->chunk;
    for (int i = 0; i < o->n_in && i < 4; i++) p->t_in[i] = o->in[i];
    for (int i = 0; i < 3; i++) p->t_out[i] = i < ops_def(o->kind)->n_out ? o->out[i] : -1;
    int rc = -1;
    const stg_tensor *sc = &g->t[o->out[p->osc]];
    if ((p->ab = cuda_is_bf16(g, o, o->in[0], err)) < 0 || cuda_same_float(g, o, o->in[1], o->in[0], err) < 0 ||
        cuda_same_float(g, o, o->out[p->osc], o->in[0], err) < 0)
        goto out;
    if (p->bwd) {
        if ((p->odx >= 0 && (p->dxb = cuda_is_bf16(g, o, o->out[p->odx], err)) < 0) ||
            (p->odw >= 0 && (p->dwb = cuda_is_bf16(g, o, o->out[p->odw], err)) < 0) ||
            (p->lb = cuda_is_bf16(g, o, o->in[3], err)) < 0)
            goto out;
        if (cuda_numel(&g->t[o->in[3]]) != p->rows) {
            stg_errf(err, "%s must have one value per row", g->t[o->in[3]].name);
            goto out;
        }
    } else {
        if ((p->lossb = cuda_is_bf16(g, o, o->out[0], err)) < 0 || (p->lb = cuda_is_bf16(g, o, o->out[1], err)) < 0) goto out;
        if (cuda_numel(&g->t[o->out[1]]) != p->rows) {
            stg_errf(err, "%s must have one value per row", g->t[o->out[1]].name);
            goto out;
        }
        *work = (size_t)p->rows * sizeof(double);
    }
    if (p->bwd) *work = sizeof(float); // grad_scale / kept rows (ce_count_kernel)
    // The vocabulary's last V mod 8 columns get products of their own (when V >= 8): cuBLASLt's
    // heuristic picks kernels 5-6x slower for a product whose vocabulary side is not a multiple of 8
    // (GPT-2's 50257: 82 TFLOP/s against 479 at 50304, docs/perf/2026-11-28c-h200-run2-4.txt), so
    // every other product's vocabulary side is one.
    p->vt = p->V >= 8 ? p->V % 8 : 0;
    p->vm = p->V - p->vt;
    if (p->bwd) { // vocabulary blocks when they are at least 64 columns wide (or all of vm)
        int64_t vb = p->chunk * p->V / (p->rows > 0 ? p->rows : 1);
        vb = vb >= p->vm ? p->vm : vb / 8 * 8;
        p->by_vocab = vb >= 64 || vb == p->vm;
        p->vb = vb;
        p->vlast = p->by_vocab && p->vm % vb ? p->vm % vb : vb;
        if (!p->by_vocab) { // row chunks: every product over all V columns
            p->vm = p->V;
            p->vt = 0;
        }
        int64_t need = ops_lce_bwd_scratch(p->rows, p->d, p->V, o->a.lce.chunk, p->dxb != 0);
        if (cuda_numel(sc) != need) {
            stg_errf(err, "%s has %lld elements; the backward needs %lld", sc->name, (long long)cuda_numel(sc), (long long)need);
            goto out;
        }
    } else if (cuda_numel(sc) != p->chunk * p->V) {
        stg_errf(err, "%s must hold %lld x %lld logits", sc->name, (long long)p->chunk, (long long)p->V);
        goto out;
    }
    p->ld = p->V;
    if (!p->bwd) { // the forward's logits rows 16-byte aligned in the same scratch, a few rows fewer a piece
        int64_t per = p->ab ? 8 : 4, vp = (p->V + per - 1) / per * per, cf = p->chunk * p->V / vp;
        if (vp != p->V && cf >= 1) {
            p->ld = vp;
            p->chunk = cf;
            p->last = p->rows % cf ? p->rows % cf : cf;
        }
    }
    p->align = lce_align(o, ptr, p);
    {
        cudaDataType_t at = p->ab ? CUDA_R_16BF : CUDA_R_32F, dxt = p->dxb ? CUDA_R_16BF : CUDA_R_32F,
                       dwt = p->dwb ? CUDA_R_16BF : CUDA_R_32F;
        // the backward's tail: its (rows, vt) dlogits LCE_TAIL_LD apart, so that every row is 16-byte aligned
        if (p->by_vocab && p->vt &&
            (lce_gemm_make(c, &p->gt[0][LCE_LOGITS], p->rows, p->vt, p->d, 0, 1, at, at, p->align, 0, LCE_TAIL_LD, err) ||
             lce_gemm_make(c, &p->gt[0][LCE_DX], p->rows, p->d, p->vt, 0, 0, at, CUDA_R_32F, p->align, LCE_TAIL_LD, 0, err) ||
             lce_gemm_make(c, &p->gt[0][LCE_DW], p->vt, p->d, p->rows, 1, 0, at, dwt, p->align, LCE_TAIL_LD, 0, err)))
            goto out;
        if (p->by_vocab) {
            for (int s = 0; s < (p->vlast != p->vb ? 2 : 1); s++) {
                int64_t nb = s ? p->vlast : p->vb, R = p->rows;
                if (lce_gemm_make(c, &p->g[s][LCE_LOGITS], R, nb, p->d, 0, 1, at, at, p->align, 0, 0, err) ||   // (R, nb) = x w_bᵀ
                    lce_gemm_make(c, &p->g[s][LCE_DX], R, p->d, nb, 0, 0, at, CUDA_R_32F, p->align, 0, 0, err) || // (R, d) += dl w_b
                    lce_gemm_make(c, &p->g[s][LCE_DW], nb, p->d, R, 1, 0, at, dwt, p->align, 0, 0, err))         // (nb, d) = dlᵀ x
                    goto out;
            }
        } else {
            for (int s = 0; s < (p->last != p->chunk ? 2 : 1); s++) {
                int64_t cr = s ? p->last : p->chunk;
                if (lce_gemm_make(c, &p->g[s][LCE_LOGITS], cr, p->vm, p->d, 0, 1, at, at, p->align, 0, p->ld, err)) goto out;
                if (p->vt && lce_gemm_make(c, &p->gt[s][LCE_LOGITS], cr, p->vt, p->d, 0, 1, at, at, p->align, 0, p->ld, err))
                    goto out;
                if (!p->bwd) continue;
                if (lce_gemm_make(c, &p->g[s][LCE_DX], cr, p->d, p->V, 0, 0, at, dxt, p->align, 0, 0, err) ||
                    lce_gemm_make(c, &p->g[s][LCE_DW], p->V, p->d, cr, 1, 0, at, dwt, p->align, 0, 0, err))
                    goto out;
            }
        }
    }
    rc = 0;
out:
    if (rc) {
        lce_plan_free(p);
        return -1;
    }
    *state = p;
    return 0;
}

static const lce_plan *lce_plan_of(const stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const lce_plan *p = c->state && op < c->nops && c->state_free[op] == lce_plan_free ? (const lce_plan *)c->state[op] : NULL;
    if (!p) {
        stg_errf(err, "linear_cross_entropy: op %d was not prepared (cuda_prepare)", op);
        return NULL;
    }
    const stg_op *o = &g->ops[op];
    bool same = o->n_in == (p->bwd ? 4 : 3);
    for (int i = 0; same && i < o->n_in; i++) same = o->in[i] == p->t_in[i];
    for (int i = 0; same && i < 3; i++) same = (i < ops_def(o->kind)->n_out ? o->out[i] : -1) == p->t_out[i];
    if (!same) {
        stg_errf(err, "linear_cross_entropy: op %d was prepared for another graph", op);
        return NULL;
    }
    int ts[5];
    lce_operands(o, ts);
    for (int i = 0; i < 5; i++)
        if (ts[i] >= 0 && !cu_aligned(ptr[ts[i]], p->align)) {
            stg_errf(err, "linear_cross_entropy: tensor %s is at %p, not %zu-byte aligned as prepared", g->t[ts[i]].name,
                     ptr[ts[i]], p->align);
            return NULL;
        }
    return p;
}

extern "C" int cuda_run_linear_cross_entropy(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const lce_plan *p = lce_plan_of(c, g, op, ptr, err);
    if (!p) return -1;
    const stg_op *o = &g->ops[op];
    double *term = (double *)c->work;
    if (!term || c->work_bytes < (size_t)p->rows * sizeof(double))
        return stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
    const char *x = (const char *)ptr[o->in[0]];
    const int32_t *tgt = (const int32_t *)ptr[o->in[2]];
    char *lse = (char *)ptr[o->out[1]];
    void *logits = ptr[o->out[2]];
    size_t xs = p->ab ? 2 : 4, ls = p->lb ? 2 : 4;
    int threads = cu_row_threads(p->V, 16);
    for (int64_t r0 = 0; r0 < p->rows; r0 += p->chunk) {
        int64_t cr = p->rows - r0 < p->chunk ? p->rows - r0 : p->chunk;
        const char *xc = x + (size_t)(r0 * p->d) * xs, *w = (const char *)ptr[o->in[1]];
        if (lce_gemm_run(c, &p->g[cr != p->chunk][LCE_LOGITS], xc, w, logits, 0.0f, err) ||
            (p->vt && lce_gemm_run(c, &p->gt[cr != p->chunk][LCE_LOGITS], xc, w + (size_t)(p->vm * p->d) * xs,
                                   (char *)logits + (size_t)p->vm * xs, 0.0f, err)))
            return -1;
        if (p->ab)
            ce_row_kernel<bf16><<<(unsigned)cr, threads, 0, c->stream>>>((const bf16 *)logits, tgt + r0, lse + (size_t)r0 * ls,
                                                                         p->lb, term + r0, p->V, p->ld);
        else
            ce_row_kernel<float><<<(unsigned)cr, threads, 0, c->stream>>>((const float *)logits, tgt + r0, lse + (size_t)r0 * ls,
                                                                          p->lb, term + r0, p->V, p->ld);
        CUDA_LAUNCH_CHECK(err, "ce_row_kernel (linear_cross_entropy)");
    }
    ce_mean_kernel<<<1, 1024, 0, c->stream>>>(term, tgt, ptr[o->out[0]], p->lossb, p->rows);
    CUDA_LAUNCH_CHECK(err, "ce_mean_kernel (linear_cross_entropy)");
    return 0;
}

// dl (R, nb; rows ldl apart) logits of vocabulary columns [v0, v0 + nb) -> (exp(logit - lse) - onehot) * *inv (the
// loss gradient / kept rows), in place; 0 on a row whose target is -1 (ignored); one block per row.
template <typename T>
__global__ void lce_dblock_kernel(T *dl, const int32_t *tgt, const void *lse, int lb, int64_t nb, int64_t ldl, int64_t v0,
                                  const float *inv) {
    int64_t r = blockIdx.x;
    T *row = dl + r * ldl;
    float l = cu_ldd(lse, lb, r);
    int64_t t = (int64_t)tgt[r] - v0;
    const float inv_rows = tgt[r] == -1 ? 0.0f : *inv;
    for (int64_t j = threadIdx.x; j < nb; j += blockDim.x) cu_st(row, j, (expf(cu_ld(row, j) - l) - (j == t ? 1.0f : 0.0f)) * inv_rows);
}

// dx (n) bf16 = acc (n) fp32
__global__ void lce_to_bf16_kernel(const float *acc, bf16 *dx, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = __float2bfloat16_rn(acc[i]);
}

// The backward's dlogits factor on the device: grad_scale / the rows whose target is not -1.
static float *lce_inv(stg_cuda *c, const lce_plan *p, const stg_op *o, const int32_t *tgt, stg_err *err) {
    float *inv = (float *)c->work;
    if (!inv || c->work_bytes < sizeof(float)) {
        stg_errf(err, "scratch too small: cuda_prepare was not called for this graph");
        return NULL;
    }
    ce_count_kernel<<<1, 1024, 0, c->stream>>>(tgt, inv, p->rows, (float)o->a.lce.grad_scale);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        stg_errf(err, "launching ce_count_kernel (linear_cross_entropy_bwd): %s", cudaGetErrorString(e));
        return NULL;
    }
    return inv;
}

// The backward by blocks of vocabulary columns (lce_plan.by_vocab).
static int lce_bwd_by_vocab(stg_cuda *c, const lce_plan *p, const stg_op *o, void *const *ptr, stg_err *err) {
    const void *x = ptr[o->in[0]], *lse = ptr[o->in[3]];
    const char *w = (const char *)ptr[o->in[1]];
    const int32_t *tgt = (const int32_t *)ptr[o->in[2]];
    char *dw = p->odw >= 0 ? (char *)ptr[o->out[p->odw]] : NULL, *dl = (char *)ptr[o->out[p->osc]];
    // dx accumulates in fp32: dx itself, or the scratch's accumulator when dx is bf16 (none for the _dw form)
    float *acc = p->odx < 0 ? NULL
                 : p->dxb   ? (float *)(dl + (size_t)OPS_LCE_ACC_AT(p->chunk * p->V) * (p->ab ? 2 : 4))
                            : (float *)ptr[o->out[p->odx]];
    size_t ws = p->ab ? 2 : 4, dws = p->dwb ? 2 : 4;
    float *inv = lce_inv(c, p, o, tgt, err);
    if (!inv) return -1;
    for (int64_t v0 = 0, nb; v0 < p->V; v0 += nb) { // blocks of vb, the last vlast, then the vt tail
        nb = v0 >= p->vm ? p->vt : p->vm - v0 < p->vb ? p->vm - v0 : p->vb;
        const lce_gemm *G = v0 >= p->vm ? p->gt[0] : p->g[nb != p->vb];
        const char *wb = w + (size_t)(v0 * p->d) * ws;
        if (lce_gemm_run(c, &G[LCE_LOGITS], x, wb, dl, 0.0f, err)) return -1;
        int threads = cu_row_threads(nb, 16);
        const int64_t ldl = v0 >= p->vm ? LCE_TAIL_LD : nb;
        if (p->ab)
            lce_dblock_kernel<bf16><<<(unsigned)p->rows, threads, 0, c->stream>>>((bf16 *)dl, tgt, lse, p->lb, nb, ldl, v0, inv);
        else
            lce_dblock_kernel<float><<<(unsigned)p->rows, threads, 0, c->stream>>>((float *)dl, tgt, lse, p->lb, nb, ldl, v0, inv);
        CUDA_LAUNCH_CHECK(err, "lce_dblock_kernel");
        if ((dw && lce_gemm_run(c, &G[LCE_DW], dl, x, dw + (size_t)(v0 * p->d) * dws, 0.0f, err)) ||
            (acc && lce_gemm_run(c, &G[LCE_DX], dl, wb, acc, v0 ? 1.0f : 0.0f, err)))
            return -1;
    }
    if (acc && p->dxb) {
        int64_t n = p->rows * p->d;
        lce_to_bf16_kernel<<<cuda_blocks(c, n, 256), 256, 0, c->stream>>>(acc, (bf16 *)ptr[o->out[p->odx]], n);
        CUDA_LAUNCH_CHECK(err, "lce_to_bf16_kernel");
    }
    return 0;
}

extern "C" int cuda_run_linear_cross_entropy_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const lce_plan *p = lce_plan_of(c, g, op, ptr, err);
    if (!p) return -1;
    const stg_op *o = &g->ops[op];
    if (p->by_vocab) return lce_bwd_by_vocab(c, p, o, ptr, err);
    // row chunks: dx rows written, dw added chunk after chunk
    const char *x = (const char *)ptr[o->in[0]];
    const void *w = ptr[o->in[1]];
    const int32_t *tgt = (const int32_t *)ptr[o->in[2]];
    const char *lse = (const char *)ptr[o->in[3]];
    char *dx = p->odx >= 0 ? (char *)ptr[o->out[p->odx]] : NULL;
    void *dw = p->odw >= 0 ? ptr[o->out[p->odw]] : NULL, *dl = ptr[o->out[p->osc]];
    size_t xs = p->ab ? 2 : 4, dxs = p->dxb ? 2 : 4, ls = p->lb ? 2 : 4;
    int threads = cu_row_threads(p->V, 16);
    float *inv = lce_inv(c, p, o, tgt, err);
    if (!inv) return -1;
    for (int64_t r0 = 0; r0 < p->rows; r0 += p->chunk) {
        int64_t cr = p->rows - r0 < p->chunk ? p->rows - r0 : p->chunk;
        const lce_gemm *G = p->g[cr != p->chunk];
        const char *xc = x + (size_t)(r0 * p->d) * xs;
        if (lce_gemm_run(c, &G[LCE_LOGITS], xc, w, dl, 0.0f, err)) return -1;
        if (p->ab)
            ce_bwd_kernel<bf16><<<(unsigned)cr, threads, 0, c->stream>>>((const bf16 *)dl, tgt + r0, lse + (size_t)r0 * ls, p->lb,
                                                                         (bf16 *)dl, p->V, inv);
        else
            ce_bwd_kernel<float><<<(unsigned)cr, threads, 0, c->stream>>>((const float *)dl, tgt + r0, lse + (size_t)r0 * ls, p->lb,
                                                                          (float *)dl, p->V, inv);
        CUDA_LAUNCH_CHECK(err, "ce_bwd_kernel (linear_cross_entropy_bwd)");
        if ((dx && lce_gemm_run(c, &G[LCE_DX], dl, w, dx + (size_t)(r0 * p->d) * dxs, 0.0f, err)) ||
            (dw && lce_gemm_run(c, &G[LCE_DW], dl, xc, dw, r0 ? 1.0f : 0.0f, err)))
            return -1;
    }
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
// MAIN: the forward's loss terms live in c->work; both use the main cuBLASLt workspace.
const cuda_rec stg_cuda_linear_cross_entropy = {cuda_run_linear_cross_entropy, lce_prepare, lce_plan_free, NULL, CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_linear_cross_entropy_bwd = {cuda_run_linear_cross_entropy_bwd, lce_prepare, lce_plan_free, NULL,
                                                    CUDA_REC_MAIN, NULL};
// The late-dW forms (late_dw=1): the same backward making dx alone, or dW alone.
const cuda_rec stg_cuda_linear_cross_entropy_dx = {cuda_run_linear_cross_entropy_bwd, lce_prepare, lce_plan_free, NULL,
                                                   CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_linear_cross_entropy_dw = {cuda_run_linear_cross_entropy_bwd, lce_prepare, lce_plan_free, NULL,
                                                   CUDA_REC_MAIN, NULL};
