#include "runtime/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "runtime/rng.h"

#define MAX_INPUTS 16

// What a run leaves for the host (results[slot]): the gradient norm, the schedule's [steps done,
// lr], then one loss per micro-batch; each as the graph's grad dtype (4 or 8 bytes).
#define RES_NORM 0
#define RES_SCHED 8
#define RES_LOSS 32
static size_t results_bytes(int micro) { return (size_t)RES_LOSS + 8 * (size_t)micro; }

struct rt_exec {
    const stg_graph *g;
    const stg_plan *p;
    rt_backend *b;
    rt_exec_opts o;
    void **ptr;      // (nt) address of every tensor
    void **owned;    // buffers to release
    int nowned;
    void *persistent, *arena;
    int64_t allocated;
    int64_t mem_before, measured;
    // Gradient accumulation: every run with a forward or backward phase is `micro` passes over as
    // many micro-batches (g->grad_accum, at least 1); ops that read a parameter gradient (the
    // data-parallel all-reduce, the optimizer) run in the last pass only (after_grads).
    int micro;
    bool *after_grads;         // (nops)
    // inputs staged in host memory, two slots (runs alternate between them), micro-batch after
    // micro-batch (micro x the tensor's bytes)
    int inputs[MAX_INPUTS];
    int ninputs;
    void *staging[2][MAX_INPUTS];
    int staged[MAX_INPUTS];    // the slot holding each input's latest value, -1 before any
    unsigned char *have;       // (ninputs x micro) micro-batch k of input i was written
    unsigned char *results[2]; // RES_*: raw gradient norm, [steps done, lr], losses as the graph's dtypes
    unsigned mask[2];          // what the run in each slot computed
    int parity;                // slot of the next submit
    int pending[2];            // slots submitted and not collected, oldest first
    int npending;
    void *graphs[8][2];        // captured runs by phase mask and slot
    bool *shared;              // (nt) with o.share: the tensor's memory is the other executor's
};

static int own(rt_exec *e, size_t n, void **out, stg_err *err) {
    if (e->b->ops->alloc(e->b, n, out, err)) return -1;
    e->owned[e->nowned++] = *out;
    e->allocated += (int64_t)n;
    return 0;
}

// rt_exec_opts.share: persistent tensors named as one of the other executor's persistent tensors,
// with its shape and dtype, take its memory; the rest of the persistent tensors get memory of their
// own (one allocation, the plan's order, or one each in separate mode); the arena is the other's
// when that is at least as large (neither in separate mode). Views follow their base.
static int share_memory(rt_exec *e, stg_err *err) {
    const stg_graph *g = e->g, *sg = e->o.share->g;
    const stg_plan *p = e->p;
    const rt_exec *sh = e->o.share;
    if (!(e->shared = stg_calloc((size_t)g->nt, sizeof *e->shared, err))) return -1;
    int64_t own_bytes = 0;
    for (int t = 0; t < g->nt; t++) {
        if (p->region[t] != STG_REGION_PERSISTENT || g->t[t].base >= 0) continue;
        int u = graph_find_tensor(sg, g->t[t].name);
        if (u >= 0 && stg_class_persistent(sg->t[u].cls) && sg->t[u].dtype == g->t[t].dtype && stg_same_shape(&sg->t[u], &g->t[t]) &&
            sh->ptr[u]) {
            e->ptr[t] = sh->ptr[u];
            e->shared[t] = true;
        } else if (e->o.separate) {
            if (own(e, (size_t)stg_bytes(&g->t[t]), &e->ptr[t], err)) return -1;
        } else {
            own_bytes += p->size[t];
        }
    }
    if (!e->o.separate) {
        if (own_bytes > 0 && own(e, (size_t)own_bytes, &e->persistent, err)) return -1;
        int64_t off = 0;
        for (int t = 0; t < g->nt; t++)
            if (p->region[t] == STG_REGION_PERSISTENT && g->t[t].base < 0 && !e->shared[t]) {
                e->ptr[t] = (char *)e->persistent + off;
                off += p->size[t];
            }
        if (sh->arena && !sh->o.separate && sh->p->arena_bytes >= p->arena_bytes) e->arena = sh->arena;
        else if (own(e, (size_t)p->arena_bytes, &e->arena, err)) return -1;
        for (int t = 0; t < g->nt; t++)
            if (p->region[t] == STG_REGION_ARENA) e->ptr[t] = (char *)e->arena + p->offset[t];
    } else {
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].base < 0 && p->region[t] == STG_REGION_ARENA && own(e, (size_t)stg_bytes(&g->t[t]), &e->ptr[t], err)) return -1;
    }
    for (int t = 0; t < g->nt; t++) { // views: their base's bytes (bases come first)
        int r = t;
        for (int k = 0; g->t[r].base >= 0 && k <= g->nt; k++) r = g->t[r].base;
        if (r != t && (p->region[t] == STG_REGION_PERSISTENT || e->o.separate)) e->ptr[t] = e->ptr[r];
    }
    return 0;
}

int rt_exec_new(const stg_graph *g, const stg_plan *p, rt_backend *b, const rt_exec_opts *o, rt_exec **out, stg_err *err) {
    *out = NULL;
    if (!g->schedule || g->nsched != p->nsched || p->nt != g->nt) return stg_errf(err, "executor: the plan is not for this graph");
    rt_exec *e = stg_calloc(1, sizeof *e, err);
    if (!e) return -1;
    e->g = g;
    e->p = p;
    e->b = b;
    if (o) e->o = *o;
    e->mem_before = b->ops->mem_used(b);
    e->measured = -1;
    e->micro = g->grad_accum > 1 ? g->grad_accum : 1;
    if (e->micro > 1 && !b->ops->set_accumulate) {
        stg_errf(err, "executor: the %s backend cannot accumulate gradients over micro-batches", b->ops->name);
        goto fail;
    }
    e->ptr = stg_calloc((size_t)g->nt, sizeof *e->ptr, err);
    e->owned = stg_calloc((size_t)g->nt + 2, sizeof *e->owned, err);
    e->after_grads = stg_calloc((size_t)g->nops + 1, sizeof *e->after_grads, err);
    e->have = stg_calloc((size_t)MAX_INPUTS * (size_t)e->micro, 1, err);
    if (!e->ptr || !e->owned || !e->after_grads || !e->have) goto fail;
    for (int op = 0; op < g->nops; op++)
        for (int i = 0; i < g->ops[op].n_in; i++) {
            int t = g->ops[op].in[i];
            if (g->t[t].cls == STG_CLASS_GRAD || (g->t[t].base >= 0 && g->t[g->t[t].base].cls == STG_CLASS_GRAD))
                e->after_grads[op] = true;
        }
    if (e->o.share) {
        if (share_memory(e, err)) goto fail;
    } else if (!e->o.separate) {
        if (own(e, (size_t)p->persistent_bytes, &e->persistent, err) || own(e, (size_t)p->arena_bytes, &e->arena, err)) goto fail;
        for (int t = 0; t < g->nt; t++) {
            if (p->region[t] == STG_REGION_PERSISTENT) e->ptr[t] = (char *)e->persistent + p->offset[t];
            else if (p->region[t] == STG_REGION_ARENA) e->ptr[t] = (char *)e->arena + p->offset[t];
        }
    } else {
        for (int t = 0; t < g->nt; t++) {
            if (g->t[t].base >= 0 || p->region[t] == STG_REGION_NONE) continue;
            if (own(e, (size_t)stg_bytes(&g->t[t]), &e->ptr[t], err)) goto fail;
        }
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].base >= 0) e->ptr[t] = e->ptr[g->t[t].base];
    }
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_INPUT) continue;
        if (e->ninputs == MAX_INPUTS) {
            stg_errf(err, "executor: more than %d inputs", MAX_INPUTS);
            goto fail;
        }
        e->inputs[e->ninputs] = t;
        e->staged[e->ninputs] = -1;
        for (int k = 0; k < 2; k++)
            if (b->ops->alloc_host(b, (size_t)stg_bytes(&g->t[t]) * (size_t)e->micro, &e->staging[k][e->ninputs], err)) goto fail;
        e->ninputs++;
    }
    for (int k = 0; k < 2; k++) {
        if (b->ops->alloc_host(b, results_bytes(e->micro), (void **)&e->results[k], err)) goto fail;
        memset(e->results[k], 0, results_bytes(e->micro));
    }
    if (b->ops->prepare && b->ops->prepare(b, g, e->ptr, err)) goto fail;
    // Small runtime state starts at zero: the schedule's [steps done, lr] and, with the optimizer in
    // backward, the previous step's gradient norm (0: the first step does not clip) and its slots.
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_WORKSPACE && g->t[t].base < 0 && e->ptr[t] && !(e->shared && e->shared[t]) &&
            b->ops->fill(b, e->ptr[t], 0, (size_t)stg_bytes(&g->t[t]), err))
            goto fail;
    if (b->ops->sync(b, err)) goto fail;
    int64_t used = b->ops->mem_used(b);
    e->measured = (used >= 0 && e->mem_before >= 0) ? used - e->mem_before : -1;
    *out = e;
    return 0;
fail:
    rt_exec_free(e);
    return -1;
}

void rt_exec_free(rt_exec *e) {
    if (!e) return;
    stg_err ignored;
    e->b->ops->sync(e->b, &ignored);
    for (int m = 0; m < 8; m++)
        for (int k = 0; k < 2; k++)
            if (e->graphs[m][k]) e->b->ops->graph_destroy(e->b, e->graphs[m][k]);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < e->ninputs; i++)
            if (e->staging[k][i]) e->b->ops->release_host(e->b, e->staging[k][i]);
        if (e->results[k]) e->b->ops->release_host(e->b, e->results[k]);
    }
    for (int i = 0; i < e->nowned; i++) e->b->ops->release(e->b, e->owned[i]);
    free(e->owned);
    free(e->shared);
    free(e->ptr);
    free(e->after_grads);
    free(e->have);
    free(e);
}

const stg_graph *rt_exec_graph(const rt_exec *e) { return e->g; }
int64_t rt_exec_measured_bytes(const rt_exec *e) { return e->measured; }

static int input_index(const rt_exec *e, int t) {
    for (int i = 0; i < e->ninputs; i++)
        if (e->inputs[i] == t) return i;
    return -1;
}
int64_t rt_exec_allocated_bytes(const rt_exec *e) { return e->allocated; }

int rt_exec_micro(const rt_exec *e) { return e->micro; }

// Stages micro-batch `micro` of input i (all of them when micro < 0) for the next run.
static int stage(rt_exec *e, int i, int micro, const void *host, size_t bytes, stg_err *err) {
    int slot = e->parity; // wait until the run that last read this slot is done
    for (int k = 0; k < e->npending; k++)
        if (e->pending[k] == slot && e->b->ops->wait(e->b, slot, err)) return -1;
    char *dst = e->staging[slot][i];
    if (micro >= 0 && e->staged[i] >= 0 && e->staged[i] != slot) // the other micro-batches: their latest values
        memcpy(dst, e->staging[e->staged[i]][i], bytes * (size_t)e->micro);
    for (int k = micro < 0 ? 0 : micro; k < (micro < 0 ? e->micro : micro + 1); k++) {
        memcpy(dst + bytes * (size_t)k, host, bytes);
        e->have[i * e->micro + k] = 1;
    }
    e->staged[i] = slot;
    return 0;
}

int rt_exec_write(rt_exec *e, int t, const void *host, size_t bytes, stg_err *err) {
    if (t < 0 || t >= e->g->nt || !e->ptr[t]) return stg_errf(err, "executor: tensor %d has no memory", t);
    if (bytes != (size_t)stg_bytes(&e->g->t[t]))
        return stg_errf(err, "executor: '%s' holds %lld bytes, not %zu", e->g->t[t].name, (long long)stg_bytes(&e->g->t[t]), bytes);
    int i = input_index(e, t);
    if (i >= 0) return stage(e, i, -1, host, bytes, err); // every micro-batch
    if (e->b->ops->upload(e->b, e->ptr[t], host, bytes, err)) return -1;
    return e->b->ops->sync(e->b, err);
}

int rt_exec_write_micro(rt_exec *e, int t, int micro, const void *host, size_t bytes, stg_err *err) {
    int i = t >= 0 && t < e->g->nt ? input_index(e, t) : -1;
    if (i < 0) return stg_errf(err, "executor: tensor %d is not an input", t);
    if (micro < 0 || micro >= e->micro)
        return stg_errf(err, "executor: micro-batch %d of '%s': a run has %d", micro, e->g->t[t].name, e->micro);
    if (bytes != (size_t)stg_bytes(&e->g->t[t]))
        return stg_errf(err, "executor: '%s' holds %lld bytes, not %zu", e->g->t[t].name, (long long)stg_bytes(&e->g->t[t]), bytes);
    return stage(e, i, micro, host, bytes, err);
}

int rt_exec_read(rt_exec *e, int t, void *host, size_t bytes, stg_err *err) {
    if (t < 0 || t >= e->g->nt || !e->ptr[t]) return stg_errf(err, "executor: tensor %d has no memory", t);
    if (bytes != (size_t)stg_bytes(&e->g->t[t]))
        return stg_errf(err, "executor: '%s' holds %lld bytes, not %zu", e->g->t[t].name, (long long)stg_bytes(&e->g->t[t]), bytes);
    if (e->b->ops->sync(e->b, err) || e->b->ops->download(e->b, host, e->ptr[t], bytes, err)) return -1;
    return e->b->ops->sync(e->b, err);
}

int rt_exec_read_f64(rt_exec *e, int t, double *host, stg_err *err) {
    const stg_tensor *x = &e->g->t[t];
    int64_t n = stg_numel(x);
    size_t bytes = (size_t)stg_bytes(x);
    void *tmp = stg_malloc(bytes, err);
    if (!tmp) return -1;
    int r = rt_exec_read(e, t, tmp, bytes, err);
    if (!r) {
        for (int64_t i = 0; i < n; i++) {
            switch (x->dtype) {
            case STG_F32: host[i] = ((const float *)tmp)[i]; break;
            case STG_F64: host[i] = ((const double *)tmp)[i]; break;
            case STG_BF16: host[i] = stg_bf16_to_f32(((const uint16_t *)tmp)[i]); break;
            case STG_I32: host[i] = ((const int32_t *)tmp)[i]; break;
            default: r = stg_errf(err, "executor: '%s' has an unknown dtype", x->name); i = n; break;
            }
        }
    }
    free(tmp);
    return r;
}

int rt_exec_write_f64(rt_exec *e, int t, const double *host, stg_err *err) {
    const stg_tensor *x = &e->g->t[t];
    int64_t n = stg_numel(x);
    size_t bytes = (size_t)stg_bytes(x);
    void *tmp = stg_malloc(bytes, err);
    if (!tmp) return -1;
    for (int64_t i = 0; i < n; i++) {
        switch (x->dtype) {
        case STG_F32: ((float *)tmp)[i] = (float)host[i]; break;
        case STG_F64: ((double *)tmp)[i] = host[i]; break;
        case STG_BF16: ((uint16_t *)tmp)[i] = stg_f32_to_bf16((float)host[i]); break;
        case STG_I32: ((int32_t *)tmp)[i] = (int32_t)host[i]; break;
        default: break;
        }
    }
    int r = rt_exec_write(e, t, tmp, bytes, err);
    free(tmp);
    return r;
}

int rt_exec_param_truth(const rt_exec *e, int p) {
    const stg_graph *g = e->g;
    int m = graph_param_state(g, p, STG_ROLE_MASTER);
    return m >= 0 ? m : p;
}

int rt_exec_init_params(rt_exec *e, uint64_t seed, stg_err *err) {
    const stg_graph *g = e->g;
    rt_rng rng;
    rt_rng_seed(&rng, seed);
    int64_t maxn = 1;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM || g->t[t].cls == STG_CLASS_OPTIMIZER) {
            int64_t n = stg_numel(&g->t[t]);
            if (n > maxn) maxn = n;
        }
    double *buf = stg_malloc(sizeof(double) * (size_t)maxn, err);
    if (!buf) return -1;
    int rc = 0;
    // parameters, in declaration order, from one stream
    for (int t = 0; t < g->nt && !rc; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_PARAM) continue;
        int64_t n = stg_numel(x);
        double std = 1.0;
        switch (x->init) {
        case STG_INIT_LINEAR: std = sqrt(2.0 / (double)(x->shape[0] + x->shape[1])); // fall through
        case STG_INIT_EMBEDDING:
            for (int64_t i = 0; i < n; i++) buf[i] = rt_rng_trunc_normal(&rng, std, -3.0 * std, 3.0 * std);
            break;
        case STG_INIT_NORMAL:
            for (int64_t i = 0; i < n; i++) buf[i] = x->init_std * rt_rng_normal(&rng);
            break;
        case STG_INIT_ONES:
            for (int64_t i = 0; i < n; i++) buf[i] = 1.0;
            break;
        case STG_INIT_ZEROS:
        case STG_INIT_NONE:
            for (int64_t i = 0; i < n; i++) buf[i] = 0.0;
            break;
        }
        rc = rt_exec_write_f64(e, t, buf, err);
        int truth = rt_exec_param_truth(e, t);
        if (!rc && truth != t) rc = rt_exec_write_f64(e, truth, buf, err);
    }
    // AdamW moments start at zero
    for (int t = 0; t < g->nt && !rc; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_OPTIMIZER || rt_exec_param_truth(e, x->param) == t) continue;
        memset(buf, 0, sizeof(double) * (size_t)stg_numel(x));
        rc = rt_exec_write_f64(e, t, buf, err);
    }
    free(buf);
    return rc;
}

int rt_exec_init_params_fast(rt_exec *e, stg_err *err) {
    const stg_graph *g = e->g;
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_PARAM && x->cls != STG_CLASS_OPTIMIZER) continue;
        bool value = x->cls == STG_CLASS_PARAM || rt_exec_param_truth(e, x->param) == t;
        if (e->b->ops->fill(e->b, e->ptr[t], value ? 0x3c : 0, (size_t)stg_bytes(x), err)) return -1;
    }
    return e->b->ops->sync(e->b, err);
}

int rt_exec_set_steps_done(rt_exec *e, int64_t done, stg_err *err) {
    if (e->g->sched_state < 0) return 0;
    double v[2] = {(double)done, 0.0};
    return rt_exec_write_f64(e, e->g->sched_state, v, err);
}

// ---- concurrent streams (graph mode) ----------------------------------------------------------------
//
// The ops of a run go to the backend's streams in schedule order. Two ops are ordered when one writes
// bytes the other reads or writes (by address, so that the arena's reuse of memory orders them too);
// independent ops may run at the same time. Each op goes to the stream whose last op it depends on
// (the latest such), else to the stream whose last op is oldest; it waits for the latest op it
// depends on on every other stream, unless its stream already follows that op (vector clocks). Side
// streams start after the run's inputs are up, and stream 0 waits for all of them at the end.
// Results are bitwise those of one stream: every kernel is deterministic and no two unordered ops
// touch the same bytes.

#define MAX_STREAMS 8                // compute streams and the communication stream
#define WSTRIDE (MAX_STREAMS + 2)    // waits of one op: one per other stream, the start, the end mark

typedef struct {
    int n;          // ops of the run, in schedule order
    int *op;        // (n) op ids
    int *stream;    // (n)
    int *wait;      // (n * WSTRIDE) events to wait on before each op, -1 ends the list
    bool *record;   // (n) record event i + 1 after op i (event 0 marks the start of the run)
    int nstreams;
    int final_wait[MAX_STREAMS + 1]; // events stream 0 waits on at the end, -1 ends the list
} lanes;

static void lanes_free(lanes *l) {
    free(l->op);
    free(l->stream);
    free(l->wait);
    free(l->record);
    memset(l, 0, sizeof *l);
}

typedef struct {
    uintptr_t lo, hi;
} span;

// The byte spans op o only reads, then those it writes (its outputs and the inputs it updates in
// place), into sp; counts in *nr, *nw.
static void op_spans(const rt_exec *e, int o, span *sp, int *nr, int *nw) {
    const stg_op *op = &e->g->ops[o];
    unsigned mut = ops_def(op->kind)->mutates_in;
    *nr = *nw = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < op->n_in + op->n_out; k++) {
            int t = k < op->n_in ? op->in[k] : op->out[k - op->n_in];
            bool writes = k >= op->n_in || (k < 32 && (mut >> k) & 1u);
            if (!e->ptr[t] || writes != (pass == 1)) continue;
            sp[*nr + *nw] = (span){(uintptr_t)e->ptr[t], (uintptr_t)e->ptr[t] + (uintptr_t)stg_bytes(&e->g->t[t])};
            if (pass == 0) (*nr)++;
            else (*nw)++;
        }
}

static bool overlaps(const span *a, int na, const span *b, int nb) {
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return true;
    return false;
}

// Whether op o runs in a pass of phase_mask: its phase is in it, and an op that reads a parameter
// gradient runs only in the last micro-batch's pass (gradient accumulation).
static bool runs(const rt_exec *e, int o, unsigned mask, bool last) {
    return (mask & (1u << e->g->ops[o].phase)) && (last || !e->after_grads[o]);
}

static int lanes_plan(rt_exec *e, unsigned mask, bool last, int nstreams, lanes *l, stg_err *err) {
    const stg_graph *g = e->g;
    rt_backend *b = e->b;
    memset(l, 0, sizeof *l);
    int n = 0;
    for (int s = 0; s < g->nsched; s++)
        if (runs(e, g->schedule[s], mask, last)) n++;
    int maxio = 1;
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].n_in + g->ops[o].n_out > maxio) maxio = g->ops[o].n_in + g->ops[o].n_out;
    l->n = n;
    l->nstreams = nstreams;
    int ns = nstreams + 1; // the last one: communication (RT_LANE_COMM)
    l->op = stg_calloc((size_t)n + 1, sizeof *l->op, err);
    l->stream = stg_calloc((size_t)n + 1, sizeof *l->stream, err);
    l->wait = stg_calloc(((size_t)n + 1) * WSTRIDE, sizeof *l->wait, err);
    l->record = stg_calloc((size_t)n + 1, sizeof *l->record, err);
    int *clock = stg_calloc(((size_t)n + 1) * MAX_STREAMS, sizeof *clock, err); // per op: what its stream follows
    span *spans = stg_calloc(((size_t)n + 1) * (size_t)maxio, sizeof *spans, err);
    int *nr = stg_calloc((size_t)n + 1, sizeof *nr, err), *nw = stg_calloc((size_t)n + 1, sizeof *nw, err);
    int rc = -1;
    if (!l->op || !l->stream || !l->wait || !l->record || !clock || !spans || !nr || !nw) goto out;
    n = 0;
    for (int s = 0; s < g->nsched; s++)
        if (runs(e, g->schedule[s], mask, last)) l->op[n++] = g->schedule[s];
    for (int i = 0; i < n; i++) op_spans(e, l->op[i], spans + (size_t)i * (size_t)maxio, &nr[i], &nw[i]);
    int tail[MAX_STREAMS + 1], now[MAX_STREAMS + 1][MAX_STREAMS + 1];
    bool started[MAX_STREAMS + 1] = {false};
    for (int k = 0; k < ns; k++) {
        tail[k] = -1;
        for (int j = 0; j < ns; j++) now[k][j] = -1;
    }
    started[0] = true;
    for (int i = 0; i < n; i++) {
        int lane = b->ops->op_lane(b, g, l->op[i]);
        int dep[MAX_STREAMS + 1];
        for (int k = 0; k < ns; k++) dep[k] = -1;
        const span *ri = spans + (size_t)i * (size_t)maxio, *wi = ri + nr[i];
        if (lane == RT_LANE_BARRIER) {
            for (int k = 0; k < ns; k++) dep[k] = tail[k];
        } else {
            for (int j = i - 1; j >= 0; j--) {
                if (dep[l->stream[j]] >= 0) continue; // the latest one on that stream is known
                const span *rj = spans + (size_t)j * (size_t)maxio, *wj = rj + nr[j];
                if (overlaps(wj, nw[j], ri, nr[i]) || overlaps(wj, nw[j], wi, nw[i]) || overlaps(rj, nr[j], wi, nw[i]))
                    dep[l->stream[j]] = j;
            }
        }
        int s = lane == RT_LANE_COMM ? nstreams : 0;
        if (lane == RT_LANE_ANY) {
            int best = -1;
            for (int k = 0; k < nstreams; k++) // continue the chain of the latest dependency
                if (tail[k] >= 0 && dep[k] == tail[k] && (best < 0 || tail[k] > tail[best])) best = k;
            if (best < 0) // else the stream whose last op is oldest
                for (int k = 0; k < nstreams; k++)
                    if (best < 0 || tail[k] < tail[best]) best = k;
            s = best;
        }
        int *wl = l->wait + (size_t)i * WSTRIDE, nwait = 0;
        if (!started[s]) {
            wl[nwait++] = 0;
            started[s] = true;
        }
        for (int k = 0; k < ns; k++) {
            if (k == s || dep[k] < 0 || dep[k] <= now[s][k]) continue;
            wl[nwait++] = dep[k] + 1;
            l->record[dep[k]] = true;
            const int *cj = clock + (size_t)dep[k] * MAX_STREAMS;
            for (int j = 0; j < ns; j++)
                if (cj[j] > now[s][j]) now[s][j] = cj[j];
        }
        wl[nwait] = -1;
        now[s][s] = i;
        memcpy(clock + (size_t)i * MAX_STREAMS, now[s], sizeof(int) * (size_t)ns);
        l->stream[i] = s;
        tail[s] = i;
    }
    int nf = 0;
    for (int k = 1; k < ns; k++)
        if (tail[k] > now[0][k]) {
            l->final_wait[nf++] = tail[k] + 1;
            l->record[tail[k]] = true;
        }
    l->final_wait[nf] = -1;
    rc = 0;
out:
    free(clock);
    free(spans);
    free(nr);
    free(nw);
    if (rc) lanes_free(l);
    return rc;
}

static int enqueue_ops_concurrent(rt_exec *e, unsigned mask, bool last, int nstreams, stg_err *err) {
    const stg_graph *g = e->g;
    rt_backend *b = e->b;
    lanes l;
    if (lanes_plan(e, mask, last, nstreams, &l, err)) return -1;
    int rc = -1;
    if (b->ops->events(b, l.n + 1, err) || b->ops->event_record(b, 0, 0, err)) goto out;
    int phase = -1;
    static const char *const names[] = {"stg forward", "stg backward", "stg optimizer"};
    for (int i = 0; i < l.n; i++) {
        int o = l.op[i], s = l.stream[i] == l.nstreams ? b->ops->streams(b) : l.stream[i]; // the backend's index
        if ((int)g->ops[o].phase != phase && b->ops->annotate) b->ops->annotate(b, names[phase = (int)g->ops[o].phase]);
        for (const int *w = l.wait + (size_t)i * WSTRIDE; *w >= 0; w++)
            if (b->ops->event_wait(b, s, *w, err)) goto out;
        if (b->ops->run_op_on(b, s, g, o, e->ptr, err)) {
            const stg_op *op = &g->ops[o];
            stg_err_prefix(err, "%s -> '%s' (stream %d)", ops_name(op->kind), op->n_out ? g->t[op->out[0]].name : "", s);
            goto out;
        }
        if (l.record[i] && b->ops->event_record(b, s, i + 1, err)) goto out;
    }
    for (const int *w = l.final_wait; *w >= 0; w++)
        if (b->ops->event_wait(b, 0, *w, err)) goto out;
    if (phase >= 0 && b->ops->annotate) b->ops->annotate(b, NULL);
    rc = 0;
out:
    lanes_free(&l);
    return rc;
}

static int exec_streams(const rt_exec *e) {
    rt_backend *b = e->b;
    if (!e->o.graph || !b->ops->streams || !b->ops->capture_begin) return 1;
    int n = b->ops->streams(b);
    if (e->o.streams > 0 && e->o.streams < n) n = e->o.streams;
    return n < 1 ? 1 : n > MAX_STREAMS - 1 ? MAX_STREAMS - 1 : n;
}

struct rt_dag {
    int n, nsched;   // ops of the run; schedule positions in all
    int *pos;        // (n) schedule position of the run's op i
    int *prev;       // (n) the op before i on its stream, -1 for the first
    int *woff, *w;   // ops i waits on (other streams): w[woff[i] .. woff[i + 1])
};

void rt_dag_free(rt_dag *d) {
    if (!d) return;
    free(d->pos), free(d->prev), free(d->woff), free(d->w);
    free(d);
}

int rt_exec_dag(rt_exec *e, unsigned mask, rt_dag **out, stg_err *err) { return rt_exec_dag_streams(e, mask, 0, out, err); }

int rt_exec_dag_streams(rt_exec *e, unsigned mask, int nstreams, rt_dag **out, stg_err *err) {
    const stg_graph *g = e->g;
    int n = 0;
    *out = NULL;
    if (nstreams <= 0) nstreams = exec_streams(e);
    if (nstreams > MAX_STREAMS - 1) return stg_errf(err, "critical path: at most %d streams", MAX_STREAMS - 1);
    if (nstreams > 1 && !e->b->ops->op_lane) return stg_errf(err, "critical path: the %s backend has one stream", e->b->ops->name);
    for (int s = 0; s < g->nsched; s++) n += (mask >> g->ops[g->schedule[s]].phase) & 1u;
    rt_dag *d = stg_calloc(1, sizeof *d, err);
    if (!d) return -1;
    d->n = n;
    d->nsched = g->nsched;
    lanes l;
    memset(&l, 0, sizeof l);
    int rc = -1;
    d->pos = stg_calloc((size_t)n + 1, sizeof *d->pos, err);
    d->prev = stg_calloc((size_t)n + 1, sizeof *d->prev, err);
    d->woff = stg_calloc((size_t)n + 1, sizeof *d->woff, err);
    d->w = stg_calloc((size_t)n * (MAX_STREAMS + 1) + 1, sizeof *d->w, err);
    if (!d->pos || !d->prev || !d->woff || !d->w) goto out;
    for (int s = 0, i = 0; s < g->nsched; s++)
        if ((mask >> g->ops[g->schedule[s]].phase) & 1u) d->pos[i++] = s;
    if (nstreams <= 1 || n == 0) { // one stream: a chain of every op
        for (int i = 0; i < n; i++) d->prev[i] = i - 1, d->woff[i + 1] = 0;
        rc = 0;
        goto out;
    }
    if (lanes_plan(e, mask, true, nstreams, &l, err)) goto out;
    int tail[MAX_STREAMS + 1], nw = 0;
    for (int k = 0; k <= MAX_STREAMS; k++) tail[k] = -1;
    for (int i = 0; i < n; i++) {
        d->prev[i] = tail[l.stream[i]];
        tail[l.stream[i]] = i;
        d->woff[i] = nw;
        for (const int *w = l.wait + (size_t)i * WSTRIDE; *w >= 0; w++)
            if (*w > 0) d->w[nw++] = *w - 1; // event 0 is the start of the run
    }
    d->woff[n] = nw;
    rc = 0;
out:
    lanes_free(&l);
    if (rc) rt_dag_free(d);
    else *out = d;
    return rc;
}

double rt_dag_length(const rt_dag *d, const double *ms, bool *on_path, double *slack) {
    int n = d->n, last = -1;
    double *fin = malloc(sizeof *fin * (size_t)(n ? n : 1)), *lf = malloc(sizeof *lf * (size_t)(n ? n : 1)), len = 0;
    int *pred = malloc(sizeof *pred * (size_t)(n ? n : 1));
    if (on_path)
        for (int s = 0; s < d->nsched; s++) on_path[s] = false;
    if (slack)
        for (int s = 0; s < d->nsched; s++) slack[s] = -1;
    if (!fin || !lf || !pred) {
        free(fin), free(lf), free(pred);
        return -1;
    }
    for (int i = 0; i < n; i++) { // finish times: after the stream's previous op and every op waited on
        double start = d->prev[i] >= 0 ? fin[d->prev[i]] : 0;
        pred[i] = d->prev[i];
        for (int k = d->woff[i]; k < d->woff[i + 1]; k++)
            if (fin[d->w[k]] > start) start = fin[d->w[k]], pred[i] = d->w[k];
        fin[i] = start + ms[d->pos[i]];
        if (last < 0 || fin[i] > fin[last]) last = i;
    }
    len = last >= 0 ? fin[last] : 0;
    for (int i = 0; i < n; i++) lf[i] = len;
    for (int j = n - 1; j >= 0; j--) { // latest finish times, backward over the same edges
        double st = lf[j] - ms[d->pos[j]];
        if (d->prev[j] >= 0 && st < lf[d->prev[j]]) lf[d->prev[j]] = st;
        for (int k = d->woff[j]; k < d->woff[j + 1]; k++)
            if (st < lf[d->w[k]]) lf[d->w[k]] = st;
    }
    if (slack)
        for (int i = 0; i < n; i++) slack[d->pos[i]] = lf[i] - fin[i] > 0 ? lf[i] - fin[i] : 0;
    if (on_path)
        for (int i = last; i >= 0; i = pred[i]) on_path[d->pos[i]] = true;
    free(fin), free(lf), free(pred);
    return len;
}

int rt_exec_critical_path(rt_exec *e, unsigned mask, const double *ms, double *length, bool *on_path, double *slack,
                          stg_err *err) {
    rt_dag *d;
    if (rt_exec_dag(e, mask, &d, err)) return -1;
    *length = rt_dag_length(d, ms, on_path, slack);
    rt_dag_free(d);
    if (*length < 0) return stg_errf(err, "critical path: out of host memory");
    return 0;
}

int rt_exec_streams(const rt_exec *e) { return exec_streams(e); }

// One pass of a run: micro-batch k's staged inputs up, poison (tests), the ops of mask (those that
// read parameter gradients only when last), its loss down.
static int enqueue_pass(rt_exec *e, unsigned mask, int slot, int k, bool last, stg_err *err) {
    const stg_graph *g = e->g;
    rt_backend *b = e->b;
    for (int i = 0; i < e->ninputs; i++) {
        int t = e->inputs[i];
        size_t by = (size_t)stg_bytes(&g->t[t]);
        if (b->ops->upload(b, e->ptr[t], (const char *)e->staging[slot][i] + by * (size_t)k, by, err)) return -1;
    }
    if (e->o.poison) {
        if (!e->o.separate) {
            if (b->ops->fill(b, e->arena, 0xff, (size_t)e->p->arena_bytes, err)) return -1;
        } else {
            for (int t = 0; t < g->nt; t++)
                if (g->t[t].base < 0 && e->ptr[t] && !stg_tensor_persistent(g, t) &&
                    b->ops->fill(b, e->ptr[t], 0xff, (size_t)stg_bytes(&g->t[t]), err))
                    return -1;
        }
        if (b->ops->poison_shared && b->ops->poison_shared(b, err)) return -1;
    }
    if (e->micro > 1) b->ops->set_accumulate(b, k > 0); // the first micro-batch writes the gradients
    int nstreams = exec_streams(e);
    if (nstreams > 1 && enqueue_ops_concurrent(e, mask, last, nstreams, err)) return -1;
    int phase = -1;
    static const char *const names[] = {"stg forward", "stg backward", "stg optimizer"};
    for (int s = 0; s < g->nsched && nstreams == 1; s++) {
        int o = g->schedule[s];
        if (!runs(e, o, mask, last)) continue;
        if ((int)g->ops[o].phase != phase && b->ops->annotate) b->ops->annotate(b, names[phase = (int)g->ops[o].phase]);
        if (b->ops->run_op(b, g, o, e->ptr, err)) {
            const stg_op *op = &g->ops[o];
            return stg_err_prefix(err, "step %d, %s -> '%s'", s, ops_name(op->kind), op->n_out ? g->t[op->out[0]].name : "");
        }
    }
    if (phase >= 0 && b->ops->annotate) b->ops->annotate(b, NULL);
    size_t w = stg_dtype_size(g->grad_dtype);
    unsigned char *r = e->results[slot];
    if ((mask & RT_PHASE_FORWARD) && g->loss >= 0 && b->ops->download(b, r + RES_LOSS + 8 * (size_t)k, e->ptr[g->loss], w, err))
        return -1;
    return 0;
}

// Everything one run enqueues: with gradient accumulation one forward and backward pass per
// micro-batch (the first writing the gradients, the others adding into them), the optimizer in the
// last; then the results down.
static int enqueue(rt_exec *e, unsigned mask, int slot, stg_err *err) {
    const stg_graph *g = e->g;
    rt_backend *b = e->b;
    int passes = (mask & (RT_PHASE_FORWARD | RT_PHASE_BACKWARD)) ? e->micro : 1;
    for (int k = 0; k < passes; k++) {
        bool last = k == passes - 1;
        int r = enqueue_pass(e, last ? mask : mask & ~RT_PHASE_OPTIMIZER, slot, k, last, err);
        if (e->micro > 1) b->ops->set_accumulate(b, false);
        if (r) return passes > 1 ? stg_err_prefix(err, "micro-batch %d of %d", k + 1, passes) : -1;
    }
    unsigned char *r = e->results[slot];
    size_t w = stg_dtype_size(g->grad_dtype);
    if ((mask & RT_PHASE_OPTIMIZER) && g->grad_norm >= 0 && b->ops->download(b, r + RES_NORM, e->ptr[g->grad_norm], w, err))
        return -1;
    if ((mask & RT_PHASE_OPTIMIZER) && g->sched_state >= 0 &&
        b->ops->download(b, r + RES_SCHED, e->ptr[g->sched_state], 2 * w, err))
        return -1;
    return 0;
}

int rt_exec_submit(rt_exec *e, unsigned mask, stg_err *err) {
    rt_backend *b = e->b;
    int slot = e->parity;
    if (e->npending == 2) return stg_errf(err, "executor: two runs are in flight; collect one first");
    if (mask == 0 || mask > RT_PHASE_ALL) return stg_errf(err, "executor: bad phase mask %u", mask);
    for (int k = 0; k < e->npending; k++)
        if (e->pending[k] == slot && b->ops->wait(b, slot, err)) return -1;
    for (int i = 0; i < e->ninputs; i++) { // inputs not rewritten since the last run: the same again
        if (e->staged[i] < 0) return stg_errf(err, "executor: input '%s' was never written", e->g->t[e->inputs[i]].name);
        for (int k = 0; k < e->micro; k++)
            if (!e->have[i * e->micro + k])
                return stg_errf(err, "executor: micro-batch %d of %d of input '%s' was never written", k + 1, e->micro,
                                e->g->t[e->inputs[i]].name);
        if (e->staged[i] != slot) {
            memcpy(e->staging[slot][i], e->staging[e->staged[i]][i], (size_t)stg_bytes(&e->g->t[e->inputs[i]]) * (size_t)e->micro);
            e->staged[i] = slot;
        }
    }
    if (e->o.graph && b->ops->capture_begin) {
        void **gr = &e->graphs[mask][slot];
        if (!*gr) {
            if (b->ops->sync(b, err) || b->ops->capture_begin(b, err)) return -1;
            int r = enqueue(e, mask, slot, err);
            void *made = NULL;
            stg_err err2;
            int r2 = b->ops->capture_end(b, &made, r ? &err2 : err);
            if (r) {
                if (made) b->ops->graph_destroy(b, made);
                return -1;
            }
            if (r2) return -1;
            *gr = made;
        }
        if (b->ops->graph_launch(b, *gr, err)) return -1;
    } else if (enqueue(e, mask, slot, err))
        return -1;
    if (b->ops->record(b, slot, err)) return -1;
    e->mask[slot] = mask;
    e->pending[e->npending++] = slot;
    e->parity ^= 1;
    return 0;
}

static double raw_at(const unsigned char *p, stg_dtype dt) {
    if (dt == STG_F64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

int rt_exec_collect(rt_exec *e, rt_exec_results *r, stg_err *err) {
    if (e->npending == 0) return stg_errf(err, "executor: no run to collect");
    int slot = e->pending[0];
    if (e->b->ops->wait(e->b, slot, err)) return -1;
    e->pending[0] = e->pending[1];
    e->npending--;
    if (r) {
        const stg_graph *g = e->g;
        const unsigned char *p = e->results[slot];
        size_t w = stg_dtype_size(g->grad_dtype);
        unsigned m = e->mask[slot];
        r->loss = NAN;
        if ((m & RT_PHASE_FORWARD) && g->loss >= 0) { // the mean over the micro-batches
            double sum = 0;
            for (int k = 0; k < e->micro; k++) sum += raw_at(p + RES_LOSS + 8 * (size_t)k, g->grad_dtype);
            r->loss = sum / (double)e->micro;
        }
        r->grad_norm = (m & RT_PHASE_OPTIMIZER) && g->grad_norm >= 0 ? raw_at(p + RES_NORM, g->grad_dtype) : NAN;
        r->lr = (m & RT_PHASE_OPTIMIZER) && g->sched_state >= 0 ? raw_at(p + RES_SCHED + w, g->grad_dtype) : NAN;
    }
    return 0;
}

int rt_exec_run_results(rt_exec *e, unsigned mask, rt_exec_results *r, stg_err *err) {
    while (e->npending > 0)
        if (rt_exec_collect(e, NULL, err)) return -1;
    if (rt_exec_submit(e, mask, err) || rt_exec_collect(e, r, err)) return -1;
    return e->b->ops->sync(e->b, err);
}

int rt_exec_run(rt_exec *e, unsigned mask, stg_err *err) { return rt_exec_run_results(e, mask, NULL, err); }

int rt_exec_profile(rt_exec *e, unsigned mask, double *ms, stg_err *err) {
    const stg_graph *g = e->g;
    rt_backend *b = e->b;
    if (!b->ops->prof_begin) return stg_errf(err, "the %s backend has no profiling marks", b->ops->name);
    while (e->npending > 0)
        if (rt_exec_collect(e, NULL, err)) return -1;
    if (b->ops->prof_begin(b, g->nsched + 1, err) || rt_exec_run(e, mask, err)) return -1; // warm, and stage inputs
    if (e->micro > 1) b->ops->set_accumulate(b, false); // one pass over the first micro-batch
    int slot = e->parity;
    for (int i = 0; i < e->ninputs; i++) {
        int t = e->inputs[i];
        if (b->ops->upload(b, e->ptr[t], e->staging[e->staged[i]][i], (size_t)stg_bytes(&g->t[t]), err)) return -1;
    }
    (void)slot;
    for (int s = 0; s < g->nsched; s++) {
        int o = g->schedule[s];
        ms[s] = 0;
        if (b->ops->prof_mark(b, s, err)) return -1;
        if (!(mask & (1u << g->ops[o].phase))) continue;
        if (b->ops->run_op(b, g, o, e->ptr, err)) return -1;
    }
    if (b->ops->prof_mark(b, g->nsched, err)) return -1;
    for (int s = 0; s < g->nsched; s++)
        if ((mask & (1u << g->ops[g->schedule[s]].phase)) && b->ops->prof_elapsed(b, s, s + 1, &ms[s], err)) return -1;
    return b->ops->sync(b, err);
}
