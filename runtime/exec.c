#include "runtime/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "runtime/rng.h"

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
};

uint16_t rt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float rt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int own(rt_exec *e, size_t n, void **out, stg_err *err) {
    if (e->b->ops->alloc(e->b, n, out, err)) return -1;
    e->owned[e->nowned++] = *out;
    e->allocated += (int64_t)n;
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
    e->ptr = stg_calloc((size_t)g->nt, sizeof *e->ptr, err);
    e->owned = stg_calloc((size_t)g->nt + 2, sizeof *e->owned, err);
    if (!e->ptr || !e->owned) goto fail;
    if (!e->o.separate) {
        if (own(e, (size_t)p->persistent_bytes, &e->persistent, err) || own(e, (size_t)p->arena_bytes, &e->arena, err)) goto fail;
        for (int t = 0; t < g->nt; t++) {
            if (p->region[t] == STG_REGION_PERSISTENT) e->ptr[t] = (char *)e->persistent + p->offset[t];
            else if (p->region[t] == STG_REGION_ARENA) e->ptr[t] = (char *)e->arena + p->offset[t];
        }
    } else {
        for (int t = 0; t < g->nt; t++) {
            if (g->t[t].base >= 0 || p->region[t] == STG_REGION_NONE) continue;
            if (own(e, (size_t)graph_bytes(&g->t[t]), &e->ptr[t], err)) goto fail;
        }
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].base >= 0) e->ptr[t] = e->ptr[g->t[t].base];
    }
    *out = e;
    return 0;
fail:
    rt_exec_free(e);
    return -1;
}

void rt_exec_free(rt_exec *e) {
    if (!e) return;
    for (int i = 0; i < e->nowned; i++) e->b->ops->release(e->b, e->owned[i]);
    free(e->owned);
    free(e->ptr);
    free(e);
}

const stg_graph *rt_exec_graph(const rt_exec *e) { return e->g; }
int64_t rt_exec_allocated_bytes(const rt_exec *e) { return e->allocated; }

int rt_exec_write(rt_exec *e, int t, const void *host, size_t bytes, stg_err *err) {
    if (t < 0 || t >= e->g->nt || !e->ptr[t]) return stg_errf(err, "executor: tensor %d has no memory", t);
    if (bytes != (size_t)graph_bytes(&e->g->t[t]))
        return stg_errf(err, "executor: '%s' holds %lld bytes, not %zu", e->g->t[t].name, (long long)graph_bytes(&e->g->t[t]), bytes);
    return e->b->ops->upload(e->b, e->ptr[t], host, bytes, err);
}

int rt_exec_read(rt_exec *e, int t, void *host, size_t bytes, stg_err *err) {
    if (t < 0 || t >= e->g->nt || !e->ptr[t]) return stg_errf(err, "executor: tensor %d has no memory", t);
    if (bytes != (size_t)graph_bytes(&e->g->t[t]))
        return stg_errf(err, "executor: '%s' holds %lld bytes, not %zu", e->g->t[t].name, (long long)graph_bytes(&e->g->t[t]), bytes);
    if (e->b->ops->sync(e->b, err)) return -1;
    return e->b->ops->download(e->b, host, e->ptr[t], bytes, err);
}

int rt_exec_read_f64(rt_exec *e, int t, double *host, stg_err *err) {
    const stg_tensor *x = &e->g->t[t];
    int64_t n = graph_numel(x);
    size_t bytes = (size_t)graph_bytes(x);
    void *tmp = stg_malloc(bytes, err);
    if (!tmp) return -1;
    int r = rt_exec_read(e, t, tmp, bytes, err);
    if (!r) {
        for (int64_t i = 0; i < n; i++) {
            switch (x->dtype) {
            case STG_F32: host[i] = ((const float *)tmp)[i]; break;
            case STG_F64: host[i] = ((const double *)tmp)[i]; break;
            case STG_BF16: host[i] = rt_bf16_to_f32(((const uint16_t *)tmp)[i]); break;
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
    int64_t n = graph_numel(x);
    size_t bytes = (size_t)graph_bytes(x);
    void *tmp = stg_malloc(bytes, err);
    if (!tmp) return -1;
    for (int64_t i = 0; i < n; i++) {
        switch (x->dtype) {
        case STG_F32: ((float *)tmp)[i] = (float)host[i]; break;
        case STG_F64: ((double *)tmp)[i] = host[i]; break;
        case STG_BF16: ((uint16_t *)tmp)[i] = rt_f32_to_bf16((float)host[i]); break;
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
    if (g->precision != STG_PREC_BF16) return p;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_OPTIMIZER && g->t[t].param == p) {
            const char *dot = strrchr(g->t[t].name, '.');
            if (dot && strcmp(dot, ".master") == 0) return t;
        }
    return p;
}

int rt_exec_init_params(rt_exec *e, uint64_t seed, stg_err *err) {
    const stg_graph *g = e->g;
    rt_rng rng;
    rt_rng_seed(&rng, seed);
    int64_t maxn = 1;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].cls == STG_CLASS_PARAM || g->t[t].cls == STG_CLASS_OPTIMIZER) {
            int64_t n = graph_numel(&g->t[t]);
            if (n > maxn) maxn = n;
        }
    double *buf = stg_malloc(sizeof(double) * (size_t)maxn, err);
    if (!buf) return -1;
    int rc = 0;
    // parameters, in declaration order, from one stream
    for (int t = 0; t < g->nt && !rc; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_PARAM) continue;
        int64_t n = graph_numel(x);
        double std = 1.0;
        switch (x->init) {
        case STG_INIT_LINEAR: std = sqrt(2.0 / (double)(x->shape[0] + x->shape[1])); // fall through
        case STG_INIT_EMBEDDING:
            for (int64_t i = 0; i < n; i++) buf[i] = rt_rng_trunc_normal(&rng, std, -3.0 * std, 3.0 * std);
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
        memset(buf, 0, sizeof(double) * (size_t)graph_numel(x));
        rc = rt_exec_write_f64(e, t, buf, err);
    }
    free(buf);
    return rc;
}

int rt_exec_set_steps_done(rt_exec *e, int64_t done, stg_err *err) {
    if (e->g->sched_state < 0) return 0;
    double v[2] = {(double)done, 0.0};
    return rt_exec_write_f64(e, e->g->sched_state, v, err);
}

int rt_exec_run(rt_exec *e, unsigned phase_mask, stg_err *err) {
    const stg_graph *g = e->g;
    if (e->o.poison) {
        if (!e->o.separate) {
            if (e->b->ops->fill(e->b, e->arena, 0xff, (size_t)e->p->arena_bytes, err)) return -1;
        } else {
            for (int t = 0; t < g->nt; t++)
                if (g->t[t].base < 0 && e->ptr[t] && !stg_class_persistent(g->t[t].cls) &&
                    e->b->ops->fill(e->b, e->ptr[t], 0xff, (size_t)graph_bytes(&g->t[t]), err))
                    return -1;
        }
    }
    for (int s = 0; s < g->nsched; s++) {
        int o = g->schedule[s];
        if (!(phase_mask & (1u << g->ops[o].phase))) continue;
        if (e->b->ops->run_op(e->b, g, o, e->ptr, err)) {
            const stg_op *op = &g->ops[o];
            return stg_err_prefix(err, "step %d, %s -> '%s'", s, ops_name(op->kind), op->n_out ? g->t[op->out[0]].name : "");
        }
    }
    return 0;
}
