// Probe (not part of the build): three same-shape bf16 GEMMs of the CS336 attention projections, one
// after another, as one pointer-array batched cuBLASLt call, and as one strided batched call. It asks
// whether grouping the q, k, v products (forward, and their weight gradients) would fill the H100's
// waves better. docs/perf/LOG.md has its numbers.
//   nvcc -O2 -arch=sm_90 tools/probes/gemm_group.cu -lcublasLt -o /tmp/gemm_group && /tmp/gemm_group
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { printf("cublas %d line %d\n", (int)s_, __LINE__); return -1;} } while (0)
static cublasLtHandle_t lt; static void *ws; static size_t wsb = 32u << 20;
__global__ void fillk(__nv_bfloat16 *p, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) p[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000.f - 0.5f); }
// mode 0: batch 1 ; 1: pointer array ; 2: strided
static int run(int mode, int batch, int m, int n, int k, int ta, int tb, cudaDataType ct, void **A, void **B, void **C, int reps, float *ms) {
  cublasLtMatmulDesc_t d; BK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &a, 4));
  BK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &b, 4));
  cublasLtMatrixLayout_t la, lb, lc;
  BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, ta ? k : m));
  BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, tb ? n : k));
  BK(cublasLtMatrixLayoutCreate(&lc, ct, m, n, m));
  void **dA = A, **dB = B, **dC = C;
  if (mode) {
    int32_t bc = batch; uint32_t bm = mode == 1 ? CUBLASLT_BATCH_MODE_POINTER_ARRAY : CUBLASLT_BATCH_MODE_STRIDED;
    cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
    int64_t st[3] = {(int64_t)m * k, (int64_t)k * n, (int64_t)m * n};
    for (int i = 0; i < 3; i++) {
      BK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, 4));
      if (mode == 1) BK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &bm, 4));
      else BK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], 8));
    }
    if (mode == 1) {
      CK(cudaMalloc(&dA, 3 * sizeof(void *) * 3));
      dB = dA + 3; dC = dA + 6;
      void *h[9]; for (int i = 0; i < 3; i++) { h[i] = A[i]; h[3 + i] = B[i]; h[6 + i] = C[i]; }
      CK(cudaMemcpy(dA, h, sizeof h, cudaMemcpyHostToDevice));
    }
  }
  cublasLtMatmulPreference_t pref; BK(cublasLtMatmulPreferenceCreate(&pref));
  BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t r; int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 1, &r, &found);
  if (s != CUBLAS_STATUS_SUCCESS || !found) { printf("  mode %d: no algorithm (%d)\n", mode, (int)s); return -1; }
  float one = 1, zero = 0; cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  int nl = mode ? 1 : batch;
  for (int rep = 0; rep < reps + 3; rep++) {
    if (rep == 3) CK(cudaEventRecord(e0));
    for (int i = 0; i < nl; i++)
      BK(cublasLtMatmul(lt, d, &one, mode == 1 ? (void *)dA : A[i], la, mode == 1 ? (void *)dB : B[i], lb, &zero, mode == 1 ? (void *)dC : C[i], lc, mode == 1 ? (void *)dC : C[i], lc, &r.algo, ws, wsb, 0));
  }
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(ms, e0, e1)); *ms /= reps;
  CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
  if (mode == 1) CK(cudaFree(dA));
  BK(cublasLtMatmulPreferenceDestroy(pref)); BK(cublasLtMatrixLayoutDestroy(la)); BK(cublasLtMatrixLayoutDestroy(lb));
  BK(cublasLtMatrixLayoutDestroy(lc)); BK(cublasLtMatmulDescDestroy(d));
  return 0;
}
int main(void) {
  CK(cudaMalloc(&ws, wsb)); if (cublasLtCreate(&lt)) return 1;
  struct { const char *nm; int m, n, k, ta, tb; cudaDataType ct; } sh[] = {
    {"2.7B dW d2 (m2560 n2560 k4096 N T f32)", 2560, 2560, 4096, 0, 1, CUDA_R_32F},
    {"2.7B fwd qkv (m2560 n4096 k2560 T N bf16)", 2560, 4096, 2560, 1, 0, CUDA_R_16BF},
    {"xl dW d2 (m1600 n1600 k4096)", 1600, 1600, 4096, 0, 1, CUDA_R_32F},
    {"xl fwd qkv (m1600 n4096 k1600)", 1600, 4096, 1600, 1, 0, CUDA_R_16BF},
    {"2.7B ctx512 dW d2 (k2048)", 2560, 2560, 2048, 0, 1, CUDA_R_32F},
  };
  for (int s = 0; s < 5; s++) {
    int m = sh[s].m, n = sh[s].n, k = sh[s].k; size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    void *A[3], *B[3], *C[3]; __nv_bfloat16 *ab, *bb; char *cb;
    CK(cudaMalloc(&ab, 3 * na * 2)); CK(cudaMalloc(&bb, 3 * nb * 2)); CK(cudaMalloc(&cb, 3 * nc * 4));
    fillk<<<(unsigned)((3 * na + 255) / 256), 256>>>(ab, 3 * na); fillk<<<(unsigned)((3 * nb + 255) / 256), 256>>>(bb, 3 * nb);
    size_t cs = sh[s].ct == CUDA_R_32F ? 4 : 2;
    for (int i = 0; i < 3; i++) { A[i] = ab + i * na; B[i] = bb + i * nb; C[i] = cb + i * nc * cs; }
    double fl = 2.0 * m * n * k * 3;
    float t[3] = {0, 0, 0};
    printf("%s\n", sh[s].nm);
    for (int mode = 0; mode < 3; mode++) {
      if (run(mode, 3, m, n, k, sh[s].ta, sh[s].tb, sh[s].ct, A, B, C, 20, &t[mode]) == 0)
        printf("  %s: %.4f ms for 3 (%.0f TFLOP/s)\n", mode == 0 ? "serial  " : mode == 1 ? "ptr-arr " : "strided ", t[mode], fl / t[mode] / 1e9);
    }
    CK(cudaFree(ab)); CK(cudaFree(bb)); CK(cudaFree(cb));
  }
  return 0;
}
