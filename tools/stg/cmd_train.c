// stg train, stg step, stg tokens.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/base/file.h"
#include "ops/optim/schedule.h"
#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/dist.h"
#include "runtime/eval.h"
#include "runtime/exec.h"
#include "runtime/fsutil.h"
#include "runtime/npy.h"
#include "runtime/safetensors.h"
#include "runtime/train.h"
#include "tools/stg/cli.h"

typedef struct {
    rt_train_cfg cfg;
    const char *device;
    bool tf32, eager, tune;
    const char *exec_given; // --exec as typed (NULL: not given)
    bool min_lr_given, val_every_given, doc_loss_mask_given;
    bool cosine_steps_given, wsd_frac_given, wsd_shape_given; // --cosine-steps, --wsd-decay-frac, --wsd-shape
    bool val_full; // --val-full: validation is the exact pass over every window of --val (runtime/eval.h)
    bool tty;
    bool quiet; // data parallel: ranks other than 0 print nothing per step
    int64_t last_print;
    const char *sample_prompt, *tok_path; // --sample-prompt; --tokenizer (the sample's text)
} train_ctx;

static void progress(void *vctx, const rt_train_progress *p) {
    train_ctx *c = vctx;
    if (c->quiet) return;
    double eta = p->step > 0 ? p->elapsed_s / (double)p->step * (double)(p->steps - p->step) : 0;
    char val[48] = "";
    if (!isnan(p->val_loss)) snprintf(val, sizeof val, " val %.4f", p->val_loss);
    if (c->tty) {
        fprintf(stderr, "\rstep %lld/%lld  loss %.4f%s  lr %.2e  %.0f tok/s  ETA %.0fs   ", (long long)p->step,
                (long long)p->steps, p->loss, val, p->lr, p->tokens_per_s, eta);
        if (p->step == p->steps || !isnan(p->val_loss)) fprintf(stderr, "\n");
    } else if (p->step == 1 || p->step == p->steps || p->step - c->last_print >= 10 || !isnan(p->val_loss)) {
        printf("step %lld/%lld loss %.4f%s lr %.3e grad_norm %.3f tok/s %.0f\n", (long long)p->step, (long long)p->steps, p->loss,
               val, p->lr, p->grad_norm, p->tokens_per_s);
        fflush(stdout);
        c->last_print = p->step;
    }
}

static int train_arg(train_ctx *c, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    rt_train_cfg *f = &c->cfg;
    int64_t n;
#define VAL() ((v = cli_value(argc, argv, i)) != NULL)
    if (strcmp(a, "--device") == 0) return VAL() ? (c->device = v, 1) : -1;
    if (strcmp(a, "--tf32") == 0) return c->tf32 = true, 1;
    int r = cli_gemm_tune_arg(argc, argv, i, &c->tune);
    if (r) return r;
    if (strcmp(a, "--exec") == 0) {
        if (!VAL()) return -1;
        if (strcmp(v, "graph") && strcmp(v, "eager")) return fprintf(stderr, "stg: --exec '%s': expected graph or eager\n", v), -1;
        c->eager = strcmp(v, "eager") == 0;
        c->exec_given = v;
        return 1;
    }
    if (strcmp(a, "--log-mode") == 0) {
        if (!VAL()) return -1;
        if (strcmp(v, "new") == 0) f->log_mode = RT_LOG_NEW;
        else if (strcmp(v, "overwrite") == 0) f->log_mode = RT_LOG_OVERWRITE;
        else if (strcmp(v, "append") == 0) f->log_mode = RT_LOG_APPEND;
        else return fprintf(stderr, "stg: --log-mode '%s': expected new, overwrite or append\n", v), -1;
        return 1;
    }
    if (strcmp(a, "--keep") == 0) return VAL() && !cli_int(a, v, 0, 1 << 20, &n) ? (f->keep = (int)n, 1) : -1;
    if (strcmp(a, "--data") == 0) return VAL() ? (f->data = v, 1) : -1;
    if (strcmp(a, "--val") == 0) return VAL() ? (f->val = v, 1) : -1;
    if (strcmp(a, "--log") == 0) return VAL() ? (f->log_path = v, 1) : -1;
    if (strcmp(a, "--ckpt") == 0) return VAL() ? (f->ckpt_dir = v, 1) : -1;
    if (strcmp(a, "--init") == 0) return VAL() ? (f->init_path = v, 1) : -1;
    if (strcmp(a, "--resume") == 0) return f->resume = true, 1;
    if (strcmp(a, "--val-full") == 0) return c->val_full = true, 1;
    if (strcmp(a, "--steps") == 0) return VAL() && !cli_int(a, v, 0, INT64_C(1) << 40, &n) ? (f->steps = n, 1) : -1;
    if (strcmp(a, "--ckpt-every") == 0) return VAL() && !cli_int(a, v, 0, INT64_C(1) << 40, &n) ? (f->ckpt_every = n, 1) : -1;
    if (strcmp(a, "--val-every") == 0)
        return VAL() && !cli_int(a, v, 0, INT64_C(1) << 40, &n) ? (f->val_every = n, c->val_every_given = true, 1) : -1;
    if (strcmp(a, "--val-batches") == 0) return VAL() && !cli_int(a, v, 1, 1 << 20, &n) ? (f->val_batches = n, 1) : -1;
    if (strcmp(a, "--markov-k") == 0) return VAL() && !cli_int(a, v, 1, 256, &n) ? (f->markov_k = (int)n, 1) : -1;
    if (strcmp(a, "--seed") == 0) return VAL() && !cli_int(a, v, 0, INT64_MAX, &n) ? (f->seed = (uint64_t)n, 1) : -1;
    if (strcmp(a, "--sample-every") == 0) return VAL() && !cli_int(a, v, 1, INT64_C(1) << 40, &n) ? (f->sample_every = n, 1) : -1;
    if (strcmp(a, "--sample-prompt") == 0) return VAL() ? (c->sample_prompt = v, 1) : -1;
    if (strcmp(a, "--doc-sep") == 0) return VAL() && !cli_int(a, v, 0, INT32_MAX, &n) ? (f->doc_sep = n, 1) : -1;
    if (strcmp(a, "--doc-loss-mask") == 0) {
        if (!VAL()) return -1;
        if (strcmp(v, "on") && strcmp(v, "off")) return fprintf(stderr, "stg: --doc-loss-mask '%s': expected on or off\n", v), -1;
        c->doc_loss_mask_given = true;
        f->doc_loss_mask = strcmp(v, "on") == 0;
        return 1;
    }
#undef VAL
    return 0;
}

static int optim_arg(cli_model_opts *m, bool *min_lr_given, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    double d;
    int64_t n;
    if (strcmp(a, "--lr") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 10, &d) ? (m->optim.lr = d, 1) : -1;
    if (strcmp(a, "--min-lr") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 10, &d) ? (m->optim.min_lr = d, *min_lr_given = true, 1) : -1;
    if (strcmp(a, "--warmup") == 0) return (v = cli_value(argc, argv, i)) && !cli_int(a, v, 0, INT64_C(1) << 40, &n) ? (m->optim.warmup = n, 1) : -1;
    if (strcmp(a, "--weight-decay") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 10, &d) ? (m->optim.weight_decay = d, 1) : -1;
    if (strcmp(a, "--clip") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 1e30, &d) ? (m->optim.max_norm = d, 1) : -1;
    if (strcmp(a, "--beta1") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 0.999999, &d) ? (m->optim.beta1 = d, 1) : -1;
    if (strcmp(a, "--beta2") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 0.999999, &d) ? (m->optim.beta2 = d, 1) : -1;
    if (strcmp(a, "--no-decay-norms-embeddings") == 0) return m->optim.decay_exempt_norms_embeddings = true, 1;
    return 0;
}

static const char *const schedule_names[STG_LR_KINDS] = {"cosine", "constant", "linear", "wsd"};
static const char *const wsd_shape_names[STG_WSD_SHAPES] = {"linear", "cosine", "sqrt"};

// The value's index in names[n], or -1 (printed).
static int name_index(const char *opt, const char *v, const char *const *names, int n, const char *expected) {
    for (int k = 0; k < n; k++)
        if (strcmp(v, names[k]) == 0) return k;
    fprintf(stderr, "stg: %s '%s': expected %s\n", opt, v, expected);
    return -1;
}

// --schedule, --cosine-steps and the WSD options (ops/optim/schedule.h has the formulas).
static int schedule_arg(cli_model_opts *m, train_ctx *c, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int64_t n;
    double d;
    int k;
    if (strcmp(a, "--cosine-steps") == 0)
        return (v = cli_value(argc, argv, i)) && !cli_int(a, v, 1, INT64_C(1) << 40, &n) ? (m->optim.cosine_steps = n, c->cosine_steps_given = true, 1)
                                                                                         : -1;
    if (strcmp(a, "--schedule") == 0)
        return (v = cli_value(argc, argv, i)) && (k = name_index(a, v, schedule_names, STG_LR_KINDS, "constant, linear, cosine or wsd")) >= 0
                   ? (m->optim.lr_kind = k, 1)
                   : -1;
    if (strcmp(a, "--wsd-shape") == 0)
        return (v = cli_value(argc, argv, i)) && (k = name_index(a, v, wsd_shape_names, STG_WSD_SHAPES, "linear, cosine or sqrt")) >= 0
                   ? (m->optim.wsd_shape = k, c->wsd_shape_given = true, 1)
                   : -1;
    if (strcmp(a, "--wsd-decay-frac") == 0)
        return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0, 1, &d) ? (m->optim.wsd_decay_frac = d, c->wsd_frac_given = true, 1) : -1;
    return 0;
}

// Validation every this many steps when --val is given without --val-every (printed at the start).
#define DEFAULT_VAL_EVERY 100

// The checks that need only the command line, before anything is opened: options that would be
// silently ignored, a schedule that is not what was asked, and outputs that are inputs.
static int train_checks(cli_model_opts *m, train_ctx *c) {
    rt_train_cfg *f = &c->cfg;
    stg_err err;
    if (f->init_path && f->resume) {
        fprintf(stderr, "stg train: --init and --resume: a resumed run takes its parameters from the checkpoint; drop one of them\n");
        return -1;
    }
    if (f->resume && !f->ckpt_dir) {
        fprintf(stderr, "stg train: --resume needs --ckpt DIR\n");
        return -1;
    }
    const stg_optim_config *o = &m->optim;
    if (o->lr_kind != STG_LR_WSD && (c->wsd_frac_given || c->wsd_shape_given)) {
        fprintf(stderr, "stg train: %s shapes the decay of --schedule wsd; this run's schedule is %s: drop it or add --schedule wsd\n",
                c->wsd_frac_given ? "--wsd-decay-frac" : "--wsd-shape", schedule_names[o->lr_kind]);
        return -1;
    }
    if (o->lr_kind == STG_LR_CONSTANT && (c->min_lr_given || c->cosine_steps_given)) {
        fprintf(stderr, "stg train: %s: --schedule constant keeps --lr after the warm-up and never decays: drop it\n",
                c->min_lr_given ? "--min-lr" : "--cosine-steps");
        return -1;
    }
    if (!c->min_lr_given) m->optim.min_lr = 0.1 * m->optim.lr; // the documented default: a tenth of the peak
    if (m->optim.min_lr > m->optim.lr) {
        fprintf(stderr, "stg train: --min-lr %g is above --lr %g: the %s would climb; give --min-lr at most --lr\n", m->optim.min_lr,
                m->optim.lr, o->lr_kind == STG_LR_COSINE ? "cosine" : "schedule");
        return -1;
    }
    if (c->val_full && !f->val) {
        fprintf(stderr, "stg train: --val-full scores every window of a validation file: give --val FILE\n");
        return -1;
    }
    if (c->val_full && f->val_every == 0 && c->val_every_given) {
        fprintf(stderr, "stg train: --val-full with --val-every 0 would never run: drop one of them\n");
        return -1;
    }
    if (f->val && !c->val_every_given) f->val_every = DEFAULT_VAL_EVERY;
    if (c->doc_loss_mask_given && f->doc_sep < 0) {
        fprintf(stderr, "stg train: --doc-loss-mask says which targets of packed documents count; it needs --doc-sep ID\n");
        return -1;
    }
    // Outputs never overwrite inputs (compared by device and inode, through symlinks).
    const char *in[STG_MAX_MODEL_FILES + 3], *inw[STG_MAX_MODEL_FILES + 3];
    int nin = cli_model_inputs(m->model, in, inw);
    in[nin] = f->data, inw[nin++] = "--data file";
    in[nin] = f->val, inw[nin++] = "--val file";
    in[nin] = f->init_path, inw[nin++] = "--init file";
    if (stg_check_output(f->log_path, "--log", in, inw, nin, &err) || stg_check_output(f->ckpt_dir, "--ckpt", in, inw, nin, &err)) {
        fprintf(stderr, "stg train: %s\n", err.msg);
        return -1;
    }
    if (f->ckpt_dir) { // an input inside DIR named like a checkpoint would be replaced or removed by the rotation
        for (int i = 0; i < nin; i++) {
            if (!in[i]) continue;
            const char *base = strrchr(in[i], '/');
            base = base ? base + 1 : in[i];
            char probe[4200];
            snprintf(probe, sizeof probe, "%s/%s", f->ckpt_dir, base);
            bool ckpt_name = strcmp(base, "ckpt.safetensors") == 0 || strcmp(base, "latest") == 0 || strncmp(base, "ckpt-", 5) == 0;
            if (ckpt_name && stg_same_file(probe, in[i]) && !(in[i] == f->init_path && f->resume)) {
                fprintf(stderr, "stg train: the %s %s is a checkpoint in --ckpt %s, which this run replaces and removes: copy it "
                                "elsewhere or use another --ckpt directory\n", inw[i], in[i], f->ckpt_dir);
                return -1;
            }
        }
    }
    return 0;
}

// The learning rate at the schedule's ends, as the lr_schedule op computes it: step s (from 1) uses
// ops_lr_at(s - 1).
static void print_schedule(const stg_optim_config *o, int64_t steps, bool min_default) {
    stg_lr_attrs a = {o->lr, o->min_lr, o->warmup, o->cosine_steps, o->lr_kind, o->wsd_shape, o->wsd_decay_frac};
    printf("lr schedule: %.4g at step 1", ops_lr_at(&a, 0));
    if (o->warmup > 0) printf(", %.4g at step %lld (after %lld warm-up steps)", ops_lr_at(&a, o->warmup), (long long)o->warmup + 1,
                              (long long)o->warmup);
    const char *dflt = min_default ? " (0.1 x --lr, the default)" : "";
    if (o->lr_kind == STG_LR_CONSTANT || o->cosine_steps == 0) printf(", then constant");
    else if (o->lr_kind == STG_LR_WSD) {
        int64_t s = stg_lr_wsd_start(&a);
        printf(", stable through step %lld, then a %s decay (--wsd-shape) over %lld steps (--wsd-decay-frac %g) down to --min-lr %.4g%s",
               (long long)s, wsd_shape_names[o->wsd_shape], (long long)(o->cosine_steps > s ? o->cosine_steps - s : 0), o->wsd_decay_frac,
               o->min_lr, dflt);
    } else
        printf(", %s down to --min-lr %.4g%s", schedule_names[o->lr_kind], o->min_lr, dflt);
    if (o->lr_kind != STG_LR_CONSTANT && o->cosine_steps > 0 && o->cosine_steps != steps)
        printf(", reached at step %lld (--cosine-steps)", (long long)o->cosine_steps + 1);
    if (steps > 0) printf("; %.4g at the last step, %lld", ops_lr_at(&a, steps - 1), (long long)steps);
    printf("\n");
}

// What every rank of a data-parallel run must agree on (rt_dist_agree): the model and every option
// that changes the step or the data, one "key=value" line each, so a difference is named.
static void run_description(const stg_graph *g, const cli_model_opts *m, const train_ctx *c, char *buf, size_t n) {
    const rt_train_cfg *f = &c->cfg;
    char dims[4096];
    rt_dims_string(g, dims, sizeof dims);
    const stg_optim_config *o = &m->optim;
    snprintf(buf, n,
             "model name=%s\ndims and options=%s\nprecision=%s\nparameters=%lld\n--lr=%.17g\n--min-lr=%.17g\n--warmup=%lld\n"
             "--cosine-steps=%lld\n--weight-decay=%.17g\n--clip=%.17g\n--beta1=%.17g\n--beta2=%.17g\n--no-decay-norms-embeddings=%d\n"
             "--steps=%lld\n--seed=%llu\n--markov-k=%d\n--data=%s\n--val=%s\n--val-every=%lld\n--ckpt-every=%lld\n--resume=%d\n"
             "--zero=%d\n--bucket-mb=%.17g\n--optimizer-in-backward=%d\n--group-matmuls=%s\n--grad-accum=%d\n--schedule=%s\n--wsd-shape=%s\n"
             "--wsd-decay-frac=%.17g\n--val-full=%d\n--doc-sep=%lld\n--doc-loss-mask=%d\n--grad-dtype=%s\n",
             g->name, dims, stg_precision_name(g->precision), (long long)graph_param_count(g), o->lr, o->min_lr, (long long)o->warmup,
             (long long)o->cosine_steps, o->weight_decay, o->max_norm, o->beta1, o->beta2, (int)o->decay_exempt_norms_embeddings,
             (long long)f->steps, (unsigned long long)f->seed, f->markov_k, f->data ? "a file" : "the synthetic source",
             f->val ? "a file" : "none", (long long)f->val_every, (long long)f->ckpt_every, (int)f->resume, o->dp_zero,
             (double)o->dp_bucket_bytes / (1 << 20), (int)o->in_backward, m->ungrouped ? "off" : "on", o->grad_accum > 1 ? o->grad_accum : 1,
             schedule_names[o->lr_kind], wsd_shape_names[o->wsd_shape], o->wsd_decay_frac, (int)c->val_full, (long long)f->doc_sep,
             (int)f->doc_loss_mask, o->bf16_grads ? "bf16" : "fp32");
}

// --val-full: forward executors of the model (the model's batch, and the short last batch's rows)
// over the --val file's windows; rt_train copies the parameters into them at each validation.
typedef struct {
    cli_fwd main, rest;
    rt_tokens *tk;
    rt_val_full v;
} val_full_ctx;

static void val_full_free(val_full_ctx *vf) {
    cli_fwd_free(&vf->rest);
    cli_fwd_free(&vf->main);
    rt_tokens_free(vf->tk);
    memset(vf, 0, sizeof *vf);
}

// Prints and returns -1 (bad input: the file holds no whole window).
static int val_full_open(const cli_model_opts *m, rt_exec *e, rt_backend *b, int device, rt_train_cfg *f, val_full_ctx *vf) {
    const stg_graph *g = rt_exec_graph(e);
    int tok = graph_find_tensor(g, "tokens");
    bool has_vocab, has_batch;
    int64_t vocab = graph_role_value(g, STG_DIM_VOCAB, &has_vocab);
    graph_role_value(g, STG_DIM_BATCH, &has_batch);
    stg_err err;
    if (tok < 0 || g->t[tok].ndim != 2 || !has_vocab) {
        fprintf(stderr, "stg train: --val-full needs a token model (inputs tokens and targets [batch, ctx], a vocab dim)%s%s\n",
                has_vocab ? "" : ": ", has_vocab ? "" : graph_role_missing(STG_DIM_VOCAB));
        return -1;
    }
    if (rt_tokens_open(f->val, vocab, &vf->tk, &err) ||
        rt_eval_shape_of(vf->tk, 0, g->t[tok].shape[0], g->t[tok].shape[1], &vf->v.shape, &err)) {
        fprintf(stderr, "stg train: --val-full: %s: %s\n", f->val, err.msg);
        return -1;
    }
    if (vf->v.shape.rest > 0 && !has_batch) {
        fprintf(stderr, "stg train: --val-full: %s's windows do not fill whole batches and %s (for the last)\n", f->val,
                graph_role_missing(STG_DIM_BATCH));
        return -1;
    }
    if (cli_fwd_open(m, 0, b, device, &vf->main) || (vf->v.shape.rest > 0 && cli_fwd_open(m, vf->v.shape.rest, b, device, &vf->rest)))
        return -1;
    vf->v.main = vf->main.e;
    vf->v.rest = vf->rest.e;
    vf->v.tokens = vf->tk;
    f->val_full = &vf->v;
    return 0;
}

int cmd_train(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    train_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = rt_train_defaults();
    c.tty = isatty(fileno(stderr)) && isatty(fileno(stdout));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) c.tok_path = argv[i + 1]; // also the samples' text
        int r = cli_model_arg(&m, argc, argv, &i);
        if (!r) r = schedule_arg(&m, &c, argc, argv, &i);
        if (!r) r = optim_arg(&m, &c.min_lr_given, argc, argv, &i);
        if (!r) r = train_arg(&c, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (argv[i][0] == '-' || m.model) {
            fprintf(stderr, "stg train: unexpected argument '%s'\n", argv[i]);
            cli_usage(stderr, "train");
            return 2;
        }
        m.model = argv[i];
    }
    if (!m.model) {
        cli_usage(stderr, "train");
        return 2;
    }
    if (m.optim.cosine_steps == 0) m.optim.cosine_steps = c.cfg.steps; // anneal over the whole run by default
    if (c.sample_prompt && !c.cfg.sample_every) {
        fprintf(stderr, "stg train: --sample-prompt is the prompt of --sample-every N's samples: give --sample-every too\n");
        return 2;
    }
    if (train_checks(&m, &c)) return 2;
    if (c.cfg.doc_sep >= 0) { // packed documents: the model's docs option on (models/cs336/lm.yaml)
        if (m.nsets == CLI_MAX_SETS) return fprintf(stderr, "stg train: too many --set options\n"), 2;
        m.sets[m.nsets++] = "docs=on";
    }
    rt_dist dist;
    if (cli_dist_env(&m, &dist) || cli_resolve_accum(&m, dist.world, "train")) return 2;
    c.cfg.rank = dist.rank;
    c.cfg.dist = &dist;
    c.cfg.world = dist.world;
    if (dist.rank != 0) c.quiet = true; // rank 0 reports for all
    rt_backend *b = cli_open_backend_at(c.device, m.precision, (c.tf32 ? CLI_CUDA_TF32 : 0u) | (c.tune ? CLI_CUDA_GEMM_TUNE : 0u),
                                        dist.local_rank);
    if (!b) return 2;
    if (strcmp(b->ops->name, "cpu") == 0 && c.exec_given) { // an explicit option that would mean nothing
        fprintf(stderr, "stg train: --exec %s chooses how CUDA launches a step; the cpu backend runs every op in turn: drop --exec\n",
                c.exec_given);
        b->ops->destroy(b);
        return 2;
    }
    if (cli_dist_join(&dist, b)) {
        b->ops->destroy(b);
        rt_dist_close(&dist);
        return 1;
    }
    stg_graph *g = cli_build(&m);
    stg_plan *p = NULL;
    rt_exec *e = NULL;
    cli_train_sampler *ts = NULL;
    val_full_ctx vf;
    memset(&vf, 0, sizeof vf);
    stg_err err;
    int rc = 1;
    if (!g) { // the model, or an override of it (--set, --doc-sep's docs=on), is bad input
        rc = 2;
        goto out;
    }
    int itok = graph_find_tensor(g, "tokens");
    if (itok >= 0 && g->t[itok].cls == STG_CLASS_INPUT && graph_role_index(g, STG_DIM_VOCAB) < 0) { // bad input too
        fprintf(stderr, "stg train: %s: a token model needs its vocabulary size (the ids drawn and read are below it); %s\n", m.model,
                graph_role_missing(STG_DIM_VOCAB));
        rc = 2;
        goto out;
    }
    if (dist.world > 1) {
        char desc[RT_DIST_DESC_MAX];
        run_description(g, &m, &c, desc, sizeof desc);
        if (rt_dist_agree(&dist, desc, &err)) {
            fprintf(stderr, "stg train: rank %d of %d: %s\n", dist.rank, dist.world, err.msg);
            goto out;
        }
    }
    // Token files are bad input (exit 2) when an id is outside the model's vocabulary: checked here,
    // before any allocation, with the first offending id and its position.
    for (int k = 0; k < 2; k++) {
        const char *path = k ? c.cfg.val : c.cfg.data;
        bool has_vocab;
        int64_t vocab = graph_role_value(g, STG_DIM_VOCAB, &has_vocab);
        if (!path || !has_vocab) continue;
        rt_tokens *tk;
        if (rt_tokens_open(path, vocab, &tk, &err)) {
            fprintf(stderr, "stg train: %s (the model's vocab is %lld)\n", err.msg, (long long)vocab);
            rc = 2;
            goto out;
        }
        rt_tokens_free(tk);
    }
    if (c.cfg.doc_sep >= 0) { // bad input (exit 2): a separator outside the vocabulary, a model that ignores docs
        bool has_vocab, read = false;
        int64_t vocab = graph_role_value(g, STG_DIM_VOCAB, &has_vocab);
        int dt = graph_find_tensor(g, "docs");
        for (int o = 0; dt >= 0 && o < g->nops; o++)
            for (int i = 0; i < g->ops[o].n_in; i++) read |= g->ops[o].in[i] == dt;
        if (has_vocab && c.cfg.doc_sep >= vocab) {
            fprintf(stderr, "stg train: --doc-sep %lld is outside the model's vocabulary [0, %lld)\n", (long long)c.cfg.doc_sep,
                    (long long)vocab);
            rc = 2;
            goto out;
        }
        if (!read) {
            fprintf(stderr, "stg train: --doc-sep: no op of the model reads its input 'docs' (the written-out attention, "
                            "--attention naive, has no document mask; models/cs336/lm.yaml reads it with --attention flash)\n");
            rc = 2;
            goto out;
        }
    }
    rt_exec_opts eo = {.graph = !c.eager};
    stg_budget_report brep;
    if (cli_plan(&m, &g, b, &p, &brep)) goto out;
    if (cli_check_fit(&m, g, p, b)) goto out;
    if (rt_exec_new(g, p, b, &eo, &e, &err)) {
        fprintf(stderr, "stg train: %s\n", err.msg);
        goto out;
    }
    if (c.val_full && val_full_open(&m, e, b, dist.local_rank, &c.cfg, &vf)) {
        rc = 2;
        goto out;
    }
    if (dist.rank == 0)
        printf("stg train: %s, %lld parameters, %s%s on %s; step memory %.1f MiB (plan)%s\n", g->name, (long long)graph_param_count(g),
               stg_precision_name(g->precision), g->bf16_grads ? " with bf16 weight gradients" : "", b->ops->name, (double)p->peak_bytes / (1 << 20),
               dist.world > 1 ? "; data parallel" : "");
    if (dist.rank == 0 && m.optim.dp_world >= 1)
        printf("data parallel: %d ranks, global batch = %d x the model's batch, gradients averaged in buckets of %.1f MiB\n", dist.world,
               dist.world * (g->grad_accum > 1 ? g->grad_accum : 1), (double)m.optim.dp_bucket_bytes / (1 << 20));
    if (dist.rank == 0 && g->grad_accum > 1) {
        int64_t mt = cli_micro_tokens(g);
        printf("gradient accumulation: %d micro-batches of %lld tokens%s per optimizer step: %lld tokens per step\n", g->grad_accum,
               (long long)mt, dist.world > 1 ? " on each rank" : "", (long long)(mt * g->grad_accum * (dist.world > 1 ? dist.world : 1)));
    }
    if (dist.rank == 0 && graph_optim_in_backward(g))
        printf("optimizer: AdamW in backward (each update as soon as its gradient is final, beside the rest of the backward); "
               "clipping by the previous step's gradient norm, none at a run's first step (a resumed run's too); the grad_norm printed is "
               "the step's own\n");
    if (dist.rank == 0) {
        print_schedule(&m.optim, c.cfg.steps, !c.min_lr_given);
        if (c.cfg.val && !c.val_every_given)
            printf("validation: on %s every %d steps and at the end (the default with --val; --val-every N)\n", c.cfg.val, DEFAULT_VAL_EVERY);
        if (c.val_full)
            printf("validation: exact, every window of %s: %lld windows of %lld (%lld targets) in %lld batches of %lld%s%s; its forward "
                   "executors (with their own copy of the parameters) %.1f MiB (plan)\n",
                   c.cfg.val, (long long)vf.v.shape.windows, (long long)vf.v.shape.ctx, (long long)vf.v.shape.targets,
                   (long long)vf.v.shape.batches, (long long)vf.v.shape.batch, vf.v.shape.rest ? " and one short batch" : "",
                   vf.v.shape.dropped ? ", the last targets (less than a window) not scored" : "",
                   (double)(vf.main.p->peak_bytes + (vf.rest.p ? vf.rest.p->peak_bytes : 0)) / (1 << 20));
    }
    if (c.cfg.sample_every && dist.rank == 0) {
        if (cli_train_sampler_open(&m, c.tok_path, c.sample_prompt ? c.sample_prompt : "\n", c.cfg.seed, b->ops->name, dist.local_rank, e, &ts))
            goto out;
        c.cfg.sample_fn = cli_train_sample;
        c.cfg.sample_ctx = ts;
    }
    rt_train_result res;
    int trc = rt_train(e, &c.cfg, progress, &c, &res, &err);
    if (dist.rank == 0 && res.stale_tmp_removed > 0)
        printf("removed %d temporary file%s that killed runs left in %s\n", res.stale_tmp_removed, res.stale_tmp_removed > 1 ? "s" : "",
               c.cfg.ckpt_dir);
    if (dist.rank == 0 && res.resumed_from[0]) {
        printf("resumed from %s (step %lld, %s)\n", res.resumed_from, (long long)(res.steps_done - res.steps_run),
               res.resumed_verified ? "verified" : "written without checksums: not verified");
        if (res.resume_skipped[0]) printf("passed over newer checkpoints: %s\n", res.resume_skipped);
    }
    if (trc) {
        if (c.tty) fprintf(stderr, "\n");
        fprintf(stderr, "stg train: %s\n", err.msg);
        goto out;
    }
    if (dist.rank == 0) {
        if (res.steps_run == 0) {
            printf("done: no steps run (the run is at step %lld of %lld)\n", (long long)res.steps_done, (long long)c.cfg.steps);
        } else {
            printf("done: %lld steps, loss %.4f -> %.4f", (long long)res.steps_run, res.first_loss, res.last_loss);
            if (!isnan(res.last_val_loss)) printf(", validation %.4f", res.last_val_loss);
            if (!isnan(res.floor)) printf(" (the synthetic source's entropy, the floor, is %.4f)", res.floor);
            printf("\n");
        }
        if (res.last_ckpt[0] && strcmp(res.last_ckpt, res.resumed_from) != 0) printf("checkpoint: %s (verified)\n", res.last_ckpt);
    }
    rc = fflush(stdout) ? 1 : 0;
out:
    cli_train_sampler_free(ts); // before the executor whose memory it reads
    val_full_free(&vf);
    rt_exec_free(e);
    plan_free(p);
    graph_free(g);
    b->ops->destroy(b);
    rt_dist_close(&dist);
    return rc;
}

// ---- stg step: one forward and backward on a given batch, everything dumped ------------------

int cmd_step(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    const char *init = NULL, *batch = NULL, *dump = NULL, *device = NULL;
    const char *usage = "usage: stg step MODEL --init PARAMS.safetensors --batch BATCH.npy --dump OUT.safetensors "
                        "[--set k=v]... [--precision fp32|fp64] [--device cpu]\n"
                        "  BATCH.npy: int32 of shape [2, batch, ctx]: [0] the tokens, [1] the targets\n";
    for (int i = 1; i < argc; i++) {
        int r = cli_model_arg(&m, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char **slot = strcmp(argv[i], "--init") == 0 ? &init : strcmp(argv[i], "--batch") == 0 ? &batch
                          : strcmp(argv[i], "--dump") == 0 ? &dump : strcmp(argv[i], "--device") == 0 ? &device : NULL;
        if (slot) {
            if (!(*slot = cli_value(argc, argv, &i))) return 2;
            continue;
        }
        if (argv[i][0] == '-' || m.model) {
            fprintf(stderr, "stg step: unexpected argument '%s'\n%s", argv[i], usage);
            return 2;
        }
        m.model = argv[i];
    }
    if (!m.model || !init || !batch || !dump) {
        fputs(usage, stderr);
        return 2;
    }
    {
        const char *in[STG_MAX_MODEL_FILES + 2], *inw[STG_MAX_MODEL_FILES + 2];
        int nin = cli_model_inputs(m.model, in, inw);
        in[nin] = init, inw[nin++] = "--init file";
        in[nin] = batch, inw[nin++] = "--batch file";
        stg_err e0;
        if (stg_check_output(dump, "--dump", in, inw, nin, &e0)) {
            fprintf(stderr, "stg step: %s\n", e0.msg);
            return 2;
        }
    }
    if (m.optim.in_backward) {
        fprintf(stderr, "stg step: --optimizer-in-backward frees each gradient as soon as its update runs; stg step dumps the "
                        "gradients, so it runs without it\n");
        return 2;
    }
    if (m.optim.grad_accum > 1 || m.total_batch_tokens > 0) {
        fprintf(stderr, "stg step: runs one batch (the one in --batch); --grad-accum and --total-batch-tokens are for train, bench "
                        "and memreport\n");
        return 2;
    }
    rt_backend *b = cli_open_backend(device, m.precision, false);
    if (!b) return 2;
    stg_graph *g = cli_build(&m);
    stg_plan *p = NULL;
    rt_exec *e = NULL;
    rt_npy bn;
    bool have_batch = false;
    rt_st_writer *w = NULL;
    double *vals[2] = {NULL, NULL};
    void **grads = NULL;
    stg_err err;
    int rc = g ? 1 : 2; // a model that does not load is bad input
    if (!g) goto out;
    int tok = graph_find_tensor(g, "tokens"), tgt = graph_find_tensor(g, "targets"), logits = graph_find_tensor(g, "logits");
    if (tok < 0 || tgt < 0) {
        fprintf(stderr, "stg step: the model needs inputs 'tokens' and 'targets'\n");
        goto out;
    }
    int64_t B = g->t[tok].shape[0], S = g->t[tok].shape[1];
    if (rt_npy_open(batch, &bn, &err)) {
        fprintf(stderr, "stg step: %s\n", err.msg);
        goto out;
    }
    have_batch = true;
    if (bn.info.dtype != RT_DT_I32 || bn.info.ndim != 3 || bn.info.shape[0] != 2 || bn.info.shape[1] != B || bn.info.shape[2] != S) {
        fprintf(stderr, "stg step: %s must be int32 of shape [2, %lld, %lld] (tokens, targets) for this model\n", batch,
                (long long)B, (long long)S);
        goto out;
    }
    if (plan_build(g, NULL, &p, &err) || rt_exec_new(g, p, b, NULL, &e, &err) || rt_exec_init_params(e, 0, &err) ||
        rt_params_load(e, init, &err)) {
        fprintf(stderr, "stg step: %s\n", err.msg);
        goto out;
    }
    size_t half = sizeof(int32_t) * (size_t)(B * S);
    bool found;
    int64_t vocab = graph_role_value(g, STG_DIM_VOCAB, &found);
    const int32_t *bt = bn.info.data;
    for (int64_t i = 0; i < 2 * B * S; i++)
        if (bt[i] < 0 || (found && bt[i] >= vocab)) {
            fprintf(stderr, "stg step: %s: element %lld is %d; token ids must be in [0, %lld)\n", batch, (long long)i, bt[i],
                    (long long)vocab);
            goto out;
        }
    // forward alone first (the logits are intact after it), then forward + backward for the gradients
    double loss;
    if (rt_exec_write(e, tok, bt, half, &err) || rt_exec_write(e, tgt, bt + B * S, half, &err) ||
        rt_exec_run(e, RT_PHASE_FORWARD, &err) || rt_exec_read_f64(e, g->loss, &loss, &err)) {
        fprintf(stderr, "stg step: %s\n", err.msg);
        goto out;
    }
    if (!(w = rt_st_writer_new(&err))) goto fail;
    // fp64 steps dump F64 (comparisons to 1e-10 against a float64 reference), the others F32
    bool f64 = g->precision == STG_PREC_FP64;
    rt_dtype ddt = f64 ? RT_DT_F64 : RT_DT_F32;
    float lossf = (float)loss;
    if (rt_st_writer_add(w, "loss", ddt, 0, NULL, f64 ? (const void *)&loss : (const void *)&lossf, &err)) goto fail;
    if (logits >= 0) {
        int64_t n = stg_numel(&g->t[logits]);
        if (!(vals[0] = stg_malloc(sizeof(double) * (size_t)n, &err)) || rt_exec_read_f64(e, logits, vals[0], &err)) goto fail;
        float *f = (float *)vals[0]; // narrowed in place: f[i] is written after vals[0][i] is read
        for (int64_t i = 0; !f64 && i < n; i++) f[i] = (float)vals[0][i];
        if (rt_st_writer_add(w, "logits", ddt, g->t[logits].ndim, g->t[logits].shape, vals[0], &err)) goto fail;
    }
    if (rt_exec_run(e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err)) goto fail;
    if (!(grads = stg_calloc((size_t)g->nt, sizeof *grads, &err))) goto fail;
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].cls != STG_CLASS_PARAM) continue;
        int gr = g->t[t].grad;
        int64_t n = stg_numel(&g->t[gr]);
        double *d = stg_malloc(sizeof(double) * (size_t)n, &err);
        if (!d) goto fail;
        grads[t] = d;
        if (rt_exec_read_f64(e, gr, d, &err)) goto fail;
        float *f = (float *)d;
        for (int64_t i = 0; !f64 && i < n; i++) f[i] = (float)d[i];
        if (rt_st_writer_add(w, g->t[t].name, ddt, g->t[t].ndim, g->t[t].shape, d, &err)) goto fail;
    }
    // No tensor 'logits': with fused_head=on the LM head and the loss are one op (linear_cross_entropy)
    // that never materialises them; the dump says so in its metadata.
    const char *fused = graph_option(g, "fused_head");
    bool fused_on = fused && strcmp(fused, "off") != 0; // on or late
    if (rt_st_writer_meta(w, "format", "stg-step-1", &err) ||
        (logits < 0 && rt_st_writer_meta(w, "logits", fused_on ? "not materialised: fused LM head (fused_head=on)"
                                                                 : "none: the model has no tensor named 'logits'", &err)) ||
        rt_st_writer_write(w, dump, &err))
        goto fail;
    int nparams = 0;
    for (int t = 0; t < g->nt; t++) nparams += g->t[t].cls == STG_CLASS_PARAM;
    printf("loss %.9g; wrote the loss, %s and %d gradients to %s\n", loss,
           logits >= 0 ? "the logits"
           : fused_on  ? "no logits (the fused LM head never materialises them; --set fused_head=off dumps them)"
                       : "no logits (the model has no tensor named 'logits')",
           nparams, dump);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "stg step: %s\n", err.msg);
out:
    if (grads)
        for (int t = 0; t < g->nt; t++) free(grads[t]);
    free(grads);
    free(vals[0]);
    rt_st_writer_free(w);
    if (have_batch) rt_npy_close(&bn);
    rt_exec_free(e);
    plan_free(p);
    graph_free(g);
    b->ops->destroy(b);
    return rc;
}

// The temporary file a killed `stg tokens` leaves (OUT.tmp.PID, as large as what it read: reading
// /dev/zero it grows until the disk is full). Killed by a signal that can be caught, it removes its
// own; a SIGKILL leaves it, and the next run for the same output removes it (its process is dead).
static char tokens_tmp[4200];

static void tokens_on_signal(int sig) {
    unlink(tokens_tmp); // async-signal-safe
    signal(sig, SIG_DFL);
    raise(sig);
}

static int tokens_guard(const char *out, stg_err *err) {
    char dir[4200];
    const char *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
    if (slash == out) snprintf(dir, sizeof dir, "/");
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    if (rt_remove_stale_tmp(dir, prefix, err) < 0) return -1;
    snprintf(tokens_tmp, sizeof tokens_tmp, "%s.tmp.%ld", out, (long)getpid());
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], tokens_on_signal);
    return 0;
}

int cmd_tokens(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (argv[i][0] == '-' || in) {
            fprintf(stderr, "stg tokens: unexpected argument '%s'\n", argv[i]);
            cli_usage(stderr, "tokens");
            return 2;
        } else
            in = argv[i];
    }
    if (!in || !out) {
        cli_usage(stderr, "tokens");
        return 2;
    }
    stg_err err;
    const char *inw = "input";
    if (stg_check_output(out, "-o", &in, &inw, 1, &err)) {
        fprintf(stderr, "stg tokens: %s\n", err.msg);
        return 2;
    }
    if (tokens_guard(out, &err)) {
        fprintf(stderr, "stg tokens: %s\n", err.msg);
        return 1;
    }
    int64_t n = rt_tokens_from_text(in, out, &err);
    if (n < 0) {
        fprintf(stderr, "stg tokens: %s\n", err.msg);
        return 1;
    }
    printf("%s: %lld tokens (vocab 256)\n", out, (long long)n);
    return 0;
}
