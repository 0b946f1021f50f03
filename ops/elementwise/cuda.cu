// Elementwise ops: silu, relu, gelu, swiglu, mul, add, scale and the backwards. One kernel template over
// up to three inputs and two outputs; 16-byte vectors when every pointer is aligned, a grid-stride
// loop, fp32 arithmetic. Each element is read before it is written by the same thread, so any
// output may alias any input (the planner's in-place rules).
#include "ops/cuda/common.cuh"

__device__ __forceinline__ float ew_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Functors: in[0..2] -> out[0..1], floats.
struct ew_silu {
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] * ew_sigmoid(a[0]); }
};
struct ew_silu_bwd { // x, dy -> dx
    __device__ void operator()(const float *a, float *y) const {
        float s = ew_sigmoid(a[0]);
        y[0] = a[1] * s * (1.0f + a[0] * (1.0f - s));
    }
};
struct ew_relu {
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] > 0.0f ? a[0] : 0.0f; }
};
struct ew_relu_bwd { // y (relu's output), dy -> dx
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] > 0.0f ? a[1] : 0.0f; }
};
// GELU, tanh approximation (GPT-2): x (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715 x^3).
struct ew_gelu {
    __device__ void operator()(const float *a, float *y) const {
        float x = a[0], t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
        y[0] = 0.5f * x * (1.0f + t);
    }
};
struct ew_gelu_bwd { // x, dy -> dx
    __device__ void operator()(const float *a, float *y) const {
        float x = a[0], t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
        float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 0.134145f * x * x);
        y[0] = a[1] * d;
    }
};
struct ew_swiglu { // a, b -> silu(a) b
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] * ew_sigmoid(a[0]) * a[1]; }
};
struct ew_swiglu_bwd { // a, b, dy -> da, db
    __device__ void operator()(const float *a, float *y) const {
        float s = ew_sigmoid(a[0]);
        y[0] = a[2] * a[1] * s * (1.0f + a[0] * (1.0f - s));
        y[1] = a[2] * a[0] * s;
    }
};
struct ew_mul {
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] * a[1]; }
};
struct ew_add {
    __device__ void operator()(const float *a, float *y) const { y[0] = a[0] + a[1]; }
};
struct ew_scale {
    float f;
    __device__ void operator()(const float *a, float *y) const { y[0] = f * a[0]; }
};
// Gradient accumulation: the output is also the last input (each element read before it is written).
struct ew_add_acc { // a, b, y -> y + (a + b)
    __device__ void operator()(const float *a, float *y) const { y[0] = a[2] + (a[0] + a[1]); }
};
struct ew_scale_acc { // x, y -> y + f x
    float f;
    __device__ void operator()(const float *a, float *y) const { y[0] = a[1] + f * a[0]; }
};

template <typename T> struct ew_args {
    const T *in[3];
    T *out[2];
};

// n elements; VEC: every pointer 16-byte aligned, vectors of CU_VEC<T>::N then a scalar tail.
template <typename T, int NI, int NO, bool VEC, typename F>
__global__ void ew_kernel(F f, ew_args<T> p, int64_t n) {
    cu_pdl_trigger(); // the next kernel may be scheduled (ops/cuda/common.cuh)
    int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (VEC) {
        const int N = CU_VEC<T>::N;
        int64_t nv = n / N;
        for (int64_t v = tid; v < nv; v += stride) {
            float a[3][N], y[2][N];
#pragma unroll
            for (int i = 0; i < NI; i++) cu_load16(p.in[i] + v * N, a[i]);
#pragma unroll
            for (int k = 0; k < N; k++) {
                float ak[3], yk[2];
#pragma unroll
                for (int i = 0; i < NI; i++) ak[i] = a[i][k];
                f(ak, yk);
#pragma unroll
                for (int o = 0; o < NO; o++) y[o][k] = yk[o];
            }
#pragma unroll
            for (int o = 0; o < NO; o++) cu_store16(p.out[o] + v * N, y[o]);
        }
        done = nv * N;
    }
    for (int64_t i = done + tid; i < n; i += stride) {
        float ak[3], yk[2];
#pragma unroll
        for (int k = 0; k < NI; k++) ak[k] = cu_ld(p.in[k], i);
        f(ak, yk);
#pragma unroll
        for (int o = 0; o < NO; o++) cu_st(p.out[o], i, yk[o]);
    }
}

template <typename T, int NI, int NO, typename F>
static int ew_launch(stg_cuda *c, F f, void *const *in, void *const *out, int64_t n, stg_err *err) {
    ew_args<T> p;
    bool vec = true;
    for (int i = 0; i < 3; i++) {
        p.in[i] = i < NI ? (const T *)in[i] : NULL;
        if (i < NI) vec = vec && cu_aligned(in[i], 16);
    }
    for (int o = 0; o < 2; o++) {
        p.out[o] = o < NO ? (T *)out[o] : NULL;
        if (o < NO) vec = vec && cu_aligned(out[o], 16);
    }
    if (n <= 0) return 0;
    const int threads = 256;
    if (vec) {
        unsigned blocks = cuda_blocks(c, (n + CU_VEC<T>::N - 1) / CU_VEC<T>::N, threads);
        ew_kernel<T, NI, NO, true><<<blocks, threads, 0, c->stream>>>(f, p, n);
    } else {
        unsigned blocks = cuda_blocks(c, n, threads);
        ew_kernel<T, NI, NO, false><<<blocks, threads, 0, c->stream>>>(f, p, n);
    }
    CUDA_LAUNCH_CHECK(err, "elementwise kernel");
    return 0;
}

// Checks that every tensor of the op has input 0's dtype and element count; returns bf16 or -1.
static int ew_check(const stg_graph *g, const stg_op *o, stg_err *err) {
    int b = cuda_is_bf16(g, o, o->in[0], err);
    if (b < 0) return -1;
    int64_t n = cuda_numel(&g->t[o->in[0]]);
    for (int i = 0; i < o->n_in + o->n_out; i++) {
        int t = i < o->n_in ? o->in[i] : o->out[i - o->n_in];
        if (cuda_same_float(g, o, t, o->in[0], err) < 0) return -1;
        if (cuda_numel(&g->t[t]) != n)
            return stg_errf(err, "tensor %s has %lld elements, expected %lld", g->t[t].name,
                            (long long)cuda_numel(&g->t[t]), (long long)n);
    }
    return b;
}

template <int NI, int NO, typename F>
static int ew_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, F f, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = ew_check(g, o, err);
    if (b < 0) return -1;
    void *in[3] = {NULL, NULL, NULL}, *out[2] = {NULL, NULL};
    for (int i = 0; i < NI; i++) in[i] = ptr[o->in[i]];
    for (int k = 0; k < NO; k++) out[k] = ptr[o->out[k]];
    int64_t n = cuda_numel(&g->t[o->in[0]]);
    return b ? ew_launch<bf16, NI, NO>(c, f, in, out, n, err) : ew_launch<float, NI, NO>(c, f, in, out, n, err);
}

extern "C" int cuda_run_silu(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<1, 1>(c, g, op, ptr, ew_silu(), err);
}
extern "C" int cuda_run_silu_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<2, 1>(c, g, op, ptr, ew_silu_bwd(), err);
}
extern "C" int cuda_run_relu(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<1, 1>(c, g, op, ptr, ew_relu(), err);
}
extern "C" int cuda_run_relu_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<2, 1>(c, g, op, ptr, ew_relu_bwd(), err);
}
extern "C" int cuda_run_gelu(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<1, 1>(c, g, op, ptr, ew_gelu(), err);
}
extern "C" int cuda_run_gelu_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<2, 1>(c, g, op, ptr, ew_gelu_bwd(), err);
}
extern "C" int cuda_run_swiglu(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<2, 1>(c, g, op, ptr, ew_swiglu(), err);
}
extern "C" int cuda_run_swiglu_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<3, 2>(c, g, op, ptr, ew_swiglu_bwd(), err);
}
extern "C" int cuda_run_mul(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return ew_run<2, 1>(c, g, op, ptr, ew_mul(), err);
}
// An op that adds into its output (gradient accumulation): the output read as input NI.
template <int NI, typename F>
static int ew_run_acc(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, F f, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int b = ew_check(g, o, err);
    if (b < 0) return -1;
    void *in[3] = {NULL, NULL, NULL}, *out[2] = {ptr[o->out[0]], NULL};
    for (int i = 0; i < NI; i++) in[i] = ptr[o->in[i]];
    in[NI] = ptr[o->out[0]];
    int64_t n = cuda_numel(&g->t[o->in[0]]);
    return b ? ew_launch<bf16, NI + 1, 1>(c, f, in, out, n, err) : ew_launch<float, NI + 1, 1>(c, f, in, out, n, err);
}

extern "C" int cuda_run_add(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (cuda_accumulating(c, &g->ops[op], 0)) return ew_run_acc<2>(c, g, op, ptr, ew_add_acc(), err);
    return ew_run<2, 1>(c, g, op, ptr, ew_add(), err);
}
extern "C" int cuda_run_scale(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (cuda_accumulating(c, &g->ops[op], 0)) {
        ew_scale_acc f;
        f.f = (float)g->ops[op].a.scale.factor;
        return ew_run_acc<1>(c, g, op, ptr, f, err);
    }
    ew_scale f;
    f.f = (float)g->ops[op].a.scale.factor;
    return ew_run<1, 1>(c, g, op, ptr, f, err);
}

// ---- records ------------------------------------------------------------------------------------

const cuda_rec stg_cuda_silu = {cuda_run_silu, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_silu_bwd = {cuda_run_silu_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_relu = {cuda_run_relu, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_relu_bwd = {cuda_run_relu_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_gelu = {cuda_run_gelu, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_gelu_bwd = {cuda_run_gelu_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_swiglu = {cuda_run_swiglu, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_swiglu_bwd = {cuda_run_swiglu_bwd, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_mul = {cuda_run_mul, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_add = {cuda_run_add, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_scale = {cuda_run_scale, NULL, NULL, NULL, CUDA_REC_ANY, NULL};
