// Probe (not part of the build): can AdamW's bytes hide behind the forward pass of the next step?
// A forward-like chain of cs336-small at batch 4, ctx 128 (per layer: the q/k/v, o, w1/w3 and w2
// products through cuBLAS and two row kernels) on one stream, and an AdamW-like pass over 128.6M
// fp32 parameters (read p, g, m, v; write p, m, v and a bf16 copy: 30 bytes a parameter) on another,
// each captured in a CUDA Graph. Times: the forward alone, AdamW alone, both at once (whole AdamW
// beside the whole forward), and chained (AdamW in 13 parts, forward layer i waiting for part i),
// for AdamW grids of many short blocks and of a few persistent blocks per SM. docs/perf/LOG.md has its
// numbers.
//   nvcc -O2 -arch=sm_90 tools/probes/overlap.cu -lcublas -o /tmp/overlap && /tmp/overlap
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "probe.cuh"
typedef __nv_bfloat16 bf16;
enum { L = 12, T = 512, D = 768, F = 3072, PARTS = L + 1 };
static const long long NP = 128625408;

__global__ void fill_f(float *p, long long n, float s) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = s * ((float)((i * 2654435761ull) % 1000) / 1000.f - 0.5f);
}
__global__ void fill_b(bf16 *p, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16((float)((i * 2654435761ull) % 1000) / 1000.f - 0.5f);
}
// a row kernel standing in for rmsnorm / swiglu: one block per row, reads and writes the row
__global__ void rowk(const bf16 *x, bf16 *y, int n) {
    const bf16 *r = x + (size_t)blockIdx.x * n;
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += __bfloat162float(r[i]) * __bfloat162float(r[i]);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    __shared__ float w[32];
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += w[i];
    float k = rsqrtf(t / n + 1e-5f);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[(size_t)blockIdx.x * n + i] = __float2bfloat16(__bfloat162float(r[i]) * k);
}
// AdamW over [lo, hi): 4 elements a thread-step, grid-stride
__global__ void adamw(float *p, const float *g, float *m, float *v, bf16 *w, long long lo, long long hi) {
    const float b1 = 0.9f, b2 = 0.95f, lr = 1e-3f, eps = 1e-8f, wd = 0.1f;
    for (long long i = lo + 4 * (blockIdx.x * (long long)blockDim.x + threadIdx.x); i < hi; i += 4ll * gridDim.x * blockDim.x) {
        float4 P = __ldcs((const float4 *)(p + i)), G = __ldcs((const float4 *)(g + i)), M = __ldcs((const float4 *)(m + i)),
               V = __ldcs((const float4 *)(v + i));
        float *pp = &P.x, *gg = &G.x, *mm = &M.x, *vv = &V.x;
        __align__(8) bf16 o[4];
        for (int j = 0; j < 4; j++) {
            mm[j] = b1 * mm[j] + (1 - b1) * gg[j];
            vv[j] = b2 * vv[j] + (1 - b2) * gg[j] * gg[j];
            pp[j] -= lr * (mm[j] / (sqrtf(vv[j]) + eps) + wd * pp[j]);
            o[j] = __float2bfloat16(pp[j]);
        }
        __stcs((float4 *)(p + i), P);
        __stcs((float4 *)(m + i), M);
        __stcs((float4 *)(v + i), V);
        *(uint2 *)(w + i) = *(uint2 *)o;
    }
}

static cublasHandle_t hb;
static bf16 *X, *H, *QKV, *A, *U, *Wq[L], *Wo[L], *W13[L], *W2[L];
static float *P, *G, *Mo, *Vo;
static bf16 *Wb;
static long long cut[PARTS + 1];

static void mm(cudaStream_t s, const bf16 *x, const bf16 *w, bf16 *y, int m, int n, int k) {
    const float one = 1, zero = 0;
    BK(cublasSetStream(hb, s));
    // y[m x n] = x[m x k] . w[n x k]^T, row-major: column-major y^T = w . x^T
    BK(cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero, y, CUDA_R_16BF, n,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
static void layer(cudaStream_t s, int l) {
    rowk<<<T, 256, 0, s>>>(X, H, D);
    mm(s, H, Wq[l], QKV, T, 3 * D, D);
    rowk<<<T, 256, 0, s>>>(QKV, A, D); // stands in for rope + attention
    mm(s, A, Wo[l], X, T, D, D);
    rowk<<<T, 256, 0, s>>>(X, H, D);
    mm(s, H, W13[l], U, T, 2 * F, D);
    rowk<<<T, 256, 0, s>>>(U, A, F); // swiglu
    mm(s, A, W2[l], X, T, D, F);
}
static int grid_of(int mode, int nsm) { return mode == 0 ? (int)((NP + 2047) / 2048) : mode * nsm; }
static void adamw_part(cudaStream_t s, int mode, int nsm, long long lo, long long hi) {
    long long n = hi - lo;
    int gr = mode == 0 ? (int)((n + 2047) / 2048) : mode * nsm;
    adamw<<<gr, 512, 0, s>>>(P, G, Mo, Vo, Wb, lo, hi);
}
// what: 1 forward, 2 adamw, 3 both at once, 4 chained
static float timed(int what, int mode, int nsm, cudaStream_t s0, cudaStream_t s1, cudaEvent_t *ev) {
    CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(ev[0], s0));
    CK(cudaStreamWaitEvent(s1, ev[0], 0));
    if (what == 2) adamw_part(s0, mode, nsm, 0, NP);
    if (what == 3) adamw_part(s1, mode, nsm, 0, NP);
    if (what == 4)
        for (int i = 0; i < PARTS; i++) {
            adamw_part(s1, mode, nsm, cut[i], cut[i + 1]);
            CK(cudaEventRecord(ev[1 + i], s1));
        }
    if (what != 2)
        for (int l = 0; l < L; l++) {
            if (what == 4) CK(cudaStreamWaitEvent(s0, ev[1 + l], 0));
            layer(s0, l);
        }
    if (what == 4) CK(cudaStreamWaitEvent(s0, ev[PARTS], 0));
    CK(cudaEventRecord(ev[PARTS + 1], s1));
    CK(cudaStreamWaitEvent(s0, ev[PARTS + 1], 0));
    return probe_replay(s0, 5, 30).mean;
}

int main(void) {
    int nsm;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    BK(cublasCreate(&hb));
    CK(cudaMalloc(&X, (size_t)T * D * 2));
    CK(cudaMalloc(&H, (size_t)T * D * 2));
    CK(cudaMalloc(&QKV, (size_t)T * 3 * D * 2));
    CK(cudaMalloc(&A, (size_t)T * F * 2));
    CK(cudaMalloc(&U, (size_t)T * 2 * F * 2));
    fill_b<<<1024, 256>>>(X, (long long)T * D);
    fill_b<<<1024, 256>>>(QKV, (long long)T * 3 * D);
    fill_b<<<1024, 256>>>(U, (long long)T * 2 * F);
    for (int l = 0; l < L; l++) {
        CK(cudaMalloc(&Wq[l], (size_t)3 * D * D * 2));
        CK(cudaMalloc(&Wo[l], (size_t)D * D * 2));
        CK(cudaMalloc(&W13[l], (size_t)2 * F * D * 2));
        CK(cudaMalloc(&W2[l], (size_t)D * F * 2));
        fill_b<<<1024, 256>>>(Wq[l], 3ll * D * D);
        fill_b<<<1024, 256>>>(Wo[l], (long long)D * D);
        fill_b<<<1024, 256>>>(W13[l], 2ll * F * D);
        fill_b<<<1024, 256>>>(W2[l], (long long)D * F);
    }
    CK(cudaMalloc(&P, NP * 4));
    CK(cudaMalloc(&G, NP * 4));
    CK(cudaMalloc(&Mo, NP * 4));
    CK(cudaMalloc(&Vo, NP * 4));
    CK(cudaMalloc(&Wb, NP * 2));
    fill_f<<<4096, 256>>>(P, NP, 0.02f);
    fill_f<<<4096, 256>>>(G, NP, 0.01f);
    fill_f<<<4096, 256>>>(Mo, NP, 0.001f);
    fill_f<<<4096, 256>>>(Vo, NP, 0.0f);
    CK(cudaDeviceSynchronize());
    // parts: the embedding (7.68M), each layer (9.44M), and the head (7.68M + norms), multiples of 4
    long long emb = 7680000, per = (NP - 2 * emb) / L / 4 * 4;
    cut[0] = 0;
    cut[1] = emb;
    for (int i = 2; i <= L; i++) cut[i] = cut[i - 1] + per;
    cut[PARTS] = NP;
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaEvent_t ev[PARTS + 2];
    for (int i = 0; i < PARTS + 2; i++) CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    printf("cs336-small forward (batch 4, ctx 128) and AdamW over %lld parameters; %d SMs; graph replay, mean of 30, ms\n", NP, nsm);
    for (int prio = 0; prio < 2; prio++) {
        cudaStream_t s0, s1;
        CK(cudaStreamCreateWithPriority(&s0, cudaStreamNonBlocking, prio ? hi : 0));
        CK(cudaStreamCreateWithPriority(&s1, cudaStreamNonBlocking, prio ? lo : 0));
        printf("%s\n", prio ? "forward at the highest priority, AdamW at the lowest" : "equal priorities");
        float f = timed(1, 0, nsm, s0, s1, ev);
        printf("  forward alone %.3f\n", f);
        for (int mode = 0; mode <= 4; mode = mode ? mode * 2 : 1) {
            float a = timed(2, mode, nsm, s0, s1, ev), b = timed(3, mode, nsm, s0, s1, ev), c = timed(4, mode, nsm, s0, s1, ev);
            printf("  AdamW grid %6d x 512: alone %.3f, both at once %.3f, chained %.3f (sum %.3f, hidden %.3f / %.3f)\n",
                   grid_of(mode, nsm), a, b, c, a + f, a + f - b, a + f - c);
        }
        CK(cudaStreamDestroy(s0));
        CK(cudaStreamDestroy(s1));
    }
    return 0;
}
