#include "runtime/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/eval.h"
#include "runtime/fsutil.h"
#include "runtime/sample.h"

rt_train_cfg rt_train_defaults(void) {
    rt_train_cfg c;
    memset(&c, 0, sizeof c);
    c.steps = 200;
    c.seed = 0;
    c.val_batches = 4;
    c.markov_k = 4;
    c.keep = 2;
    c.doc_sep = -1;
    return c;
}


// ---- data feeding ---------------------------------------------------------------------------

struct rt_feed {
    int in_a, in_t;     // tensor ids: tokens (or x) and targets
    int in_d;           // docs (document starts), or -1
    int64_t doc_sep;    // the separator token (rt_feed_docs), or -1: every row one document
    bool loss_mask;     // targets of separators -> -1
    int32_t *d;         // host staging of docs (this rank's rows)
    bool toy;
    int64_t batch, ctx, vocab, features;
    rt_tokens *tokens;
    rt_markov *markov;
    rt_toy *toyd;
    int32_t *a, *b;     // host staging (allocated once): the global batch, micro x world x batch rows
    float *x;
    int rank, world;    // data parallel: this process feeds rows [rank * batch, (rank + 1) * batch)
    int micro;          // gradient accumulation: micro-batches per step (the graph's grad_accum, >= 1)
};

int rt_feed_new(const stg_graph *g, const char *data_path, int markov_k, uint64_t data_seed, rt_feed **out, stg_err *err) {
    *out = NULL;
    rt_feed *f = stg_calloc(1, sizeof *f, err);
    if (!f) return -1;
    f->world = 1;
    f->micro = g->grad_accum > 1 ? g->grad_accum : 1;
    f->in_a = graph_find_tensor(g, "tokens");
    f->in_t = graph_find_tensor(g, "targets");
    f->in_d = graph_find_tensor(g, "docs");
    f->doc_sep = -1;
    if (f->in_a < 0) {
        f->in_a = graph_find_tensor(g, "x");
        f->toy = true;
    }
    if (f->in_a < 0 || f->in_t < 0 || g->t[f->in_a].cls != STG_CLASS_INPUT || g->t[f->in_t].cls != STG_CLASS_INPUT) {
        rt_feed_free(f);
        return stg_errf(err, "the model's inputs must be 'tokens' and 'targets' (token batches) or 'x' and 'targets' (feature batches)");
    }
    const stg_tensor *a = &g->t[f->in_a], *t = &g->t[f->in_t];
    int rc = 0;
    if (!f->toy) {
        if (a->ndim != 2 || t->ndim != 2 || a->dtype != STG_I32 || t->dtype != STG_I32 || a->shape[0] != t->shape[0] ||
            a->shape[1] != t->shape[1]) {
            rt_feed_free(f);
            return stg_errf(err, "inputs 'tokens' and 'targets' must both be [batch, ctx, i32]");
        }
        f->batch = a->shape[0];
        f->ctx = a->shape[1];
        bool found;
        f->vocab = graph_role_value(g, STG_DIM_VOCAB, &found);
        if (!found) {
            rt_feed_free(f);
            return stg_errf(err, "a token model needs a vocab: %s", graph_role_missing(STG_DIM_VOCAB));
        }
        if (f->in_d >= 0) {
            const stg_tensor *d = &g->t[f->in_d];
            if (d->cls != STG_CLASS_INPUT || d->ndim != 2 || d->dtype != STG_I32 || d->shape[0] != f->batch ||
                d->shape[1] != f->ctx) {
                rt_feed_free(f);
                return stg_errf(err, "input 'docs' must be [batch, ctx, i32] like 'tokens'");
            }
            f->d = stg_calloc((size_t)(f->batch * f->ctx), sizeof(int32_t), err);
        }
        f->a = stg_malloc(sizeof(int32_t) * (size_t)(f->micro * f->batch * f->ctx), err);
        f->b = stg_malloc(sizeof(int32_t) * (size_t)(f->micro * f->batch * f->ctx), err);
        if (!f->a || !f->b || (f->in_d >= 0 && !f->d)) rc = -1;
        else if (data_path) rc = rt_tokens_open(data_path, f->vocab, &f->tokens, err);
        else if (!(f->markov = rt_markov_new(f->vocab, markov_k, data_seed, RT_MARKOV_UNIFORM, err))) rc = -1;
    } else {
        int classes = -1;
        for (int o = 0; o < g->nops; o++)
            if (g->ops[o].kind == STG_OP_CROSS_ENTROPY) {
                const stg_tensor *lg = &g->t[g->ops[o].in[0]];
                classes = (int)lg->shape[lg->ndim - 1];
            }
        if (a->ndim != 2 || t->ndim != 1 || t->dtype != STG_I32 || classes < 1 || data_path) {
            rt_feed_free(f);
            return stg_errf(err, "feature models train on the built-in toy data only: inputs x [batch, in, float] and targets [batch, i32] into cross_entropy");
        }
        f->batch = a->shape[0];
        f->features = a->shape[1];
        f->x = stg_malloc(sizeof(float) * (size_t)(f->micro * f->batch * f->features), err);
        f->b = stg_malloc(sizeof(int32_t) * (size_t)(f->micro * f->batch), err);
        if (!f->x || !f->b) rc = -1;
        else if (!(f->toyd = rt_toy_new(f->features, classes, data_seed, err))) rc = -1;
    }
    if (rc) {
        rt_feed_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

void rt_feed_free(rt_feed *f) {
    if (!f) return;
    rt_tokens_free(f->tokens);
    rt_markov_free(f->markov);
    rt_toy_free(f->toyd);
    free(f->a);
    free(f->b);
    free(f->d);
    free(f->x);
    free(f);
}

int rt_feed_docs(rt_feed *f, int64_t sep, bool loss_mask, stg_err *err) {
    if (f->toy || f->in_d < 0)
        return stg_errf(err, "packed documents need a model with an input 'docs' [batch, ctx, i32] read by its attention "
                             "(models/cs336/lm.yaml: --set docs=on)");
    if (sep < 0 || sep >= f->vocab)
        return stg_errf(err, "the document separator %lld is outside the vocabulary [0, %lld)", (long long)sep, (long long)f->vocab);
    f->doc_sep = sep;
    f->loss_mask = loss_mask;
    return 0;
}

double rt_feed_floor(const rt_feed *f) { return f->markov ? rt_markov_entropy(f->markov) : NAN; }

int64_t rt_feed_tokens_per_batch(const rt_feed *f) { return f->toy ? f->batch : f->batch * f->ctx; }
int64_t rt_feed_tokens_per_step(const rt_feed *f) { return rt_feed_tokens_per_batch(f) * f->micro; }

int rt_feed_shard(rt_feed *f, int rank, int world, stg_err *err) {
    if (world < 1 || rank < 0 || rank >= world) return stg_errf(err, "data: rank %d of %d", rank, world);
    int64_t rows = f->batch * world * f->micro, per = f->toy ? f->features : f->ctx;
    int32_t *b = realloc(f->b, sizeof(int32_t) * (size_t)(rows * (f->toy ? 1 : per)));
    if (!b) return stg_errf(err, "data: out of host memory for a global batch of %lld rows", (long long)rows);
    f->b = b;
    if (f->toy) {
        float *x = realloc(f->x, sizeof(float) * (size_t)(rows * per));
        if (!x) return stg_errf(err, "data: out of host memory for a global batch of %lld rows", (long long)rows);
        f->x = x;
    } else {
        int32_t *a = realloc(f->a, sizeof(int32_t) * (size_t)(rows * per));
        if (!a) return stg_errf(err, "data: out of host memory for a global batch of %lld rows", (long long)rows);
        f->a = a;
    }
    f->rank = rank;
    f->world = world;
    return 0;
}

// Draws the global batch (micro x world x batch rows, the same on every rank for the same rng) and
// writes this rank's rows of each micro-batch: micro-batch k of rank r is rows
// [(k world + r) batch, (k world + r + 1) batch), so that all of them together are the rows one
// process without accumulation and with micro x world x batch rows would get.
int rt_feed_next(rt_feed *f, rt_exec *e, rt_rng *rng, stg_err *err) {
    int64_t rows = f->batch * f->world * f->micro;
    size_t n = (size_t)(f->batch * f->ctx);
    if (rt_exec_micro(e) != f->micro)
        return stg_errf(err, "data: the feed makes %d micro-batches per step, the executor %d", f->micro, rt_exec_micro(e));
    if (f->toy) {
        if (rt_toy_batch(f->toyd, rng, rows, f->x, f->b, err)) return -1;
        const stg_tensor *xt = &rt_exec_graph(e)->t[f->in_a];
        int64_t ne = f->batch * f->features;
        void *d = xt->dtype == STG_F32 ? NULL : stg_malloc((size_t)stg_bytes(xt), err); // the features in x's dtype
        if (xt->dtype != STG_F32 && !d) return -1;
        int r = 0;
        for (int k = 0; k < f->micro && !r; k++) {
            int64_t r0 = f->batch * ((int64_t)k * f->world + f->rank);
            const float *x = f->x + r0 * f->features;
            for (int64_t i = 0; d && i < ne; i++) {
                if (xt->dtype == STG_F64) ((double *)d)[i] = x[i];
                else ((uint16_t *)d)[i] = stg_f32_to_bf16(x[i]);
            }
            r = rt_exec_write_micro(e, f->in_a, k, d ? d : x, (size_t)stg_bytes(xt), err);
            if (!r) r = rt_exec_write_micro(e, f->in_t, k, f->b + r0, sizeof(int32_t) * (size_t)f->batch, err);
        }
        free(d);
        return r;
    }
    int r = f->tokens ? rt_tokens_batch(f->tokens, rng, rows, f->ctx, f->a, f->b, err)
                      : rt_markov_batch(f->markov, rng, rows, f->ctx, f->a, f->b, err);
    if (r) return -1;
    for (int k = 0; k < f->micro; k++) {
        int64_t r0 = f->batch * ((int64_t)k * f->world + f->rank);
        if (f->in_d >= 0) { // this micro-batch's rows: document starts, and (loss_mask) separators' targets ignored
            for (int64_t i = 0; i < f->batch; i++) {
                const int32_t *tok = f->a + (r0 + i) * f->ctx;
                int32_t *tgt = f->b + (r0 + i) * f->ctx, *d = f->d + i * f->ctx, start = 0;
                for (int64_t p = 0; p < f->ctx; p++) {
                    d[p] = start;
                    if (f->doc_sep >= 0 && tok[p] == f->doc_sep) {
                        start = (int32_t)p + 1;
                        if (f->loss_mask) tgt[p] = -1;
                    }
                }
            }
            if (rt_exec_write_micro(e, f->in_d, k, f->d, sizeof(int32_t) * n, err)) return -1;
        }
        if (rt_exec_write_micro(e, f->in_a, k, f->a + r0 * f->ctx, sizeof(int32_t) * n, err) ||
            rt_exec_write_micro(e, f->in_t, k, f->b + r0 * f->ctx, sizeof(int32_t) * n, err))
            return -1;
    }
    return 0;
}

// ---- the loop -------------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


static int val_loss(rt_exec *e, rt_feed *vf, const rt_train_cfg *cfg, double *out, stg_err *err) {
    rt_rng r;
    rt_rng_seed_stream(&r, cfg->seed, 2); // the same held-out batches at every evaluation
    double sum = 0;
    int64_t nb = cfg->val_batches > 0 ? cfg->val_batches : 1;
    for (int64_t i = 0; i < nb; i++) {
        rt_exec_results res;
        if (rt_feed_next(vf, e, &r, err) || rt_exec_run_results(e, RT_PHASE_FORWARD, &res, err)) return -1;
        sum += res.loss;
    }
    *out = sum / (double)nb;
    return 0;
}

// Every rank calls it at the same step; rank 0 writes (with ZeRO-1 the owners send it their
// parameters' AdamW state first: rt_ckpt_save_dist).
static int write_ckpt(rt_exec *e, const rt_train_cfg *cfg, int64_t step, const rt_rng *data_rng, char *written, size_t wn, stg_err *err) {
    rt_ckpt_state st = {step, *data_rng};
    return rt_ckpt_save_dir(e, cfg->ckpt_dir, &st, cfg->keep, cfg->world > 1 ? cfg->dist : NULL, written, wn, err);
}

// ", the last good checkpoint, step N, is P" or ", no checkpoint was written" for messages that stop a run.
static void last_good(const rt_train_result *res, int64_t step, const rt_train_cfg *cfg, char *buf, size_t n) {
    if (!cfg->ckpt_dir) snprintf(buf, n, "%s", "");
    else if (res->last_ckpt[0]) snprintf(buf, n, "; the last good checkpoint (verified), step %lld, is %s", (long long)step, res->last_ckpt);
    else snprintf(buf, n, "; no checkpoint of this run was written");
}

int rt_train(rt_exec *e, const rt_train_cfg *cfg, rt_progress_fn cb, void *ctx, rt_train_result *res, stg_err *err) {
    const stg_graph *g = rt_exec_graph(e);
    memset(res, 0, sizeof *res);
    res->last_val_loss = NAN;
    if (cfg->steps < 0) return stg_errf(err, "train: steps must be non-negative");
    rt_feed *feed = NULL, *vfeed = NULL;
    FILE *log = NULL;
    int rc = -1;
    int64_t queue[2];
    int nq = 0;
    rt_text sample_text = {0};
    if (rt_feed_new(g, cfg->data, cfg->markov_k, cfg->seed ^ 0x5eedda7aULL, &feed, err)) goto out;
    if (cfg->val && rt_feed_new(g, cfg->val, cfg->markov_k, cfg->seed ^ 0x5eedda7aULL, &vfeed, err)) goto out;
    if (cfg->doc_sep >= 0 && (rt_feed_docs(feed, cfg->doc_sep, cfg->doc_loss_mask, err) ||
                              (vfeed && rt_feed_docs(vfeed, cfg->doc_sep, cfg->doc_loss_mask, err))))
        goto out;
    int world = cfg->world > 1 ? cfg->world : 1;
    bool lead = world == 1 || cfg->rank == 0; // writes the log and the checkpoints
    if (world > 1 && rt_feed_shard(feed, cfg->rank, world, err)) goto out;
    res->floor = rt_feed_floor(feed);
    rt_rng data_rng;
    rt_rng_seed_stream(&data_rng, cfg->seed, 1);
    int64_t start = 0;
    if (cfg->resume && cfg->init_path) {
        stg_errf(err, "--init %s and --resume: a resumed run takes its parameters from the checkpoint; drop one of them", cfg->init_path);
        goto out;
    }
    if (cfg->resume && !cfg->ckpt_dir) {
        stg_errf(err, "--resume needs --ckpt DIR");
        goto out;
    }
    if (cfg->ckpt_dir && lead) {
        // Before step 1: temporary files that killed runs left (each as large as a checkpoint), and
        // whether checkpoints can be written here at all (not after hours of training).
        int removed = rt_probe_dir(cfg->ckpt_dir, err) ? -1 : rt_remove_stale_tmp(cfg->ckpt_dir, NULL, err);
        if (removed < 0) goto out;
        res->stale_tmp_removed = removed;
    }
    if (cfg->resume) {
        rt_ckpt_state st;
        if (rt_ckpt_resume(e, cfg->ckpt_dir, &st, res->resumed_from, sizeof res->resumed_from, res->resume_skipped,
                           sizeof res->resume_skipped, err))
            goto out;
        start = st.step;
        data_rng = st.data_rng;
        stg_err unverified;
        res->resumed_verified = rt_ckpt_verify(res->resumed_from, &unverified) == 0;
        if (res->resumed_verified) // "the last good checkpoint" is said only of one verified good
            snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s", res->resumed_from);
    } else {
        if (rt_exec_init_params(e, cfg->seed, err)) goto out;
        if (cfg->init_path && rt_params_load(e, cfg->init_path, err)) goto out;
    }
    if (lead && cfg->log_path) {
        bool append = cfg->log_mode == RT_LOG_APPEND || (cfg->log_mode == RT_LOG_NEW && cfg->resume);
        struct stat ls;
        if (cfg->log_mode == RT_LOG_NEW && !cfg->resume && stat(cfg->log_path, &ls) == 0 && (!S_ISREG(ls.st_mode) || ls.st_size > 0)) {
            stg_errf(err, "%s exists%s; a new run does not overwrite it: --log-mode overwrite or --log-mode append (a resumed run appends)",
                     cfg->log_path, S_ISREG(ls.st_mode) ? " and is not empty" : " and is not a regular file");
            goto out;
        }
        if (!(log = fopen(cfg->log_path, append ? "a" : "w"))) {
            stg_errf(err, "%s: cannot open the log: %s", cfg->log_path, strerror(errno));
            goto out;
        }
    }
    if (rt_exec_set_steps_done(e, start, err)) goto out;
    double t0 = now_s(), tpaused = 0; // time in validation and checkpoints is not training time
    res->steps_done = start;
    int64_t last_good_ckpt = cfg->resume ? start : -1;
    char good[4400];
    // Pipelined: step N+1 is submitted before step N's results are read, so the host prepares the
    // next batch while the device works. Validation and checkpoints wait for their step.
    for (int64_t step = start + 1; step <= cfg->steps; step++) {
        if (rt_feed_next(feed, e, &data_rng, err) || rt_exec_submit(e, RT_PHASE_ALL, err)) {
            stg_err_prefix(err, "step %lld", (long long)step);
            goto out;
        }
        queue[nq++] = step;
        bool val_due = cfg->val_every > 0 && (step % cfg->val_every == 0 || step == cfg->steps);
        bool ckpt_due = cfg->ckpt_dir && ((cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0) || step == cfg->steps);
        bool sample_due = lead && cfg->sample_fn && cfg->sample_every > 0 && step % cfg->sample_every == 0;
        while (nq == 2 || (nq > 0 && (val_due || ckpt_due || sample_due || step == cfg->steps))) {
            int64_t done = queue[0];
            queue[0] = queue[1];
            nq--;
            rt_exec_results r;
            if (rt_exec_collect(e, &r, err)) {
                stg_err_prefix(err, "step %lld", (long long)done);
                goto out;
            }
            if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
                last_good(res, last_good_ckpt, cfg, good, sizeof good);
                stg_errf(err, "step %lld: the %s is %g; stopping (try a lower --lr or --clip 1)%s", (long long)done,
                         isfinite(r.loss) ? "gradient norm" : "loss", isfinite(r.loss) ? r.grad_norm : r.loss, good);
                goto out;
            }
            double t1 = now_s();
            // throughput over the run so far (reports arrive in pairs when steps are pipelined)
            int64_t step_tokens = rt_feed_tokens_per_step(feed) * world;
            rt_train_progress p = {done, cfg->steps, r.loss, r.lr, r.grad_norm, NAN,
                                   (double)step_tokens * (double)(done - start) / (t1 - t0 - tpaused), t1 - t0, res->floor,
                                   step_tokens};
            if (done == step && val_due) {
                if (cfg->val_full ? rt_eval_full(cfg->val_full, e, &p.val_loss, err) : val_loss(e, vfeed ? vfeed : feed, cfg, &p.val_loss, err))
                    goto out;
                res->last_val_loss = p.val_loss;
                tpaused += now_s() - t1;
            }
            bool sampled = done == step && sample_due;
            if (sampled) { // between steps: nothing of this executor is in flight
                double ts = now_s();
                sample_text.n = 0;
                if (cfg->sample_fn(cfg->sample_ctx, done, &sample_text, err)) {
                    stg_err_prefix(err, "step %lld: sampling", (long long)done);
                    goto out;
                }
                tpaused += now_s() - ts;
            }
            if (done == start + 1) res->first_loss = r.loss;
            res->last_loss = r.loss;
            res->steps_done = done;
            res->steps_run = done - start;
            if (log) {
                fprintf(log, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.6g, \"tokens_per_step\": %lld",
                        (long long)done, r.loss, r.lr, r.grad_norm, p.tokens_per_s, (long long)step_tokens);
                fprintf(log, ", \"elapsed_s\": %.6g", p.elapsed_s); // wall-clock since this run (or resume) started: stg plot
                if (!isnan(p.val_loss)) fprintf(log, ", \"val_loss\": %.9g", p.val_loss);
                if (sampled && (fprintf(log, ", \"sample\": ") < 0 || rt_json_string(log, sample_text.p, sample_text.n))) {
                    stg_errf(err, "%s: write failed", cfg->log_path);
                    goto out;
                }
                fprintf(log, "}\n");
                if (fflush(log) != 0 || ferror(log)) {
                    stg_errf(err, "%s: write failed: %s", cfg->log_path, strerror(errno));
                    goto out;
                }
            }
            if (cb) cb(ctx, &p);
            if (done == step && ckpt_due) {
                double tc = now_s();
                char written[4200];
                if (write_ckpt(e, cfg, step, &data_rng, written, sizeof written, err)) {
                    last_good(res, last_good_ckpt, cfg, good, sizeof good);
                    stg_err_prefix(err, "step %lld: checkpoint not written", (long long)step);
                    size_t k = strlen(err->msg);
                    snprintf(err->msg + k, sizeof err->msg - k, "%s", good);
                    goto out;
                }
                tpaused += now_s() - tc;
                last_good_ckpt = step;
                snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s", written);
            }
        }
    }
    rc = 0;
out:
    while (nq-- > 0) { // leave nothing in flight
        stg_err ignored;
        rt_exec_collect(e, NULL, &ignored);
    }
    if (log && fclose(log) != 0 && rc == 0) rc = stg_errf(err, "%s: close failed: %s", cfg->log_path, strerror(errno));
    rt_feed_free(feed);
    rt_feed_free(vfeed);
    free(sample_text.p);
    return rc;
}
