#include "runtime/ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist.h"
#include "runtime/safetensors.h"

#define CKPT_FORMAT "stg-checkpoint-1"

void rt_dims_string(const stg_graph *g, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < g->ndims && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s=%lld", k ? "," : "", g->dims[i].name, (long long)g->dims[i].value);
    for (int i = 0; i < g->nopts && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s=%s", k ? "," : "", g->opt_names[i], g->opt_values[i]);
}

static rt_dtype host_dtype(const stg_graph *g) { return g->grad_dtype == STG_F64 ? RT_DT_F64 : RT_DT_F32; }

// Reads tensor t as host values of the graph's grad dtype (f32 or f64) into a new buffer.
static void *read_host(rt_exec *e, int t, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    int64_t n = stg_numel(&g->t[t]);
    double *d = stg_malloc(sizeof(double) * (size_t)n, err);
    if (!d) return NULL;
    if (rt_exec_read_f64(e, t, d, err)) {
        free(d);
        return NULL;
    }
    if (host_dtype(g) == RT_DT_F64) return d;
    float *f = stg_malloc(sizeof(float) * (size_t)n, err);
    if (f)
        for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
    free(d);
    return f;
}

// The checkpoint's metadata: format, model, precision, step, data RNG state, dims.
static int write_meta(rt_st_writer *w, const stg_graph *g, const rt_ckpt_state *st, stg_err *err) {
    char dims[4096], num[64], rng_hex[2 * RT_RNG_STATE_BYTES + 1];
    uint8_t rs[RT_RNG_STATE_BYTES];
    rt_rng_save(&st->data_rng, rs);
    for (int i = 0; i < RT_RNG_STATE_BYTES; i++) snprintf(rng_hex + 2 * i, 3, "%02x", rs[i]);
    rt_dims_string(g, dims, sizeof dims);
    snprintf(num, sizeof num, "%" PRId64, st->step);
    if (rt_st_writer_meta(w, "format", CKPT_FORMAT, err) || rt_st_writer_meta(w, "model", g->name, err) ||
        rt_st_writer_meta(w, "precision", stg_precision_name(g->precision), err) ||
        rt_st_writer_meta(w, "step", num, err) || rt_st_writer_meta(w, "data_rng", rng_hex, err) ||
        rt_st_writer_meta(w, "dims", dims, err))
        return -1;
    return 0;
}

int rt_ckpt_save(rt_exec *e, const char *path, const rt_ckpt_state *st, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    rt_st_writer *w = rt_st_writer_new(err);
    if (!w) return -1;
    void **bufs = stg_calloc((size_t)g->nt, sizeof *bufs, err);
    int rc = -1;
    if (!bufs) goto out;
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        int src = -1;
        char name[STG_NAME_MAX + 16];
        if (x->cls == STG_CLASS_PARAM) {
            src = rt_exec_param_truth(e, t);
            snprintf(name, sizeof name, "%s", x->name);
        } else if (x->cls == STG_CLASS_OPTIMIZER && rt_exec_param_truth(e, x->param) != t) {
            src = t;
            snprintf(name, sizeof name, "%s", x->name);
        }
        if (src < 0) continue;
        if (!(bufs[t] = read_host(e, src, err))) goto out;
        if (rt_st_writer_add(w, name, host_dtype(g), x->ndim, x->shape, bufs[t], err)) goto out;
    }
    if (write_meta(w, g, st, err)) goto out;
    rc = rt_st_writer_write(w, path, err);
out:
    if (bufs)
        for (int t = 0; t < g->nt; t++) free(bufs[t]);
    free(bufs);
    rt_st_writer_free(w);
    return rc;
}

// The owner rank of parameter p in a ZeRO-1 graph (the root of its broadcast op), -1 when none.
static int zero_owner(const stg_graph *g, int p) {
    for (int o = 0; o < g->nops; o++)
        if (g->ops[o].kind == STG_OP_BROADCAST && g->ops[o].in[0] == p) return (int)g->ops[o].a.comm.root;
    return -1;
}

// This rank's AdamW state tensor "<param>.<suffix>" of parameter p, -1 when it holds none.
static int state_of(const stg_graph *g, int p, const char *suffix) {
    char nm[STG_NAME_MAX + 16];
    snprintf(nm, sizeof nm, "%s.%s", g->t[p].name, suffix);
    nm[STG_NAME_MAX - 1] = 0;
    int t = graph_find_tensor(g, nm);
    return t >= 0 && g->t[t].cls == STG_CLASS_OPTIMIZER && g->t[t].param == p ? t : -1;
}

int rt_ckpt_save_dist(rt_exec *e, const char *path, const rt_ckpt_state *st, rt_dist *d, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    bool zero = false;
    for (int o = 0; o < g->nops; o++) zero |= g->ops[o].kind == STG_OP_BROADCAST;
    if (!d || d->world <= 1) return rt_ckpt_save(e, path, st, err);
    if (!zero) return d->rank == 0 ? rt_ckpt_save(e, path, st, err) : 0; // every rank holds everything
    static const char *const names[3] = {NULL, "adam_m", "adam_v"};
    size_t hsz = host_dtype(g) == RT_DT_F64 ? 8 : 4;
    rt_st_writer *w = d->rank == 0 ? rt_st_writer_new(err) : NULL;
    if (d->rank == 0 && !w) return -1;
    void **bufs = stg_calloc((size_t)g->nt * 3, sizeof *bufs, err);
    int rc = -1;
    if (!bufs) goto out;
    for (int p = 0; p < g->nt; p++) {
        const stg_tensor *x = &g->t[p];
        if (x->cls != STG_CLASS_PARAM) continue;
        int owner = zero_owner(g, p);
        if (owner < 0) owner = 0;
        size_t bytes = hsz * (size_t)stg_numel(x);
        for (int k = 0; k < 3; k++) {
            void **b = &bufs[3 * p + k];
            if (d->rank == owner) {
                int src = k == 0 ? rt_exec_param_truth(e, p) : state_of(g, p, names[k]);
                if (src < 0) {
                    stg_errf(err, "rank %d: no AdamW state '%s.%s' for a parameter it owns", d->rank, x->name, names[k]);
                    goto out;
                }
                if (!(*b = read_host(e, src, err))) goto out;
            } else if (d->rank == 0 && !(*b = stg_malloc(bytes ? bytes : 1, err)))
                goto out;
            if (owner != 0 && rt_dist_to_root(d, *b, bytes, owner, err)) goto out;
            if (d->rank == 0) {
                char nm[STG_NAME_MAX + 16];
                if (k == 0) snprintf(nm, sizeof nm, "%s", x->name);
                else snprintf(nm, sizeof nm, "%s.%s", x->name, names[k]);
                if (rt_st_writer_add(w, nm, host_dtype(g), x->ndim, x->shape, *b, err)) goto out;
            }
            if (d->rank != 0) { // sent
                free(*b);
                *b = NULL;
            }
        }
    }
    if (d->rank != 0) {
        rc = 0;
        goto out;
    }
    if (write_meta(w, g, st, err)) goto out;
    rc = rt_st_writer_write(w, path, err);
out:
    if (bufs)
        for (int t = 0; t < 3 * g->nt; t++) free(bufs[t]);
    free(bufs);
    if (w) rt_st_writer_free(w);
    return rc;
}

// Converts a file tensor to doubles.
static int to_f64(const rt_st_tensor *s, double *out, stg_err *err) {
    const unsigned char *p = s->data;
    for (int64_t i = 0; i < s->numel; i++) {
        switch (s->dtype) {
        case RT_DT_F32: {
            float f;
            memcpy(&f, p + 4 * i, 4);
            out[i] = f;
            break;
        }
        case RT_DT_F64: {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = d;
            break;
        }
        case RT_DT_BF16: {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = stg_bf16_to_f32(h);
            break;
        }
        default: return stg_errf(err, "tensor '%s' is %s; expected F32, F64 or BF16", s->name, rt_dtype_name(s->dtype));
        }
    }
    return 0;
}

static int check_shape(const stg_tensor *x, const rt_st_tensor *s, const char *path, stg_err *err) {
    bool ok = s->ndim == x->ndim;
    for (int i = 0; ok && i < x->ndim; i++) ok = s->shape[i] == x->shape[i];
    if (ok) return 0;
    char a[128], b[160];
    size_t k = (size_t)snprintf(b, sizeof b, "[");
    for (int i = 0; i < s->ndim && k < sizeof b; i++) k += (size_t)snprintf(b + k, sizeof b - k, "%s%lld", i ? ", " : "", (long long)s->shape[i]);
    if (k < sizeof b) snprintf(b + k, sizeof b - k, "]");
    return stg_errf(err, "%s: '%s' has shape %s; the model's is %s", path, x->name, b, stg_shape_str(x, a, sizeof a));
}

// Loads every tensor of `e` selected by `want` from st; checks all first, then writes.
static int load_tensors(rt_exec *e, const rt_st *st, const char *path, bool with_state, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    for (int pass = 0; pass < 2; pass++) {
        for (int t = 0; t < g->nt; t++) {
            const stg_tensor *x = &g->t[t];
            bool is_state = x->cls == STG_CLASS_OPTIMIZER && rt_exec_param_truth(e, x->param) != t;
            if (x->cls != STG_CLASS_PARAM && !(with_state && is_state)) continue;
            const rt_st_tensor *s = rt_st_find(st, x->name);
            if (!s) return stg_errf(err, "%s: has no tensor '%s' (a %s of this model)", path, x->name, is_state ? "optimizer state" : "parameter");
            if (check_shape(x, s, path, err)) return -1;
            if (pass == 0) {
                if (s->dtype != RT_DT_F32 && s->dtype != RT_DT_F64 && s->dtype != RT_DT_BF16)
                    return stg_errf(err, "%s: '%s' is %s; expected F32, F64 or BF16", path, x->name, rt_dtype_name(s->dtype));
                continue;
            }
            double *d = stg_malloc(sizeof(double) * (size_t)(s->numel ? s->numel : 1), err);
            if (!d) return -1;
            int r = to_f64(s, d, err);
            if (!r) r = rt_exec_write_f64(e, t, d, err);
            if (!r && x->cls == STG_CLASS_PARAM && rt_exec_param_truth(e, t) != t) r = rt_exec_write_f64(e, rt_exec_param_truth(e, t), d, err);
            free(d);
            if (r) return -1;
        }
    }
    return 0;
}

int rt_ckpt_load(rt_exec *e, const char *path, rt_ckpt_state *out, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    rt_st *st;
    if (rt_st_open(path, &st, err)) return -1;
    int rc = -1;
    const char *fmt = rt_st_meta_get(st, "format"), *dims = rt_st_meta_get(st, "dims"), *step = rt_st_meta_get(st, "step"),
               *rng = rt_st_meta_get(st, "data_rng");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        stg_errf(err, "%s: not an stg checkpoint (metadata 'format' is %s%s%s)", path, fmt ? "'" : "", fmt ? fmt : "missing", fmt ? "'" : "");
        goto out;
    }
    char mine[4096];
    rt_dims_string(g, mine, sizeof mine);
    if (!dims || strcmp(dims, mine) != 0) {
        stg_errf(err, "%s: checkpoint is for a different model or dims (%s); this run has %s", path, dims ? dims : "none", mine);
        goto out;
    }
    char *end;
    long long s = step ? strtoll(step, &end, 10) : -1;
    if (!step || *end || s < 0) {
        stg_errf(err, "%s: metadata 'step' is missing or not a count", path);
        goto out;
    }
    uint8_t rs[RT_RNG_STATE_BYTES];
    if (!rng || strlen(rng) != 2 * RT_RNG_STATE_BYTES) {
        stg_errf(err, "%s: metadata 'data_rng' is missing or malformed", path);
        goto out;
    }
    for (int i = 0; i < RT_RNG_STATE_BYTES; i++) {
        unsigned v;
        if (sscanf(rng + 2 * i, "%2x", &v) != 1) {
            stg_errf(err, "%s: metadata 'data_rng' is not hex", path);
            goto out;
        }
        rs[i] = (uint8_t)v;
    }
    if (rt_rng_load(&out->data_rng, rs, err)) {
        stg_err_prefix(err, "%s", path);
        goto out;
    }
    out->step = s;
    rc = load_tensors(e, st, path, true, err);
out:
    rt_st_free(st);
    return rc;
}

int rt_params_load(rt_exec *e, const char *path, stg_err *err) {
    rt_st *st;
    if (rt_st_open(path, &st, err)) return -1;
    int rc = load_tensors(e, st, path, false, err);
    rt_st_free(st);
    return rc;
}
