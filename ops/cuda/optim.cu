// The optimizer side of the step, kept on the device: the learning-rate schedule, the global
// gradient norm and AdamW.
//
// global_norm: one multi-tensor launch over all of the op's inputs (a table built by cuda_prepare),
// one block per CUDA_NORM_CHUNK elements writing its sum of squares into a partial, then one block
// adding the partials in a fixed order (deterministic: no atomics).
// adamw: one multi-tensor launch for every parameter, made by the first ADAMW op of the schedule;
// the other ADAMW ops do nothing. Clipping by the global norm and the step / learning rate are read
// from device memory, so the whole update can be captured in a CUDA Graph.
#include <stdlib.h>

#include "ops/cuda/common.cuh"

// ---- lr_schedule ----------------------------------------------------------------------------------

// sched (2) = [steps done, lr]: done += 1; lr = CS336 cosine schedule with warm-up at t = done - 1
// (the formula of ops_lr_at in ops/registry.c, in double).
__global__ void lr_schedule_kernel(void *sched, int sb, double lr, double min_lr, long long warmup,
                                   long long cosine_steps) {
    double done = (double)cu_ldd(sched, sb, 0) + 1.0;
    long long t = (long long)done - 1;
    double out;
    if (t < warmup)
        out = (double)t / (double)warmup * lr;
    else if (cosine_steps == 0)
        out = lr;
    else if (t <= cosine_steps && cosine_steps > warmup)
        out = min_lr + 0.5 * (1.0 + cos((double)(t - warmup) / (double)(cosine_steps - warmup) * 3.14159265358979323846)) *
                           (lr - min_lr);
    else
        out = min_lr;
    cu_std(sched, sb, 0, (float)done);
    cu_std(sched, sb, 1, (float)out);
}

extern "C" int cuda_run_lr_schedule(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int sb = cuda_is_bf16(g, o, o->in[0], err);
    if (sb < 0) return -1;
    if (cuda_numel(&g->t[o->in[0]]) != 2)
        return stg_errf(err, "schedule state %s must hold [steps done, lr]", g->t[o->in[0]].name);
    const stg_lr_attrs *a = &o->a.lr;
    lr_schedule_kernel<<<1, 1, 0, c->stream>>>(ptr[o->in[0]], sb, a->lr, a->min_lr, (long long)a->warmup,
                                               (long long)a->cosine_steps);
    CUDA_LAUNCH_CHECK(err, "lr_schedule_kernel");
    return 0;
}

// ---- tables -----------------------------------------------------------------------------------------

static int64_t optim_blocks(int64_t n, int64_t chunk) { return (n + chunk - 1) / chunk; }

extern "C" int cuda_optim_plan(stg_cuda *c, const stg_graph *g, void *const *ptr, size_t *table_bytes,
                               size_t *work_bytes, stg_err *err) {
    *table_bytes = 0;
    *work_bytes = 0;
    c->norm_first = (int *)stg_malloc(sizeof(int) * (size_t)(g->nops > 0 ? g->nops : 1), err);
    if (!c->norm_first) return -1;
    int n_norm = 0, n_adamw = 0;
    for (int i = 0; i < g->nops; i++) {
        c->norm_first[i] = -1;
        if (g->ops[i].kind == STG_OP_GLOBAL_NORM) n_norm += g->ops[i].n_in;
        if (g->ops[i].kind == STG_OP_ADAMW) n_adamw++;
    }

    // global_norm: every op's inputs, op after op; blocks counted per op.
    if (n_norm) {
        c->norm_host = (cuda_norm_entry *)stg_calloc((size_t)n_norm, sizeof(cuda_norm_entry), err);
        if (!c->norm_host) return -1;
    }
    int k = 0;
    int64_t max_blocks = 0;
    for (int i = 0; i < g->nops; i++) {
        const stg_op *o = &g->ops[i];
        if (o->kind != STG_OP_GLOBAL_NORM) continue;
        c->norm_first[i] = k;
        int64_t blocks = 0;
        for (int j = 0; j < o->n_in; j++, k++) {
            int t = o->in[j];
            int b = cuda_is_bf16(g, o, t, err);
            if (b < 0) return stg_err_prefix(err, "cuda: global_norm (%s)", g->t[o->out[0]].name);
            if (!ptr[t]) return stg_errf(err, "cuda: global_norm: tensor %s has no device memory", g->t[t].name);
            cuda_norm_entry *e = &c->norm_host[k];
            e->p = ptr[t];
            e->n = cuda_numel(&g->t[t]);
            e->block0 = blocks;
            e->bf16 = b;
            e->vec = cu_aligned(ptr[t], 16);
            blocks += optim_blocks(e->n, CUDA_NORM_CHUNK);
        }
        if (blocks > max_blocks) max_blocks = blocks;
    }
    c->n_norm = n_norm;
    c->norm_blocks = (int)max_blocks;
    *work_bytes = (size_t)max_blocks * sizeof(double);

    // adamw: every parameter in schedule order; the first one's op launches the update.
    if (n_adamw) {
        c->adamw_host = (cuda_adamw_entry *)stg_calloc((size_t)n_adamw, sizeof(cuda_adamw_entry), err);
        if (!c->adamw_host) return -1;
    }
    int na = 0;
    int64_t blocks = 0;
    int count = g->nsched > 0 ? g->nsched : g->nops;
    for (int s = 0; s < count; s++) {
        int i = g->nsched > 0 ? g->schedule[s] : s;
        const stg_op *o = &g->ops[i];
        if (o->kind != STG_OP_ADAMW) continue;
        if (na == n_adamw) return stg_errf(err, "cuda: adamw op %d appears twice in the schedule", i);
        const char *pn = g->t[o->in[0]].name;
        int pb = cuda_is_bf16(g, o, o->in[0], err);
        int gb = pb < 0 ? -1 : cuda_is_bf16(g, o, o->in[1], err);
        int nb = gb < 0 ? -1 : cuda_is_bf16(g, o, o->in[4], err);
        int sb = nb < 0 ? -1 : cuda_is_bf16(g, o, o->in[5], err);
        if (sb < 0) return stg_err_prefix(err, "cuda: adamw (%s)", pn);
        int state[3] = {o->in[2], o->in[3], o->n_in > 6 ? o->in[6] : -1};
        for (int q = 0; q < 3; q++)
            if (state[q] >= 0 && g->t[state[q]].dtype != STG_F32)
                return stg_errf(err, "cuda: adamw (%s): optimizer state %s must be f32, not %s", pn,
                                g->t[state[q]].name, stg_dtype_name(g->t[state[q]].dtype));
        for (int q = 0; q < o->n_in; q++)
            if (!ptr[o->in[q]]) return stg_errf(err, "cuda: adamw (%s): tensor %s has no device memory", pn, g->t[o->in[q]].name);
        int64_t n = cuda_numel(&g->t[o->in[0]]);
        for (int q = 1; q < o->n_in; q++)
            if (q != 4 && q != 5 && cuda_numel(&g->t[o->in[q]]) != n)
                return stg_errf(err, "cuda: adamw (%s): %s has %lld elements, expected %lld", pn, g->t[o->in[q]].name,
                                (long long)cuda_numel(&g->t[o->in[q]]), (long long)n);
        if (na == 0) {
            c->first_adamw_op = i;
            c->adamw_norm = ptr[o->in[4]];
            c->adamw_sched = ptr[o->in[5]];
            c->adamw_norm_bf16 = nb;
            c->adamw_sched_bf16 = sb;
        } else if (c->adamw_norm != ptr[o->in[4]] || c->adamw_sched != ptr[o->in[5]]) {
            return stg_errf(err, "cuda: adamw (%s): every adamw op must read the same norm and schedule state", pn);
        }
        cuda_adamw_entry *e = &c->adamw_host[na++];
        e->param = ptr[o->in[0]];
        e->grad = ptr[o->in[1]];
        e->m = (float *)ptr[o->in[2]];
        e->v = (float *)ptr[o->in[3]];
        e->master = o->n_in > 6 ? (float *)ptr[o->in[6]] : NULL;
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
        blocks += optim_blocks(n, CUDA_ADAMW_CHUNK);
    }
    c->n_adamw = na;
    c->adamw_blocks = blocks;
    *table_bytes = sizeof(cuda_norm_entry) * (size_t)n_norm + sizeof(cuda_adamw_entry) * (size_t)na;
    return 0;
}

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

// ---- global_norm --------------------------------------------------------------------------------------

__device__ __forceinline__ float4 optim_load4(const void *p, int bf16_, int64_t i) {
    return bf16_ ? cu_load4((const bf16 *)p + i) : cu_load4((const float *)p + i);
}

__global__ void norm_partial_kernel(const cuda_norm_entry *tab, int ne, double *part) {
    __shared__ int s_e;
    int64_t b = blockIdx.x;
    if (threadIdx.x == 0) s_e = optim_find(tab, ne, b);
    __syncthreads();
    const cuda_norm_entry *e = &tab[s_e];
    int64_t start = (b - e->block0) * CUDA_NORM_CHUNK;
    int64_t end = start + CUDA_NORM_CHUNK < e->n ? start + CUDA_NORM_CHUNK : e->n;
    float acc = 0.0f;
    int64_t i0 = start;
    if (e->vec) {
        int64_t nq = (end - start) / 4;
        for (int64_t q = threadIdx.x; q < nq; q += blockDim.x) {
            float4 v = optim_load4(e->p, e->bf16, start + 4 * q);
            acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        i0 = start + 4 * nq;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) {
        float v = cu_ldd(e->p, e->bf16, i);
        acc += v * v;
    }
    double s = cu_block_sum((double)acc);
    if (threadIdx.x == 0) part[b] = s;
}

__global__ void norm_final_kernel(const double *part, int64_t nb, void *out, int ob) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
    s = cu_block_sum(s);
    if (threadIdx.x == 0) cu_std(out, ob, 0, (float)sqrt(s));
}

extern "C" int cuda_run_global_norm(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    const stg_op *o = &g->ops[op];
    int ob = cuda_is_bf16(g, o, o->out[0], err);
    if (ob < 0) return -1;
    if (!c->norm_first || op >= c->nops || c->norm_first[op] < 0)
        return stg_errf(err, "no global-norm table: cuda_prepare was not called for this graph");
    const cuda_norm_entry *h = &c->norm_host[c->norm_first[op]];
    for (int j = 0; j < o->n_in; j++)
        if (h[j].p != ptr[o->in[j]])
            return stg_errf(err, "tensor %s moved since cuda_prepare: call cuda_prepare again", g->t[o->in[j]].name);
    int64_t nb = o->n_in ? h[o->n_in - 1].block0 + optim_blocks(h[o->n_in - 1].n, CUDA_NORM_CHUNK) : 0;
    double *part = (double *)c->norm_partials;
    const cuda_norm_entry *tab = (const cuda_norm_entry *)c->norm_table + c->norm_first[op];
    if (nb > 0) {
        norm_partial_kernel<<<(unsigned)nb, 256, 0, c->stream>>>(tab, o->n_in, part);
        CUDA_LAUNCH_CHECK(err, "norm_partial_kernel");
    }
    norm_final_kernel<<<1, 1024, 0, c->stream>>>(part, nb, ptr[o->out[0]], ob);
    CUDA_LAUNCH_CHECK(err, "norm_final_kernel");
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

__global__ void adamw_kernel(const cuda_adamw_entry *tab, int ne, const void *norm, int nb, const void *sched, int sb) {
    __shared__ int s_e;
    __shared__ adamw_k s_k;
    int64_t b = blockIdx.x;
    if (threadIdx.x == 0) {
        int ei = optim_find(tab, ne, b);
        const cuda_adamw_entry *e = &tab[ei];
        double nrm = cu_ldd(norm, nb, 0), step = cu_ldd(sched, sb, 0), lr = cu_ldd(sched, sb, 1);
        double mx = e->max_norm;
        adamw_k k;
        k.c = (float)((mx > 0 && nrm > mx) ? mx / (nrm + 1e-6) : 1.0);
        k.b1 = e->beta1;
        k.b2 = e->beta2;
        k.eps = e->eps;
        k.at = (float)(lr * sqrt(1.0 - pow((double)e->beta2, step)) / (1.0 - pow((double)e->beta1, step)));
        k.decay = (float)(lr * (double)e->weight_decay);
        s_k = k;
        s_e = ei;
    }
    __syncthreads();
    const cuda_adamw_entry *e = &tab[s_e];
    const adamw_k k = s_k;
    int64_t start = (b - e->block0) * CUDA_ADAMW_CHUNK;
    int64_t end = start + CUDA_ADAMW_CHUNK < e->n ? start + CUDA_ADAMW_CHUNK : e->n;
    int64_t i0 = start;
    if (e->vec) {
        int64_t nq = (end - start) / 4;
        for (int64_t q = threadIdx.x; q < nq; q += blockDim.x) {
            int64_t i = start + 4 * q;
            float4 gr = optim_load4(e->grad, e->grad_bf16, i);
            float4 m = cu_load4(e->m + i), v = cu_load4(e->v + i);
            float4 p = e->master ? cu_load4(e->master + i) : optim_load4(e->param, e->param_bf16, i);
            p.x = adamw_elem(k, gr.x, m.x, v.x, p.x);
            p.y = adamw_elem(k, gr.y, m.y, v.y, p.y);
            p.z = adamw_elem(k, gr.z, m.z, v.z, p.z);
            p.w = adamw_elem(k, gr.w, m.w, v.w, p.w);
            cu_store4(e->m + i, m);
            cu_store4(e->v + i, v);
            if (e->master) cu_store4(e->master + i, p);
            if (e->param_bf16)
                cu_store4((bf16 *)e->param + i, p);
            else
                cu_store4((float *)e->param + i, p);
        }
        i0 = start + 4 * nq;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) {
        float m = e->m[i], v = e->v[i];
        float p = e->master ? e->master[i] : cu_ldd(e->param, e->param_bf16, i);
        p = adamw_elem(k, cu_ldd(e->grad, e->grad_bf16, i), m, v, p);
        e->m[i] = m;
        e->v[i] = v;
        if (e->master) e->master[i] = p;
        cu_std(e->param, e->param_bf16, i, p);
    }
}

// param, grad, m, v, norm (), sched (2) [, master]: the first ADAMW op of the schedule updates
// every parameter; the others were done by it.
extern "C" int cuda_run_adamw(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err) {
    if (!c->adamw_host || c->n_adamw == 0)
        return stg_errf(err, "no AdamW table: cuda_prepare was not called for this graph");
    if (op != c->first_adamw_op) {
        for (int i = 0; i < c->n_adamw; i++)
            if (c->adamw_host[i].op == op) return 0; // updated by the first ADAMW op's launch
        return stg_errf(err, "adamw op %d is not in the table cuda_prepare built", op);
    }
    for (int i = 0; i < c->n_adamw; i++) {
        const cuda_adamw_entry *e = &c->adamw_host[i];
        const stg_op *o = &g->ops[e->op];
        if (ptr[o->in[0]] != e->param || ptr[o->in[1]] != e->grad || ptr[o->in[2]] != (void *)e->m ||
            ptr[o->in[3]] != (void *)e->v || (e->master && ptr[o->in[6]] != (void *)e->master) ||
            ptr[o->in[4]] != c->adamw_norm || ptr[o->in[5]] != c->adamw_sched)
            return stg_errf(err, "the tensors of parameter %s moved since cuda_prepare: call cuda_prepare again",
                            g->t[o->in[0]].name);
    }
    if (c->adamw_blocks == 0) return 0;
    adamw_kernel<<<(unsigned)c->adamw_blocks, 256, 0, c->stream>>>((const cuda_adamw_entry *)c->adamw_table, c->n_adamw,
                                                                  c->adamw_norm, c->adamw_norm_bf16, c->adamw_sched,
                                                                  c->adamw_sched_bf16);
    CUDA_LAUNCH_CHECK(err, "adamw_kernel");
    return 0;
}
