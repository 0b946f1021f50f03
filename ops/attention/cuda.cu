// Fused causal attention, flash style. bf16 storage runs on tensor cores: the forward on wgmma, warp-specialised
// (ops/attention/sm90a/attention_ws.cu), and the backward on wgmma, warp-specialised at head dims 64 and 80
// (ops/attention/sm90a/attention_ws_bwd.cu) and not at 128 (ops/attention/sm90a/attention_wgmma_bwd.cu), at head
// dims 64, 80 and 128 on compute capability 9.0, else the
// att_tc_* kernels of cuda_mma.cu (mma.sync m16n8k16, f32 accumulation and softmax, the same three-launch
// deterministic backward; head dims that are multiples of 8 but not 16 are padded with zeros to the
// next multiple of 16 inside the kernels). f32 storage runs the CUDA-core kernels of cuda_f32.cu.
//
// Layout (B, S, H, Dh) for q, o, do, dq and (B, S, Hkv, Dh) for k, v, dk, dv (H = G Hkv: grouped-query
// attention, query head h reads kv head h / G): head h of token s of batch b starts at
// ((b S + s) H + h) Dh. lse (B, H, S) f32. scale = attrs scale, or 1/sqrt(Dh) when 0. Optional docs
// (B, S) i32: packed documents, query s sees keys docs[b][s] .. s. Every kernel works on the S G
// "rows" of a kv head (position R / G of query head hk G + R % G; ops/attention/rows.cuh), so a K/V
// tile load serves the whole group, and starts its key loop at the first tile a document makes
// visible (the backward's key-tile blocks stop where the last document touching their keys ends).
//
// Forward: one block per (64 rows, kv head, batch) keeps its queries in shared memory and streams
// over the key tiles up to the diagonal with a running row max and sum (the S x S scores are never
// stored), then writes o and lse = log sum_j exp(scale q_i k_j).
// Backward, three launches, no atomics (replay is bitwise equal to eager launch):
//   1. D_i = do_i . o_i into the scratch (B, H, S) f32;
//   2. one block per key tile of a kv head loops over the row tiles (every query head of its group)
//      at and below the diagonal and accumulates dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij do_i
//      in registers;
//   3. one block per row tile loops over the key tiles up to the diagonal and accumulates
//      dq_i = scale sum_j ds_ij k_j.
//   with p_ij = exp(scale q_i k_j - lse_i), ds_ij = p_ij (do_i . v_j - D_i).
// Exponentials are taken base 2 on log2(e)-scaled scores.
// This file: the ops' checks, the dispatch over dtype and head dim, the backward's first launch and
// the records; ops/attention/cuda.cuh says what the three files share.
#include <math.h>
#include <stdint.h>

#include "ops/attention/cuda.cuh"

// ---- host side --------------------------------------------------------------------------------

// Shape, dtype and scale of an ATTENTION or ATTENTION_BWD op; checks what the kernels assume.
static int att_shape_of(const stg_graph *g, int id, void *const *ptr, att_shape *sh, stg_err *err) {
    const stg_op *op = &g->ops[id];
    const stg_tensor *q = &g->t[op->in[0]], *kt = &g->t[op->in[1]];
    if (q->ndim != 4 || kt->ndim != 4)
        return stg_errf_at(err, op->loc, "%s: '%s' and '%s' must be (B, S, H, Dh)", ops_name(op->kind), q->name, kt->name);
    const bool bwd = op->kind == STG_OP_ATTENTION_BWD;
    int lse_in = bwd ? 4 : -1, docs_in = bwd ? 6 : 3;
    if (op->n_in <= docs_in) docs_in = -1;
    int bf16 = cuda_is_bf16(g, op, op->in[0], err);
    if (bf16 < 0) return -1;
    for (int i = 1; i < op->n_in; i++)
        if (i != lse_in && i != docs_in && cuda_same_float(g, op, op->in[i], op->in[0], err) < 0) return -1;
    for (int i = 0; i < op->n_out; i++) {
        int t = op->out[i];
        if (op->kind == STG_OP_ATTENTION && i == 1) {
            if (g->t[t].dtype != STG_F32)
                return stg_errf_at(err, op->loc, "attention: log-sum-exp '%s' must be f32", g->t[t].name);
        } else if (cuda_same_float(g, op, t, op->in[0], err) < 0) {
            return -1;
        }
    }
    if (lse_in >= 0 && g->t[op->in[lse_in]].dtype != STG_F32)
        return stg_errf_at(err, op->loc, "attention_bwd: log-sum-exp '%s' must be f32", g->t[op->in[lse_in]].name);
    int64_t Dh = q->shape[3], Hkv = kt->shape[2];
    if (Dh <= 0 || Dh > 128 || Dh % 8)
        return stg_errf_at(err, op->loc, "%s: head dim %lld is not supported on CUDA (a multiple of 8 up to 128)",
                           ops_name(op->kind), (long long)Dh);
    if (Hkv <= 0 || q->shape[2] % Hkv || kt->shape[0] != q->shape[0] || kt->shape[1] != q->shape[1] || kt->shape[3] != Dh)
        return stg_errf_at(err, op->loc, "%s: '%s' does not match '%s' (query heads a multiple of kv heads)",
                           ops_name(op->kind), kt->name, q->name);
    if (q->shape[0] > 65535 || q->shape[2] > 65535 || q->shape[1] > INT32_MAX / 2 ||
        q->shape[0] * q->shape[1] * q->shape[2] >= INT32_MAX)
        return stg_errf_at(err, op->loc, "%s: shape of '%s' too large for the CUDA kernel", ops_name(op->kind), q->name);
    for (int i = 0; i < op->n_in; i++)
        if (i != docs_in && (uintptr_t)ptr[op->in[i]] % 16)
            return stg_errf_at(err, op->loc, "%s: '%s' is not 16-byte aligned", ops_name(op->kind), g->t[op->in[i]].name);
    sh->docs = NULL;
    sh->ws = NULL;
    sh->ws_bytes = 0;
    if (docs_in >= 0) {
        const stg_tensor *d = &g->t[op->in[docs_in]];
        if (d->dtype != STG_I32 || d->ndim != 2 || d->shape[0] != q->shape[0] || d->shape[1] != q->shape[1])
            return stg_errf_at(err, op->loc, "%s: docs '%s' must be i32 (B, S)", ops_name(op->kind), d->name);
        if ((uintptr_t)ptr[op->in[docs_in]] % 4)
            return stg_errf_at(err, op->loc, "%s: docs '%s' is not 4-byte aligned", ops_name(op->kind), d->name);
        sh->docs = (const int *)ptr[op->in[docs_in]];
    }
    sh->B = (int)q->shape[0];
    sh->S = (int)q->shape[1];
    sh->H = (int)q->shape[2];
    sh->G = (int)(q->shape[2] / Hkv);
    sh->D = (int)Dh;
    sh->bf16 = bf16;
    double sc = op->a.attention.scale;
    sh->scale = (float)(sc == 0.0 ? 1.0 / sqrt((double)Dh) : sc);
    return 0;
}

size_t cuda_attention_scratch_bytes(const stg_graph *g, int op) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION_BWD) return 0;
    const stg_tensor *q = &g->t[o->in[0]];
    if (q->ndim != 4) return 0;
    size_t n = (size_t)q->shape[0] * (size_t)q->shape[1] * (size_t)q->shape[2]; // D (B, H, S) f32
    return (n * sizeof(float) + 255) / 256 * 256;
}

// ---- backward, first launch ---------------------------------------------------------------------

// Dsum (B, H, S) = sum_d do . o: eight threads per (b, s, h) row, so a warp reads four whole rows, contiguous
// (the rows of (B, S, H, D) are), with 16-byte loads (head dims are multiples of 8 and the tensors 16-byte
// aligned: checked by att_shape_of); lane j of a row's eight takes vectors j, j + 8, ..., and three shuffles
// sum the eight in a fixed order. 32-bit index arithmetic (B S H < 2^31: checked there too). One thread per
// row (a warp's loads 32 rows apart) took 32-41 us a layer of medium's ctx-1024 step (H200 timeline, thirtieth
// session) for 16 MB; a warp per row with 64-bit division had taken the 2.7B step 0.3-0.4 ms longer
// (docs/PERF.md). Every lane of a warp runs the loop and the shuffles (rows past the end add zero).
template <typename T>
__global__ void att_bwd_dot_kernel(const T *__restrict__ o, const T *__restrict__ dout, float *__restrict__ Dsum,
                                       int rows, int S, int H, int D) {
    constexpr int N = 16 / (int)sizeof(T);
    const int nv = D / N, sub = (int)threadIdx.x & 7;
    const int warps = (int)(gridDim.x * blockDim.x / 32);
    for (int w = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32); w < (rows + 3) / 4; w += warps) {
        const int r = 4 * w + ((int)threadIdx.x & 31) / 8;
        float acc = 0.0f;
        if (r < rows) {
            const uint4 *a = (const uint4 *)(o + (int64_t)r * D), *g = (const uint4 *)(dout + (int64_t)r * D);
#pragma unroll 2
            for (int v = sub; v < nv; v += 8) {
                const uint4 x = a[v], y = g[v];
                const T *ex = (const T *)&x, *ey = (const T *)&y;
#pragma unroll
                for (int e = 0; e < N; e++) acc = fmaf(att_to_float(ex[e]), att_to_float(ey[e]), acc);
            }
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 4);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (sub == 0 && r < rows) {
            const int hh = r % H, t = r / H, sq = t % S, bb = t / S;
            Dsum[((int64_t)bb * H + hh) * S + sq] = acc;
        }
    }
}

// ---- dispatch -----------------------------------------------------------------------------------

template <typename T, int DP>
static int att_fwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, stg_err *err) {
    if constexpr (sizeof(T) == 2) { // bf16: tensor cores (head dims padded with zeros to DP in the kernels)
        return s->D == DP ? att_tc_fwd_launch<DP, false>(c, s, ptr, op, err) : att_tc_fwd_launch<DP, true>(c, s, ptr, op, err);
    } else {
        return att_f32_fwd_launch<T, DP>(c, s, ptr, op, err);
    }
}

template <typename T, int DP>
static int att_bwd_launch(stg_cuda *c, const att_shape *s, void *const *ptr, const stg_op *op, float *Dsum, stg_err *err) {
    const T *o = (const T *)ptr[op->in[3]], *dout = (const T *)ptr[op->in[5]];
    int64_t rows = (int64_t)s->B * s->S * s->H;
    att_bwd_dot_kernel<T><<<cuda_blocks(c, rows * 8, 256), 256, 0, c->stream>>>(o, dout, Dsum, (int)rows, s->S, s->H,
                                                                           s->D);
    CUDA_LAUNCH_CHECK(err, "attention backward (do . o)");
    if constexpr (sizeof(T) == 2) {
        return s->D == DP ? att_tc_bwd_launch<DP, false>(c, s, ptr, op, Dsum, err)
                          : att_tc_bwd_launch<DP, true>(c, s, ptr, op, Dsum, err);
    } else {
        return att_f32_bwd_launch<T, DP>(c, s, ptr, op, Dsum, err);
    }
}

// Calls F<T, DP>(args...) with DP the head dim rounded up to 16.
#define ATT_DISPATCH(F, s, ...)                                                                         \
    do {                                                                                                \
        int dp_ = ((s)->D + 15) / 16 * 16;                                                              \
        if ((s)->bf16) {                                                                                \
            switch (dp_) {                                                                              \
            case 16: return F<__nv_bfloat16, 16>(__VA_ARGS__);                                          \
            case 32: return F<__nv_bfloat16, 32>(__VA_ARGS__);                                          \
            case 48: return F<__nv_bfloat16, 48>(__VA_ARGS__);                                          \
            case 64: return F<__nv_bfloat16, 64>(__VA_ARGS__);                                          \
            case 80: return F<__nv_bfloat16, 80>(__VA_ARGS__);                                          \
            case 96: return F<__nv_bfloat16, 96>(__VA_ARGS__);                                          \
            case 112: return F<__nv_bfloat16, 112>(__VA_ARGS__);                                        \
            case 128: return F<__nv_bfloat16, 128>(__VA_ARGS__);                                        \
            }                                                                                           \
        } else {                                                                                        \
            switch (dp_) {                                                                              \
            case 16: return F<float, 16>(__VA_ARGS__);                                                  \
            case 32: return F<float, 32>(__VA_ARGS__);                                                  \
            case 48: return F<float, 48>(__VA_ARGS__);                                                  \
            case 64: return F<float, 64>(__VA_ARGS__);                                                  \
            case 80: return F<float, 80>(__VA_ARGS__);                                                  \
            case 96: return F<float, 96>(__VA_ARGS__);                                                  \
            case 112: return F<float, 112>(__VA_ARGS__);                                                \
            case 128: return F<float, 128>(__VA_ARGS__);                                                \
            }                                                                                           \
        }                                                                                               \
        return stg_errf(err, "attention: head dim %d not supported", (s)->D);                          \
    } while (0)

extern "C" int cuda_attention_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION) return stg_errf(err, "cuda attention: op %d is %s", op, ops_name(o->kind));
    att_shape s;
    if (att_shape_of(g, op, ptr, &s, err)) return -1;
    (void)scratch;
    ATT_DISPATCH(att_fwd_launch, &s, c, &s, ptr, o, err);
}

extern "C" int cuda_attention_bwd_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch,
                                      stg_err *err) {
    const stg_op *o = &g->ops[op];
    if (o->kind != STG_OP_ATTENTION_BWD) return stg_errf(err, "cuda attention backward: op %d is %s", op, ops_name(o->kind));
    att_shape s;
    if (att_shape_of(g, op, ptr, &s, err)) return -1;
    if (!scratch) return stg_errf(err, "cuda attention backward: op %d has no scratch", op);
    float *Dsum = (float *)scratch;
    const size_t dbytes = cuda_attention_scratch_bytes(g, op); // D's part; the workspace after it
    if (c->work_bytes > dbytes) {
        s.ws = (char *)scratch + dbytes;
        s.ws_bytes = c->work_bytes - dbytes;
    }
    ATT_DISPATCH(att_bwd_launch, &s, c, &s, ptr, o, Dsum, err);
}

// ---- records ------------------------------------------------------------------------------------

static int prep_attention(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state, size_t *work,
                   stg_err *err) {
    *work = cuda_attention_scratch_bytes(g, op);
    if (g->ops[op].kind == STG_OP_ATTENTION_BWD) {
        att_shape s;
        int fail = 0;
        if (att_shape_of(g, op, ptr, &s, err)) return -1;
        const size_t ws = att_tc_bwd_ws_bytes(c, &s, err, &fail);
        if (fail) return -1;
        *work += ws;
    }
    return 0;
}

static int cuda_run_attention(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_attention_run(c, g, op, ptr, c->work, err);
}

static int cuda_run_attention_bwd(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    return cuda_attention_bwd_run(c, g, op, ptr, c->work, err);
}

const cuda_rec stg_cuda_attention = {cuda_run_attention, prep_attention, NULL, NULL, CUDA_REC_ANY, NULL};
const cuda_rec stg_cuda_attention_bwd = {cuda_run_attention_bwd, prep_attention, NULL, NULL, CUDA_REC_MAIN, NULL};

