// Rotary position embedding over adjacent pairs (x[2k], x[2k+1]) (CS336), x (..., S, H, Dh).
// The general kernel (head dims not a multiple of 8, unaligned tensors): one block per (outer,
// position) row of H*Dh elements: the block first computes the row's Dh/2 cos/sin pairs in double
// (the angle p * theta^(-2k/Dh) reaches ~1e3 radians at ctx 1024, past fp32's accuracy), keeps them
// in shared memory, then rotates every pair of the row. Each thread reads a pair before writing it,
// so y may alias x (in place); the same holds for the vectorised kernel below.
#include "ops/cuda/common.cuh"
#include "ops/rope/angle.cuh"

template <typename T>
__global__ void rope_kernel(const T *x, T *y, int64_t S, int64_t H, int64_t Dh, double log_theta, double sign) {
    extern __shared__ float cs[]; // (Dh/2, 2) cos, sin
    int64_t row = blockIdx.x;      // (outer, S)
    double p = (double)(row % S);
    int64_t half = Dh / 2;
    for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
        double ang = sign * p * exp(-2.0 * (double)k / (double)Dh * log_theta);
        double s, co;
        sincos(ang, &s, &co);
        cs[2 * k] = (float)co;
        cs[2 * k + 1] = (float)s;
    }
    __syncthreads();
    const T *xr = x + row * H * Dh;
    T *yr = y + row * H * Dh;
    for (int64_t q = threadIdx.x; q < H * half; q += blockDim.x) {
        int64_t k = q % half;
        float co = cs[2 * k], s = cs[2 * k + 1];
        float x0 = cu_ld(xr, 2 * q), x1 = cu_ld(xr, 2 * q + 1);
        cu_st(yr, 2 * q, x0 * co - x1 * s);
        cu_st(yr, 2 * q + 1, x0 * s + x1 * co);
    }
}

// tab[s][k] = (cos, sin) of position s, pair k: one table per (S, Dh, theta), built once when the
// graph is prepared (before any capture: the rope group, below), read by every rope op of that shape.
__global__ void rope_table_kernel(float2 *tab, int64_t S, int Dh, double log_theta) {
    const int half = Dh / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < S * half; i += (int64_t)gridDim.x * blockDim.x)
        tab[i] = rope_cos_sin(i / half, (int)(i % half), Dh, log_theta);
}

// Vectorised: blocks (position s, chunk): each block covers a chunk of the vectors of every outer
// index at position s; each thread reads its vector's N/2 (cos, sin) pairs from the prepared table
// (L2-resident: S Dh / 2 float2). Before the table there was one per block, built in shared memory
// (a double exp and a sincosf per pair, a barrier): 21.6 us a call at 2.7B's q against 13.8 with the
// table (ncu, one lease; docs/PERF.md).
// Needs Dh % 8 == 0 (a table row is whole 32-byte pieces) and 16-byte aligned x, y. 32-bit index arithmetic (a position's vectors fit an
// int: checked by the launch); with 64-bit division the kernel took 22.0 us at 2.7B's q against 20.8.
template <typename T>
__global__ void __launch_bounds__(256) rope_vec_kernel(const T *x, T *y, const float2 *__restrict__ tab, int outer, int64_t S,
                                                        int64_t HD, int Dh, float sign) {
    const int N = CU_VEC<T>::N;
    const int64_t s = blockIdx.x;
    const int nvr = (int)(HD / N), total = outer * nvr, half = Dh / 2;
    const float2 *row = tab + s * half;
    for (int q = (int)(blockIdx.y * blockDim.x + threadIdx.x); q < total; q += (int)(gridDim.y * blockDim.x)) {
        const int r = q / nvr, c = q - r * nvr;
        const int64_t off = ((int64_t)r * S + s) * HD + (int64_t)c * N;
        float v[N];
        cu_load16(x + off, v);
        const int k0 = (c % (Dh / N)) * (N / 2);
        float cs[N]; // (cos, sin) of pairs k0 .. k0 + N/2 - 1: N/2 float2, 8 N bytes, 16-byte aligned
#pragma unroll
        for (int j = 0; j < N / 4; j++) {
            float4 t = __ldg((const float4 *)(row + k0) + j);
            cs[4 * j] = t.x, cs[4 * j + 1] = t.y, cs[4 * j + 2] = t.z, cs[4 * j + 3] = t.w;
        }
        float o[N];
#pragma unroll
        for (int j = 0; j < N / 2; j++) {
            float co = cs[2 * j], sn = sign * cs[2 * j + 1];
            float x0 = v[2 * j], x1 = v[2 * j + 1];
            o[2 * j] = x0 * co - x1 * sn;
            o[2 * j + 1] = x0 * sn + x1 * co;
        }
        cu_store16(y + off, o);
    }
}

// ---- the tables ---------------------------------------------------------------------------------

static bool rope_vec_shape(const stg_graph *g, const stg_op *o, int64_t *S, int64_t *Dh) {
    const stg_tensor *x = &g->t[o->in[0]];
    if (x->ndim < 3) return false;
    *S = x->shape[x->ndim - 3];
    *Dh = x->shape[x->ndim - 1];
    return *S > 0 && *Dh > 0 && *Dh % 8 == 0; // bf16 vectors of 8, fp32 of 4: the table's rows 32-byte multiples
}

// A rope table: float2 (cos, sin) [S][Dh / 2] at byte `off` of the group's table.
typedef struct rope_key {
    int64_t S;
    int64_t Dh;
    double theta;
    size_t off;
} rope_key;

// The rope group's state: one table per (positions, head dim, theta) of the graph's rope ops.
typedef struct rope_tables {
    rope_key *keys; // (n)
    int n;
    void *tab;      // the tables (device memory inside c->scratch), NULL when none
} rope_tables;

static int rope_key_find(const rope_tables *t, int64_t S, int64_t Dh, double theta) {
    for (int i = 0; i < t->n; i++)
        if (t->keys[i].S == S && t->keys[i].Dh == Dh && t->keys[i].theta == theta) return i;
    return -1;
}

static void rope_tables_free(void *state) {
    rope_tables *t = (rope_tables *)state;
    if (t) free(t->keys);
    free(t);
}

// The tables the graph's rope ops need and their bytes.
static int rope_plan(stg_cuda *c, const stg_graph *g, void *const *ptr, void **state, size_t *bytes, size_t *work,
                     stg_err *err) {
    *bytes = 0;
    *work = 0;
    rope_tables *t = (rope_tables *)stg_calloc(1, sizeof *t, err);
    if (!t) return -1;
    *state = t;
    for (int i = 0; i < g->nops; i++) {
        const stg_op *o = &g->ops[i];
        int64_t S, Dh;
        if (o->kind != STG_OP_ROPE || !rope_vec_shape(g, o, &S, &Dh) || rope_key_find(t, S, Dh, o->a.rope.theta) >= 0) continue;
        rope_key *k = (rope_key *)realloc(t->keys, sizeof *k * (size_t)(t->n + 1));
        if (!k) return stg_errf(err, "cuda: out of host memory for the rope tables");
        t->keys = k;
        k[t->n++] = (rope_key){S, Dh, o->a.rope.theta, *bytes};
        *bytes += ((size_t)S * (size_t)(Dh / 2) * sizeof(float2) + 255) & ~(size_t)255; // 256-byte aligned tables
    }
    return 0;
}

// Their values: a kernel on c->stream.
static int rope_fill(stg_cuda *c, void *state, void *table, stg_err *err) {
    rope_tables *t = (rope_tables *)state;
    t->tab = t->n ? table : NULL;
    if (!t->n) return 0;
    for (int i = 0; i < t->n; i++) {
        const rope_key *k = &t->keys[i];
        int64_t n = k->S * (k->Dh / 2);
        rope_table_kernel<<<cuda_blocks(c, n, 256), 256, 0, c->stream>>>((float2 *)((char *)t->tab + k->off), k->S, (int)k->Dh,
                                                                          log(k->theta));
        CUDA_LAUNCH_CHECK(err, "rope_table_kernel");
    }
    CUDA_CHECK(err, cudaStreamSynchronize(c->stream)); // the tables are read from every stream
    return 0;
}

static const cuda_group rope_group = {"rope cos/sin tables", rope_plan, rope_fill, rope_tables_free};

extern "C" int cuda_run_rope(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    const stg_tensor *x = &g->t[o->in[0]];
    int b = cuda_same_float(g, o, o->out[0], o->in[0], err);
    if (b < 0) return -1;
    if (x->ndim < 3) return stg_errf(err, "tensor %s must be (..., S, H, Dh), has %d dims", x->name, x->ndim);
    int64_t S = x->shape[x->ndim - 3], H = x->shape[x->ndim - 2], Dh = x->shape[x->ndim - 1];
    if (Dh % 2) return stg_errf(err, "tensor %s has an odd head dim %lld", x->name, (long long)Dh);
    if (cuda_numel(&g->t[o->out[0]]) != cuda_numel(x))
        return stg_errf(err, "tensor %s does not match %s", g->t[o->out[0]].name, x->name);
    int64_t rows = cuda_numel(x) / (H * Dh);
    if (rows == 0) return 0;
    int threads = cu_row_threads(H * Dh / 2, 2);
    size_t smem = (size_t)Dh * sizeof(float);
    if (smem > 48 * 1024) return stg_errf(err, "head dim %lld is too large for the rope kernel", (long long)Dh);
    double lt = log(o->a.rope.theta), sign = o->a.rope.inverse ? -1.0 : 1.0;
    int N = b ? 8 : 4;
    int64_t vS, vDh;
    const rope_tables *rt = (const rope_tables *)cuda_group_state(c, &rope_group);
    int key = rt && rope_vec_shape(g, o, &vS, &vDh) ? rope_key_find(rt, S, Dh, o->a.rope.theta) : -1;
    if (key >= 0 && rt->tab && cu_aligned(ptr[o->in[0]], 16) && cu_aligned(ptr[o->out[0]], 16) &&
        rows / S * (H * Dh / N) + (int64_t)256 * 65535 < INT32_MAX) {
        const float2 *tab = (const float2 *)((const char *)rt->tab + rt->keys[key].off);
        int64_t outer = rows / S, total = outer * (H * Dh / N);
        int vt = 256;
        int64_t chunks = (total + vt - 1) / vt;
        if (chunks > 65535) chunks = 65535;
        dim3 grid((unsigned)S, (unsigned)chunks);
        if (b)
            rope_vec_kernel<bf16><<<grid, vt, 0, c->stream>>>((const bf16 *)ptr[o->in[0]], (bf16 *)ptr[o->out[0]], tab,
                                                              (int)outer, S, H * Dh, (int)Dh, (float)sign);
        else
            rope_vec_kernel<float><<<grid, vt, 0, c->stream>>>((const float *)ptr[o->in[0]], (float *)ptr[o->out[0]], tab,
                                                               (int)outer, S, H * Dh, (int)Dh, (float)sign);
        CUDA_LAUNCH_CHECK(err, "rope_vec_kernel");
        return 0;
    }
    if (b)
        rope_kernel<bf16><<<(unsigned)rows, threads, smem, c->stream>>>((const bf16 *)ptr[o->in[0]],
                                                                        (bf16 *)ptr[o->out[0]], S, H, Dh, lt, sign);
    else
        rope_kernel<float><<<(unsigned)rows, threads, smem, c->stream>>>((const float *)ptr[o->in[0]],
                                                                         (float *)ptr[o->out[0]], S, H, Dh, lt, sign);
    CUDA_LAUNCH_CHECK(err, "rope_kernel");
    return 0;
}

// ---- records ------------------------------------------------------------------------------------

const cuda_rec stg_cuda_rope = {cuda_run_rope, NULL, NULL, NULL, CUDA_REC_ANY, NULL, &rope_group};
