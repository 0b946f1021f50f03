// Probe (not part of the build): do cuBLASLt configurations outside the heuristic's answers run the
// small products of cs336-small at batch 4, ctx 128 (M = 512 tokens) faster? For each product of
// the step, the heuristic's first answer, the best of its first 16 (what --gemm-tune times), and the
// best of every algorithm id x tile x stages x split-K (1-4) x cluster (auto, 1x1) that
// cublasLtMatmulAlgoCheck accepts, each timed as 20 launches in one CUDA Graph (the way the step
// runs them). docs/perf/LOG.md has its numbers.
//   nvcc -O2 -arch=sm_90 tools/probes/gemm_search.cu -lcublasLt -o /tmp/gemm_search && /tmp/gemm_search
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <time.h>

#include "probe.cuh"

static cublasLtHandle_t lt;
static void *ws;
static const size_t wsb = 32u << 20;
static cudaStream_t st;

__global__ void fillk(__nv_bfloat16 *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000.f - 0.5f);
}

typedef struct {
    const char *name;
    int m, n, k, ta, tb; // column-major C (m x n) = op(A) op(B)
    cudaDataType_t ct;   // C / D type
} shape;

static cublasLtMatmulDesc_t d;
static cublasLtMatrixLayout_t la, lb, lc;
static void *A, *B, *C;

// mean microseconds a product over 20 launches replayed in one graph; < 0 when it does not run
static double timed(const cublasLtMatmulAlgo_t *algo) {
    const float one = 1, zero = 0;
    const int n = 20;
    if (cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wsb, st) != CUBLAS_STATUS_SUCCESS) return -1;
    if (cudaStreamSynchronize(st) != cudaSuccess) {
        printf("a configuration failed on the device\n");
        exit(1);
    }
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wsb, st);
    return probe_replay(st, 1, 3).best * 1e3 / n;
}

static int cfg(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    int v = -1;
    size_t w = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &w) != CUBLAS_STATUS_SUCCESS) return -1;
    return v;
}
static void describe(const cublasLtMatmulAlgo_t *a, char *out, size_t n) {
    snprintf(out, n, "algo %d tile %d stages %d splitK %d cluster %d", cfg(a, CUBLASLT_ALGO_CONFIG_ID), cfg(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             cfg(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), cfg(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

static void search(const shape *s) {
    BK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
    BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4));
    BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s->ta ? s->k : s->m, s->ta ? s->m : s->k, s->ta ? s->k : s->m));
    BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s->tb ? s->n : s->k, s->tb ? s->k : s->n, s->tb ? s->n : s->k));
    BK(cublasLtMatrixLayoutCreate(&lc, s->ct, s->m, s->n, s->m));
    cublasLtMatmulPreference_t pref;
    BK(cublasLtMatmulPreferenceCreate(&pref));
    BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    BK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 16, res, &found));
    char desc[160];
    double h1 = timed(&res[0].algo), hbest = h1;
    int hb = 0;
    for (int i = 1; i < found; i++) {
        double t = timed(&res[i].algo);
        if (t > 0 && t < hbest) hbest = t, hb = i;
    }
    describe(&res[0].algo, desc, sizeof desc);
    printf("%-28s m %5d n %5d k %5d: heuristic first %6.2f us (%s)\n", s->name, s->m, s->n, s->k, h1, desc);
    describe(&res[hb].algo, desc, sizeof desc);
    printf("%-28s best of its %2d answers %6.2f us (%s)\n", "", found, hbest, desc);
    int ids[256], nids = 0;
    BK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, s->ct, s->ct, 256, ids, &nids));
    double best = 1e9;
    cublasLtMatmulAlgo_t besta;
    long tried = 0, ran = 0;
    clock_t t0 = clock();
    for (int ii = 0; ii < nids; ii++) {
        cublasLtMatmulAlgo_t a;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, s->ct, s->ct, ids[ii], &a) != CUBLAS_STATUS_SUCCESS)
            continue;
        uint32_t tiles[512], stages[512];
        size_t w = 0;
        int nt = 0, ns = 0, splitk = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles, &w) == CUBLAS_STATUS_SUCCESS) nt = (int)(w / 4);
        if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof stages, &w) == CUBLAS_STATUS_SUCCESS) ns = (int)(w / 4);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk, sizeof splitk, &w);
        if (nt == 0) tiles[nt++] = 0;
        if (ns == 0) stages[ns++] = 0;
        for (int ti = 0; ti < nt; ti++)
            for (int si = 0; si < ns; si++)
                for (int sk = 1; sk <= (splitk ? 4 : 1); sk++)
                    for (int cl = 0; cl < 2; cl++) {
                        uint32_t tile = tiles[ti], stage = stages[si], cluster = cl ? CUBLASLT_CLUSTER_SHAPE_1x1x1 : CUBLASLT_CLUSTER_SHAPE_AUTO;
                        int32_t spk = sk;
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof stage);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &spk, sizeof spk);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster);
                        cublasLtMatmulHeuristicResult_t chk;
                        tried++;
                        if (cublasLtMatmulAlgoCheck(lt, d, la, lb, lc, lc, &a, &chk) != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > wsb) continue;
                        double t = timed(&a);
                        if (t < 0) continue;
                        ran++;
                        if (t < best) best = t, besta = a;
                    }
        if ((double)(clock() - t0) / CLOCKS_PER_SEC > 40) {
            printf("%-28s (stopped after 40 s of host time)\n", "");
            break;
        }
    }
    if (ran) {
        describe(&besta, desc, sizeof desc);
        printf("%-28s best of %ld configurations (%ld tried, %d ids) %6.2f us (%s)\n", "", ran, tried, nids, best, desc);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
}

int main(void) {
    BK(cublasLtCreate(&lt));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&ws, wsb));
    size_t big = (size_t)3072 * 3072 * 4;
    CK(cudaMalloc(&A, big));
    CK(cudaMalloc(&B, big));
    CK(cudaMalloc(&C, big));
    fillk<<<1024, 256>>>((__nv_bfloat16 *)A, big / 2);
    fillk<<<1024, 256>>>((__nv_bfloat16 *)B, big / 2);
    CK(cudaDeviceSynchronize());
    // T = 512 tokens, D = 768, F = 3072. Row-major y = x W^T is column-major y^T (N x T) = W (T op) x^T;
    // dX = dY W is dX^T (K x T) = W^T... (N N); dW = dY^T X is dW^T (K x N) = X^T dY (N T), fp32 out.
    const shape shapes[] = {
        {"x W^T, 768 <- 768", 768, 512, 768, 1, 0, CUDA_R_16BF},
        {"x W^T, 768 <- 3072 (w2)", 768, 512, 3072, 1, 0, CUDA_R_16BF},
        {"x W^T, 3072 <- 768 (w1)", 3072, 512, 768, 1, 0, CUDA_R_16BF},
        {"dY W, 768 <- 768", 768, 512, 768, 0, 0, CUDA_R_16BF},
        {"dY W, 768 <- 3072 (w1 dX)", 768, 512, 3072, 0, 0, CUDA_R_16BF},
        {"dY^T X, 768 x 768 (fp32)", 768, 768, 512, 0, 1, CUDA_R_32F},
        {"dY^T X, 3072 x 768 (fp32)", 768, 3072, 512, 0, 1, CUDA_R_32F},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) search(&shapes[i]);
    return 0;
}
