#include "runtime/eval.h"

#include "runtime/tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int rt_eval_shape_of(const rt_tokens *tk, int64_t limit, int64_t batch, int64_t ctx, rt_eval_shape *s, stg_err *err) {
    memset(s, 0, sizeof *s);
    if (batch < 1 || ctx < 1) return stg_errf(err, "eval: batch %lld, ctx %lld", (long long)batch, (long long)ctx);
    int64_t n = rt_tokens_count(tk);
    if (limit > 0 && limit < n) n = limit;
    if (n < ctx + 1)
        return stg_errf(err, "%lld tokens hold no whole window: one needs ctx + 1 = %lld (the next token of each position)", (long long)n,
                        (long long)ctx + 1);
    s->tokens = n;
    s->ctx = ctx;
    s->batch = batch;
    s->windows = (n - 1) / ctx;
    s->targets = s->windows * ctx;
    s->dropped = n - 1 - s->targets;
    s->batches = s->windows / batch;
    s->rest = s->windows % batch;
    return 0;
}

static int inputs_of(rt_exec *e, int64_t rows, int64_t ctx, int *tok, int *tgt, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    *tok = graph_find_tensor(g, "tokens");
    *tgt = graph_find_tensor(g, "targets");
    if (*tok < 0 || *tgt < 0 || g->loss < 0) return stg_errf(err, "eval: the model needs inputs 'tokens' and 'targets' and a loss");
    const stg_tensor *a = &g->t[*tok], *b = &g->t[*tgt];
    if (a->ndim != 2 || b->ndim != 2 || a->dtype != STG_I32 || b->dtype != STG_I32 || a->shape[0] != rows || a->shape[1] != ctx ||
        b->shape[0] != rows || b->shape[1] != ctx)
        return stg_errf(err, "eval: inputs 'tokens' and 'targets' must be [%lld, %lld, i32]", (long long)rows, (long long)ctx);
    return 0;
}

// Windows [w0, w0 + rows) into tokens and targets (rows x ctx each).
static void fill(const rt_tokens *tk, int64_t w0, int64_t rows, int64_t ctx, int32_t *a, int32_t *b) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = (w0 + r) * ctx;
        for (int64_t t = 0; t < ctx; t++) {
            a[r * ctx + t] = (int32_t)rt_tokens_at(tk, base + t);
            b[r * ctx + t] = (int32_t)rt_tokens_at(tk, base + t + 1);
        }
    }
}

int rt_eval_run(rt_exec *main, rt_exec *rest, const rt_tokens *tk, const rt_eval_shape *s, double *loss, stg_err *err) {
    int tok, tgt, rtok = -1, rtgt = -1;
    if (inputs_of(main, s->batch, s->ctx, &tok, &tgt, err)) return -1;
    if ((rest != NULL) != (s->rest > 0))
        return stg_errf(err, "eval: %lld windows in the last batch but %s executor for them", (long long)s->rest, rest ? "an" : "no");
    if (rest && inputs_of(rest, s->rest, s->ctx, &rtok, &rtgt, err)) return -1;
    size_t n = (size_t)(s->batch * s->ctx);
    int32_t *a = stg_malloc(sizeof(int32_t) * n, err), *b = stg_malloc(sizeof(int32_t) * n, err);
    int rc = -1, inflight = 0;
    double sum = 0;
    if (!a || !b) goto out;
    // Two runs in flight: a batch is staged while the device works on the one before (the staging
    // is double-buffered: run k's inputs are written once run k - 2 is collected).
    for (int64_t k = 0; k < s->batches; k++) {
        rt_exec_results r;
        if (inflight == 2) {
            if (rt_exec_collect(main, &r, err)) goto out;
            inflight--;
            sum += r.loss * (double)n;
        }
        fill(tk, k * s->batch, s->batch, s->ctx, a, b);
        if (rt_exec_write(main, tok, a, sizeof(int32_t) * n, err) || rt_exec_write(main, tgt, b, sizeof(int32_t) * n, err) ||
            rt_exec_submit(main, RT_PHASE_FORWARD, err))
            goto out;
        inflight++;
    }
    while (inflight > 0) {
        rt_exec_results r;
        if (rt_exec_collect(main, &r, err)) goto out;
        inflight--;
        sum += r.loss * (double)n;
    }
    if (rest) {
        size_t m = (size_t)(s->rest * s->ctx);
        rt_exec_results r;
        fill(tk, s->batches * s->batch, s->rest, s->ctx, a, b);
        if (rt_exec_write(rest, rtok, a, sizeof(int32_t) * m, err) || rt_exec_write(rest, rtgt, b, sizeof(int32_t) * m, err) ||
            rt_exec_run_results(rest, RT_PHASE_FORWARD, &r, err))
            goto out;
        sum += r.loss * (double)m;
    }
    *loss = sum / (double)s->targets;
    if (!isfinite(*loss)) {
        stg_errf(err, "eval: the loss is %g (a parameter or an activation is not finite)", *loss);
        goto out;
    }
    rc = 0;
out:
    while (inflight-- > 0) { // leave nothing in flight
        stg_err ignored;
        rt_exec_collect(main, NULL, &ignored);
    }
    free(a);
    free(b);
    return rc;
}

int rt_eval_copy_params(rt_exec *dst, rt_exec *src, stg_err *err) {
    const stg_graph *gd = rt_exec_graph(dst), *gs = rt_exec_graph(src);
    size_t cap = 0;
    void *buf = NULL;
    int rc = 0;
    for (int t = 0; t < gd->nt && rc == 0; t++) {
        const stg_tensor *d = &gd->t[t];
        if (d->cls != STG_CLASS_PARAM) continue;
        int u = graph_find_tensor(gs, d->name);
        if (u < 0 || gs->t[u].cls != STG_CLASS_PARAM || gs->t[u].dtype != d->dtype || !stg_same_shape(&gs->t[u], d)) {
            rc = stg_errf(err, "eval: parameter %s is not the training step's (name, dtype and shape must match)", d->name);
            break;
        }
        size_t bytes = (size_t)stg_bytes(d);
        if (bytes > cap) {
            void *nb = stg_realloc(buf, bytes, err);
            if (!nb) {
                rc = -1;
                break;
            }
            buf = nb;
            cap = bytes;
        }
        if (rt_exec_read(src, u, buf, bytes, err) || rt_exec_write(dst, t, buf, bytes, err)) rc = -1;
    }
    free(buf);
    return rc;
}

int64_t rt_eval_target_bytes(const rt_tok *t, const rt_tokens *tk, const rt_eval_shape *s, stg_err *err) {
    uint32_t v = rt_tok_vocab_size(t);
    int64_t bytes = 0;
    for (int64_t i = 1; i <= s->targets; i++) {
        int64_t id = rt_tokens_at(tk, i);
        if (id < 0 || id >= (int64_t)v)
            return stg_errf(err, "token %lld (id %lld) is outside the tokenizer's vocabulary of %u", (long long)i, (long long)id, v);
        size_t len;
        rt_tok_token_bytes(t, (uint32_t)id, &len);
        bytes += (int64_t)len;
    }
    return bytes;
}

int rt_eval_full(const rt_val_full *v, rt_exec *train, double *loss, stg_err *err) {
    if (rt_eval_copy_params(v->main, train, err) || (v->rest && rt_eval_copy_params(v->rest, train, err))) return -1;
    return rt_eval_run(v->main, v->rest, v->tokens, &v->shape, loss, err);
}
