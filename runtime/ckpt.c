#include "runtime/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/dist.h"
#include "runtime/fsutil.h"
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

// Index of the first NaN or infinity among n values of dtype dt at p, -1 when all are finite.
static int64_t first_nonfinite(rt_dtype dt, const void *p, int64_t n) {
    const unsigned char *b = p;
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (dt == RT_DT_F32) {
            float f;
            memcpy(&f, b + 4 * i, 4);
            v = f;
        } else if (dt == RT_DT_F64) {
            memcpy(&v, b + 8 * i, 8);
        } else if (dt == RT_DT_BF16) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            v = stg_bf16_to_f32(h);
        } else {
            return -1;
        }
        if (!isfinite(v)) return i;
    }
    return -1;
}

// Adds a tensor to a checkpoint after checking that every value is finite (a checkpoint with NaN
// weights or AdamW moments would replace a good one with one that can never train again), with
// its CRC-32C in the metadata ("crc32c:<name>"), which every load verifies.
static int add_checked(rt_st_writer *w, const char *name, rt_dtype dt, int ndim, const int64_t *shape, const void *data,
                       stg_err *err) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int64_t bad = first_nonfinite(dt, data, n);
    if (bad >= 0) {
        double v = dt == RT_DT_F32 ? (double)((const float *)data)[bad] : ((const double *)data)[bad];
        return stg_errf(err, "'%s' holds %g (element %lld): not writing a checkpoint of non-finite values", name, v, (long long)bad);
    }
    char key[STG_NAME_MAX + 32], hex[16];
    snprintf(key, sizeof key, "crc32c:%s", name);
    snprintf(hex, sizeof hex, "%08x", (unsigned)rt_crc32c(0, data, (size_t)n * (dt == RT_DT_F64 ? 8 : 4)));
    if (rt_st_writer_add(w, name, dt, ndim, shape, data, err) || rt_st_writer_meta(w, key, hex, err)) return -1;
    return 0;
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
        rt_st_writer_meta(w, "dims", dims, err) || rt_st_writer_meta(w, "checksum", "crc32c", err))
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
        if (add_checked(w, name, host_dtype(g), x->ndim, x->shape, bufs[t], err)) goto out;
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

int rt_ckpt_save_dist(rt_exec *e, const char *path, const rt_ckpt_state *st, rt_dist *d, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    bool zero = false;
    for (int o = 0; o < g->nops; o++) zero |= g->ops[o].kind == STG_OP_BROADCAST;
    if (!d || d->world <= 1) return rt_ckpt_save(e, path, st, err);
    if (!zero) return d->rank == 0 ? rt_ckpt_save(e, path, st, err) : 0; // every rank holds everything
    static const char *const names[3] = {NULL, "adam_m", "adam_v"};
    static const stg_role roles[3] = {STG_ROLE_NONE, STG_ROLE_ADAM_M, STG_ROLE_ADAM_V};
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
                int src = k == 0 ? rt_exec_param_truth(e, p) : graph_param_state(g, p, roles[k]);
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
                if (add_checked(w, nm, host_dtype(g), x->ndim, x->shape, *b, err)) goto out;
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

// Checks each tensor's bytes against the CRC-32C its writer stored ("checksum": "crc32c" in the
// metadata, and "crc32c:<name>" for every tensor). Files without checksums (other writers, older
// stg) pass: there is nothing to verify them with.
static int verify_checksums(const rt_st *st, const char *path, stg_err *err) {
    const char *kind = rt_st_meta_get(st, "checksum");
    if (!kind) return 0;
    if (strcmp(kind, "crc32c") != 0) return stg_errf(err, "%s: unknown checksum kind '%s' in the metadata", path, kind);
    for (size_t i = 0; i < rt_st_count(st); i++) {
        const rt_st_tensor *t = rt_st_at(st, i);
        char key[4200];
        snprintf(key, sizeof key, "crc32c:%s", t->name);
        const char *want = rt_st_meta_get(st, key);
        char *end;
        unsigned long v = want ? strtoul(want, &end, 16) : 0;
        if (!want || *end || strlen(want) != 8)
            return stg_errf(err, "%s: tensor '%s' has no checksum although the file says it has checksums: the file is damaged", path,
                            t->name);
        uint32_t got = rt_crc32c(0, t->data, t->nbytes);
        if (got != (uint32_t)v)
            return stg_errf(err, "%s: tensor '%s' fails its CRC-32C check (stored %08lx, computed %08x): the file is damaged and is "
                                 "not loaded", path, t->name, v, (unsigned)got);
    }
    return 0;
}

// Loads every tensor of `e` selected by `want` from st; checks all first (shapes, dtypes, that every
// value is finite), then writes.
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
                int64_t bad = first_nonfinite(s->dtype, s->data, s->numel);
                if (bad >= 0)
                    return stg_errf(err, "%s: %s '%s' holds a NaN or infinity (element %lld): the file's values cannot be trained from",
                                    path, is_state ? "optimizer state" : "parameter", x->name, (long long)bad);
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
    if (verify_checksums(st, path, err)) goto out;
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
    if (rt_require_regular(path, "--init", err) || rt_st_open(path, &st, err)) return -1;
    int rc = verify_checksums(st, path, err) ? -1 : load_tensors(e, st, path, false, err);
    rt_st_free(st);
    return rc;
}

// ---- a directory of checkpoints ----------------------------------------------------------------

// "ckpt-<step>.safetensors": the step when name is one, else -1.
static int64_t numbered_step(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(name + 5, &end, 10);
    if (errno || end == name + 5 || v < 0 || strcmp(end, ".safetensors") != 0) return -1;
    return v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// The steps of dir's numbered checkpoints, newest first (malloc'ed into *out; *n of them).
static int list_numbered(const char *dir, int64_t **out, int *n, stg_err *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return stg_errf(err, "%s: cannot list: %s", dir, strerror(errno));
    }
    int cap = 0, rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) rc = stg_errf(err, "%s: cannot list: %s", dir, strerror(errno));
            break;
        }
        int64_t s = numbered_step(de->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *p = stg_realloc(*out, sizeof *p * (size_t)cap, err);
            if (!p) {
                rc = -1;
                break;
            }
            *out = p;
        }
        (*out)[(*n)++] = s;
    }
    if (closedir(d) != 0 && rc == 0) rc = stg_errf(err, "%s: closedir failed: %s", dir, strerror(errno));
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
    }
    if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_desc);
    return 0;
}

void rt_ckpt_path(const char *dir, int64_t step, char *buf, size_t n) { snprintf(buf, n, "%s/ckpt-%lld.safetensors", dir, (long long)step); }

// Points `link` (in dir) at the checkpoint `name` (in dir) by building the new pointer under a
// temporary name and renaming it over the old: a reader sees the old pointer or the new, never
// none. hard: a hard link (a real file for tools that read one), falling back to a symlink where
// the file system has no hard links.
static int repoint(const char *dir, const char *link_name, const char *name, bool hard, stg_err *err) {
    char target[4200], lk[4200], tmp[4300];
    snprintf(target, sizeof target, "%s/%s", dir, name);
    snprintf(lk, sizeof lk, "%s/%s", dir, link_name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", lk, (long)getpid());
    if (unlink(tmp) != 0 && errno != ENOENT) return stg_errf(err, "%s: cannot remove: %s", tmp, strerror(errno));
    int r = hard ? link(target, tmp) : -1;
    if (r != 0 && (!hard || errno == EPERM || errno == ENOTSUP || errno == EXDEV || errno == EMLINK)) r = symlink(name, tmp);
    if (r != 0) return stg_errf(err, "%s: cannot point it at %s: %s", lk, name, strerror(errno));
    if (rename(tmp, lk) != 0) {
        int e = errno;
        unlink(tmp);
        return stg_errf(err, "%s: cannot replace it: %s", lk, strerror(e));
    }
    return 0;
}

int rt_ckpt_verify(const char *path, stg_err *err) {
    rt_st *st;
    if (rt_require_regular(path, "checkpoint", err) || rt_st_open(path, &st, err)) return -1;
    int rc = verify_checksums(st, path, err);
    if (!rc && !rt_st_meta_get(st, "checksum")) rc = stg_errf(err, "%s: has no checksums; cannot verify it", path);
    rt_st_free(st);
    return rc;
}

int rt_ckpt_save_dir(rt_exec *e, const char *dir, const rt_ckpt_state *st, int keep, rt_dist *d, char *written, size_t wn,
                     stg_err *err) {
    bool lead = !d || d->world <= 1 || d->rank == 0;
    char path[4200], name[64];
    rt_ckpt_path(dir, st->step, path, sizeof path);
    snprintf(name, sizeof name, "ckpt-%lld.safetensors", (long long)st->step);
    int rc = rt_ckpt_save_dist(e, path, st, d, err);
    // What is on disk is read back and checked before anything points at it.
    if (lead && rc == 0) rc = rt_ckpt_verify(path, err);
    if (lead && rc == 0) rc = repoint(dir, "ckpt.safetensors", name, true, err);
    if (lead && rc == 0) rc = repoint(dir, "latest", name, false, err);
    if (lead && rc == 0 && keep > 0) { // older checkpoints beyond the newest `keep`
        int64_t *steps;
        int n;
        if (list_numbered(dir, &steps, &n, err)) rc = -1;
        int kept = 1; // this one
        for (int i = 0; rc == 0 && i < n; i++) {
            if (steps[i] >= st->step) continue; // newer ones come from another run: not this run's to remove
            if (kept < keep) {
                kept++;
                continue;
            }
            char old[4200];
            rt_ckpt_path(dir, steps[i], old, sizeof old);
            if (unlink(old) != 0 && errno != ENOENT) rc = stg_errf(err, "%s: cannot remove an old checkpoint: %s", old, strerror(errno));
        }
        free(steps);
    }
    if (d && d->world > 1) { // every rank learns whether rank 0 wrote it
        stg_err verdict;
        memset(&verdict, 0, sizeof verdict);
        if (lead && rc) snprintf(verdict.msg, sizeof verdict.msg, "%s", err->msg);
        stg_err e2;
        if (rt_dist_bcast(d, &verdict, sizeof verdict, &e2)) return stg_errf(err, "%s", e2.msg);
        if (!lead && verdict.msg[0]) rc = stg_errf(err, "rank 0 did not write the checkpoint: %s", verdict.msg);
    }
    if (rc == 0 && written) snprintf(written, wn, "%s", path);
    return rc;
}

int rt_ckpt_resume(rt_exec *e, const char *dir, rt_ckpt_state *out, char *from, size_t nfrom, char *skipped, size_t nskipped,
                   stg_err *err) {
    int64_t *steps;
    int n;
    if (skipped && nskipped) skipped[0] = 0;
    if (list_numbered(dir, &steps, &n, err)) return -1;
    char notes[2048] = "";
    size_t k = 0;
    int rc = -1;
    // Newest first; then the plain ckpt.safetensors of a directory that an older stg wrote.
    for (int i = 0; i <= n && rc != 0; i++) {
        char path[4200];
        if (i < n) rt_ckpt_path(dir, steps[i], path, sizeof path);
        else snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
        if (i == n && access(path, F_OK) != 0 && n > 0) break;
        stg_err e1;
        if (rt_require_regular(path, "checkpoint", &e1) == 0 && rt_ckpt_load(e, path, out, &e1) == 0) {
            rc = 0;
            if (from) snprintf(from, nfrom, "%s", path);
            break;
        }
        if (k < sizeof notes) k += (size_t)snprintf(notes + k, sizeof notes - k, "%s%s", k ? "; " : "", e1.msg);
    }
    free(steps);
    if (rc == 0 && skipped && nskipped) snprintf(skipped, nskipped, "%s", notes);
    if (rc != 0) stg_errf(err, "%s: no checkpoint that loads and verifies: %s", dir, notes);
    return rc;
}
