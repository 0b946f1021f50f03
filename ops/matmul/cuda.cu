// MATMUL and LINEAR through cuBLASLt.
//
// Row-major, PyTorch order. LINEAR: y (..., out) = x (..., in) · Wᵀ with W (out, in).
// MATMUL: C (..., m, n) = op(A) · op(B), A (..., a0, a1), B (b0, b1) broadcast over A's batch or
// (..., b0, b1) with A's batch dims; op transposes the last two dims when ta / tb is set.
//
// cuBLASLt is column-major. A row-major (r, c) matrix is the column-major (c, r) matrix with
// leading dimension c, so row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt's
// first operand is our B, its second is our A, and its (m, n) is our (n, m).
//   our B, tb = 0: row-major (k, n) = column-major (n, k): already op(B)ᵀ, so CUBLAS_OP_N.
//   our B, tb = 1: row-major (n, k) = column-major (k, n): CUBLAS_OP_T.
//   our A, ta = 0: row-major (m, k) = column-major (k, m): CUBLAS_OP_N; ta = 1: CUBLAS_OP_T.
// Batches are strided. A 2-D B under a batched A would need batch stride 0, which not every
// algorithm accepts: without ta the batch folds into m (A's rows are contiguous); with ta it is
// rejected (the registry's gradient rules never emit it).
//
// MATMUL_GROUP: the products of its pairs (equal shapes, each one matrix product) as one cuBLASLt
// call in pointer-array batch mode: the operands stay where the plan put them, and a table of
// their addresses (device memory, the context's op_tab, written before capture) is what cuBLASLt reads.
//
// Products of at most 8 rows in bf16 (decoding: one row per sequence) run on the few-rows kernel
// below instead (mm_gv_kernel), which reads each weight once at close to the copy bandwidth.
//
// Everything is chosen by cuda_mm_prepare before capture; cuda_mm_run only enqueues
// cublasLtMatmul on c->stream with c->lt_workspace: no allocation, no synchronisation.
//
// The algorithm: the heuristic's first answer, or with c->gemm_tune the fastest of its first
// MM_TUNE_CANDIDATES answers, each timed on the op's own tensors (one product after the L2 cache
// was overwritten, as in a step, where a product's operands were last touched long before; the
// candidates interleaved, the least of MM_TUNE_ROUNDS rounds). Products timed back to back on
// warm L2 ranked the candidates wrongly: on the xl model the winner of such timing was 11% slower
// inside the step (docs/PERF.md). Without device memory for the flush buffer, no tuning. Another
// candidate replaces the heuristic's first only when it is faster by more than MM_TUNE_MARGIN, so
// that timing noise between near-equal kernels does not decide. The choice is kept for the process
// (by shape, device and workspace): every context and executor of a process gets the same
// algorithm for a shape, so graph and eager runs, or two executors, stay bitwise comparable.
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"

#define MM_WORKSPACE_BYTES ((size_t)32 << 20) // Hopper: at least 32 MiB
#define MM_TUNE_CANDIDATES 8
// With tuning, split-K forms of the heuristic's first answer are candidates too (k cut in 2, 4, 8 and
// 16, the parts added in a separate step in the compute type: no atomics, the same bits each run):
// few-row products (batch-64 decoding: 64 rows, 2560 x 2560 weights) make too few output tiles to
// fill the device, and none of the heuristic's first 8 answers splits k. -DMM_TUNE_SPLITK=0: none.
#ifndef MM_TUNE_SPLITK
#define MM_TUNE_SPLITK 1
#endif
#define MM_SPLITK_FORMS 4
#define MM_TUNE_MAX (MM_TUNE_CANDIDATES + MM_SPLITK_FORMS)
#define MM_TUNE_ROUNDS 5
#define MM_TUNE_MARGIN 0.01
#define MM_TUNE_CACHE 512

// Everything that decides the algorithm: equal keys share the heuristic's answer.
typedef struct mm_key {
    int a_type, c_type;           // cudaDataType of the inputs and of the output
    int compute;                  // cublasComputeType_t
    int trans_a, trans_b;         // cuBLASLt's ops (its A is our B)
    int64_t m, n, k;              // cuBLASLt's sizes (m = our n, n = our m)
    int64_t rows_a, cols_a, ld_a; // cuBLASLt's A layout (our B)
    int64_t rows_b, cols_b, ld_b; // cuBLASLt's B layout (our A)
    int64_t ld_c;
    int64_t batch, stride_a, stride_b, stride_c; // elements
    int ptr_array;                // matmul_group: batch products through tables of pointers
    int bias;                     // linear with a bias: CUBLASLT_EPILOGUE_BIAS (bias of D's type)
} mm_key;

// The algorithm chosen for a key, and how (tuned: the candidate chosen, in the heuristic's order, of
// ncand, and the time of one product with the heuristic's first and with the chosen, ms; ncand 0
// and times -1 when not tuned).
typedef struct mm_choice {
    cublasLtMatmulAlgo_t algo;
    size_t ws_bytes; // workspace the algorithm needs
    int pick, ncand;
    float ms_first, ms_pick;
} mm_choice;

struct cuda_mm_plan {
    mm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; // cuBLASLt's A (our B), B (our A), C = D (our C)
    mm_choice ch;
    int in0, in1, out;                 // tensor ids: our A, our B, our C (a group: its first pair's)
    int bias;                          // linear's bias tensor id (the epilogue's vector), -1 none
    const void *bias_ptr;              // the address last set on desc
    // matmul_group: its tensors and the address tables cuBLASLt reads, host copy and device
    // (tab[0 .. n) its A = our Bs, [n, 2n) its B = our As, [2n, 3n) C, [3n, 4n) D = our outputs)
    int gv;                            // mm_gv_fits: the few-rows kernel runs it (when aligned at run)
    int gv_w_early;                    // its Ws are parameters of a graph that never writes one (mm_gv_kernel)
    int gv_rows;                       // rows of W a warp (mm_gv_pick_t, chosen at prepare)
    int gv_split;                      // warps sharing a row's k (1, 2, 4 or 8; mm_gv_pick_t)
    int64_t gv_blocks;                 // with split k: the grid, one wave of resident blocks (0: a block a row group)
    // a matmul_group of two whose outputs only a swiglu reads (mm_fold_plan): the few-rows kernel
    // writes the swiglu's output (tensor glu_out) from both sums, pair glu_a the swiglu's a
    int glu, glu_out, glu_a, glu_split; // (glu_split: warps sharing a row pair's k, mm_gv_glu_pick)
    // an RMSNorm whose output only this product reads as its x (every pair's), folded in (mm_fold_plan):
    // the few-rows kernel reads the norm's input (tensor nrm_x) and gain (nrm_g) instead
    int nrm, nrm_x, nrm_g;
    float nrm_eps;
    // the tensor-core kernels take it (2 to 8 rows, mm_tc_takes): warps sharing a tile's k (mm_tc_pick),
    // and the swiglu kernel's when glu
    int tc, tc_split, tc_glu_split;
    int npairs;
    int ins[2 * STG_MAX_OUT], outs[STG_MAX_OUT];
    const void *htab[4 * STG_MAX_OUT];
    void **dtab;
};

size_t cuda_mm_workspace_bytes(void) { return MM_WORKSPACE_BYTES; }

void cuda_mm_free(void *plan) {
    cuda_mm_plan *p = (cuda_mm_plan *)plan;
    if (!p) return;
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    free(p);
}

static int mm_dtype(const stg_graph *g, const stg_op *op, int t, int *out, stg_err *err) {
    switch (g->t[t].dtype) {
    case STG_F32: *out = CUDA_R_32F; return 0;
    case STG_BF16: *out = CUDA_R_16BF; return 0;
    default:
        return stg_errf_at(err, op->loc, "%s: tensor '%s' is %s; the CUDA matmul takes f32 or bf16", ops_name(op->kind),
                           g->t[t].name, stg_dtype_name(g->t[t].dtype));
    }
}

// The key of pair p of op `id` of g (inputs 2p, 2p + 1, output p; p 0 for matmul and linear):
// shapes, ops, strides and types in cuBLASLt's terms.
static int mm_key_of(const stg_cuda *c, const stg_graph *g, int id, int p, mm_key *key, stg_err *err) {
    const stg_op *op = &g->ops[id];
    if (op->kind != STG_OP_MATMUL && op->kind != STG_OP_LINEAR && op->kind != STG_OP_MATMUL_GROUP)
        return stg_errf(err, "cuda matmul: op %d is %s, not matmul or linear", id, ops_name(op->kind));
    int ia = op->in[2 * p], ib = op->in[2 * p + 1], ic = op->out[p];
    const stg_tensor *A = &g->t[ia], *B = &g->t[ib], *C = &g->t[ic];
    int ta = 0, tb = 1; // LINEAR: x · Wᵀ
    if (op->kind != STG_OP_LINEAR) {
        ta = op->a.matmul.ta != 0;
        tb = op->a.matmul.tb != 0;
    }
    memset(key, 0, sizeof *key);
    int at, bt, ct;
    if (mm_dtype(g, op, ia, &at, err) || mm_dtype(g, op, ib, &bt, err) || mm_dtype(g, op, ic, &ct, err))
        return -1;
    if (at != bt || (at == CUDA_R_32F && ct != CUDA_R_32F))
        return stg_errf_at(err, op->loc, "%s: dtypes %s · %s -> %s are not supported (f32 or bf16 inputs, bf16 -> f32 allowed)",
                           ops_name(op->kind), stg_dtype_name(A->dtype), stg_dtype_name(B->dtype), stg_dtype_name(C->dtype));
    key->a_type = at;
    key->c_type = ct;
    key->compute = at == CUDA_R_32F && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    int64_t batch = 1, m, k, n, b0, b1, a0, a1;
    int b_batched = 0;
    if (op->kind == STG_OP_LINEAR) {
        if (A->ndim < 1 || B->ndim != 2) return stg_errf_at(err, op->loc, "linear: bad operand ranks");
        a1 = A->shape[A->ndim - 1];
        a0 = cuda_rows(A);
        b0 = B->shape[0];
        b1 = B->shape[1];
    } else {
        if (A->ndim < 2 || B->ndim < 2) return stg_errf_at(err, op->loc, "%s: operands need 2 or more dims", ops_name(op->kind));
        a0 = A->shape[A->ndim - 2];
        a1 = A->shape[A->ndim - 1];
        b0 = B->shape[B->ndim - 2];
        b1 = B->shape[B->ndim - 1];
        for (int i = 0; i + 2 < A->ndim; i++) batch *= A->shape[i];
        b_batched = B->ndim > 2;
        if (b_batched && B->ndim != A->ndim)
            return stg_errf_at(err, op->loc, "matmul: '%s' must be 2-D or have the dims of '%s'", B->name, A->name);
        if (!b_batched && batch > 1) {
            if (ta)
                return stg_errf_at(err, op->loc,
                                   "matmul: a transposed batched '%s' with a 2-D '%s' is not supported on CUDA", A->name, B->name);
            a0 *= batch; // fold the batch into m: A's rows are contiguous
            batch = 1;
        }
    }
    m = ta ? a1 : a0;
    k = ta ? a0 : a1;
    n = tb ? b0 : b1;
    if ((tb ? b1 : b0) != k)
        return stg_errf_at(err, op->loc, "%s: inner dims differ (%lld vs %lld)", ops_name(op->kind), (long long)k,
                           (long long)(tb ? b1 : b0));
    if (cuda_numel(C) != batch * m * n)
        return stg_errf_at(err, op->loc, "%s: output '%s' has %lld elements, expected %lld", ops_name(op->kind), C->name,
                           (long long)cuda_numel(C), (long long)(batch * m * n));

    key->trans_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    key->trans_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    key->m = n;
    key->n = m;
    key->k = k;
    key->rows_a = b1; // our B, row-major (b0, b1) = column-major (b1, b0)
    key->cols_a = b0;
    key->ld_a = b1;
    key->rows_b = a1; // our A
    key->cols_b = a0;
    key->ld_b = a1;
    key->ld_c = n;    // our C, row-major (m, n)
    key->batch = batch;
    key->stride_a = batch > 1 && b_batched ? b0 * b1 : 0;
    key->stride_b = batch > 1 ? a0 * a1 : 0;
    key->stride_c = batch > 1 ? m * n : 0;
    if (op->kind == STG_OP_LINEAR && op->a.linear.bias) {
        if (op->n_in < 3) return stg_errf_at(err, op->loc, "linear: a bias is declared but not given");
        const stg_tensor *bt = &g->t[op->in[2]];
        if (bt->dtype != C->dtype || cuda_numel(bt) != n)
            return stg_errf_at(err, op->loc, "linear: the bias '%s' must have %lld elements of the output's dtype", bt->name,
                               (long long)n);
        key->bias = 1;
    }
    return 0;
}

static int mm_layout(cublasLtMatrixLayout_t *l, int type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                     int64_t stride, int ptr_array, stg_err *err) {
    CUBLAS_CHECK(err, cublasLtMatrixLayoutCreate(l, (cudaDataType_t)type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        CUBLAS_CHECK(err, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        if (ptr_array) {
            cublasLtBatchMode_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
            CUBLAS_CHECK(err, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
        } else {
            CUBLAS_CHECK(err, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                               sizeof stride));
        }
    }
    return 0;
}

// Fills p's descriptors from its key.
static int mm_build(cuda_mm_plan *p, stg_err *err) {
    const mm_key *k = &p->key;
    CUBLAS_CHECK(err, cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)k->compute, CUDA_R_32F));
    int32_t ta = k->trans_a, tb = k->trans_b;
    CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->bias) { // D = A B (+ C) + bias broadcast over D's columns (our rows): one value per output feature
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = k->c_type;
        CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (mm_layout(&p->la, k->a_type, k->rows_a, k->cols_a, k->ld_a, k->batch, k->stride_a, k->ptr_array, err) ||
        mm_layout(&p->lb, k->a_type, k->rows_b, k->cols_b, k->ld_b, k->batch, k->stride_b, k->ptr_array, err) ||
        mm_layout(&p->lc, k->c_type, k->m, k->n, k->ld_c, k->batch, k->stride_c, k->ptr_array, err))
        return -1;
    return 0;
}

// The process's tuned choices (c->gemm_tune): key, device and workspace bytes -> algorithm.
typedef struct mm_tuned {
    mm_key key;
    int device;
    size_t ws;
    mm_choice ch;
} mm_tuned;
static mm_tuned mm_tuned_cache[MM_TUNE_CACHE];
static int mm_ntuned;

// Points the epilogue of p (a linear with a bias) at the bias's bytes b (a host-side attribute of
// the descriptor, read when cublasLtMatmul enqueues).
static int mm_set_bias(cuda_mm_plan *p, const void *b, stg_err *err) {
    if (p->bias < 0 || p->bias_ptr == b) return 0;
    CUBLAS_CHECK(err, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
    p->bias_ptr = b;
    return 0;
}

// Device time (ms) of one product of p with algorithm a on the op's tensors, after `flush` bytes at
// fl were overwritten (the L2 cache emptied of the operands); 1 when cuBLASLt refuses the algorithm
// (a candidate to skip), -1 on a CUDA error.
static int mm_time(stg_cuda *c, const cuda_mm_plan *p, const cublasLtMatmulAlgo_t *a, const void *x, const void *w,
                   const void *add, void *y, void *fl, size_t flush, cudaEvent_t ev[2], float *ms, stg_err *err) {
    const float one = 1.0f, zero = 0.0f;
    CUDA_CHECK(err, cudaMemsetAsync(fl, 0x5a, flush, c->stream));
    CUDA_CHECK(err, cudaEventRecord(ev[0], c->stream));
    if (cublasLtMatmul(c->lt, p->desc, &one, w, p->la, x, p->lb, add ? &one : &zero, add ? add : y, p->lc, y, p->lc, a,
                       c->lt_workspace, c->lt_workspace_bytes, c->stream) != CUBLAS_STATUS_SUCCESS)
        return 1;
    CUDA_CHECK(err, cudaEventRecord(ev[1], c->stream));
    CUDA_CHECK(err, cudaEventSynchronize(ev[1]));
    CUDA_CHECK(err, cudaEventElapsedTime(ms, ev[0], ev[1]));
    return 0;
}

// Times the n candidates res[] on the op's tensors (x our A, w our B, add the addend or NULL, y the
// output) and returns the index of the one to use (-1 on error); records the times in p (not when
// there is no device memory for the flush buffer: then the heuristic's first, untuned).
static int mm_tune(stg_cuda *c, cuda_mm_plan *p, const cublasLtMatmulHeuristicResult_t *res, int n, const void *x,
                   const void *w, const void *add, void *y, stg_err *err) {
    cudaEvent_t ev[2] = {NULL, NULL};
    float best[MM_TUNE_MAX];
    bool ok[MM_TUNE_MAX];
    int pick = -1, l2 = 0;
    void *fl = NULL;
    size_t flush = 0;
    cudaError_t e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->device);
    if (e == cudaSuccess) {
        flush = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
        if (cudaMalloc(&fl, flush) != cudaSuccess) {
            (void)cudaGetLastError(); // out of memory is not sticky: clear it and keep the heuristic's answer
            return 0;
        }
    }
    if (e == cudaSuccess) e = cudaEventCreate(&ev[0]);
    if (e == cudaSuccess) e = cudaEventCreate(&ev[1]);
    if (e != cudaSuccess) {
        stg_errf(err, "cuda matmul: tuning: %s", cudaGetErrorString(e));
        goto out;
    }
    for (int i = 0; i < n; i++) {
        float ms;
        int r = res[i].workspaceSize <= c->lt_workspace_bytes ? mm_time(c, p, &res[i].algo, x, w, add, y, fl, flush, ev, &ms, err) : 1;
        if (r < 0) goto out;
        ok[i] = r == 0; // the first round warms up and finds the algorithms cuBLASLt refuses
        best[i] = 3.4e38f;
    }
    for (int round = 0; round < MM_TUNE_ROUNDS; round++)
        for (int i = 0; i < n; i++) {
            float ms;
            if (!ok[i]) continue;
            int r = mm_time(c, p, &res[i].algo, x, w, add, y, fl, flush, ev, &ms, err);
            if (r < 0) goto out;
            if (r > 0) ok[i] = false;
            else if (ms < best[i]) best[i] = ms;
        }
    pick = 0;
    for (int i = 1; i < n; i++)
        if (ok[i] && (!ok[pick] || best[i] < best[pick])) pick = i;
    if (!ok[pick]) {
        stg_errf(err, "cuda matmul: cuBLASLt refused every candidate algorithm");
        pick = -1;
    } else if (pick != 0 && ok[0] && best[pick] > (1.0 - MM_TUNE_MARGIN) * best[0]) {
        pick = 0;
    }
    if (pick >= 0) {
        p->ch.ms_first = ok[0] ? best[0] : -1.0f;
        p->ch.ms_pick = best[pick];
    }
out:
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (fl && cudaFree(fl) != cudaSuccess && pick >= 0) {
        stg_errf(err, "cuda matmul: tuning: cudaFree: %s", cudaGetErrorString(cudaGetLastError()));
        pick = -1;
    }
    return pick;
}

// Appends to res[0, n) (room for MM_TUNE_MAX) the split-K forms of res[0] that cuBLASLt accepts for p
// within ws bytes of workspace; returns the new count.
static int mm_splitk_forms(stg_cuda *c, const cuda_mm_plan *p, cublasLtMatmulHeuristicResult_t *res, int n, size_t ws) {
    int32_t sup = 0;
    uint32_t mask = 0;
    size_t w = 0;
    if (n < 1 || cublasLtMatmulAlgoCapGetAttribute(&res[0].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sup, sizeof sup, &w) !=
                     CUBLAS_STATUS_SUCCESS || !sup ||
        cublasLtMatmulAlgoCapGetAttribute(&res[0].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &mask, sizeof mask, &w) !=
            CUBLAS_STATUS_SUCCESS ||
        !(mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE))
        return n;
    const int32_t splits[MM_SPLITK_FORMS] = {2, 4, 8, 16};
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    for (int i = 0; i < MM_SPLITK_FORMS && n < MM_TUNE_MAX; i++) {
        if ((int64_t)splits[i] * 256 > p->key.k) break; // parts of at least 256 of k
        cublasLtMatmulHeuristicResult_t r;
        memset(&r, 0, sizeof r);
        r.algo = res[0].algo;
        if (cublasLtMatmulAlgoConfigSetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits[i], sizeof splits[i]) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme) !=
                CUBLAS_STATUS_SUCCESS)
            continue;
        const cublasLtMatmulAlgo_t a = r.algo;
        if (cublasLtMatmulAlgoCheck(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, &a, &r) != CUBLAS_STATUS_SUCCESS ||
            r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > ws)
            continue;
        r.algo = a; // the check never writes it
        res[n++] = r;
    }
    return n;
}

// Chooses the algorithm of p (descriptors built): the heuristic's first answer, or with
// c->gemm_tune and the op's tensors (x, w, add, y; add may be NULL) the fastest candidate.
static int mm_search(stg_cuda *c, cuda_mm_plan *p, const void *x, const void *w, const void *add, void *y, stg_err *err) {
    size_t ws = c->lt_workspace_bytes ? c->lt_workspace_bytes : cuda_mm_workspace_bytes();
    bool tune = c->gemm_tune && x && w && y;
    if (tune)
        for (int i = 0; i < mm_ntuned; i++) {
            const mm_tuned *t = &mm_tuned_cache[i];
            if (t->device == c->device && t->ws == ws && memcmp(&t->key, &p->key, sizeof p->key) == 0) {
                p->ch = t->ch;
                return 0;
            }
        }
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(err, cublasLtMatmulPreferenceCreate(&pref));
    // The plan's tensors are 256-byte aligned, but views may start inside one: promise 16 bytes.
    uint32_t align = 16;
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res[MM_TUNE_MAX];
    int found = 0;
    memset(res, 0, sizeof res);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, tune ? MM_TUNE_CANDIDATES : 1, res,
                                           &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(err, s);
    int n = 0; // the usable answers, in the heuristic's order
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) res[n++] = res[i];
    if (n < 1)
        return stg_errf(err, "cuBLASLt has no algorithm for (%lld x %lld x %lld, batch %lld, types %d/%d, compute %d)",
                        (long long)p->key.m, (long long)p->key.n, (long long)p->key.k, (long long)p->key.batch,
                        p->key.a_type, p->key.c_type, p->key.compute);
    if (tune && MM_TUNE_SPLITK) n = mm_splitk_forms(c, p, res, n, ws);
    int pick = 0;
    if (tune && n > 1 && (pick = mm_tune(c, p, res, n, x, w, add, y, err)) < 0) return -1;
    p->ch.algo = res[pick].algo;
    p->ch.ws_bytes = res[pick].workspaceSize;
    p->ch.pick = pick;
    p->ch.ncand = tune && n > 1 && p->ch.ms_pick >= 0 ? n : 0; // 0 too when mm_tune had no flush buffer
    if (tune && (n < 2 || p->ch.ncand > 0) && mm_ntuned < MM_TUNE_CACHE)
        mm_tuned_cache[mm_ntuned++] = (mm_tuned){p->key, c->device, ws, p->ch};
    return 0;
}

size_t cuda_mm_table_bytes(const stg_graph *g, int op) {
    const stg_op *o = &g->ops[op];
    return o->kind == STG_OP_MATMUL_GROUP ? ((4 * (size_t)o->n_out * sizeof(void *) + 255) & ~(size_t)255) : 0;
}

// ---- few rows: y (m, n) = x (m, k) · Wᵀ, W (n, k), bf16, m <= MM_GV_ROWS -------------------------
// Decoding multiplies one row per sequence by every weight matrix, so a step is bound by reading the
// weights once; cuBLASLt's products of one row reached 65% of that bound on the 2.7B model
// (docs/perf/2026-11-25-sample.txt). Here each warp owns R consecutive rows of W (output features)
// and sums all m rows of x against them: its lanes stream the W rows in 16-byte vectors, MM_GV_U(R)
// vectors a lane in flight, read once (evict-first), x through the caches (every warp reads it; a
// plain load, not the read-only path: under programmatic dependent launch x is written by the kernel
// before while this one is already running),
// then add their partial sums across the warp in a fixed order (the same bits on every run: no
// atomics). The epilogue adds the bias, then C (the addend, or the output itself when accumulating a
// gradient), and stores y in its dtype. A matmul_group is one launch, blockIdx.y its pair.
// Taken when the key fits (mm_gv_fits) and every x and W is 16-byte aligned, else cuBLASLt;
// STG_NO_GEMV (a compile definition) keeps cuBLASLt for every product, for comparisons.
#define MM_GV_ROWS 8  // most rows of x (sequences decoded at once)
#define MM_GV_WARPS 8 // warps per block
// vectors of each W row a lane has in flight: 8 when a warp streams one row (long rows, few of them:
// more bytes in flight per warp), else 4 (R rows x 4)
#define MM_GV_U(R) ((R) == 1 ? 8 : 4)
// rows a group of split-k warps takes at most (mm_gv_launch_shape: the grid is never smaller than that needs)
#define MM_GV_IT 8

typedef struct mm_gv_args {
    const bf16 *x[STG_MAX_OUT], *w[STG_MAX_OUT];
    void *y[STG_MAX_OUT];
    const void *c[STG_MAX_OUT];    // beta 1: the addend, or y when accumulating; NULL: beta 0
    const void *bias[STG_MAX_OUT]; // n values of y's dtype, or NULL
    int64_t m, k, n;
    int w_early; // every W is a parameter: read before the wait for the kernel before (inference only)
    // an RMSNorm folded in (mm_fold_plan; the kernels' NRM): x[q] is the norm's input, not its output, ng
    // its gain (k values, bf16) and neps its epsilon
    const bf16 *ng;
    float neps;
} mm_gv_args;

// acc[j] += x . w over 8 bf16 pairs, in the vector's order.
__device__ __forceinline__ float mm_gv_dot8(uint4 x, uint4 w, float acc) {
    const __nv_bfloat162 *a = (const __nv_bfloat162 *)&x, *b = (const __nv_bfloat162 *)&w;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
        acc = fmaf(fa.x, fb.x, acc);
        acc = fmaf(fa.y, fb.y, acc);
    }
    return acc;
}

// One trip's W vectors of a lane: U per row from v0 on, zeros past the row.
template <int R, int U>
__device__ __forceinline__ void mm_gv_load(uint4 (&wv)[U][R], const uint4 *const (&w)[R], int64_t v0, int64_t kv) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t v = v0 + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) wv[u][r] = v < kv ? __ldcs(w[r] + v) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// acc[r][i] += the warp's sum of x_i . w_r over the 16-byte vectors [lo, hi) (i < m): each lane in the
// vectors' order, then across the warp (fixed shuffles: the same bits every run). wv holds the first
// trip's W when w_early (loaded before cu_pdl_wait), else it is loaded here.
// (mm_gv_sum_lanes, then mm_gv_warp_sum.)
template <int M, int R, int U>
__device__ __forceinline__ void mm_gv_sum_lanes(float (&acc)[R][M], uint4 (&wv)[U][R], const uint4 *const (&w)[R], const uint4 *x,
                                                int64_t kv, int m, int64_t lo, int64_t hi, int lane, bool w_early) {
    if (!w_early) mm_gv_load<R, U>(wv, w, lo + lane, hi);
    for (int64_t v0 = lo + lane; v0 < hi; v0 += 32 * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = v0 + 32 * u;
            if (v >= hi) break;
#pragma unroll
            for (int i = 0; i < M; i++) {
                if (i >= m) break;
                const uint4 xv = x[i * kv + v]; // a coherent load: x may have been written while this kernel waited (not ld.global.nc)
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][i] = mm_gv_dot8(xv, wv[u][r], acc[r][i]);
            }
        }
        if (v0 + 32 * U < hi) mm_gv_load<R, U>(wv, w, v0 + 32 * U, hi); // the next trip's
    }
}

// acc[r][i] summed across the warp (fixed shuffles: the same bits every run).
template <int M, int R> __device__ __forceinline__ void mm_gv_warp_sum(float (&acc)[R][M]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < M; i++)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], off);
}

template <int M, int R, int U>
__device__ __forceinline__ void mm_gv_sum(float (&acc)[R][M], uint4 (&wv)[U][R], const uint4 *const (&w)[R], const uint4 *x,
                                          int64_t kv, int m, int64_t lo, int64_t hi, int lane, bool w_early) {
    mm_gv_sum_lanes<M, R, U>(acc, wv, w, x, kv, m, lo, hi, lane, w_early);
    mm_gv_warp_sum<M, R>(acc);
}

// Output feature j of every row of x from its sums v (i < m): the folded norm's 1 / rms, the bias, C,
// then y in its dtype.
template <int M, typename TO, bool NRM>
__device__ __forceinline__ void mm_gv_out(const mm_gv_args &a, int q, int64_t j, const float (&v)[M], const float (&rs)[NRM ? M : 1]) {
    TO *y = (TO *)a.y[q];
    const TO *c = (const TO *)a.c[q], *bias = (const TO *)a.bias[q];
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (i >= a.m) break;
        float t = v[i];
        if constexpr (NRM) t *= rs[i];
        if (bias) t += cu_f(bias[j]);
        if (c) t += cu_f(c[i * a.n + j]);
        y[i * a.n + j] = cu_t<TO>(t);
    }
}

// A folded norm's 1 / rms of a row from the sum of its k squares, as the rmsnorm kernel computes it.
__device__ __forceinline__ float mm_gv_rs(float ss, int64_t k, float eps) { return 1.0f / sqrtf(ss / (float)k + eps); }

// The few-rows kernels' dynamic shared memory: a folded norm's rows x g (NRM).
extern __shared__ uint4 mm_gv_hs[];

// NRM (an RMSNorm folded in, mm_fold_norms): the block's m rows of x g (bf16, k a row) into hs, and every
// row's 1 / rms into rs (every thread's copy), from the norm's input x and gain g (16-byte vectors, kv a
// row). Every thread of the block takes part (a block barrier inside). The products then read hs as
// their x and scale each row's sums by rs: the norm's output but for where the rounding to bf16 falls.
// The squares are added in a fixed order (each thread's vectors in order, then the warp's shuffles, then
// the warps in order): the same bits every run.
template <int M>
__device__ __forceinline__ void mm_gv_norm_rows(uint4 *hs, float (&rs)[M], const uint4 *x, const uint4 *g, int64_t kv, int m,
                                                int64_t k, float eps) {
    __shared__ float part[MM_GV_WARPS][M];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    float ss[M];
#pragma unroll
    for (int i = 0; i < M; i++) {
        ss[i] = 0.0f;
        if (i >= m) continue;
        for (int64_t v = threadIdx.x; v < kv; v += blockDim.x) {
            const uint4 xv = x[i * kv + v], gv = g[v]; // x: a coherent load (written by the kernel before)
            const __nv_bfloat162 *xp = (const __nv_bfloat162 *)&xv, *gp = (const __nv_bfloat162 *)&gv;
            uint4 hv;
            __nv_bfloat162 *hp = (__nv_bfloat162 *)&hv;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 f = __bfloat1622float2(xp[e]), gg = __bfloat1622float2(gp[e]);
                ss[i] = fmaf(f.x, f.x, ss[i]);
                ss[i] = fmaf(f.y, f.y, ss[i]);
                hp[e] = __floats2bfloat162_rn(f.x * gg.x, f.y * gg.y);
            }
            hs[i * kv + v] = hv;
        }
    }
#pragma unroll
    for (int i = 0; i < M; i++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], off);
        if (lane == 0) part[warp][i] = ss[i];
    }
    __syncthreads(); // hs and part written
#pragma unroll
    for (int i = 0; i < M; i++) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < MM_GV_WARPS; w++) t += part[w][i];
        rs[i] = mm_gv_rs(t, k, eps);
    }
}

// Grid (ceil(n KS / (MM_GV_WARPS R)), pairs); M >= a.m rows of x (the rows past a.m are not read).
// KS warps share a group of R rows, warp w of the group taking the w-th of KS consecutive slices of
// k (split k: enough warps in flight when the rows are few, the 2.7B model's w2 and wo); their sums
// meet in shared memory and are added in the warps' order (the same bits every run). With split k
// the grid may be smaller (mm_gv_grid: one wave of the resident blocks): a group then takes rows the
// grid's groups apart, up to MM_GV_IT, the next row's first vectors loaded while the last one's sums
// cross the warp, and the block meets once at the end. It lets a product of few long rows take fewer,
// longer slices a warp and still fill the GPU (mm_gv_pick_m); the loop alone, at the same slices, was
// worth little (the 2.7B model's w2 at 8 slices: the batch-1 step 2.217 -> 2.214 ms, H200).
// Launched with programmatic dependent launch where the device has it (mm_gv_run): when every W is
// a parameter (a.w_early), the first trip's W is loaded before cu_pdl_wait(), under the end of the
// kernel before; x, the addend and y only after it. Every thread waits, the warps past n too, so the
// kernel never ends before the one it depends on.
// NRM: an RMSNorm folded in (mm_gv_norm_rows): x g of the rows in shared memory read as x, each row's sums
// scaled by its 1 / rms.
template <int M, int R, int KS, typename TO, bool NRM>
__global__ void __launch_bounds__(MM_GV_WARPS * 32) mm_gv_kernel(const mm_gv_args a) {
    static_assert(MM_GV_WARPS % KS == 0 && (KS == 1 || R == 1), "split k: KS divides the block's warps, one row a group");
    cu_pdl_trigger();
    const int q = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x / 32, part = warp % KS;
    const int64_t row0 = ((int64_t)blockIdx.x * (MM_GV_WARPS / KS) + warp / KS) * R;
    const bool live = row0 < a.n; // warp-uniform
    const int64_t kv = a.k / 8;   // 16-byte vectors in a row
    const int64_t slice = (kv + KS - 1) / KS, lo = min(kv, part * slice), hi = min(kv, lo + slice); // this warp's vectors
    const uint4 *x = (const uint4 *)a.x[q];
    const uint4 *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) w[r] = (const uint4 *)(a.w[q] + min(row0 + r, a.n - 1) * a.k); // past n: re-read the last
    constexpr int U = MM_GV_U(R);
    uint4 wv[U][R];
    if (live && a.w_early) mm_gv_load<R, U>(wv, w, lo + lane, hi);
    cu_pdl_wait();
    float rs[NRM ? M : 1];
    if constexpr (NRM) mm_gv_norm_rows<M>(mm_gv_hs, rs, x, (const uint4 *)a.ng, kv, (int)a.m, a.k, a.neps);
    const uint4 *xs = NRM ? mm_gv_hs : x;
    if constexpr (KS > 1) { // one row a group of KS warps: its rows the grid's groups apart (at most MM_GV_IT of them)
        __shared__ float part_sum[MM_GV_IT][MM_GV_WARPS][M];
        const int64_t stride = (int64_t)gridDim.x * (MM_GV_WARPS / KS);
        int nit = 0;
        for (int64_t j = row0; j < a.n && nit < MM_GV_IT; j += stride, nit++) {
            float acc[1][M];
#pragma unroll
            for (int i = 0; i < M; i++) acc[0][i] = 0.0f;
            mm_gv_sum_lanes<M, 1, U>(acc, wv, w, xs, kv, a.m, lo, hi, lane, a.w_early || nit > 0);
            if (j + stride < a.n && nit + 1 < MM_GV_IT) { // the next row's first vectors in flight during the shuffles
                w[0] = (const uint4 *)(a.w[q] + (j + stride) * a.k);
                mm_gv_load<1, U>(wv, w, lo + lane, hi);
            }
            mm_gv_warp_sum<M, 1>(acc);
            if (lane == 0)
#pragma unroll
                for (int i = 0; i < M; i++) part_sum[nit][warp][i] = acc[0][i];
        }
        __syncthreads();
        if (part > 0 || lane != 0) return;
        for (int it = 0; it < nit; it++) { // the group's first warp adds the other slices' sums, in order
            float v[M];
#pragma unroll
            for (int i = 0; i < M; i++) {
                v[i] = part_sum[it][warp][i];
#pragma unroll
                for (int p = 1; p < KS; p++) v[i] += part_sum[it][warp + p][i];
            }
            mm_gv_out<M, TO, NRM>(a, q, row0 + it * stride, v, rs);
        }
        return;
    }
    if (!live) return;
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < M; i++) acc[r][i] = 0.0f;
    mm_gv_sum<M, R, U>(acc, wv, w, xs, kv, a.m, lo, hi, lane, a.w_early);
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r >= a.n) break;
        mm_gv_out<M, TO, NRM>(a, q, row0 + r, acc[r], rs);
    }
}

// A matmul_group of two products of one x whose outputs a and b only a swiglu reads (mm_fold_plan):
// one launch, grid ceil(n KS / MM_GV_WARPS); each group of KS warps takes row j of both Ws (W_a =
// a.w[ia], W_b = the other), warp w of the group the w-th slice of k as mm_gv_kernel splits it. Each
// row is summed as mm_gv_kernel sums it (lane by lane in the vectors' order, across the warp, then the
// slices in order), rounded to bf16 as the product would store a and b, and silu(a) b written to y
// (rounded to bf16) as the swiglu kernel computes it. With KS = 1 those are the bits of the two ops
// (mm_gv_kernel's bits do not depend on its rows a warp when k is whole). NRM: an RMSNorm folded in, as in
// mm_gv_kernel.
template <int M, int KS, bool NRM>
__global__ void __launch_bounds__(MM_GV_WARPS * 32) mm_gv_glu_kernel(const mm_gv_args a, int ia, bf16 *__restrict__ y) {
    static_assert(MM_GV_WARPS % KS == 0, "KS divides the block's warps");
    cu_pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, part = warp % KS;
    const int64_t j = (int64_t)blockIdx.x * (MM_GV_WARPS / KS) + warp / KS; // the output feature
    const bool live = j < a.n;                                              // warp-uniform
    const int64_t kv = a.k / 8;
    const int64_t slice = (kv + KS - 1) / KS, lo = min(kv, part * slice), hi = min(kv, lo + slice);
    const uint4 *x = (const uint4 *)a.x[0];
    const uint4 *w[2] = {(const uint4 *)(a.w[ia] + min(j, a.n - 1) * a.k), (const uint4 *)(a.w[1 - ia] + min(j, a.n - 1) * a.k)};
    constexpr int U = MM_GV_U(2);
    uint4 wv[U][2];
    if (live && a.w_early) mm_gv_load<2, U>(wv, w, lo + lane, hi);
    cu_pdl_wait();
    float rs[NRM ? M : 1];
    if constexpr (NRM) mm_gv_norm_rows<M>(mm_gv_hs, rs, x, (const uint4 *)a.ng, kv, (int)a.m, a.k, a.neps);
    if (KS == 1 && !live) return; // (split: every warp reaches the barrier below)
    float acc[2][M];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int i = 0; i < M; i++) acc[r][i] = 0.0f;
    if (live) {
        if constexpr (NRM)
            mm_gv_sum<M, 2, U>(acc, wv, w, mm_gv_hs, kv, a.m, lo, hi, lane, a.w_early);
        else
            mm_gv_sum<M, 2, U>(acc, wv, w, x, kv, a.m, lo, hi, lane, a.w_early);
    }
    if (KS > 1) { // the group's first warp adds the other slices' sums, in order
        __shared__ float part_sum[MM_GV_WARPS][2][M];
        if (lane == 0 && part > 0)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < M; i++) part_sum[warp][r][i] = acc[r][i];
        __syncthreads();
        if (part > 0 || !live) return;
#pragma unroll
        for (int p = 1; p < KS; p++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int i = 0; i < M; i++) acc[r][i] += part_sum[warp + p][r][i];
    }
    if (lane != 0) return;
    if constexpr (NRM) {
#pragma unroll
        for (int i = 0; i < M; i++) {
            acc[0][i] *= rs[i];
            acc[1][i] *= rs[i];
        }
    }
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (i >= a.m) break;
        const float fa = __bfloat162float(__float2bfloat16_rn(acc[0][i])), fb = __bfloat162float(__float2bfloat16_rn(acc[1][i]));
        y[i * a.n + j] = __float2bfloat16_rn(fa * (1.0f / (1.0f + expf(-fa))) * fb);
    }
}

// The dynamic shared memory of a few-rows launch: a folded norm's m rows of k (bf16; at most
// MM_GV_NORM_SMEM, mm_fold_norms: with the kernels' static shared memory within the 48 KiB a launch
// has without opting in), else none.
#define MM_GV_NORM_SMEM (46 * 1024)
static size_t mm_gv_smem(const mm_gv_args *a, bool nrm) { return nrm ? (size_t)(a->m * a->k) * sizeof(bf16) : 0; }

// Blocks of mm_gv_glu_kernel<M, KS> resident on one multiprocessor (1 when the query fails).
template <int M, int KS> static int mm_gv_glu_resident(void) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mm_gv_glu_kernel<M, KS, false>, MM_GV_WARPS * 32, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n > 0 ? n : 1;
}

template <int M, int KS, bool NRM>
static cudaError_t mm_gv_glu_launch_m(const mm_gv_args *a, int ia, bf16 *y, bool pdl, cudaStream_t st) {
    const dim3 grid((unsigned)((a->n * KS + MM_GV_WARPS - 1) / MM_GV_WARPS)), block(MM_GV_WARPS * 32);
    return cu_launch_pdl(pdl, mm_gv_glu_kernel<M, KS, NRM>, grid, block, mm_gv_smem(a, NRM), st, *a, ia, y);
}

template <int KS, bool NRM> static cudaError_t mm_gv_glu_launch(const mm_gv_args *a, int ia, bf16 *y, bool pdl, cudaStream_t st) {
    if constexpr (NRM) // a norm folds into one row only (mm_nrm_reader)
        return a->m == 1 ? mm_gv_glu_launch_m<1, KS, true>(a, ia, y, pdl, st) : cudaErrorInvalidValue;
    return a->m <= 1   ? mm_gv_glu_launch_m<1, KS, NRM>(a, ia, y, pdl, st)
           : a->m <= 2 ? mm_gv_glu_launch_m<2, KS, NRM>(a, ia, y, pdl, st)
           : a->m <= 4 ? mm_gv_glu_launch_m<4, KS, NRM>(a, ia, y, pdl, st)
                       : mm_gv_glu_launch_m<8, KS, NRM>(a, ia, y, pdl, st);
}

// The warps sharing a row pair's k (1 or 2) for m rows of x and n output features of k inputs: 2 when
// its grid uses the resident block slots better over its waves than 1 by more than 2% and leaves each
// warp 128 vectors at least (the 2.7B model's w1/w3: 1280 blocks in 528 slots, 81%, against 2560, 97%).
static double mm_gv_wave_use(int64_t blocks, int64_t slots); // (below)

template <int M> static int mm_gv_glu_pick_m(int64_t n, int64_t k, int sms) {
    const int64_t s = sms > 0 ? sms : 132, b1 = (n + MM_GV_WARPS - 1) / MM_GV_WARPS;
    if (k / 8 / 2 < 128) return 1;
    const double u1 = mm_gv_wave_use(b1, s * mm_gv_glu_resident<M, 1>()), u2 = mm_gv_wave_use(2 * b1, s * mm_gv_glu_resident<M, 2>());
    return u2 > u1 * 1.02 ? 2 : 1;
}

static int mm_gv_glu_pick(int64_t m, int64_t n, int64_t k, int sms) {
    return m <= 1 ? mm_gv_glu_pick_m<1>(n, k, sms)
         : m <= 2 ? mm_gv_glu_pick_m<2>(n, k, sms)
         : m <= 4 ? mm_gv_glu_pick_m<4>(n, k, sms)
                  : mm_gv_glu_pick_m<8>(n, k, sms);
}

// Whether the few-rows kernel computes key k's product: bf16 inputs, x · Wᵀ (cuBLASLt's A, our W,
// transposed; its B, our x, not), at most MM_GV_ROWS rows, k a multiple of 8, one product (a group's
// pairs each one).
static bool mm_gv_fits(const mm_key *k) {
#ifdef STG_NO_GEMV
    (void)k;
    return false;
#else
    return k->a_type == CUDA_R_16BF && (k->c_type == CUDA_R_16BF || k->c_type == CUDA_R_32F) && k->trans_a == CUBLAS_OP_T &&
           k->trans_b == CUBLAS_OP_N && k->n >= 1 && k->n <= MM_GV_ROWS && k->k % 8 == 0 && k->k > 0 && k->m > 0 &&
           (k->batch == 1 || k->ptr_array) && k->ld_a == k->k && k->ld_b == k->k && k->ld_c == k->m;
#endif
}

static bool mm_gv_aligned(const void *x, const void *w) { return (((uintptr_t)x | (uintptr_t)w) & 15u) == 0; }

// Blocks of mm_gv_kernel<M, R, KS, TO> resident on one multiprocessor (the occupancy query; 1 when it
// fails, which only makes the choice below prefer fewer rows a warp). Asked at prepare, never while
// a graph is being captured.
template <int M, int R, int KS, typename TO> static int mm_gv_resident(void) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mm_gv_kernel<M, R, KS, TO, false>, MM_GV_WARPS * 32, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n > 0 ? n : 1;
}

// The share of the GPU's resident block slots a grid of `blocks` keeps busy over its waves: a
// bandwidth-bound product whose last wave is a fifth full runs that wave with a fifth of the loads
// in flight.
static double mm_gv_wave_use(int64_t blocks, int64_t slots) {
    if (slots <= 0) return 0.0;
    const int64_t waves = (blocks + slots - 1) / slots;
    return (double)blocks / (double)(waves * slots);
}

// The shape of the launch for m rows of x, n output features of k inputs and npairs products in one
// launch: *rows (R: 1, 2 or 4 rows of W a warp) and *split (KS: warps sharing a row's k), each chosen
// by how well its grid uses the GPU's resident block slots over its waves. When a grid of one row a
// warp fills the slots at least once, KS = 1 and R is the best (the 2.7B model's w1/w3 pair at 4 rows:
// 640 blocks in 264 slots, 2.42 waves, 81%; at 1 row: 2560 in 528, 97%), the larger R when within 2%
// (x read by fewer warps); every R gives the same bits (a row's sum does not depend on how many rows
// its warp has). Fewer rows (the 2.7B model's w2, 2560 rows of 10240: 320 blocks at one row a warp for
// 528 slots, 61%) split k at one row a group instead: the best KS of 1, 2, 4 and 8 (w2: 8, 97%), the
// smaller when within 2% of it, no warp left fewer than 128 vectors (four a lane: the 2.7B model's wo,
// 320 vectors a row, took 0.336 ms over 32 layers split in four against 0.318 whole, H200). With k split,
// a single product's grid is one wave of resident blocks (*blocks), each group of warps looping over
// rows (mm_gv_kernel); then the least KS that still gives every group a full trip (32 MM_GV_U(1)
// vectors a warp) and two waves of groups (each block two rows or more, so the last round's imbalance
// costs at most a third) goes before the wave rule: the 2.7B model's w2 at 4 (10 vectors a lane, 2.4
// rows a block) took the batch-1 step 2.214 -> 2.192 ms against 8 (5 a lane, 4.85 rows), and 2 ways (1.2
// rows a block) 2.317 (H200; docs/perf/LOG.md, twenty-ninth session). STG_NO_GV_LOOP=1: a block a group
// and the wave rule alone.
template <int M, typename TO>
static void mm_gv_pick_m(int64_t n, int64_t k, int npairs, int sms, int *rows, int *split, int64_t *blocks) {
    const int64_t s = sms > 0 ? sms : 132, kv = k / 8;
    *blocks = 0;
    const int64_t b1 = (n + MM_GV_WARPS - 1) / MM_GV_WARPS * npairs; // blocks at one row a warp
    const double u1 = mm_gv_wave_use(b1, s * mm_gv_resident<M, 1, 1, TO>());
    *rows = 1;
    *split = 1;
    if (b1 < s * mm_gv_resident<M, 1, 1, TO>()) {
        const int ks[3] = {2, 4, 8}, res[3] = {mm_gv_resident<M, 1, 2, TO>(), mm_gv_resident<M, 1, 4, TO>(), mm_gv_resident<M, 1, 8, TO>()};
        double best = u1;
        for (int i = 0; i < 3 && kv / ks[i] >= 128; i++) {
            const double u = mm_gv_wave_use(b1 * ks[i], s * res[i]);
            if (u > best * 1.02) best = u, *split = ks[i];
        }
        const char *nl = getenv("STG_NO_GV_LOOP");
        if (*split == 1 || npairs != 1 || (nl && *nl && *nl != '0')) return;
        for (int i = 0; i < 3; i++)
            if (kv / ks[i] >= 32 * MM_GV_U(1) && b1 * ks[i] >= 2 * s * res[i]) {
                *split = ks[i];
                break;
            }
        for (int i = 0; i < 3; i++)
            if (ks[i] == *split) *blocks = s * res[i];
        return;
    }
    const double u4 = mm_gv_wave_use((n + 4 * MM_GV_WARPS - 1) / (4 * MM_GV_WARPS) * npairs, s * mm_gv_resident<M, 4, 1, TO>()),
                 u2 = mm_gv_wave_use((n + 2 * MM_GV_WARPS - 1) / (2 * MM_GV_WARPS) * npairs, s * mm_gv_resident<M, 2, 1, TO>());
    *rows = u4 + 0.02 >= u2 && u4 + 0.02 >= u1 ? 4 : u2 + 0.02 >= u1 ? 2 : 1;
}

template <typename TO>
static void mm_gv_pick_t(int64_t m, int64_t n, int64_t k, int npairs, int sms, int *rows, int *split, int64_t *blocks) {
    if (m <= 1) mm_gv_pick_m<1, TO>(n, k, npairs, sms, rows, split, blocks);
    else if (m <= 2) mm_gv_pick_m<2, TO>(n, k, npairs, sms, rows, split, blocks);
    else if (m <= 4) mm_gv_pick_m<4, TO>(n, k, npairs, sms, rows, split, blocks);
    else mm_gv_pick_m<8, TO>(n, k, npairs, sms, rows, split, blocks);
}

// blocks: the grid's x (0: one row group a block); with split k never fewer than MM_GV_IT rows a group need.
template <int M, int R, int KS, typename TO, bool NRM>
static cudaError_t mm_gv_launch_shape(const mm_gv_args *a, int npairs, int64_t blocks, bool pdl, cudaStream_t st) {
    constexpr int64_t per_block = (int64_t)MM_GV_WARPS / KS * R; // rows of W a block
    const int64_t full = (a->n + per_block - 1) / per_block, least = (full + MM_GV_IT - 1) / MM_GV_IT;
    const int64_t gx = KS == 1 || blocks <= 0 || blocks > full ? full : blocks < least ? least : blocks;
    return cu_launch_pdl(pdl, mm_gv_kernel<M, R, KS, TO, NRM>, dim3((unsigned)gx, (unsigned)npairs), dim3(MM_GV_WARPS * 32),
                         mm_gv_smem(a, NRM), st, *a);
}

template <int M, typename TO, bool NRM>
static cudaError_t mm_gv_launch_rows(const mm_gv_args *a, int npairs, int rows, int split, int64_t blocks, bool pdl, cudaStream_t st) {
    switch (split) {
    case 2: return mm_gv_launch_shape<M, 1, 2, TO, NRM>(a, npairs, blocks, pdl, st);
    case 4: return mm_gv_launch_shape<M, 1, 4, TO, NRM>(a, npairs, blocks, pdl, st);
    case 8: return mm_gv_launch_shape<M, 1, 8, TO, NRM>(a, npairs, blocks, pdl, st);
    default: break;
    }
    if (rows == 4) return mm_gv_launch_shape<M, 4, 1, TO, NRM>(a, npairs, 0, pdl, st);
    if (rows == 2) return mm_gv_launch_shape<M, 2, 1, TO, NRM>(a, npairs, 0, pdl, st);
    return mm_gv_launch_shape<M, 1, 1, TO, NRM>(a, npairs, 0, pdl, st);
}

template <typename TO, bool NRM>
static cudaError_t mm_gv_launch(const mm_gv_args *a, int npairs, int rows, int split, int64_t blocks, bool pdl, cudaStream_t st) {
    if constexpr (NRM) // a norm folds into one row only (mm_nrm_reader)
        return a->m == 1 ? mm_gv_launch_rows<1, TO, true>(a, npairs, rows, split, blocks, pdl, st) : cudaErrorInvalidValue;
    if (a->m <= 1) return mm_gv_launch_rows<1, TO, NRM>(a, npairs, rows, split, blocks, pdl, st);
    if (a->m <= 2) return mm_gv_launch_rows<2, TO, NRM>(a, npairs, rows, split, blocks, pdl, st);
    if (a->m <= 4) return mm_gv_launch_rows<4, TO, NRM>(a, npairs, rows, split, blocks, pdl, st);
    return mm_gv_launch_rows<8, TO, NRM>(a, npairs, rows, split, blocks, pdl, st);
}

// ---- few rows on the tensor cores: 2 to 8 rows of x -------------------------------------------------
// From 2 rows on the few-rows kernel's FMAs, not the weights' bytes, bound it (H200, the 2.7B model:
// 2.95 / 4.21 / 7.19 ms a step at 2 / 4 / 8 sequences against 2.40 at 1, where reading the weights bounds
// them at 1.8 / 1.9 / 2.1 ms; docs/perf/LOG.md, twenty-fourth session). These kernels take the products
// to mma.sync m16n8k16 (bf16 in, f32 sums): A the rows of x (sequences 0 .. 7; A's rows 8 .. 15 zero),
// B eight rows of W (eight output features, one a column), k in chunks of 32 (four 16-byte vectors). Lane
// (g = lane / 4, t = lane % 4) loads vector 4 c + t of W row f0 + g and of x row g (zero past m or past
// the row) for chunk c; its vector's elements 0-3 stand for its k indices 2t, 2t + 1, 2t + 8, 2t + 9 of
// the chunk's first product and elements 4-7 for those of its second. Every lane maps its k indices to the
// same places of the chunk for A and for B, so the two products sum the chunk's 32 products of x and W,
// in another order. C: c0, c1 are sequence g's sums of features f0 + 2t and f0 + 2t + 1 (c2, c3: A's zero
// rows). KS warps share a tile of 8 features, each a slice of the chunks, added in shared memory in the
// warps' order; the sums are the same bits every run. Launched and prefetched as mm_gv_kernel is.
// Measured (H200, the 2.7B model, 512 + 512 tokens; docs/perf/LOG.md, twenty-fifth session): 2 / 3 / 4 / 8
// rows 2.61 / 2.71 / 2.79 / 3.15 ms a step against the CUDA-core kernels' 2.95 / 3.76 / 4.21 / 7.20.

#define MM_TC_U 4 // chunks of a lane in flight (8 ran 10-12% slower a step at 2 to 8 rows; H200, twenty-fifth session)

__device__ __forceinline__ void mm_tc_mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

// Chunks c0 .. c0 + U - 1 (below hi) of NW W rows: each lane's vector 4 c + t, zeros past the row (kv vectors).
template <int NW, int U>
__device__ __forceinline__ void mm_tc_load(uint4 (&wv)[U][NW], const uint4 *const (&w)[NW], int64_t c0, int64_t hi, int64_t kv, int t) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t ch = c0 + u, v = 4 * ch + t;
#pragma unroll
        for (int r = 0; r < NW; r++) wv[u][r] = ch < hi && v < kv ? __ldcs(w[r] + v) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// Chunks c0 .. c0 + U - 1 (below hi) of x row xr: each lane's vector 4 c + t, zeros past the row or when
// !xlive. Plain loads (coherent): x may have been written while this kernel waited.
template <int U>
__device__ __forceinline__ void mm_tc_xload(uint4 (&xv)[U], const uint4 *xr, bool xlive, int64_t c0, int64_t hi, int64_t kv, int t) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t ch = c0 + u, v = 4 * ch + t;
        xv[u] = xlive && ch < hi && v < kv ? xr[v] : make_uint4(0u, 0u, 0u, 0u);
    }
}

// c[r] += the products of chunks [lo, hi) of x row xr (zeros when !xlive) and W row w[r] (the caller's tile);
// wv holds the first U chunks when w_early (loaded before cu_pdl_wait), else they are loaded here. A trip's x
// vectors are loaded with its W, all in flight together (x loaded inside the products' loop waited one L2
// round trip a chunk).
template <int NW, int U>
__device__ __forceinline__ void mm_tc_sum(float (&c)[NW][4], uint4 (&wv)[U][NW], const uint4 *const (&w)[NW], const uint4 *xr,
                                          bool xlive, int64_t kv, int64_t lo, int64_t hi, int t, bool w_early) {
    if (!w_early) mm_tc_load<NW, U>(wv, w, lo, hi, kv, t);
    uint4 xv[U];
    mm_tc_xload<U>(xv, xr, xlive, lo, hi, kv, t);
    for (int64_t c0 = lo; c0 < hi; c0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u >= hi) break; // warp-uniform: every lane takes part in the products
#pragma unroll
            for (int r = 0; r < NW; r++) {
                mm_tc_mma(c[r], xv[u].x, xv[u].y, wv[u][r].x, wv[u][r].y);
                mm_tc_mma(c[r], xv[u].z, xv[u].w, wv[u][r].z, wv[u][r].w);
            }
        }
        if (c0 + U < hi) {
            mm_tc_load<NW, U>(wv, w, c0 + U, hi, kv, t);
            mm_tc_xload<U>(xv, xr, xlive, c0 + U, hi, kv, t);
        }
    }
}

// Adds the KS slices' sums of the block's tiles in the warps' order (shared memory): true for the lanes of
// each tile's first warp, which then hold the whole sums in c.
template <int NW, int KS>
__device__ __forceinline__ bool mm_tc_gather(float (&c)[NW][4], int warp, int lane, int part, bool live) {
    if constexpr (KS > 1) {
        __shared__ float part_sum[MM_GV_WARPS][NW][2][32];
        if (part > 0)
#pragma unroll
            for (int r = 0; r < NW; r++) {
                part_sum[warp][r][0][lane] = c[r][0];
                part_sum[warp][r][1][lane] = c[r][1];
            }
        __syncthreads();
        if (part > 0 || !live) return false;
#pragma unroll
        for (int p = 1; p < KS; p++)
#pragma unroll
            for (int r = 0; r < NW; r++) {
                c[r][0] += part_sum[warp + p][r][0][lane];
                c[r][1] += part_sum[warp + p][r][1][lane];
            }
    }
    return live;
}

// Grid (ceil(n KS / 64), pairs): 8 / KS tiles of 8 features a block. y, bias and C as mm_gv_kernel.
template <int KS, typename TO>
__global__ void __launch_bounds__(MM_GV_WARPS * 32) mm_tc_kernel(const mm_gv_args a) {
    static_assert(MM_GV_WARPS % KS == 0, "KS divides the block's warps");
    cu_pdl_trigger();
    const int q = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x / 32, part = warp % KS, g = lane >> 2, t = lane & 3;
    const int64_t f0 = ((int64_t)blockIdx.x * (MM_GV_WARPS / KS) + warp / KS) * 8; // the tile's first feature
    const bool live = f0 < a.n;                                                      // warp-uniform
    const int64_t kv = a.k / 8, nch = (kv + 3) / 4, slice = (nch + KS - 1) / KS, lo = min(nch, part * slice), hi = min(nch, lo + slice);
    const uint4 *const w[1] = {(const uint4 *)(a.w[q] + min(f0 + g, a.n - 1) * a.k)}; // past n: re-read the last
    uint4 wv[MM_TC_U][1];
    if (live && a.w_early) mm_tc_load<1, MM_TC_U>(wv, w, lo, hi, kv, t);
    cu_pdl_wait();
    if (KS == 1 && !live) return; // (split: every warp reaches the barrier in mm_tc_gather)
    float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    if (live) mm_tc_sum<1, MM_TC_U>(c, wv, w, (const uint4 *)a.x[q] + (g < a.m ? g : 0) * kv, g < a.m, kv, lo, hi, t, a.w_early);
    if (!mm_tc_gather<1, KS>(c, warp, lane, part, live) || g >= a.m) return;
    TO *y = (TO *)a.y[q];
    const TO *cc = (const TO *)a.c[q], *bias = (const TO *)a.bias[q];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int64_t j = f0 + 2 * t + e;
        if (j >= a.n) break;
        float v = c[0][e];
        if (bias) v += cu_f(bias[j]);
        if (cc) v += cu_f(cc[g * a.n + j]);
        y[g * a.n + j] = cu_t<TO>(v);
    }
}

// The swiglu pair on the tensor cores (mm_fold_plan, as mm_gv_glu_kernel): each warp's tile of both Ws
// (W_a = a.w[ia]), each sum rounded to bf16 as the product stores it, then silu(a) b rounded to bf16.
template <int KS>
__global__ void __launch_bounds__(MM_GV_WARPS * 32) mm_tc_glu_kernel(const mm_gv_args a, int ia, bf16 *__restrict__ y) {
    static_assert(MM_GV_WARPS % KS == 0, "KS divides the block's warps");
    cu_pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, part = warp % KS, g = lane >> 2, t = lane & 3;
    const int64_t f0 = ((int64_t)blockIdx.x * (MM_GV_WARPS / KS) + warp / KS) * 8;
    const bool live = f0 < a.n;
    const int64_t kv = a.k / 8, nch = (kv + 3) / 4, slice = (nch + KS - 1) / KS, lo = min(nch, part * slice), hi = min(nch, lo + slice);
    const int64_t row = min(f0 + g, a.n - 1) * a.k;
    const uint4 *const w[2] = {(const uint4 *)(a.w[ia] + row), (const uint4 *)(a.w[1 - ia] + row)};
    uint4 wv[MM_TC_U][2];
    if (live && a.w_early) mm_tc_load<2, MM_TC_U>(wv, w, lo, hi, kv, t);
    cu_pdl_wait();
    if (KS == 1 && !live) return;
    float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    if (live) mm_tc_sum<2, MM_TC_U>(c, wv, w, (const uint4 *)a.x[0] + (g < a.m ? g : 0) * kv, g < a.m, kv, lo, hi, t, a.w_early);
    if (!mm_tc_gather<2, KS>(c, warp, lane, part, live) || g >= a.m) return;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int64_t j = f0 + 2 * t + e;
        if (j >= a.n) break;
        const float fa = __bfloat162float(__float2bfloat16_rn(c[0][e])), fb = __bfloat162float(__float2bfloat16_rn(c[1][e]));
        y[g * a.n + j] = __float2bfloat16_rn(fa * (1.0f / (1.0f + expf(-fa))) * fb);
    }
}

template <int KS, typename TO> static cudaError_t mm_tc_launch_ks(const mm_gv_args *a, int npairs, bool pdl, cudaStream_t st) {
    return cu_launch_pdl(pdl, mm_tc_kernel<KS, TO>, dim3((unsigned)((a->n * KS + 63) / 64), (unsigned)npairs), dim3(MM_GV_WARPS * 32), 0,
                         st, *a);
}

template <typename TO> static cudaError_t mm_tc_launch(const mm_gv_args *a, int npairs, int split, bool pdl, cudaStream_t st) {
    return split == 8   ? mm_tc_launch_ks<8, TO>(a, npairs, pdl, st)
           : split == 4 ? mm_tc_launch_ks<4, TO>(a, npairs, pdl, st)
           : split == 2 ? mm_tc_launch_ks<2, TO>(a, npairs, pdl, st)
                        : mm_tc_launch_ks<1, TO>(a, npairs, pdl, st);
}

template <int KS> static cudaError_t mm_tc_glu_launch_ks(const mm_gv_args *a, int ia, bf16 *y, bool pdl, cudaStream_t st) {
    return cu_launch_pdl(pdl, mm_tc_glu_kernel<KS>, dim3((unsigned)((a->n * KS + 63) / 64)), dim3(MM_GV_WARPS * 32), 0, st, *a, ia, y);
}

static cudaError_t mm_tc_glu_launch(const mm_gv_args *a, int ia, bf16 *y, int split, bool pdl, cudaStream_t st) {
    return split == 8   ? mm_tc_glu_launch_ks<8>(a, ia, y, pdl, st)
           : split == 4 ? mm_tc_glu_launch_ks<4>(a, ia, y, pdl, st)
           : split == 2 ? mm_tc_glu_launch_ks<2>(a, ia, y, pdl, st)
                        : mm_tc_glu_launch_ks<1>(a, ia, y, pdl, st);
}

// Blocks of a tensor-core kernel resident on one multiprocessor (1 when the query fails).
template <typename K> static int mm_tc_resident(K kernel) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, MM_GV_WARPS * 32, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n > 0 ? n : 1;
}

// Whether the tensor-core kernels take a few-rows product of m rows: 2 rows or more, unless STG_NO_GEMV_TC
// is set (the CUDA-core kernels then take every row count, for comparisons).
static bool mm_tc_takes(int64_t m) { return m >= 2 && !getenv("STG_NO_GEMV_TC"); }

// The warps sharing a tile's k (KS: 1, 2, 4 or 8) for n features of k inputs, npairs launches' worth of
// tiles (glu: the swiglu kernel): the best use of the resident block slots over the waves, the smaller KS
// when within 2%, no warp left fewer than 8 chunks (256 inputs) unless KS is 1.
static int mm_tc_pick(int64_t n, int64_t k, int npairs, bool glu, bool bf16_out, int sms) {
    const int64_t s = sms > 0 ? sms : 132, nch = (k / 8 + 3) / 4;
    const int ks[4] = {1, 2, 4, 8};
    int best = 1;
    double ub = -1.0;
    for (int i = 0; i < 4; i++) {
        if (i > 0 && nch / ks[i] < 8) break;
        const int res = glu ? (ks[i] == 1 ? mm_tc_resident(mm_tc_glu_kernel<1>) : ks[i] == 2 ? mm_tc_resident(mm_tc_glu_kernel<2>)
                               : ks[i] == 4 ? mm_tc_resident(mm_tc_glu_kernel<4>) : mm_tc_resident(mm_tc_glu_kernel<8>))
                      : bf16_out ? (ks[i] == 1 ? mm_tc_resident(mm_tc_kernel<1, bf16>) : ks[i] == 2 ? mm_tc_resident(mm_tc_kernel<2, bf16>)
                                    : ks[i] == 4 ? mm_tc_resident(mm_tc_kernel<4, bf16>) : mm_tc_resident(mm_tc_kernel<8, bf16>))
                                 : (ks[i] == 1 ? mm_tc_resident(mm_tc_kernel<1, float>) : ks[i] == 2 ? mm_tc_resident(mm_tc_kernel<2, float>)
                                    : ks[i] == 4 ? mm_tc_resident(mm_tc_kernel<4, float>) : mm_tc_resident(mm_tc_kernel<8, float>));
        const double u = mm_gv_wave_use((n * ks[i] + 63) / 64 * npairs, s * res);
        if (u > ub * 1.02) ub = u, best = ks[i];
    }
    return best;
}

// Runs op o's product (plan p, key fitting mm_gv_fits) with the few-rows kernel when every x and W
// is 16-byte aligned: 1 when it ran, 0 when cuBLASLt must, -1 with err set.
static int mm_gv_run(stg_cuda *c, const stg_op *o, const cuda_mm_plan *p, void *const *ptr, stg_err *err) {
    mm_gv_args a;
    memset(&a, 0, sizeof a);
    const int n = p->npairs ? p->npairs : 1, addend = p->npairs ? -1 : ops_addend_of(o);
    for (int q = 0; q < n; q++) {
        const int ix = p->npairs ? o->in[2 * q] : p->in0, iw = p->npairs ? o->in[2 * q + 1] : p->in1,
                  iy = p->npairs ? o->out[q] : p->out;
        if (!mm_gv_aligned(ptr[ix], ptr[iw])) // (a fold: the swiglu or norm wrote nothing, no other kernel can take it)
            return p->glu || p->nrm ? stg_errf(err, "matmul (few rows): the tensors of a product with its swiglu or norm moved off 16 bytes") : 0;
        a.x[q] = (const bf16 *)ptr[p->nrm ? p->nrm_x : ix];
        a.w[q] = (const bf16 *)ptr[iw];
        a.y[q] = ptr[iy];
        a.c[q] = addend > 0 ? ptr[o->in[addend]] : cuda_accumulating(c, o, 0) ? ptr[iy] : NULL;
        a.bias[q] = !p->npairs && p->bias >= 0 ? ptr[p->bias] : NULL;
    }
    a.m = p->key.n; // ours: cuBLASLt's n
    a.k = p->key.k;
    a.n = p->key.m;
    a.w_early = p->gv_w_early && c->pdl;
    if (p->nrm) { // (mm_fold_plan: aligned when folded, and the planned addresses do not move)
        if (!mm_gv_aligned(ptr[p->nrm_x], ptr[p->nrm_g]))
            return stg_errf(err, "matmul (few rows): the input or gain of its folded norm moved off 16 bytes");
        a.ng = (const bf16 *)ptr[p->nrm_g];
        a.neps = p->nrm_eps;
    }
    if (p->glu && p->tc) { // the swiglu pair on the tensor cores (2 rows or more)
        cudaError_t e = mm_tc_glu_launch(&a, p->glu_a, (bf16 *)ptr[p->glu_out], p->tc_glu_split, c->pdl, c->stream);
        if (e != cudaSuccess) return stg_errf(err, "matmul (few rows, tensor cores, swiglu): launch: %s", cudaGetErrorString(e));
        CUDA_LAUNCH_CHECK(err, "matmul (few rows, tensor cores, swiglu)");
        return 1;
    }
    if (p->tc) {
        cudaError_t e = p->key.c_type == CUDA_R_16BF ? mm_tc_launch<bf16>(&a, n, p->tc_split, c->pdl, c->stream)
                                                     : mm_tc_launch<float>(&a, n, p->tc_split, c->pdl, c->stream);
        if (e != cudaSuccess) return stg_errf(err, "matmul (few rows, tensor cores): launch: %s", cudaGetErrorString(e));
        CUDA_LAUNCH_CHECK(err, "matmul (few rows, tensor cores)");
        return 1;
    }
    if (p->glu) { // bf16 out (mm_fold_plan): one launch writing the swiglu's output
        bf16 *y = (bf16 *)ptr[p->glu_out];
        cudaError_t e = p->glu_split == 2 ? (p->nrm ? mm_gv_glu_launch<2, true>(&a, p->glu_a, y, c->pdl, c->stream)
                                                    : mm_gv_glu_launch<2, false>(&a, p->glu_a, y, c->pdl, c->stream))
                                          : (p->nrm ? mm_gv_glu_launch<1, true>(&a, p->glu_a, y, c->pdl, c->stream)
                                                    : mm_gv_glu_launch<1, false>(&a, p->glu_a, y, c->pdl, c->stream));
        if (e != cudaSuccess) return stg_errf(err, "matmul (few rows, swiglu): launch: %s", cudaGetErrorString(e));
        CUDA_LAUNCH_CHECK(err, "matmul (few rows, swiglu)");
        return 1;
    }
    // (a folded norm only before a bf16 product: mm_fold_plan)
    cudaError_t e = p->key.c_type != CUDA_R_16BF ? mm_gv_launch<float, false>(&a, n, p->gv_rows, p->gv_split, p->gv_blocks, c->pdl, c->stream)
                    : p->nrm ? mm_gv_launch<bf16, true>(&a, n, p->gv_rows, p->gv_split, p->gv_blocks, c->pdl, c->stream)
                             : mm_gv_launch<bf16, false>(&a, n, p->gv_rows, p->gv_split, p->gv_blocks, c->pdl, c->stream);
    if (e != cudaSuccess) return stg_errf(err, "matmul (few rows): launch: %s", cudaGetErrorString(e));
    CUDA_LAUNCH_CHECK(err, "matmul (few rows)");
    return 1;
}

// A matmul_group's key (its first pair's, batched over the pairs through pointer tables) and its
// tables, written to `dtab` (device memory of cuda_mm_table_bytes) from ptr.
static int mm_group_setup(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *dtab, cuda_mm_plan *p,
                          stg_err *err) {
    const stg_op *o = &g->ops[op];
    if (o->n_out < 2 || o->n_out > STG_MAX_OUT || o->n_in != 2 * o->n_out)
        return stg_errf(err, "matmul_group: %d inputs for %d outputs", o->n_in, o->n_out);
    p->npairs = o->n_out;
    for (int q = 0; q < o->n_out; q++) {
        mm_key kq;
        if (mm_key_of(c, g, op, q, &kq, err)) return -1;
        if (kq.batch != 1)
            return stg_errf_at(err, o->loc, "matmul_group: pair %d is a batch of %lld products; each pair must be one", q,
                               (long long)kq.batch);
        if (q == 0) p->key = kq;
        else if (memcmp(&kq, &p->key, sizeof kq) != 0)
            return stg_errf_at(err, o->loc, "matmul_group: pair %d differs from the first in shape or type", q);
        p->ins[2 * q] = o->in[2 * q];
        p->ins[2 * q + 1] = o->in[2 * q + 1];
        p->outs[q] = o->out[q];
    }
    p->key.batch = o->n_out;
    p->key.ptr_array = 1;
    if (!ptr || !dtab) return stg_errf(err, "matmul_group: prepared without the tensors' addresses");
    int n = o->n_out;
    for (int q = 0; q < n; q++) {
        p->htab[q] = ptr[o->in[2 * q + 1]];  // cuBLASLt's A: our B
        p->htab[n + q] = ptr[o->in[2 * q]];  // its B: our A
        p->htab[2 * n + q] = ptr[o->out[q]]; // C (beta 0: not read) and D
        p->htab[3 * n + q] = ptr[o->out[q]];
    }
    p->dtab = (void **)dtab;
    CUDA_CHECK(err, cudaMemcpy(dtab, p->htab, 4 * (size_t)n * sizeof(void *), cudaMemcpyHostToDevice));
    return 0;
}

// Op i's plan when op i is a prepared matmul (its state was made here), else NULL.
static const cuda_mm_plan *mm_plan_of(const stg_cuda *c, int i) {
    return c && c->state && i >= 0 && i < c->nops && c->state_free[i] == cuda_mm_free ? (const cuda_mm_plan *)c->state[i]
                                                                                         : NULL;
}

int cuda_mm_prepare(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                    stg_err *err) {
    if (op < 0 || op >= g->nops) return stg_errf(err, "cuda matmul: no op %d", op);
    if (!c->state || op >= c->nops) return stg_errf(err, "cuda matmul: the context has no state slot for op %d", op);
    cuda_mm_plan *p = (cuda_mm_plan *)calloc(1, sizeof *p);
    if (!p) return stg_errf(err, "cuda matmul: out of host memory");
    const stg_op *o = &g->ops[op];
    p->in0 = o->in[0];
    p->in1 = o->in[1];
    p->out = o->out[0];
    p->bias = o->kind == STG_OP_LINEAR && o->a.linear.bias && o->n_in >= 3 ? o->in[2] : -1;
    p->bias_ptr = NULL;
    int addend = ops_addend_of(o);
    if ((o->kind == STG_OP_MATMUL_GROUP ? mm_group_setup(c, g, op, ptr, table, p, err) : mm_key_of(c, g, op, 0, &p->key, err)) ||
        mm_build(p, err) || (p->bias >= 0 && ptr && mm_set_bias(p, ptr[p->bias], err))) {
        cuda_mm_free(p);
        return stg_err_prefix(err, "%s (op %d)", ops_name(o->kind), op);
    }
    const cuda_mm_plan *same = NULL; // an earlier plan of the same key: reuse its search
    for (int i = 0; i < c->nops && !same; i++)
        if (i != op && mm_plan_of(c, i) && memcmp(&mm_plan_of(c, i)->key, &p->key, sizeof p->key) == 0)
            same = mm_plan_of(c, i);
    p->ch.ms_first = p->ch.ms_pick = -1.0f;
    if (same) {
        p->ch = same->ch;
    } else if (p->npairs ? mm_search(c, p, p->dtab + p->npairs, p->dtab, NULL, p->dtab + 3 * p->npairs, err)
                         : mm_search(c, p, ptr ? ptr[o->in[0]] : NULL, ptr ? ptr[o->in[1]] : NULL,
                                     ptr && addend > 0 ? ptr[o->in[addend]] : NULL, ptr ? ptr[o->out[0]] : NULL, err)) {
        cuda_mm_free(p);
        return stg_err_prefix(err, "%s (op %d)", ops_name(o->kind), op);
    }
    p->gv = mm_gv_fits(&p->key);
    if (p->gv && ptr) // the tensors' addresses now: what cuda_mm_describe reports (the run checks again)
        for (int q = 0; q < (p->npairs ? p->npairs : 1); q++)
            if (!mm_gv_aligned(ptr[o->in[2 * q]], ptr[o->in[2 * q + 1]])) p->gv = 0;
    // W may be read before the kernel before it ends only when no kernel of the graph writes it: every W
    // a parameter, and no optimizer op (an inference graph)
    p->gv_w_early = p->gv;
    for (int q = 0; p->gv_w_early && q < (p->npairs ? p->npairs : 1); q++)
        p->gv_w_early = g->t[p->npairs ? o->in[2 * q + 1] : p->in1].cls == STG_CLASS_PARAM;
    for (int i = 0; p->gv_w_early && i < g->nops; i++) p->gv_w_early = g->ops[i].phase != STG_PHASE_OPTIMIZER;
    if (p->gv) { // our m rows (cuBLASLt's n), n output features (its m)
        const int np = p->npairs ? p->npairs : 1;
        if (p->key.c_type == CUDA_R_16BF)
            mm_gv_pick_t<bf16>(p->key.n, p->key.m, p->key.k, np, c->sm_count, &p->gv_rows, &p->gv_split, &p->gv_blocks);
        else mm_gv_pick_t<float>(p->key.n, p->key.m, p->key.k, np, c->sm_count, &p->gv_rows, &p->gv_split, &p->gv_blocks);
        p->tc = mm_tc_takes(p->key.n);
        if (p->tc) p->tc_split = mm_tc_pick(p->key.m, p->key.k, np, false, p->key.c_type == CUDA_R_16BF, c->sm_count);
    }
    *state = p;
    if (p->ch.ws_bytes > c->side_ws_need) c->side_ws_need = p->ch.ws_bytes;
    return 0;
}

int cuda_mm_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const cuda_mm_plan *p = mm_plan_of(c, op);
    if (!p) return stg_errf(err, "cuda matmul: op %d was not prepared (cuda_prepare)", op);
    const stg_op *o = &g->ops[op];
    if (o->in[0] != p->in0 || o->in[1] != p->in1 || o->out[0] != p->out)
        return stg_errf(err, "cuda matmul: op %d was prepared for another graph", op);
    if (p->ch.ws_bytes > c->lt_workspace_bytes)
        return stg_errf(err, "cuda matmul: op %d needs %zu workspace bytes, the context has %zu", op, p->ch.ws_bytes,
                        c->lt_workspace_bytes);
    const float one = 1.0f, zero = 0.0f;
    if (p->npairs) { // the tables hold the addresses the op's tensors had when it was prepared
        int n = p->npairs;
        for (int q = 0; q < n; q++)
            if (o->n_out != n || p->htab[q] != ptr[o->in[2 * q + 1]] || p->htab[n + q] != ptr[o->in[2 * q]] ||
                p->htab[3 * n + q] != ptr[o->out[q]])
                return stg_errf(err, "cuda matmul: matmul_group op %d runs on other tensors than it was prepared for", op);
        if (o->accum && o->accum != (1u << n) - 1u)
            return stg_errf(err, "cuda matmul: matmul_group op %d accumulates some outputs but not all", op);
        if (mm_gv_fits(&p->key)) {
            int ran = mm_gv_run(c, o, p, ptr, err);
            if (ran) return ran < 0 ? -1 : 0;
        }
        // gradient accumulation: beta 1 with C = D, the outputs (every pair of a group accumulates or none)
        CUBLAS_CHECK(err, cublasLtMatmul(c->lt, p->desc, &one, p->dtab, p->la, p->dtab + n, p->lb,
                                         cuda_accumulating(c, o, 0) ? &one : &zero, p->dtab + 2 * n, p->lc,
                                         p->dtab + 3 * n, p->lc, &p->ch.algo, c->lt_workspace, c->lt_workspace_bytes,
                                         c->stream));
        return 0;
    }
    // cuBLASLt's A is our B, its B our A; D is our output, C the addend (the last input, beta 1) or
    // the output itself: beta 0 (not read), or beta 1 when accumulating a gradient (D += product);
    // a bias through the epilogue.
    int addend = ops_addend_of(o);
    if ((p->bias >= 0) != (o->kind == STG_OP_LINEAR && o->a.linear.bias) || (p->bias >= 0 && o->in[2] != p->bias))
        return stg_errf(err, "cuda matmul: op %d was prepared for another graph", op);
    if (mm_gv_fits(&p->key)) {
        int ran = mm_gv_run(c, o, p, ptr, err);
        if (ran) return ran < 0 ? -1 : 0;
    }
    if (p->bias >= 0 && mm_set_bias((cuda_mm_plan *)p, ptr[p->bias], err)) return -1;
    const void *cc = addend > 0 ? ptr[o->in[addend]] : ptr[p->out];
    bool beta1 = addend > 0 || cuda_accumulating(c, o, 0);
    CUBLAS_CHECK(err, cublasLtMatmul(c->lt, p->desc, &one, ptr[p->in1], p->la, ptr[p->in0], p->lb, beta1 ? &one : &zero, cc,
                                     p->lc, ptr[p->out], p->lc, &p->ch.algo, c->lt_workspace, c->lt_workspace_bytes, c->stream));
    return 0;
}

// One algorithm configuration attribute (-1 when cuBLASLt does not report it).
static int mm_algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    uint32_t v = 0; // every attribute read here is 32 bits or narrower (little-endian)
    size_t w = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &w) != CUBLAS_STATUS_SUCCESS || w > sizeof v) return -1;
    return (int)v;
}

extern "C" int cuda_mm_describe(const stg_cuda *c, int op, cuda_mm_info *out) {
    const cuda_mm_plan *p = mm_plan_of(c, op);
    if (!p) return -1;
    memset(out, 0, sizeof *out);
    out->m = p->key.n; // ours: cuBLASLt's n
    out->n = p->key.m;
    out->k = p->key.k;
    out->batch = p->key.batch;
    out->algo_id = mm_algo_attr(&p->ch.algo, CUBLASLT_ALGO_CONFIG_ID);
    out->tile = mm_algo_attr(&p->ch.algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
    out->stages = mm_algo_attr(&p->ch.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    out->splitk = mm_algo_attr(&p->ch.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    out->cluster = mm_algo_attr(&p->ch.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
    out->workspace = p->ch.ws_bytes;
    out->pick = p->ch.pick;
    out->candidates = p->ch.ncand;
    out->ms_first = p->ch.ms_first;
    out->ms_pick = p->ch.ms_pick;
    out->gemv = p->gv;
    out->gemv_rows = p->gv ? p->gv_rows : 0;
    out->gemv_split = p->gv ? p->gv_split : 0;
    out->gemv_blocks = p->gv ? p->gv_blocks : 0;
    out->gemv_fold = p->glu;
    out->gemv_norm = p->nrm;
    out->gemv_tc = p->gv && p->tc;
    if (p->glu) out->gemv_split = p->glu_split;
    if (p->gv && p->tc) out->gemv_split = p->glu ? p->tc_glu_split : p->tc_split;
    return 0;
}

// ---- sum_rows: linear's bias gradient ------------------------------------------------------------
// x (R, N) -> y (N). Blocks of 32 columns x 8 row lanes; the rows are cut into K chunks (enough
// blocks to fill the GPU, at least SR_MIN_ROWS rows each): each block sums its chunk's rows of its
// columns (each lane its rows in order, then the 8 lanes in order) into a float partial (K, N) in
// c->work, and a second kernel adds the K partials of each column in order (with K = 1 the first
// writes y). The same bits on every run: no atomics.
#define SR_COLS 32
#define SR_LANES 8
#define SR_MIN_ROWS 64

static int64_t sr_chunks(const stg_cuda *c, int64_t R, int64_t N) {
    int64_t strips = (N + SR_COLS - 1) / SR_COLS, want = 4 * (int64_t)(c->sm_count > 0 ? c->sm_count : 132);
    int64_t k = (want + strips - 1) / strips, most = (R + SR_MIN_ROWS - 1) / SR_MIN_ROWS;
    if (k > most) k = most;
    if (k > 65535) k = 65535; // grid.y
    return k < 1 ? 1 : k;
}

template <typename T>
__global__ void sum_rows_kernel(const T *x, void *out, int out_bf16, int64_t R, int64_t N, int64_t rows_per) {
    __shared__ float part[SR_LANES][SR_COLS];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * SR_COLS + tx, r0 = (int64_t)blockIdx.y * rows_per;
    int64_t r1 = r0 + rows_per < R ? r0 + rows_per : R;
    float acc = 0.0f;
    if (j < N)
        for (int64_t r = r0 + ty; r < r1; r += SR_LANES) acc += cu_ld(x, r * N + j);
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < N) {
        float s = 0.0f;
#pragma unroll
        for (int l = 0; l < SR_LANES; l++) s += part[l][tx];
        if (gridDim.y == 1) cu_std(out, out_bf16, j, s);
        else ((float *)out)[(int64_t)blockIdx.y * N + j] = s;
    }
}

__global__ void sum_parts_kernel(const float *part, void *y, int y_bf16, int64_t K, int64_t N) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < N; j += stride) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s += part[k * N + j];
        cu_std(y, y_bf16, j, s);
    }
}

static size_t sum_rows_work(const stg_cuda *c, const stg_graph *g, int op) {
    const stg_tensor *x = &g->t[g->ops[op].in[0]];
    int64_t R = cuda_rows(x), N = cuda_last(x), K = sr_chunks(c, R, N);
    return K > 1 ? (size_t)K * (size_t)N * sizeof(float) : 0;
}

extern "C" int cuda_run_sum_rows(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]], *y = &g->t[o->out[0]];
    int xb = cuda_is_bf16(g, o, o->in[0], err);
    int yb = xb < 0 ? -1 : cuda_is_bf16(g, o, o->out[0], err);
    if (yb < 0) return -1;
    int64_t R = cuda_rows(x), N = cuda_last(x);
    if (cuda_numel(y) != N) return stg_errf(err, "sum_rows: output %s must have %lld elements", y->name, (long long)N);
    if (N == 0) return 0;
    int64_t K = sr_chunks(c, R, N), rows_per = (R + K - 1) / K;
    size_t need = sum_rows_work(c, g, op);
    if (need && (!c->work || c->work_bytes < need))
        return stg_errf(err, "sum_rows: scratch too small: cuda_prepare was not called for this graph");
    dim3 grid((unsigned)((N + SR_COLS - 1) / SR_COLS), (unsigned)K), block(SR_COLS, SR_LANES);
    void *dst = K > 1 ? c->work : ptr[o->out[0]];
    if (xb)
        sum_rows_kernel<bf16><<<grid, block, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], dst, yb, R, N, rows_per);
    else
        sum_rows_kernel<float><<<grid, block, 0, c->stream>>>((const float *)ptr[o->in[0]], dst, yb, R, N, rows_per);
    CUDA_LAUNCH_CHECK(err, "sum_rows_kernel");
    if (K > 1) {
        sum_parts_kernel<<<cuda_blocks(c, N, 256), 256, 0, c->stream>>>((const float *)c->work, ptr[o->out[0]], yb, K, N);
        CUDA_LAUNCH_CHECK(err, "sum_parts_kernel");
    }
    return 0;
}

static int prep_sum_rows(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                         stg_err *err) {
    *work = sum_rows_work(c, g, op);
    return 0;
}

// ---- the swiglu of a decoding graph, written by the product that makes its inputs -------------------
// In a decoding graph the w1/w3 pair (one matmul_group on the few-rows kernel) feeds a swiglu whose
// launch costs more than its work. mm_fold_plan (the matmul records' group, planned after every op's
// prepare) lets the pair's launch write the swiglu's output itself (mm_gv_glu_kernel: the same bits
// as the two ops) and marks the swiglu folded (cuda_op_folded: its run enqueues nothing) when:
//  - the graph has no backward or optimizer op (an inference graph), and STG_NO_FOLD is not set;
//  - the swiglu's a and b (bf16, of its output's size, bf16) are the two outputs of one matmul_group
//    of two products of the same x on the few-rows kernel, and nothing else reads them;
//  - its output y now written at the group's time is safe: y's bytes overlap none of the group's
//    inputs, and no op but the two that is neither before the group (an ancestor through the
//    tensors) nor after the swiglu (a descendant) reads or writes bytes of y, so no stream order
//    lets one in between.
typedef struct mm_fold_graph {
    int *rstart, *rlist; // tensor t's readers: rlist[rstart[t] .. rstart[t + 1]), each op once
    unsigned char *anc, *desc; // per op: an ancestor of the group, a descendant of the swiglu
    int *stack;
} mm_fold_graph;

static void mm_fold_graph_free(mm_fold_graph *fg) {
    free(fg->rstart);
    free(fg->rlist);
    free(fg->anc);
    free(fg->desc);
    free(fg->stack);
}

// Whether op o reads tensor t at an input before k (a tensor read twice is one reader).
static bool mm_reads_before(const stg_op *o, int k, int t) {
    for (int j = 0; j < k; j++)
        if (o->in[j] == t) return true;
    return false;
}

static int mm_fold_graph_build(const stg_graph *g, mm_fold_graph *fg, stg_err *err) {
    memset(fg, 0, sizeof *fg);
    int64_t nr = 0;
    for (int i = 0; i < g->nops; i++) nr += g->ops[i].n_in;
    const size_t nops = (size_t)(g->nops > 0 ? g->nops : 1);
    fg->rstart = (int *)calloc((size_t)(g->nt > 0 ? g->nt : 0) + 1, sizeof(int));
    fg->rlist = (int *)malloc(sizeof(int) * (size_t)(nr ? nr : 1));
    fg->anc = (unsigned char *)calloc(nops, 1);
    fg->desc = (unsigned char *)calloc(nops, 1);
    fg->stack = (int *)malloc(sizeof(int) * nops);
    if (!fg->rstart || !fg->rlist || !fg->anc || !fg->desc || !fg->stack) {
        mm_fold_graph_free(fg);
        return stg_errf(err, "cuda matmul: out of host memory (folds)");
    }
    for (int i = 0; i < g->nops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++)
            if (!mm_reads_before(&g->ops[i], k, g->ops[i].in[k])) fg->rstart[g->ops[i].in[k] + 1]++;
    for (int t = 0; t < g->nt; t++) fg->rstart[t + 1] += fg->rstart[t];
    for (int i = 0; i < g->nops; i++) // each list in op order; rstart[t] is its next free slot meanwhile
        for (int k = 0; k < g->ops[i].n_in; k++)
            if (!mm_reads_before(&g->ops[i], k, g->ops[i].in[k])) fg->rlist[fg->rstart[g->ops[i].in[k]]++] = i;
    for (int t = g->nt; t > 0; t--) fg->rstart[t] = fg->rstart[t - 1]; // back to the starts
    fg->rstart[0] = 0;
    return 0;
}

// mark[i] = 1 for every op reachable from op `from` through the tensors (not `from` itself unless
// reached again): downstream (its outputs' readers, on) or upstream (its inputs' producers, on).
static void mm_fold_walk(const stg_graph *g, mm_fold_graph *fg, unsigned char *mark, int from, bool down) {
    memset(mark, 0, (size_t)g->nops);
    int sp = 0;
    fg->stack[sp++] = from;
    while (sp > 0) {
        const stg_op *o = &g->ops[fg->stack[--sp]];
        const int n = down ? o->n_out : o->n_in;
        for (int k = 0; k < n; k++) {
            const int t = down ? o->out[k] : o->in[k];
            if (down) {
                for (int j = fg->rstart[t]; j < fg->rstart[t + 1]; j++)
                    if (!mark[fg->rlist[j]]) mark[fg->rlist[j]] = 1, fg->stack[sp++] = fg->rlist[j];
            } else {
                const int p = g->t[t].producer;
                if (p >= 0 && !mark[p]) mark[p] = 1, fg->stack[sp++] = p;
            }
        }
    }
}

static bool mm_overlap(const stg_graph *g, void *const *ptr, int t, int u) {
    const uintptr_t x = (uintptr_t)ptr[t], y = (uintptr_t)ptr[u];
    const uintptr_t nx = (uintptr_t)stg_bytes(&g->t[t]), ny = (uintptr_t)stg_bytes(&g->t[u]);
    return x && y && nx > 0 && ny > 0 && x < y + ny && y < x + nx;
}

// Whether swiglu op n (output y) can be written by group op p (see above).
static bool mm_glu_safe(const stg_graph *g, void *const *ptr, mm_fold_graph *fg, int p, int n) {
    const stg_op *P = &g->ops[p];
    const int y = g->ops[n].out[0];
    for (int k = 0; k < P->n_in; k++)
        if (mm_overlap(g, ptr, P->in[k], y)) return false;
    mm_fold_walk(g, fg, fg->anc, p, false);
    mm_fold_walk(g, fg, fg->desc, n, true);
    for (int i = 0; i < g->nops; i++) {
        if (i == p || i == n || fg->anc[i] || fg->desc[i]) continue;
        const stg_op *W = &g->ops[i];
        for (int k = 0; k < W->n_in + W->n_out; k++)
            if (mm_overlap(g, ptr, k < W->n_in ? W->in[k] : W->out[k - W->n_in], y)) return false;
    }
    return true;
}

// ---- the RMSNorm of a decoding graph, folded into the product that reads its output ----------------
// A decoding step at batch 1 spent ~2.6 us a norm kernel, two a layer, before the few-rows products
// that read their rows (the 2.7B model: 64 norms in a 2.4 ms step; docs/perf/LOG.md). mm_fold_plan folds
// rmsnorm N (x, g -> h, rstd) into the product P that reads h: P's few-rows kernel reads x and g
// instead of h and scales each row's sums by its 1 / rms (mm_gv_norm_rows), and N is marked absorbed
// (cuda_op_folded 2: its run enqueues nothing and h and rstd are never written) when:
//  - the graph has no backward or optimizer op, and neither STG_NO_FOLD nor STG_NO_NORM_FOLD is set;
//  - x, g and h are bf16 and 16-byte aligned, h's rows are P's rows of k, and they fit in 46 KiB (each block
//    of P first writes the rows of x g to shared memory and takes every row's 1 / rms: mm_gv_norm_rows);
//  - what those prologues read, blocks x (m + 1) rows of k, is at most half of P's weights: the 2.7B
//    model's w1 / w3 at 8 rows read as much x as W and ran 12% slower a step folded (H200; at 1 row a
//    quarter as much, 2.4% faster; docs/perf/LOG.md, twenty-fourth session);
//  - P has one row (batch-1 decoding). From 2 rows on the tensor-core kernels take the products, and they
//    take no norm; on the CUDA-core kernels (STG_NO_GEMV_TC) the 2.7B model at 2 rows ran 12-14% slower a
//    step folded (2.95 -> 3.30 ms with the prologue's loads of all rows in flight together, 3.36 with a
//    row at a time; H200, docs/perf/LOG.md, twenty-fourth and twenty-fifth sessions), so only the one-row
//    kernels have a norm folded in (mm_gv_launch, mm_gv_glu_launch);
//  - every op that reads h is such a product P (a matmul, linear or matmul_group on the few-rows kernel,
//    bf16 out, not accumulating) reading it only as the x of every pair, and no op reads rstd (a
//    grouped-query layer's q and k / v products are separate readers: each computes the 1 / rms);
//  - x and g hold at each P's time what they held at N's: no output of P (nor the swiglu it writes)
//    overlaps them, and no op but the two that is neither before N (an ancestor) nor after P (a
//    descendant) writes bytes of them.
// The sums differ from the two ops' in rounding only (h is not rounded to bf16 between them).
static bool mm_writes_over(const stg_graph *g, void *const *ptr, const stg_op *o, int t) {
    for (int k = 0; k < o->n_out; k++)
        if (mm_overlap(g, ptr, o->out[k], t)) return true;
    return false;
}

static bool mm_nrm_safe(const stg_graph *g, void *const *ptr, mm_fold_graph *fg, int n, int p, const cuda_mm_plan *pl) {
    const int x = g->ops[n].in[0], gn = g->ops[n].in[1];
    if (mm_writes_over(g, ptr, &g->ops[p], x) || mm_writes_over(g, ptr, &g->ops[p], gn)) return false;
    if (pl->glu && (mm_overlap(g, ptr, pl->glu_out, x) || mm_overlap(g, ptr, pl->glu_out, gn))) return false;
    mm_fold_walk(g, fg, fg->anc, n, false);
    mm_fold_walk(g, fg, fg->desc, p, true);
    for (int i = 0; i < g->nops; i++) {
        if (i == n || i == p || fg->anc[i] || fg->desc[i]) continue;
        if (mm_writes_over(g, ptr, &g->ops[i], x) || mm_writes_over(g, ptr, &g->ops[i], gn)) return false;
    }
    return true;
}

// Whether product op p (plan pl) reads tensor h as its x, every pair's, and nowhere else.
static bool mm_reads_as_x(const stg_op *P, const cuda_mm_plan *pl, int h) {
    int seen = 0;
    for (int k = 0; k < P->n_in; k++) seen += P->in[k] == h;
    if (pl->npairs) {
        for (int q = 0; q < pl->npairs; q++)
            if (P->in[2 * q] != h) return false;
        return seen == pl->npairs;
    }
    return pl->in0 == h && seen == 1;
}

// Whether rmsnorm op n's output h can be read as x by product op p instead (see above), p's plan.
static cuda_mm_plan *mm_nrm_reader(stg_cuda *c, const stg_graph *g, void *const *ptr, mm_fold_graph *fg, int n, int p) {
    const stg_op *N = &g->ops[n], *P = &g->ops[p];
    const int x = N->in[0], gn = N->in[1], h = N->out[0];
    if (P->kind != STG_OP_MATMUL && P->kind != STG_OP_LINEAR && P->kind != STG_OP_MATMUL_GROUP) return NULL;
    cuda_mm_plan *pl = (cuda_mm_plan *)mm_plan_of(c, p);
    if (!pl || !pl->gv || pl->tc || pl->nrm || P->accum || (pl->key.c_type != CUDA_R_16BF && !pl->glu) || !mm_reads_as_x(P, pl, h))
        return NULL; // (the tensor-core kernels take no norm)
    const stg_tensor *th = &g->t[h];
    if (g->t[x].dtype != STG_BF16 || th->dtype != STG_BF16 || g->t[gn].dtype != STG_BF16 || stg_last(th) != pl->key.k ||
        stg_numel(th) != pl->key.k * pl->key.n || !stg_same_shape(&g->t[x], th) || stg_numel(&g->t[gn]) != pl->key.k ||
        !mm_gv_aligned(ptr[x], ptr[gn]) || pl->key.n * pl->key.k * (int64_t)sizeof(bf16) > MM_GV_NORM_SMEM)
        return NULL;
    // what the blocks' prologues read (m rows of x and g, k each) against the product's W: at most half
    const int64_t nf = pl->key.m, m = pl->key.n, ws = pl->glu ? 2 : pl->npairs > 0 ? pl->npairs : 1; // features, rows, Ws
    const int64_t per_block = pl->glu ? MM_GV_WARPS / pl->glu_split : MM_GV_WARPS / pl->gv_split * pl->gv_rows;
    const int64_t blocks = (nf + per_block - 1) / per_block * (pl->glu ? 1 : ws);
    if (m > 1 || 2 * blocks * (m + 1) > ws * nf) return NULL; // one row; the cost rule (above)
    return mm_nrm_safe(g, ptr, fg, n, p, pl) ? pl : NULL;
}

// Folds each rmsnorm whose readers are all products that can take it (mm_nrm_reader): every one of them
// computes the rows' 1 / rms itself (the q, k and v products of a grouped-query layer are three).
static void mm_fold_norms(stg_cuda *c, const stg_graph *g, void *const *ptr, mm_fold_graph *fg) {
    if (getenv("STG_NO_NORM_FOLD")) return;
    for (int n = 0; n < g->nops; n++) {
        const stg_op *N = &g->ops[n];
        if (N->kind != STG_OP_RMSNORM || N->n_in != 2 || N->n_out != 2) continue;
        const int h = N->out[0], rs = N->out[1], nr = fg->rstart[h + 1] - fg->rstart[h];
        if (nr < 1 || nr > STG_MAX_OUT || fg->rstart[rs + 1] != fg->rstart[rs]) continue; // h read, rstd not
        cuda_mm_plan *pls[STG_MAX_OUT];
        bool ok = true;
        for (int j = 0; j < nr && ok; j++) ok = (pls[j] = mm_nrm_reader(c, g, ptr, fg, n, fg->rlist[fg->rstart[h] + j])) != NULL;
        if (!ok) continue;
        for (int j = 0; j < nr; j++) {
            pls[j]->nrm = 1;
            pls[j]->nrm_x = N->in[0];
            pls[j]->nrm_g = N->in[1];
            pls[j]->nrm_eps = (float)N->a.norm.eps;
        }
        c->folded[n] = 2;
    }
}

static int mm_fold_plan(stg_cuda *c, const stg_graph *g, void *const *ptr, void **state, size_t *table_bytes, size_t *work,
                        stg_err *err) {
    *state = NULL;
    *table_bytes = 0;
    *work = 0;
    if (!ptr || !c->folded || getenv("STG_NO_FOLD")) return 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].phase != STG_PHASE_FORWARD) return 0;
    mm_fold_graph fg;
    if (mm_fold_graph_build(g, &fg, err)) return -1;
    for (int n = 0; n < g->nops; n++) {
        const stg_op *N = &g->ops[n];
        if (N->kind != STG_OP_SWIGLU || N->n_in != 2 || N->n_out != 1) continue;
        const int ta = N->in[0], tb = N->in[1], y = N->out[0], p = g->t[ta].producer;
        if (ta == tb || p < 0 || g->t[tb].producer != p || g->ops[p].kind != STG_OP_MATMUL_GROUP) continue;
        const stg_op *P = &g->ops[p];
        cuda_mm_plan *pl = (cuda_mm_plan *)mm_plan_of(c, p);
        if (!pl || !pl->gv || pl->npairs != 2 || pl->glu || pl->key.c_type != CUDA_R_16BF || P->accum ||
            P->n_in != 4 || P->in[0] != P->in[2])
            continue;
        if (g->t[ta].dtype != STG_BF16 || g->t[tb].dtype != STG_BF16 || g->t[y].dtype != STG_BF16 ||
            stg_numel(&g->t[ta]) != stg_numel(&g->t[y]) || stg_numel(&g->t[tb]) != stg_numel(&g->t[y]))
            continue;
        const int ia = P->out[0] == ta ? 0 : 1;
        if (P->out[ia] != ta || P->out[1 - ia] != tb) continue;
        if (fg.rstart[ta + 1] - fg.rstart[ta] != 1 || fg.rstart[tb + 1] - fg.rstart[tb] != 1) continue; // the swiglu alone reads them
        if (!mm_glu_safe(g, ptr, &fg, p, n)) continue;
        pl->glu = 1;
        pl->glu_out = y;
        pl->glu_a = ia;
        pl->glu_split = mm_gv_glu_pick(pl->key.n, pl->key.m, pl->key.k, c->sm_count); // our m rows, n features
        if (pl->tc) pl->tc_glu_split = mm_tc_pick(pl->key.m, pl->key.k, 1, true, true, c->sm_count);
        c->folded[n] = 1;
    }
    mm_fold_norms(c, g, ptr, &fg);
    mm_fold_graph_free(&fg);
    return 0;
}

static const cuda_group mm_fold_group = {"few-rows swiglu and norm folds (no table)", mm_fold_plan, NULL, NULL};

// ---- records ------------------------------------------------------------------------------------

static int prep_mm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    if (!c->lt_workspace) { // the cuBLASLt workspace, made by the first product (its search uses it)
        size_t ws = cuda_mm_workspace_bytes();
        if (ws) {
            CUDA_CHECK(err, cudaMalloc(&c->lt_workspace, ws));
            c->lt_workspace_bytes = ws;
        }
    }
    return cuda_mm_prepare(c, g, op, ptr, table, state, err);
}

extern "C" int cuda_run_linear(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_mm_run(c, g, op, ptr, err);
}

extern "C" int cuda_run_matmul(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_mm_run(c, g, op, ptr, err);
}

extern "C" int cuda_run_matmul_group(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_mm_run(c, g, op, ptr, err);
}

const cuda_rec stg_cuda_linear = {cuda_run_linear, prep_mm, cuda_mm_free, cuda_mm_table_bytes, CUDA_REC_ANY, NULL, &mm_fold_group};
const cuda_rec stg_cuda_matmul = {cuda_run_matmul, prep_mm, cuda_mm_free, cuda_mm_table_bytes, CUDA_REC_ANY, NULL, &mm_fold_group};
const cuda_rec stg_cuda_sum_rows = {cuda_run_sum_rows, prep_sum_rows, NULL, NULL, CUDA_REC_MAIN, NULL};
const cuda_rec stg_cuda_matmul_group = {cuda_run_matmul_group, prep_mm, cuda_mm_free, cuda_mm_table_bytes, CUDA_REC_ANY,
                                        NULL, &mm_fold_group};
