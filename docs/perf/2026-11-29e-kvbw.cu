// 2026-11-29 (twenty-second session), the probe run between calls 2 and 3: nvcc -O3 -arch=sm_90 -o /tmp/kvbw kvbw.cu && /tmp/kvbw
// Read bandwidth of a decode KV cache in two layouts: position-major (B, C, H, D) as stg keeps it, and
// head-major (B, H, C, D). Every block streams the first L rows of one (b, h) pair, K then V, 16 bytes a
// load, the same loop in both; the only difference is the address of row r.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
template <bool HEAD_MAJOR, int UN>
__global__ void rd(const uint4 *k, const uint4 *v, int H, int C, int L, int NC, unsigned *out) {
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t n = (int64_t)L * NC;
    unsigned acc = 0;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += (int64_t)blockDim.x * UN) {
        uint4 x[UN], y[UN];
#pragma unroll
        for (int u = 0; u < UN; u++) {
            int64_t i = i0 + (int64_t)u * blockDim.x;
            if (i < n) {
                int64_t r = i / NC, c = i % NC;
                int64_t off = HEAD_MAJOR ? ((int64_t)bh * C + r) * NC + c : (((int64_t)b * C + r) * H + h) * NC + c;
                x[u] = __ldcs(k + off), y[u] = __ldcs(v + off);
            } else x[u] = y[u] = make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UN; u++) acc ^= x[u].x ^ x[u].w ^ y[u].y ^ y[u].z;
    }
    if (acc == 0x12345678u) out[0] = acc;
}
int main() {
    const int B = 64, H = 32, C = 1024, D = 80, NC = D * 2 / 16;
    size_t bytes = (size_t)B * C * H * D * 2;
    uint4 *k, *v; unsigned *o;
    CK(cudaMalloc(&k, bytes)); CK(cudaMalloc(&v, bytes)); CK(cudaMalloc(&o, 4));
    CK(cudaMemset(k, 1, bytes)); CK(cudaMemset(v, 2, bytes));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    float ms;
    CK(cudaEventRecord(e0)); for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(v, k, bytes, cudaMemcpyDeviceToDevice)); CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("copy: %.3f TB/s (read + write)\n", 2.0 * bytes * 10 / (ms * 1e-3) / 1e12);
    for (int L : {256, 763, 1024})
        for (int t : {128, 256})
            for (int hm = 0; hm < 2; hm++) {
                for (int rep = 0; rep < 2; rep++) {
                    CK(cudaEventRecord(e0));
                    for (int i = 0; i < 20; i++) {
                        if (hm) { if (t == 128) rd<true, 4><<<B * H, t>>>(k, v, H, C, L, NC, o); else rd<true, 4><<<B * H, t>>>(k, v, H, C, L, NC, o); }
                        else { if (t == 128) rd<false, 4><<<B * H, t>>>(k, v, H, C, L, NC, o); else rd<false, 4><<<B * H, t>>>(k, v, H, C, L, NC, o); }
                    }
                    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
                    double rb = 2.0 * B * H * (double)L * D * 2;
                    if (rep) printf("L %4d threads %d %s: %.1f us, %.3f TB/s\n", L, t, hm ? "head-major    " : "position-major", ms * 1e3 / 20, rb * 20 / (ms * 1e-3) / 1e12);
                }
            }
    CK(cudaGetLastError());
    return 0;
}
