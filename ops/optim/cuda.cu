// The optimizer side of the step, kept on the device: the learning-rate schedule, the global
// gradient norm and AdamW.
//
// Both multi-tensor kernels stream their bytes once and are written to run at the device's copy
// bandwidth: 16-byte loads and stores, several of each in flight per thread before the first use
// (an unrolled loop), streaming cache hints (the bytes are touched once per step, far more than L2
// holds), and large per-block chunks so that each block's table lookup and constants cost little.
//
// global_norm: one multi-tensor launch over all of the op's inputs (the op's own table, built by its
// record's prepare), one block per CUDA_NORM_CHUNK elements writing its sum of squares into a
// partial, then one block adding the partials in a fixed order (deterministic: no atomics).
// adamw: one multi-tensor launch for every parameter (one table over every ADAMW op of the graph:
// a cuda_group), made by the first ADAMW op of the schedule; the other ADAMW ops do nothing.
// Clipping by the global norm and the step / learning rate are read from device memory, so the
// whole update can be captured in a CUDA Graph.
// adamw with a slot (the optimizer in backward): each ADAMW op launches the same update over its
// own table entry, on a grid of ADAMW_IB_PER_SM blocks a multiprocessor striding over the tensor;
// the blocks also write their sums of squares of the gradient into partials, and a one-block kernel
// adds them in order into the op's slot. slot_norm then adds the slots in order (deterministic: the
// grid is fixed per device). These ops run on a stream of their own beside the backward's (the
// communication lane, which a run with the optimizer in backward never uses for communication: data
// parallelism refuses it), so each update overlaps the rest of the backward pass. Their partials
// live in the AdamW table's own device memory (one region: the lane is one stream, so the ops run one
// after another), not in the shared scratch c->work that ops on the other streams use.
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/optim/bench.h"
#include "ops/optim/schedule.h"

// ---- multi-tensor tables ----------------------------------------------------------------------------
// Elements per block of the multi-tensor kernels. Multiples of 4 (float4 alignment of chunks) and
// of the elements one block covers per loop trip (CUDA_OPTIM_THREADS x 4 x the unroll), so only an
// entry's last chunk has a remainder. Large chunks amortise each block's table lookup and constants;
// AdamW's one loop trip per block (2048 elements) measured fastest all the same: 2.7B at ctx 1024,
// 161.2-161.6 ms a step against 161.9-162.1 with 8192 (docs/PERF.md). Both settable at build time
// (-DCUDA_ADAMW_CHUNK=...) for such measurements.
#define CUDA_OPTIM_THREADS 256
#ifndef CUDA_NORM_CHUNK
#define CUDA_NORM_CHUNK 65536
#endif
#ifndef CUDA_ADAMW_CHUNK
#define CUDA_ADAMW_CHUNK 2048
#endif

// One input of a global_norm op.
typedef struct cuda_norm_entry {
    const void *p;     // (n) F32 or BF16
    int64_t n;
    int64_t block0;    // first block of this entry within its op's launch
    int bf16;          // element type
    int vec;           // p is 16-byte aligned: float4 / 4 x bf16 loads
} cuda_norm_entry;

// One parameter of the AdamW update.
typedef struct cuda_adamw_entry {
    void *param;       // (n) F32 or BF16 working weight
    const void *grad;  // (n) F32 or BF16
    float *m, *v;      // (n) F32
    float *master;     // (n) F32 master weight (bf16 training), NULL when param is updated directly
    int64_t n;
    int64_t block0;    // first block of this entry in the launch
    float beta1, beta2, eps, weight_decay, max_norm;
    int param_bf16, grad_bf16;
    int vec;           // every pointer is 16-byte aligned (param 8-byte when bf16)
    int op;            // the ADAMW op it came from (host-side check of the pointers)
    int slot;          // optimizer in backward: 1 + the index in `slots` of this gradient's sum of
                       // squares; 0 in the ordinary form (one launch for every parameter)
    void *slots;       // (k) F32 or BF16 slots (optimizer in backward), else NULL
    int slots_bf16;
    int64_t grid;      // with a slot and STG_ADAMW_ONE: blocks of the op's own launch (a few per SM), else 0
} cuda_adamw_entry;

// ---- lr_schedule ----------------------------------------------------------------------------------

// sched (2) = [steps done, lr]: done += 1; lr = the schedule at t = done - 1 (ops/optim/schedule.h,
// the formula the CPU runner uses, in double).
__global__ void lr_schedule_kernel(void *sched, int sb, stg_lr_attrs a) {
    double done = (double)cu_ldd(sched, sb, 0) + 1.0;
    double out = stg_lr_schedule_at(&a, (int64_t)done - 1);
    cu_std(sched, sb, 0, (float)done);
    cu_std(sched, sb, 1, (float)out);
}

extern "C" int cuda_run_lr_schedule(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int sb = cuda_is_bf16(g, o, o->in[0], err);
    if (sb < 0) return -1;
    if (cuda_numel(&g->t[o->in[0]]) != 2)
        return stg_errf(err, "schedule state %s must hold [steps done, lr]", g->t[o->in[0]].name);
    lr_schedule_kernel<<<1, 1, 0, c->stream>>>(ptr[o->in[0]], sb, o->a.lr);
    CUDA_LAUNCH_CHECK(err, "lr_schedule_kernel");
    return 0;
}

// ---- tables -----------------------------------------------------------------------------------------

// The tuned configuration (cuda_optim_bench times the others; the unrolls settable at build time).
#ifndef NORM_UNROLL
#define NORM_UNROLL 4
#endif
#define NORM_CS true
// Blocks a multiprocessor of each update of the optimizer in backward (its grid-stride form). The
// updates run beside the backward's kernels, whose blocks wait for a multiprocessor that the
// updates' blocks hold: 2 a multiprocessor measured fastest against 1, 3, 4 and as many as fit
// (docs/perf/LOG.md, twenty-seventh session).
#ifndef ADAMW_IB_PER_SM
#define ADAMW_IB_PER_SM 2
#endif
#ifndef ADAMW_UNROLL
#define ADAMW_UNROLL 2
#endif
#define ADAMW_CS true

static int64_t optim_blocks(int64_t n, int64_t chunk) { return (n + chunk - 1) / chunk; }

// ---- preparation: the global_norm ops' tables (each op's own) ------------------------------------

// A global_norm op's prepared state: its table (one entry per input) on the host, to check the
// pointers at run time, and on the device (the op's table, inside c->op_tab).
typedef struct optim_norm_tab {
    cuda_norm_entry *host; // (n)
    const cuda_norm_entry *dev;
    int n;
} optim_norm_tab;

static void optim_norm_free(void *state) {
    optim_norm_tab *t = (optim_norm_tab *)state;
    if (t) free(t->host);
    free(t);
}

static size_t optim_norm_table_bytes(const stg_graph *g, int op) {
    return (sizeof(cuda_norm_entry) * (size_t)g->ops[op].n_in + 255) & ~(size_t)255;
}

// The op's inputs in order, blocks counted from 0; its partials (one double per block) in c->work.
static int prep_global_norm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                            size_t *work, stg_err *err) {
    const stg_op *o = &g->ops[op];
    optim_norm_tab *t = (optim_norm_tab *)stg_calloc(1, sizeof *t, err);
    if (!t) return -1;
    *state = t;
    if (o->n_in) {
        t->host = (cuda_norm_entry *)stg_calloc((size_t)o->n_in, sizeof(cuda_norm_entry), err);
        if (!t->host) return -1;
    }
    int64_t blocks = 0;
    for (int j = 0; j < o->n_in; j++) {
        int k = o->in[j];
        int b = cuda_is_bf16(g, o, k, err);
        if (b < 0) return -1;
        if (!ptr[k]) return stg_errf(err, "tensor %s has no device memory", g->t[k].name);
        cuda_norm_entry *e = &t->host[j];
        e->p = ptr[k];
        e->n = cuda_numel(&g->t[k]);
        e->block0 = blocks;
        e->bf16 = b;
        e->vec = cu_aligned(ptr[k], 16);
        blocks += optim_blocks(e->n, CUDA_NORM_CHUNK);
    }
    t->n = o->n_in;
    t->dev = (const cuda_norm_entry *)table;
    if (o->n_in) CUDA_CHECK(err, cudaMemcpy(table, t->host, sizeof(cuda_norm_entry) * (size_t)o->n_in, cudaMemcpyHostToDevice));
    *work = (size_t)blocks * sizeof(double);
    return 0;
}

// ---- preparation: the AdamW table (a group: every ADAMW op of the graph) ---------------------------

// The AdamW group's state: one entry per parameter in schedule order, on the host (checked against
// ptr at run time) and on the device (the group's table, inside c->scratch).
typedef struct optim_adamw_tab {
    cuda_adamw_entry *host; // (n)
    const cuda_adamw_entry *dev;
    int n;
    int first_op;           // the op that launches the one multi-tensor AdamW kernel
    int64_t blocks;         // blocks of that launch
    const void *norm;       // the global norm () and schedule state (2) every AdamW op reads
    const void *sched;
    int norm_bf16, sched_bf16;
    int *entry_of;          // (nops) the entry of each ADAMW op, -1 for other ops
    int nops;
    double *part;           // with slots: the partials (part_n doubles past the entries in the table)
    int64_t part_n;
} optim_adamw_tab;

static void optim_adamw_free(void *state) {
    optim_adamw_tab *t = (optim_adamw_tab *)state;
    if (!t) return;
    free(t->host);
    free(t->entry_of);
    free(t);
}

// Where the partials start in the AdamW table: past the entries, 256-byte aligned.
static size_t optim_part_offset(int n) { return (sizeof(cuda_adamw_entry) * (size_t)n + 255) / 256 * 256; }

// Every parameter in schedule order; the first one's op launches the update (or, with slots, each
// op its own entry).
static int optim_adamw_plan(stg_cuda *c, const stg_graph *g, void *const *ptr, void **state, size_t *table_bytes,
                            size_t *work_bytes, stg_err *err) {
    *table_bytes = 0;
    *work_bytes = 0;
    optim_adamw_tab *t = (optim_adamw_tab *)stg_calloc(1, sizeof *t, err);
    if (!t) return -1;
    *state = t;
    t->first_op = -1;
    int nops = g->nops > 0 ? g->nops : 1;
    t->nops = g->nops;
    t->entry_of = (int *)stg_malloc(sizeof(int) * (size_t)nops, err);
    if (!t->entry_of) return -1;
    int n_adamw = 0;
    for (int i = 0; i < nops; i++) t->entry_of[i] = -1;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == STG_OP_ADAMW) n_adamw++;
    if (n_adamw) {
        t->host = (cuda_adamw_entry *)stg_calloc((size_t)n_adamw, sizeof(cuda_adamw_entry), err);
        if (!t->host) return -1;
    }
    int64_t part_n = 0;
    int na = 0;
    int64_t blocks = 0;
    int count = g->nsched > 0 ? g->nsched : g->nops;
    for (int s = 0; s < count; s++) {
        int i = g->nsched > 0 ? g->schedule[s] : s;
        const stg_op *o = &g->ops[i];
        if (o->kind != STG_OP_ADAMW) continue;
        if (na == n_adamw) return stg_errf(err, "cuda: adamw op %d appears twice in the schedule", i);
        const char *pn = g->t[o->in[0]].name;
        int slot = o->a.adamw.slot;
        int nin = o->n_in - (slot > 0); // inputs before the slots
        if (slot < 0 || nin < 6 || nin > 7) return stg_errf(err, "cuda: adamw (%s): %d inputs with slot %d", pn, o->n_in, slot);
        int pb = cuda_is_bf16(g, o, o->in[0], err);
        int gb = pb < 0 ? -1 : cuda_is_bf16(g, o, o->in[1], err);
        int nb = gb < 0 ? -1 : cuda_is_bf16(g, o, o->in[4], err);
        int sb = nb < 0 ? -1 : cuda_is_bf16(g, o, o->in[5], err);
        int lb = sb < 0 || slot == 0 ? sb : cuda_is_bf16(g, o, o->in[nin], err);
        if (lb < 0) return stg_err_prefix(err, "cuda: adamw (%s)", pn);
        int st[3] = {o->in[2], o->in[3], nin > 6 ? o->in[6] : -1};
        for (int q = 0; q < 3; q++)
            if (st[q] >= 0 && g->t[st[q]].dtype != STG_F32)
                return stg_errf(err, "cuda: adamw (%s): optimizer state %s must be f32, not %s", pn,
                                g->t[st[q]].name, stg_dtype_name(g->t[st[q]].dtype));
        for (int q = 0; q < o->n_in; q++)
            if (!ptr[o->in[q]]) return stg_errf(err, "cuda: adamw (%s): tensor %s has no device memory", pn, g->t[o->in[q]].name);
        int64_t n = cuda_numel(&g->t[o->in[0]]);
        for (int q = 1; q < nin; q++)
            if (q != 4 && q != 5 && cuda_numel(&g->t[o->in[q]]) != n)
                return stg_errf(err, "cuda: adamw (%s): %s has %lld elements, expected %lld", pn, g->t[o->in[q]].name,
                                (long long)cuda_numel(&g->t[o->in[q]]), (long long)n);
        if (slot > 0 && slot > cuda_numel(&g->t[o->in[nin]]))
            return stg_errf(err, "cuda: adamw (%s): slot %d is past the %lld slots of %s", pn, slot,
                            (long long)cuda_numel(&g->t[o->in[nin]]), g->t[o->in[nin]].name);
        if (na == 0) {
            t->first_op = i;
            t->norm = ptr[o->in[4]];
            t->sched = ptr[o->in[5]];
            t->norm_bf16 = nb;
            t->sched_bf16 = sb;
        } else if (t->norm != ptr[o->in[4]] || t->sched != ptr[o->in[5]]) {
            return stg_errf(err, "cuda: adamw (%s): every adamw op must read the same norm and schedule state", pn);
        } else if ((slot > 0) != (t->host[0].slot > 0)) {
            return stg_errf(err, "cuda: adamw (%s): either every adamw op has a slot (optimizer in backward) or none", pn);
        }
        cuda_adamw_entry *e = &t->host[na];
        t->entry_of[i] = na++;
        e->param = ptr[o->in[0]];
        e->grad = ptr[o->in[1]];
        e->m = (float *)ptr[o->in[2]];
        e->v = (float *)ptr[o->in[3]];
        e->master = nin > 6 ? (float *)ptr[o->in[6]] : NULL;
        e->n = n;
        e->block0 = blocks;
        e->beta1 = (float)o->a.adamw.beta1;
        e->beta2 = (float)o->a.adamw.beta2;
        e->eps = (float)o->a.adamw.eps;
        e->weight_decay = (float)o->a.adamw.weight_decay;
        e->max_norm = (float)o->a.adamw.max_norm;
        e->param_bf16 = pb;
        e->grad_bf16 = gb;
        e->vec = cu_aligned(e->param, pb ? 8 : 16) && cu_aligned(e->grad, gb ? 8 : 16) && cu_aligned(e->m, 16) &&
                 cu_aligned(e->v, 16) && (!e->master || cu_aligned(e->master, 16));
        e->op = i;
        e->slot = slot;
        e->slots = slot > 0 ? ptr[o->in[nin]] : NULL;
        e->slots_bf16 = slot > 0 ? lb : 0;
        e->grid = 0;
        if (slot > 0) { // ADAMW_IB_PER_SM blocks a multiprocessor, no more than there are trips of one block's threads
            int64_t trips = optim_blocks(n, 4 * ADAMW_UNROLL * CUDA_OPTIM_THREADS);
            int64_t full = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * ADAMW_IB_PER_SM;
            e->grid = trips < full ? trips : full;
            if (e->grid > part_n) part_n = e->grid;
        }
        blocks += optim_blocks(n, CUDA_ADAMW_CHUNK);
    }
    t->n = na;
    t->blocks = blocks;
    t->part_n = part_n;
    *table_bytes = optim_part_offset(na) + sizeof(double) * (size_t)part_n;
    return 0;
}

static int optim_adamw_fill(stg_cuda *c, void *state, void *table, stg_err *err) {
    optim_adamw_tab *t = (optim_adamw_tab *)state;
    t->dev = (const cuda_adamw_entry *)table;
    t->part = t->part_n ? (double *)((char *)table + optim_part_offset(t->n)) : NULL;
    if (t->n) CUDA_CHECK(err, cudaMemcpy(table, t->host, sizeof(cuda_adamw_entry) * (size_t)t->n, cudaMemcpyHostToDevice));
    return 0;
}

static const cuda_group optim_adamw_group = {"AdamW table", optim_adamw_plan, optim_adamw_fill, optim_adamw_free};

// The entry whose blocks hold block b: the last one with block0 <= b (entries with no elements own
// no block and are passed over).
template <typename E> __device__ int optim_find(const E *tab, int ne, int64_t b) {
    int lo = 0, hi = ne - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tab[mid].block0 <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// ---- streaming vector access ------------------------------------------------------------------------
// 4 elements: a float4 for float, 8 bytes for bf16; CS: the evict-first (streaming) cache hint.

template <bool CS> __device__ __forceinline__ float4 ld4(const float *p) {
    return CS ? __ldcs((const float4 *)p) : *(const float4 *)p;
}
template <bool CS> __device__ __forceinline__ float4 ld4(const bf16 *p) {
    uint2 raw = CS ? __ldcs((const uint2 *)p) : *(const uint2 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
    float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    return make_float4(a.x, a.y, b.x, b.y);
}
template <bool CS> __device__ __forceinline__ void st4(float *p, float4 v) {
    if (CS)
        __stcs((float4 *)p, v);
    else
        *(float4 *)p = v;
}
template <bool CS> __device__ __forceinline__ void st4(bf16 *p, float4 v) {
    uint2 raw;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw;
    h[0] = __floats2bfloat162_rn(v.x, v.y);
    h[1] = __floats2bfloat162_rn(v.z, v.w);
    if (CS)
        __stcs((uint2 *)p, raw);
    else
        *(uint2 *)p = raw;
}

__device__ __forceinline__ float sq4(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

// ---- global_norm --------------------------------------------------------------------------------------

// Sum of squares of p[start, end) by this thread's share: U vectors of 4 in flight per trip.
template <int U, bool CS, typename T> __device__ __forceinline__ double norm_span(const T *__restrict__ p, int64_t start, int64_t end) {
    const int64_t nv = (end - start) / 4;
    const int bt = blockDim.x;
    double acc = 0.0;
    int64_t q = threadIdx.x;
    for (; q + (int64_t)(U - 1) * bt < nv; q += (int64_t)U * bt) {
        float4 x[U];
#pragma unroll
        for (int u = 0; u < U; u++) x[u] = ld4<CS>(p + start + 4 * (q + (int64_t)u * bt));
#pragma unroll
        for (int u = 0; u < U; u++) acc += (double)sq4(x[u]);
    }
    for (; q < nv; q += bt) acc += (double)sq4(ld4<CS>(p + start + 4 * q));
    for (int64_t i = start + 4 * nv + threadIdx.x; i < end; i += bt) {
        float v = cu_f(p[i]);
        acc += (double)(v * v);
    }
    return acc;
}

template <int U, bool CS>
__global__ void __launch_bounds__(CUDA_OPTIM_THREADS) norm_partial_kernel(const cuda_norm_entry *tab, int ne, int64_t chunk, double *part) {
    __shared__ cuda_norm_entry s_e;
    int64_t b = blockIdx.x;
    if (threadIdx.x == 0) s_e = tab[optim_find(tab, ne, b)];
    __syncthreads();
    const cuda_norm_entry e = s_e;
    int64_t start = (b - e.block0) * chunk;
    int64_t end = start + chunk < e.n ? start + chunk : e.n;
    double acc = 0.0;
    if (e.vec && e.bf16)
        acc = norm_span<U, CS>((const bf16 *)e.p, start, end);
    else if (e.vec)
        acc = norm_span<U, CS>((const float *)e.p, start, end);
    else
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            float v = cu_ldd(e.p, e.bf16, i);
            acc += (double)(v * v);
        }
    double s = cu_block_sum(acc);
    if (threadIdx.x == 0) part[b] = s;
}

// Adds part[0, nb) in a fixed order (thread i takes i, i + bd, ...; four loads in flight), then
// writes sqrt of the sum (out_sqrt) or the sum itself into out[idx].
__global__ void partials_final_kernel(const double *part, int64_t nb, void *out, int ob, int64_t idx, int out_sqrt) {
    const int64_t bd = blockDim.x;
    double s = 0.0;
    int64_t i = threadIdx.x;
    for (; i + 3 * bd < nb; i += 4 * bd) {
        double a0 = part[i], a1 = part[i + bd], a2 = part[i + 2 * bd], a3 = part[i + 3 * bd];
        s += a0;
        s += a1;
        s += a2;
        s += a3;
    }
    for (; i < nb; i += bd) s += part[i];
    s = cu_block_sum(s);
    if (threadIdx.x == 0) cu_std(out, ob, idx, (float)(out_sqrt ? sqrt(s) : s));
}

extern "C" int cuda_run_global_norm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int ob = cuda_is_bf16(g, o, o->out[0], err);
    if (ob < 0) return -1;
    const optim_norm_tab *nt = c->state && op < c->nops && c->state_free[op] == optim_norm_free ? (const optim_norm_tab *)c->state[op]
                                                                                              : NULL;
    if (!nt || nt->n != o->n_in) return stg_errf(err, "no global-norm table: cuda_prepare was not called for this graph");
    const cuda_norm_entry *h = nt->host;
    for (int j = 0; j < o->n_in; j++)
        if (h[j].p != ptr[o->in[j]])
            return stg_errf(err, "tensor %s moved since cuda_prepare: call cuda_prepare again", g->t[o->in[j]].name);
    int64_t nb = o->n_in ? h[o->n_in - 1].block0 + optim_blocks(h[o->n_in - 1].n, CUDA_NORM_CHUNK) : 0;
    double *part = (double *)c->work;
    const cuda_norm_entry *tab = nt->dev;
    if (nb > 0) {
        norm_partial_kernel<NORM_UNROLL, NORM_CS><<<(unsigned)nb, CUDA_OPTIM_THREADS, 0, c->stream>>>(tab, o->n_in, CUDA_NORM_CHUNK, part);
        CUDA_LAUNCH_CHECK(err, "norm_partial_kernel");
    }
    partials_final_kernel<<<1, 1024, 0, c->stream>>>(part, nb, ptr[o->out[0]], ob, 0, 1);
    CUDA_LAUNCH_CHECK(err, "partials_final_kernel");
    return 0;
}

// ---- adamw ----------------------------------------------------------------------------------------------

struct adamw_k {
    float c, b1, b2, eps, at, decay;
};

// One element: the AdamW update of (param or master) with m, v; returns the new weight.
__device__ __forceinline__ float adamw_elem(const adamw_k &k, float gr, float &m, float &v, float p) {
    float gg = k.c * gr;
    m = k.b1 * m + (1.0f - k.b1) * gg;
    v = k.b2 * v + (1.0f - k.b2) * gg * gg;
    p -= k.at * m / (sqrtf(v) + k.eps);
    p -= k.decay * p;
    return p;
}

__device__ __forceinline__ float4 adamw_elem4(const adamw_k &k, float4 gr, float4 &m, float4 &v, float4 p) {
    p.x = adamw_elem(k, gr.x, m.x, v.x, p.x);
    p.y = adamw_elem(k, gr.y, m.y, v.y, p.y);
    p.z = adamw_elem(k, gr.z, m.z, v.z, p.z);
    p.w = adamw_elem(k, gr.w, m.w, v.w, p.w);
    return p;
}

// The update of elements [start, end) of one entry by this thread's share: the vectors of 4
// q0, q0 + bt, q0 + 2 bt, ... (then the last < 4 elements the same way), U vectors in flight per
// trip; returns the sum of squares of the raw gradient when SUMSQ (else 0).
template <int U, bool CS, bool MASTER, bool PBF16, bool GBF16, bool SUMSQ>
__device__ __forceinline__ double adamw_span(const cuda_adamw_entry &e, const adamw_k &k, int64_t start, int64_t end, int64_t q0,
                                             int64_t bt) {
    typedef typename std::conditional<PBF16, bf16, float>::type PT;
    typedef typename std::conditional<GBF16, bf16, float>::type GT;
    const GT *__restrict__ gr = (const GT *)e.grad;
    float *__restrict__ mm = e.m;
    float *__restrict__ vv = e.v;
    float *__restrict__ ms = e.master;
    PT *__restrict__ pw = (PT *)e.param;
    const int64_t nv = (end - start) / 4;
    double acc = 0.0;
    int64_t q = q0;
    for (; q + (U - 1) * bt < nv; q += U * bt) {
        float4 g4[U], m4[U], v4[U], p4[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t i = start + 4 * (q + u * bt);
            g4[u] = ld4<CS>(gr + i);
            m4[u] = ld4<CS>(mm + i);
            v4[u] = ld4<CS>(vv + i);
            p4[u] = MASTER ? ld4<CS>(ms + i) : ld4<CS>(pw + i);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t i = start + 4 * (q + u * bt);
            if (SUMSQ) acc += (double)sq4(g4[u]);
            float4 p = adamw_elem4(k, g4[u], m4[u], v4[u], p4[u]);
            st4<CS>(mm + i, m4[u]);
            st4<CS>(vv + i, v4[u]);
            if (MASTER) st4<CS>(ms + i, p);
            st4<CS>(pw + i, p);
        }
    }
    for (; q < nv; q += bt) {
        int64_t i = start + 4 * q;
        float4 g = ld4<CS>(gr + i), m = ld4<CS>(mm + i), v = ld4<CS>(vv + i);
        float4 p0 = MASTER ? ld4<CS>(ms + i) : ld4<CS>(pw + i);
        if (SUMSQ) acc += (double)sq4(g);
        float4 p = adamw_elem4(k, g, m, v, p0);
        st4<CS>(mm + i, m);
        st4<CS>(vv + i, v);
        if (MASTER) st4<CS>(ms + i, p);
        st4<CS>(pw + i, p);
    }
    for (int64_t i = start + 4 * nv + q0; i < end; i += bt) {
        float g = cu_f(gr[i]), m = mm[i], v = vv[i];
        float p = MASTER ? ms[i] : cu_f(pw[i]);
        if (SUMSQ) acc += (double)(g * g);
        p = adamw_elem(k, g, m, v, p);
        mm[i] = m;
        vv[i] = v;
        if (MASTER) ms[i] = p;
        cu_st(pw, i, p);
    }
    return acc;
}

// Any layout (unaligned pointers): one element at a time.
template <bool SUMSQ>
__device__ double adamw_span_any(const cuda_adamw_entry &e, const adamw_k &k, int64_t start, int64_t end, int64_t q0, int64_t bt) {
    double acc = 0.0;
    for (int64_t i = start + q0; i < end; i += bt) {
        float g = cu_ldd(e.grad, e.grad_bf16, i), m = e.m[i], v = e.v[i];
        float p = e.master ? e.master[i] : cu_ldd(e.param, e.param_bf16, i);
        if (SUMSQ) acc += (double)(g * g);
        p = adamw_elem(k, g, m, v, p);
        e.m[i] = m;
        e.v[i] = v;
        if (e.master) e.master[i] = p;
        cu_std(e.param, e.param_bf16, i, p);
    }
    return acc;
}

// The step's constants of entry e (clipping, bias corrections, decay).
__device__ adamw_k adamw_consts(const cuda_adamw_entry *e, const void *norm, int nb, const void *sched, int sb) {
    double nrm = cu_ldd(norm, nb, 0), step = cu_ldd(sched, sb, 0), lr = cu_ldd(sched, sb, 1);
    double mx = e->max_norm;
    adamw_k k;
    k.c = (float)((mx > 0 && nrm > mx) ? mx / (nrm + 1e-6) : 1.0);
    k.b1 = e->beta1;
    k.b2 = e->beta2;
    k.eps = e->eps;
    k.at = (float)(lr * sqrt(1.0 - pow((double)e->beta2, step)) / (1.0 - pow((double)e->beta1, step)));
    k.decay = (float)(lr * (double)e->weight_decay);
    return k;
}

// The update of e's elements [start, end), vectors q0, q0 + bt, ... (the layout picks the path).
template <int U, bool CS, bool SUMSQ>
__device__ __forceinline__ double adamw_any_span(const cuda_adamw_entry &e, const adamw_k &k, int64_t start, int64_t end, int64_t q0,
                                                 int64_t bt) {
    if (!e.vec) return adamw_span_any<SUMSQ>(e, k, start, end, q0, bt);
    if (e.grad_bf16) // bf16 gradients come with bf16 working weights and fp32 masters (bf16 precision)
        return e.master && e.param_bf16 ? adamw_span<U, CS, true, true, true, SUMSQ>(e, k, start, end, q0, bt)
                                        : adamw_span_any<SUMSQ>(e, k, start, end, q0, bt);
    if (e.master)
        return e.param_bf16 ? adamw_span<U, CS, true, true, false, SUMSQ>(e, k, start, end, q0, bt)
                            : adamw_span<U, CS, true, false, false, SUMSQ>(e, k, start, end, q0, bt);
    return e.param_bf16 ? adamw_span<U, CS, false, true, false, SUMSQ>(e, k, start, end, q0, bt)
                        : adamw_span<U, CS, false, false, false, SUMSQ>(e, k, start, end, q0, bt);
}

// The multi-tensor form: blocks blk0 + blockIdx.x of the table's numbering (entries tab[0, ne)),
// CHUNK elements each. SUMSQ: part[blockIdx.x] = the block's sum of squares of the raw gradient.
template <int U, bool CS, bool SUMSQ>
__global__ void __launch_bounds__(CUDA_OPTIM_THREADS)
    adamw_kernel(const cuda_adamw_entry *tab, int ne, int64_t blk0, int64_t chunk, const void *norm, int nb, const void *sched,
                 int sb, double *part) {
    __shared__ cuda_adamw_entry s_e;
    __shared__ adamw_k s_k;
    int64_t b = blk0 + blockIdx.x;
    if (threadIdx.x == 0) {
        const cuda_adamw_entry *e = &tab[optim_find(tab, ne, b)];
        s_k = adamw_consts(e, norm, nb, sched, sb);
        s_e = *e;
    }
    __syncthreads();
    const cuda_adamw_entry e = s_e;
    int64_t start = (b - e.block0) * chunk;
    int64_t end = start + chunk < e.n ? start + chunk : e.n;
    double acc = adamw_any_span<U, CS, SUMSQ>(e, s_k, start, end, threadIdx.x, blockDim.x);
    if (SUMSQ) {
        double s = cu_block_sum(acc);
        if (threadIdx.x == 0) part[blockIdx.x] = s;
    }
}

// One entry (the optimizer in backward: one parameter per launch) over a grid of a few blocks per
// SM, each thread striding over the whole tensor (no tail of half-empty waves on a small launch);
// part[blockIdx.x] = the block's sum of squares of the raw gradient.
template <int U, bool CS>
__global__ void __launch_bounds__(CUDA_OPTIM_THREADS)
    adamw_one_kernel(const cuda_adamw_entry *ent, const void *norm, int nb, const void *sched, int sb, double *part) {
    __shared__ cuda_adamw_entry s_e;
    __shared__ adamw_k s_k;
    if (threadIdx.x == 0) {
        s_k = adamw_consts(ent, norm, nb, sched, sb);
        s_e = *ent;
    }
    __syncthreads();
    const cuda_adamw_entry e = s_e;
    double acc = adamw_any_span<U, CS, true>(e, s_k, 0, e.n, blockIdx.x * (int64_t)blockDim.x + threadIdx.x,
                                              (int64_t)gridDim.x * blockDim.x);
    double s = cu_block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// param, grad, m, v, norm (), sched (2) [, master] [, slots]: without slots the first ADAMW op of
// the schedule updates every parameter and the others were done by it; with slots each op updates
// its own parameter and writes its gradient's sum of squares into its slot.
extern "C" int cuda_run_adamw(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const optim_adamw_tab *t = (const optim_adamw_tab *)cuda_group_state(c, &optim_adamw_group);
    if (!t || t->n == 0 || t->nops != g->nops || op >= t->nops)
        return stg_errf(err, "no AdamW table: cuda_prepare was not called for this graph");
    int idx = t->entry_of[op];
    if (idx < 0 || t->host[idx].op != op) return stg_errf(err, "adamw op %d is not in the table cuda_prepare built", op);
    const cuda_adamw_entry *self = &t->host[idx];
    bool per_op = self->slot > 0;
    if (!per_op && op != t->first_op) return 0; // updated by the first ADAMW op's launch
    for (int i = per_op ? idx : 0; i < (per_op ? idx + 1 : t->n); i++) {
        const cuda_adamw_entry *e = &t->host[i];
        const stg_op *o = &g->ops[e->op];
        int nin = o->n_in - (e->slot > 0);
        if (ptr[o->in[0]] != e->param || ptr[o->in[1]] != e->grad || ptr[o->in[2]] != (void *)e->m ||
            ptr[o->in[3]] != (void *)e->v || (e->master && ptr[o->in[6]] != (void *)e->master) ||
            (e->slot > 0 && ptr[o->in[nin]] != e->slots) || ptr[o->in[4]] != t->norm || ptr[o->in[5]] != t->sched)
            return stg_errf(err, "the tensors of parameter %s moved since cuda_prepare: call cuda_prepare again",
                            g->t[o->in[0]].name);
    }
    const cuda_adamw_entry *dtab = t->dev;
    if (!per_op) {
        if (t->blocks == 0) return 0;
        adamw_kernel<ADAMW_UNROLL, ADAMW_CS, false><<<(unsigned)t->blocks, CUDA_OPTIM_THREADS, 0, c->stream>>>(
            dtab, t->n, 0, CUDA_ADAMW_CHUNK, t->norm, t->norm_bf16, t->sched, t->sched_bf16, NULL);
        CUDA_LAUNCH_CHECK(err, "adamw_kernel");
        return 0;
    }
    int64_t nb = self->grid;
    double *part = t->part;
    if (nb < 1 || !part || nb > t->part_n)
        return stg_errf(err, "adamw (%s): the AdamW table holds %lld partials, %lld needed", g->t[g->ops[op].in[0]].name,
                        (long long)t->part_n, (long long)nb);
    adamw_one_kernel<ADAMW_UNROLL, ADAMW_CS><<<(unsigned)nb, CUDA_OPTIM_THREADS, 0, c->stream>>>(
        dtab + idx, t->norm, t->norm_bf16, t->sched, t->sched_bf16, part);
    CUDA_LAUNCH_CHECK(err, "adamw_one_kernel");
    partials_final_kernel<<<1, 256, 0, c->stream>>>(part, nb, self->slots, self->slots_bf16, self->slot - 1, 0);
    CUDA_LAUNCH_CHECK(err, "partials_final_kernel");
    return 0;
}

// ---- slot_norm ------------------------------------------------------------------------------------------

// norm = sqrt(slots[0] + ... + slots[k-1]), added in order in double by one thread (k is the number
// of parameters: small), as the CPU backend does.
__global__ void slot_norm_kernel(const void *slots, int lb, int64_t k, void *norm, int nb) {
    double s = 0.0;
    for (int64_t i = 0; i < k; i++) s += (double)cu_ldd(slots, lb, i);
    cu_std(norm, nb, 0, (float)sqrt(s));
}

extern "C" int cuda_run_slot_norm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int lb = cuda_is_bf16(g, o, o->in[0], err);
    int nb = lb < 0 ? -1 : cuda_is_bf16(g, o, o->in[1], err);
    if (nb < 0) return -1;
    if (cuda_numel(&g->t[o->in[1]]) != 1) return stg_errf(err, "norm %s must be a scalar", g->t[o->in[1]].name);
    slot_norm_kernel<<<1, 1, 0, c->stream>>>(ptr[o->in[0]], lb, cuda_numel(&g->t[o->in[0]]), ptr[o->in[1]], nb);
    CUDA_LAUNCH_CHECK(err, "slot_norm_kernel");
    return 0;
}

// ---- measurements -----------------------------------------------------------------------------------------

// Deterministic pseudo-random fill: lo + (hi - lo) * u, u uniform in [0, 1) from a hash of i.
__global__ void bench_fill_kernel(float *p, int64_t n, uint32_t seed, float lo, float hi) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        h *= 0x846ca68bu;
        h ^= h >> 16;
        p[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
    }
}

__global__ void bench_fill_bf16_kernel(bf16 *p, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(src[i]);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// Median milliseconds of `reps` timed launches of fn (one warm-up first).
template <typename F> static int bench_time(stg_cuda *c, int reps, F fn, double *ms, stg_err *err) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *t = (float *)stg_calloc((size_t)reps, sizeof(float), err);
    if (!t) return -1;
    int rc = -1;
    cudaError_t ce = cudaEventCreate(&e0);
    if (ce == cudaSuccess) ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        stg_errf(err, "cudaEventCreate: %s", cudaGetErrorString(ce));
        goto out;
    }
    if (fn(err)) goto out;
    for (int r = 0; r < reps; r++) {
        ce = cudaEventRecord(e0, c->stream);
        if (ce != cudaSuccess) break;
        if (fn(err)) goto out;
        ce = cudaEventRecord(e1, c->stream);
        if (ce == cudaSuccess) ce = cudaEventSynchronize(e1);
        if (ce == cudaSuccess) ce = cudaEventElapsedTime(&t[r], e0, e1);
        if (ce != cudaSuccess) break;
    }
    if (ce != cudaSuccess) {
        stg_errf(err, "timing: %s", cudaGetErrorString(ce));
        goto out;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_float);
    *ms = reps % 2 ? t[reps / 2] : 0.5 * ((double)t[reps / 2 - 1] + (double)t[reps / 2]);
    rc = 0;
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(t);
    return rc;
}

extern "C" int cuda_copy_bandwidth(stg_cuda *c, size_t bytes, int reps, double *bytes_per_s, stg_err *err) {
    if (bytes < 16 || reps < 1) return stg_errf(err, "copy bandwidth: %zu bytes, %d repetitions", bytes, reps);
    CUDA_CHECK(err, cudaSetDevice(c->device));
    void *src = NULL, *dst = NULL;
    int rc = -1;
    double ms = 0;
    cudaError_t ce = cudaMalloc(&src, bytes);
    if (ce == cudaSuccess) ce = cudaMalloc(&dst, bytes);
    if (ce != cudaSuccess) {
        stg_errf(err, "copy bandwidth: cudaMalloc of 2 x %zu bytes: %s", bytes, cudaGetErrorString(ce));
        goto out;
    }
    bench_fill_kernel<<<c->sm_count * 4, 256, 0, c->stream>>>((float *)src, (int64_t)(bytes / 4), 7u, -1.0f, 1.0f);
    if ((ce = cudaGetLastError()) != cudaSuccess) {
        stg_errf(err, "copy bandwidth: fill: %s", cudaGetErrorString(ce));
        goto out;
    }
    if (bench_time(c, reps,
                   [&](stg_err *e) -> int {
                       cudaError_t r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
                       return r == cudaSuccess ? 0 : stg_errf(e, "cudaMemcpyAsync: %s", cudaGetErrorString(r));
                   },
                   &ms, err))
        goto out;
    *bytes_per_s = ms > 0 ? 2.0 * (double)bytes / (ms * 1e-3) : 0;
    rc = 0;
out:
    if (src) cudaFree(src);
    if (dst) cudaFree(dst);
    return rc;
}

// Synthetic tensors shaped like one layer of the 2.7B model (d_model 2560, d_ff 10240), repeated.
static const int64_t bench_shape[] = {2560 * 2560, 2560 * 2560, 2560 * 2560, 2560 * 2560, 10240 * 2560,
                                      10240 * 2560, 10240 * 2560, 2560, 2560};
#define BENCH_NSHAPE ((int)(sizeof bench_shape / sizeof bench_shape[0]))

typedef struct bench_bufs {
    float *grad, *m, *v, *master;
    bf16 *param;
    void *tabs;   // adamw entries, then norm entries
    double *part; // partials
    float *norm_sched; // [norm, steps done, lr]
} bench_bufs;

template <int U, bool CS>
static int bench_adamw(stg_cuda *c, const bench_bufs *bb, cuda_adamw_entry *host, int ne, int64_t chunk, int reps, double *ms,
                       stg_err *err) {
    int64_t blocks = 0;
    for (int i = 0; i < ne; i++) {
        host[i].block0 = blocks;
        blocks += optim_blocks(host[i].n, chunk);
    }
    CUDA_CHECK(err, cudaMemcpy(bb->tabs, host, sizeof(cuda_adamw_entry) * (size_t)ne, cudaMemcpyHostToDevice));
    const cuda_adamw_entry *tab = (const cuda_adamw_entry *)bb->tabs;
    return bench_time(
        c, reps,
        [&](stg_err *e) -> int {
            adamw_kernel<U, CS, false><<<(unsigned)blocks, CUDA_OPTIM_THREADS, 0, c->stream>>>(tab, ne, 0, chunk, bb->norm_sched, 0,
                                                                                          bb->norm_sched + 1, 0, NULL);
            CUDA_LAUNCH_CHECK(e, "adamw_kernel");
            return 0;
        },
        ms, err);
}

template <int U, bool CS>
static int bench_norm(stg_cuda *c, const bench_bufs *bb, cuda_norm_entry *host, int ne, int64_t chunk, int reps, double *ms,
                      stg_err *err) {
    int64_t blocks = 0;
    for (int i = 0; i < ne; i++) {
        host[i].block0 = blocks;
        blocks += optim_blocks(host[i].n, chunk);
    }
    CUDA_CHECK(err, cudaMemcpy(bb->tabs, host, sizeof(cuda_norm_entry) * (size_t)ne, cudaMemcpyHostToDevice));
    const cuda_norm_entry *tab = (const cuda_norm_entry *)bb->tabs;
    return bench_time(
        c, reps,
        [&](stg_err *e) -> int {
            norm_partial_kernel<U, CS><<<(unsigned)blocks, CUDA_OPTIM_THREADS, 0, c->stream>>>(tab, ne, chunk, bb->part);
            CUDA_LAUNCH_CHECK(e, "norm_partial_kernel");
            partials_final_kernel<<<1, 1024, 0, c->stream>>>(bb->part, blocks, bb->norm_sched, 0, 0, 1);
            CUDA_LAUNCH_CHECK(e, "partials_final_kernel");
            return 0;
        },
        ms, err);
}

extern "C" int cuda_optim_bench(stg_cuda *c, int64_t n, int reps, cuda_optim_bench_row *rows, int max_rows, int *nrows,
                                stg_err *err) {
    *nrows = 0;
    int64_t per = 0;
    for (int i = 0; i < BENCH_NSHAPE; i++) per += bench_shape[i];
    int layers = (int)((n + per - 1) / per);
    if (layers < 1) layers = 1;
    int ne = layers * BENCH_NSHAPE;
    int64_t total = per * layers;
    CUDA_CHECK(err, cudaSetDevice(c->device));
    bench_bufs bb;
    memset(&bb, 0, sizeof bb);
    cuda_adamw_entry *ah = (cuda_adamw_entry *)stg_calloc((size_t)ne, sizeof *ah, err);
    cuda_norm_entry *nh = ah ? (cuda_norm_entry *)stg_calloc((size_t)ne, sizeof *nh, err) : NULL;
    int rc = -1;
    size_t fb = sizeof(float) * (size_t)total;
    cudaError_t ce = cudaSuccess;
    if (!nh) goto out;
    {
        void **bufs[5] = {(void **)&bb.grad, (void **)&bb.m, (void **)&bb.v, (void **)&bb.master, (void **)&bb.param};
        size_t sizes[5] = {fb, fb, fb, fb, fb / 2};
        for (int i = 0; i < 5 && ce == cudaSuccess; i++) ce = cudaMalloc(bufs[i], sizes[i]);
        if (ce == cudaSuccess) ce = cudaMalloc(&bb.tabs, sizeof(cuda_adamw_entry) * (size_t)ne + 256);
        if (ce == cudaSuccess) ce = cudaMalloc((void **)&bb.part, sizeof(double) * (size_t)(total / 4096 + ne + 1));
        if (ce == cudaSuccess) ce = cudaMalloc((void **)&bb.norm_sched, 3 * sizeof(float));
        if (ce != cudaSuccess) {
            stg_errf(err, "optim bench: cudaMalloc for %lld elements: %s", (long long)total, cudaGetErrorString(ce));
            goto out;
        }
    }
    {
        unsigned fg = (unsigned)c->sm_count * 8;
        bench_fill_kernel<<<fg, 256, 0, c->stream>>>(bb.grad, total, 1u, -0.3f, 0.3f);
        bench_fill_kernel<<<fg, 256, 0, c->stream>>>(bb.m, total, 2u, -0.01f, 0.01f);
        bench_fill_kernel<<<fg, 256, 0, c->stream>>>(bb.v, total, 3u, 1e-6f, 1e-3f);
        bench_fill_kernel<<<fg, 256, 0, c->stream>>>(bb.master, total, 4u, -0.05f, 0.05f);
        bench_fill_bf16_kernel<<<fg, 256, 0, c->stream>>>(bb.param, bb.master, total);
        CUDA_LAUNCH_CHECK(err, "bench fill");
        float ns[3] = {0.5f, 10.0f, 1e-4f}; // norm under max_norm, step 11, lr
        CUDA_CHECK(err, cudaMemcpy(bb.norm_sched, ns, sizeof ns, cudaMemcpyHostToDevice));
    }
    {
        int64_t off = 0;
        for (int i = 0; i < ne; i++) {
            int64_t len = bench_shape[i % BENCH_NSHAPE];
            cuda_adamw_entry *e = &ah[i];
            e->param = bb.param + off;
            e->grad = bb.grad + off;
            e->m = bb.m + off;
            e->v = bb.v + off;
            e->master = bb.master + off;
            e->n = len;
            e->beta1 = 0.9f;
            e->beta2 = 0.95f;
            e->eps = 1e-8f;
            e->weight_decay = 0.1f;
            e->max_norm = 1.0f;
            e->param_bf16 = 1;
            e->vec = 1;
            nh[i].p = bb.grad + off;
            nh[i].n = len;
            nh[i].vec = 1;
            off += len;
        }
        double ab = 30.0 * (double)total, nbytes = 4.0 * (double)total;
        struct {
            const char *name;
            int (*fn)(stg_cuda *, const bench_bufs *, cuda_adamw_entry *, int, int64_t, int, double *, stg_err *);
            int64_t chunk;
        } av[] = {
            {"adamw U=2 cs chunk 2048 (used)", bench_adamw<2, true>, 2048},
            {"adamw U=1 cs chunk 2048", bench_adamw<1, true>, 2048},
            {"adamw U=4 cs chunk 4096", bench_adamw<4, true>, 4096},
            {"adamw U=2 plain chunk 2048", bench_adamw<2, false>, 2048},
            {"adamw U=2 cs chunk 8192", bench_adamw<2, true>, 8192},
            {"adamw U=2 cs chunk 32768", bench_adamw<2, true>, 32768},
        };
        struct {
            const char *name;
            int (*fn)(stg_cuda *, const bench_bufs *, cuda_norm_entry *, int, int64_t, int, double *, stg_err *);
            int64_t chunk;
        } nv[] = {
            {"global_norm U=4 cs chunk 65536 (used)", bench_norm<4, true>, 65536},
            {"global_norm U=2 cs chunk 65536", bench_norm<2, true>, 65536},
            {"global_norm U=8 cs chunk 65536", bench_norm<8, true>, 65536},
            {"global_norm U=4 plain chunk 65536", bench_norm<4, false>, 65536},
            {"global_norm U=4 cs chunk 16384", bench_norm<4, true>, 16384},
        };
        double ms;
        double bw;
        if (*nrows < max_rows) {
            if (cuda_copy_bandwidth(c, fb, reps, &bw, err)) goto out;
            cuda_optim_bench_row *r = &rows[(*nrows)++];
            snprintf(r->name, sizeof r->name, "copy (cudaMemcpyAsync D2D, %lld MiB)", (long long)(fb >> 20));
            r->bytes = 2.0 * (double)fb;
            r->ms = r->bytes / bw * 1e3;
        }
        for (size_t i = 0; i < sizeof av / sizeof av[0] && *nrows < max_rows; i++) {
            if (av[i].fn(c, &bb, ah, ne, av[i].chunk, reps, &ms, err)) goto out;
            cuda_optim_bench_row *r = &rows[(*nrows)++];
            snprintf(r->name, sizeof r->name, "%s", av[i].name);
            r->ms = ms;
            r->bytes = ab;
        }
        for (size_t i = 0; i < sizeof nv / sizeof nv[0] && *nrows < max_rows; i++) {
            if (nv[i].fn(c, &bb, nh, ne, nv[i].chunk, reps, &ms, err)) goto out;
            cuda_optim_bench_row *r = &rows[(*nrows)++];
            snprintf(r->name, sizeof r->name, "%s", nv[i].name);
            r->ms = ms;
            r->bytes = nbytes;
        }
    }
    ce = cudaStreamSynchronize(c->stream);
    if (ce != cudaSuccess) {
        stg_errf(err, "optim bench: %s", cudaGetErrorString(ce));
        goto out;
    }
    rc = 0;
out:
    cudaStreamSynchronize(c->stream);
    void *all[7] = {bb.grad, bb.m, bb.v, bb.master, bb.param, bb.tabs, bb.part};
    for (int i = 0; i < 7; i++)
        if (all[i]) cudaFree(all[i]);
    if (bb.norm_sched) cudaFree(bb.norm_sched);
    free(ah);
    free(nh);
    return rc;
}

// ---- records ------------------------------------------------------------------------------------

// AdamW with a slot (optimizer in backward) touches only its own tensors and its table's partials:
// the lane off the compute streams, one stream for every update (so that one region of partials
// serves them all); the one multi-tensor launch of the ordinary form updates every parameter, named
// or not. lr_schedule goes with the updates in backward (it writes only the schedule state, which
// they read), so it joins no stream mid-backward.
static int adamw_lane(const stg_graph *g, int op) { return g->ops[op].a.adamw.slot > 0 ? CUDA_REC_COMM : CUDA_REC_BARRIER; }
static int lr_lane(const stg_graph *g, int op) {
    (void)op;
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].kind == STG_OP_ADAMW && g->ops[o].a.adamw.slot > 0) return CUDA_REC_COMM;
    return CUDA_REC_BARRIER;
}

const cuda_rec stg_cuda_adamw = {cuda_run_adamw, NULL, NULL, NULL, CUDA_REC_BARRIER, adamw_lane, &optim_adamw_group};
const cuda_rec stg_cuda_global_norm = {cuda_run_global_norm, prep_global_norm, optim_norm_free, optim_norm_table_bytes,
                                       CUDA_REC_BARRIER, NULL, NULL};
const cuda_rec stg_cuda_lr_schedule = {cuda_run_lr_schedule, NULL, NULL, NULL, CUDA_REC_BARRIER, lr_lane};
const cuda_rec stg_cuda_slot_norm = {cuda_run_slot_norm, NULL, NULL, NULL, CUDA_REC_MAIN, NULL};
