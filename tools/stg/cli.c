#include "tools/stg/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/loader.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "runtime/tokenizer/tokenizer.h"
#ifdef STG_HAVE_CUDA
#include "runtime/cuda/backend_cuda.h"
#endif

static int cli_on_off(int argc, char **argv, int *i, const char *opt, bool *on);

void cli_model_opts_init(cli_model_opts *m) {
    memset(m, 0, sizeof *m);
    m->precision = STG_PREC_FP32;
    m->train = true;
    m->optim = graph_optim_defaults();
    m->optim.dp_bucket_bytes = (int64_t)25 << 20; // data parallel: 25 MiB buckets, a 1 MiB first one
    m->optim.dp_first_bucket_bytes = (int64_t)1 << 20;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "stg: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "stg: %s '%s' is not an integer in [%lld, %lld]\n", opt, s, (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_double(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "stg: %s '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_model_arg(cli_model_opts *m, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--zero") == 0) {
        const char *v = cli_value(argc, argv, i);
        int64_t z;
        if (!v || cli_int(a, v, 0, 3, &z)) return -1;
        m->optim.dp_zero = (int)z;
        return 1;
    }
    if (strcmp(a, "--bucket-mb") == 0) {
        const char *v = cli_value(argc, argv, i);
        double mb;
        if (!v || cli_double(a, v, 0, 1 << 20, &mb)) return -1;
        m->optim.dp_bucket_bytes = (int64_t)(mb * (1 << 20));
        if (m->optim.dp_first_bucket_bytes > m->optim.dp_bucket_bytes) m->optim.dp_first_bucket_bytes = m->optim.dp_bucket_bytes;
        return 1;
    }
    if (strcmp(a, "--set") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (m->nsets == CLI_MAX_SETS) {
            fprintf(stderr, "stg: at most %d --set options\n", CLI_MAX_SETS);
            return -1;
        }
        m->sets[m->nsets++] = v;
        return 1;
    }
    if (strcmp(a, "--tokenizer") == 0) {
        // The model's vocab from a tokenizer, as --set vocab=N would (the loader gives it to the
        // vocab role's dim, whatever its name; applied before the --set options, so an explicit
        // --set vocab=... still wins).
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        stg_err err;
        rt_tok *t;
        if (rt_tok_load(v, &t, &err)) {
            fprintf(stderr, "stg: --tokenizer: %s\n", err.msg);
            return -1;
        }
        snprintf(m->vocab_set, sizeof m->vocab_set, "%s=%u", graph_role_key(STG_DIM_VOCAB), rt_tok_vocab_size(t));
        rt_tok_free(t);
        return 1;
    }
    if (strcmp(a, "--attention") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "naive") != 0 && strcmp(v, "flash") != 0) {
            fprintf(stderr, "stg: --attention '%s': expected naive or flash\n", v);
            return -1;
        }
        snprintf(m->attention_set, sizeof m->attention_set, "attention=%s", v);
        return 1;
    }
    if (strcmp(a, "--grad-accum") == 0) {
        const char *v = cli_value(argc, argv, i);
        int64_t n;
        if (!v) return -1;
        if (strcmp(v, "0") == 0) {
            fprintf(stderr, "stg: --grad-accum 0: an optimizer step needs at least one micro-batch (1: no accumulation)\n");
            return -1;
        }
        if (cli_int(a, v, 1, 1 << 16, &n)) return -1;
        m->optim.grad_accum = (int)n;
        return 1;
    }
    if (strcmp(a, "--total-batch-tokens") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v || cli_int(a, v, 1, INT64_C(1) << 50, &m->total_batch_tokens)) return -1;
        return 1;
    }
    if (strcmp(a, "--optimizer-in-backward") == 0) {
        m->optim.in_backward = true;
        return 1;
    }
    if (strcmp(a, "--grad-dtype") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0) {
            fprintf(stderr, "stg: --grad-dtype '%s': expected fp32 or bf16\n", v);
            return -1;
        }
        m->optim.bf16_grads = strcmp(v, "bf16") == 0;
        return 1;
    }
    bool on;
    int r = cli_on_off(argc, argv, i, "--group-matmuls", &on);
    if (r) {
        if (r > 0) m->ungrouped = !on;
        return r;
    }
    if (strcmp(a, "--memory-budget") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "auto") == 0) {
            m->budget = -1;
            return 1;
        }
        char *end;
        double x = strtod(v, &end);
        double unit = 1;
        if (*end == 'K' || *end == 'k') unit = 1024.0, end++;
        else if (*end == 'M') unit = 1024.0 * 1024, end++;
        else if (*end == 'G') unit = 1024.0 * 1024 * 1024, end++;
        else if (*end == 'T') unit = 1024.0 * 1024 * 1024 * 1024, end++;
        if (unit > 1 && strncmp(end, "iB", 2) == 0) end += 2;
        else if (*end == 'B') end++;
        if (end == v || *end || !(x > 0) || x * unit > 9e18) {
            fprintf(stderr, "stg: --memory-budget '%s': expected bytes (e.g. 60G, 61440M, 64424509440) or auto\n", v);
            return -1;
        }
        m->budget = (int64_t)(x * unit);
        return 1;
    }
    if (strcmp(a, "--precision") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "fp32") == 0) m->precision = STG_PREC_FP32;
        else if (strcmp(v, "bf16") == 0) m->precision = STG_PREC_BF16;
        else if (strcmp(v, "fp64") == 0) m->precision = STG_PREC_FP64;
        else {
            fprintf(stderr, "stg: --precision '%s': expected fp32 or bf16 (fp64 on the CPU backend)\n", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

// The step options m stands for; sets (CLI_MAX_SETS + 3 slots) holds --attention's and --tokenizer's overrides first,
// then the --set ones, then `extra` when non-NULL.
static stg_step_opts cli_step_opts(const cli_model_opts *m, const char **sets, const char *extra) {
    stg_step_opts o = stg_step_defaults();
    int n = 0;
    if (m->attention_set[0]) sets[n++] = m->attention_set;
    if (m->vocab_set[0]) sets[n++] = m->vocab_set;
    for (int i = 0; i < m->nsets; i++) sets[n++] = m->sets[i];
    if (extra) sets[n++] = extra;
    o.model_path = m->model;
    o.sets = sets;
    o.nsets = n;
    o.precision = m->precision;
    o.train = m->train;
    o.optim = m->optim;
    o.ungrouped = m->ungrouped;
    o.no_plan = true; // cli_plan plans, once the backend (for --memory-budget auto) is known
    return o;
}

int cli_model_inputs(const char *model, const char **in, const char **what) {
    static char files[STG_MAX_MODEL_FILES][4096];
    in[0] = model;
    what[0] = "model file";
    if (!model) return 1;
    stg_load_opts o = {.precision = STG_PREC_FP32};
    stg_graph *g = NULL;
    stg_err err;
    if (graph_load(model, &o, &g, &err)) return 1;
    int n = 0;
    for (int i = 0; i < g->nfiles && n < STG_MAX_MODEL_FILES; i++, n++) {
        snprintf(files[n], sizeof files[n], "%s", g->files[i]);
        in[n] = files[n];
        what[n] = i == 0 ? "model file" : "file the model includes";
    }
    graph_free(g);
    return n > 0 ? n : 1;
}

stg_graph *cli_build(const cli_model_opts *m) {
    const char *sets[CLI_MAX_SETS + 3];
    stg_step_opts o = cli_step_opts(m, sets, NULL);
    stg_err err;
    stg_step *s;
    if (stg_step_build(&o, &s, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    stg_graph *g = s->g;
    s->g = NULL;
    stg_step_free(s);
    return g;
}

int64_t cli_micro_tokens(const stg_graph *g) {
    int t = graph_find_tensor(g, "tokens");
    if (t >= 0 && g->t[t].cls == STG_CLASS_INPUT) return stg_numel(&g->t[t]);
    t = graph_find_tensor(g, "x"); // a feature model: one row is one example
    if (t >= 0 && g->t[t].cls == STG_CLASS_INPUT && g->t[t].ndim >= 1) return g->t[t].shape[0];
    return 0;
}

int cli_resolve_accum(cli_model_opts *m, int world, const char *cmd) {
    if (world < 1) world = 1;
    if (m->total_batch_tokens > 0 && m->optim.grad_accum > 0) {
        fprintf(stderr, "stg %s: --grad-accum and --total-batch-tokens both set the micro-batches per optimizer step: give one\n", cmd);
        return -1;
    }
    if (m->total_batch_tokens > 0) {
        const char *sets[CLI_MAX_SETS + 3];
        int n = 0;
        if (m->attention_set[0]) sets[n++] = m->attention_set;
        if (m->vocab_set[0]) sets[n++] = m->vocab_set;
        for (int i = 0; i < m->nsets; i++) sets[n++] = m->sets[i];
        stg_load_opts lo = {m->precision, sets, n};
        stg_graph *g = NULL;
        stg_err err;
        if (graph_load(m->model, &lo, &g, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return -1;
        }
        int64_t micro = cli_micro_tokens(g);
        bool fb, fc;
        int64_t B = graph_role_value(g, STG_DIM_BATCH, &fb), S = graph_role_value(g, STG_DIM_CTX, &fc);
        graph_free(g);
        if (micro <= 0) {
            fprintf(stderr, "stg %s: --total-batch-tokens: the model has no 'tokens' (or 'x') input to count\n", cmd);
            return -1;
        }
        int64_t per = micro * world, T = m->total_batch_tokens;
        char what[160];
        if (fb && fc && B * S == micro)
            snprintf(what, sizeof what, "batch %lld x ctx %lld", (long long)B, (long long)S);
        else
            snprintf(what, sizeof what, "%lld per batch", (long long)micro);
        if (world > 1) {
            size_t k = strlen(what);
            snprintf(what + k, sizeof what - k, " x %d ranks", world);
        }
        if (T % per != 0 || T / per > (1 << 16)) {
            int64_t below = T / per * per, above = below + per;
            if (T / per > (1 << 16))
                fprintf(stderr, "stg %s: --total-batch-tokens %lld would take %lld micro-batches of %lld tokens (%s); at most %d\n", cmd,
                        (long long)T, (long long)(T / per), (long long)per, what, 1 << 16);
            else if (below == 0)
                fprintf(stderr, "stg %s: --total-batch-tokens %lld is less than one micro-batch of %lld tokens (%s); the smallest is %lld\n",
                        cmd, (long long)T, (long long)per, what, (long long)per);
            else
                fprintf(stderr, "stg %s: --total-batch-tokens %lld is not a multiple of the %lld tokens of one micro-batch (%s): "
                                "%lld or %lld would be (%lld or %lld micro-batches)\n",
                        cmd, (long long)T, (long long)per, what, (long long)below, (long long)above, (long long)(below / per), (long long)(above / per));
            return -1;
        }
        m->optim.grad_accum = (int)(T / per);
    }
    if (m->optim.grad_accum > 1 && !m->train) {
        fprintf(stderr, "stg %s: --grad-accum and --total-batch-tokens shape the training step; the forward mode has no gradients to accumulate\n", cmd);
        return -1;
    }
    if (m->optim.bf16_grads && m->precision != STG_PREC_BF16) {
        fprintf(stderr, "stg %s: --grad-dtype bf16 needs --precision bf16 (the products' weight gradients rounded to bf16 as "
                        "autocast rounds them; fp32 and fp64 steps keep gradients in their own precision)\n", cmd);
        return -1;
    }
    if (m->optim.bf16_grads && m->optim.grad_accum > 1) {
        fprintf(stderr, "stg %s: --grad-dtype bf16 cannot combine with gradient accumulation (%d micro-batches): the sum over "
                        "micro-batches needs fp32 gradients\n", cmd, m->optim.grad_accum);
        return -1;
    }
    if (m->optim.grad_accum > 1 && m->optim.in_backward) {
        fprintf(stderr, "stg %s: --optimizer-in-backward cannot combine with gradient accumulation (%d micro-batches): it updates each "
                        "parameter and frees its gradient as soon as the gradient is final, so nothing is left for the next "
                        "micro-batch to add to; drop one of them\n",
                cmd, m->optim.grad_accum);
        return -1;
    }
    return 0;
}

FILE *cli_out_open(const char *path, char *tmp, size_t tmpn) {
    tmp[0] = 0;
    if (!path || strcmp(path, "-") == 0) return stdout;
    snprintf(tmp, tmpn, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) fprintf(stderr, "stg: cannot write %s: %s\n", tmp, strerror(errno));
    return f;
}

int cli_out_close(FILE *f, const char *path, const char *tmp) {
    if (f == stdout) {
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "stg: writing to standard output failed\n");
            return -1;
        }
        return 0;
    }
    int bad = ferror(f) != 0;
    if (fflush(f) != 0) bad = 1;
    if (!bad && fsync(fileno(f)) != 0) bad = 1;
    if (fclose(f) != 0) bad = 1;
    if (bad) {
        fprintf(stderr, "stg: writing %s failed: %s; %s is unchanged\n", tmp, strerror(errno), path);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "stg: cannot rename %s to %s: %s\n", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int cli_dist_env(cli_model_opts *m, rt_dist *d) {
    stg_err err;
    if (rt_dist_from_env(d, &err)) {
        fprintf(stderr, "stg: %s\n", err.msg);
        return -1;
    }
    if (rt_dist_launched()) {
        m->optim.dp_world = d->world;
        m->optim.dp_rank = d->rank;
    }
    if (m->optim.dp_zero > 1) {
        fprintf(stderr, "stg: --zero %d: stg runs ZeRO stages 0 and 1 (memreport --world N --zero 2|3 accounts for the others)\n",
                m->optim.dp_zero);
        return -1;
    }
    if (m->optim.dp_zero == 1 && !rt_dist_launched()) {
        fprintf(stderr, "stg: --zero 1 shards the optimizer over data-parallel ranks: run under stg launch -n N (or mpirun)\n");
        return -1;
    }
    return 0;
}

int cli_dist_join(rt_dist *d, struct rt_backend *b) {
    stg_err err;
    if (!rt_dist_launched()) return 0;
    if (rt_dist_connect(d, &err)) {
        fprintf(stderr, "stg: rank %d of %d: %s\n", d->rank, d->world, err.msg);
        return -1;
    }
    int r;
    if (strcmp(b->ops->name, "cpu") == 0) r = rt_backend_cpu_join(b, d, &err);
    else {
#ifdef STG_HAVE_CUDA
        r = rt_backend_cuda_join(b, d, &err);
#else
        r = stg_errf(&err, "no data-parallel support for the %s backend", b->ops->name);
#endif
    }
    if (r) fprintf(stderr, "stg: rank %d of %d: %s\n", d->rank, d->world, err.msg);
    return r ? -1 : 0;
}

struct rt_backend *cli_open_backend(const char *name, stg_precision prec, unsigned cuda) { return cli_open_backend_at(name, prec, cuda, 0); }

// Option `opt` with the value on or off at argv[*i]: 1 consumed (*on set), 0 another option, -1 bad.
static int cli_on_off(int argc, char **argv, int *i, const char *opt, bool *on) {
    if (strcmp(argv[*i], opt) != 0) return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    if (strcmp(v, "on") && strcmp(v, "off")) {
        fprintf(stderr, "stg: %s '%s': expected on or off\n", opt, v);
        return -1;
    }
    *on = strcmp(v, "on") == 0;
    return 1;
}

int cli_gemm_tune_arg(int argc, char **argv, int *i, bool *on) { return cli_on_off(argc, argv, i, "--gemm-tune", on); }

struct rt_backend *cli_open_backend_at(const char *name, stg_precision prec, unsigned cuda, int device) {
    stg_err err;
    rt_backend *b = NULL;
#ifdef STG_HAVE_CUDA
    if (!name) name = rt_cuda_available() ? "cuda" : "cpu";
#else
    if (!name) name = "cpu";
#endif
    if (strcmp(name, "cpu") == 0) {
        if (prec == STG_PREC_BF16) {
            fprintf(stderr, "stg: the cpu backend runs fp32 and fp64; bf16 needs --device cuda\n");
            return NULL;
        }
        if (rt_backend_cpu_new(&b, &err)) {
            fprintf(stderr, "stg: %s\n", err.msg);
            return NULL;
        }
        return b;
    }
    if (strcmp(name, "cuda") == 0) {
#ifdef STG_HAVE_CUDA
        if (prec == STG_PREC_FP64) {
            fprintf(stderr, "stg: fp64 runs on the cpu backend only\n");
            return NULL;
        }
        unsigned flags = ((cuda & CLI_CUDA_TF32) ? RT_CUDA_TF32 : 0u) | ((cuda & CLI_CUDA_GEMM_TUNE) ? RT_CUDA_GEMM_TUNE : 0u);
        // A process that sees one GPU uses it, whatever its local rank: Slurm's GPU binding (and any
        // CUDA_VISIBLE_DEVICES per rank) gives each task its own device 0.
        if (device > 0 && cuda_device_count() == 1) device = 0;
        if (rt_backend_cuda_new(device, flags, &b, &err)) {
            fprintf(stderr, "stg: %s\n", err.msg);
            return NULL;
        }
        return b;
#else
        fprintf(stderr, "stg: this build has no CUDA backend (configure with nvcc present, -DSTG_CUDA=ON)\n");
        return NULL;
#endif
    }
    fprintf(stderr, "stg: --device '%s': expected cpu or cuda\n", name);
    return NULL;
}

// Plans the model with one dim overridden; returns the peak or -1.
static int64_t peak_with(const cli_model_opts *m, const char *dim, int64_t v) {
    if (m->nsets == CLI_MAX_SETS) return -1;
    char set[96];
    snprintf(set, sizeof set, "%s=%lld", dim, (long long)v);
    const char *sets[CLI_MAX_SETS + 3];
    stg_step_opts o = cli_step_opts(m, sets, set);
    o.no_plan = false;
    stg_err err;
    stg_step *s;
    if (stg_step_build(&o, &s, &err)) return -1;
    int64_t peak = s->p->peak_bytes;
    stg_step_free(s);
    return peak;
}

static int64_t largest_fitting(const cli_model_opts *m, const char *dim, int64_t hi, int64_t budget) {
    int64_t lo = 0; // largest known to fit (0: none)
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        int64_t pk = peak_with(m, dim, mid);
        if (pk >= 0 && pk <= budget) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int cli_check_fit(const cli_model_opts *m, const stg_graph *g, const stg_plan *p, rt_backend *b) {
    int64_t fr = b->ops->mem_free(b);
    if (fr < 0) return 0;
    const int64_t margin = (int64_t)256 << 20; // library workspaces and the CUDA context's own
    int64_t budget = fr - margin;
    if (p->peak_bytes <= budget) return 0;
    bool host = strcmp(b->ops->name, "cpu") == 0; // the cpu backend's free memory is the host's MemAvailable
    fprintf(stderr, "stg: the step needs %.2f GiB (plan) but the %s has %.2f GiB %s (less %.0f MiB for workspaces)\n",
            (double)p->peak_bytes / (1 << 30), host ? "host" : "device", (double)fr / (1 << 30), host ? "available (MemAvailable)" : "free",
            (double)margin / (1 << 20));
    // the overrides name the roles' dims as the model does (batch may be `B`, ctx `seq`)
    const char *bname = graph_role_name(g, STG_DIM_BATCH), *cname = graph_role_name(g, STG_DIM_CTX);
    if (bname) {
        int64_t k = largest_fitting(m, bname, graph_role_value(g, STG_DIM_BATCH, NULL), budget);
        if (k > 0) fprintf(stderr, "stg: the largest batch that fits is %lld (--set %s=%lld)\n", (long long)k, bname, (long long)k);
        else fprintf(stderr, "stg: no batch size fits at this ctx\n");
    }
    if (cname) {
        int64_t k = largest_fitting(m, cname, graph_role_value(g, STG_DIM_CTX, NULL), budget);
        if (k > 0) fprintf(stderr, "stg: the largest ctx that fits at this batch is %lld (--set %s=%lld)\n", (long long)k, cname, (long long)k);
    }
    return -1;
}

// After a budget the search could not fit: the levers of a training step the user left off that change what
// the step keeps (bf16 weight gradients in bf16 precision; the optimizer in backward), each tried alone with
// the same budget, and a line for each that fits (these change numerics or clipping, so stg never picks them).
static void cli_other_levers(const stg_step_opts *o, int64_t budget) {
    if (!o->train || o->optim.grad_accum > 1) return;
    for (int k = 0; k < 2; k++) {
        stg_step_opts q = *o;
        const char *flag, *what;
        if (k == 0) {
            if (q.precision != STG_PREC_BF16 || q.optim.bf16_grads) continue;
            q.optim.bf16_grads = true;
            flag = "--grad-dtype bf16", what = "the products' weight gradients in bf16";
        } else {
            if (q.optim.in_backward || q.optim.dp_world >= 1) continue;
            q.optim.in_backward = true;
            flag = "--optimizer-in-backward", what = "each gradient freed by its update; clipping by the previous step's norm";
        }
        stg_budget_report r;
        stg_step *s = NULL;
        stg_err e;
        if (plan_fit_budget(&q, budget, &s, &r, NULL, &e) == 0)
            fprintf(stderr, "stg: with %s (%s) the step fits: planned peak %.2f GiB (%lld bytes), %d activations recomputed\n", flag,
                    what, (double)s->p->peak_bytes / (1 << 30), (long long)s->p->peak_bytes, r.n_recomputed);
        stg_step_free(s);
    }
}

int cli_plan(const cli_model_opts *m, stg_graph **g, rt_backend *b, stg_plan **p, stg_budget_report *rep) {
    stg_err err;
    memset(rep, 0, sizeof *rep);
    *p = NULL;
    if (m->budget == 0) {
        if (plan_build(*g, NULL, p, &err)) {
            fprintf(stderr, "stg: %s\n", err.msg);
            return -1;
        }
        return 0;
    }
    int64_t budget = m->budget;
    if (budget < 0) {
        int64_t fr = b ? b->ops->mem_free(b) : -1;
        if (fr < 0) {
            fprintf(stderr, "stg: --memory-budget auto needs a device that reports its free memory (--device cuda)\n");
            return -1;
        }
        budget = fr - ((int64_t)512 << 20); // the CUDA context, cuBLASLt workspace and kernel scratch
    }
    // The search fits a step of its own, built as *g was; the fitted one replaces *g.
    const char *sets[CLI_MAX_SETS + 3];
    stg_step_opts o = cli_step_opts(m, sets, NULL);
    stg_step *s;
    if (plan_fit_budget(&o, budget, &s, rep, NULL, &err)) {
        fprintf(stderr, "stg: %s\n", err.msg);
        cli_other_levers(&o, budget);
        return -1;
    }
    graph_free(*g);
    *g = s->g;
    *p = s->p;
    s->g = NULL;
    s->p = NULL;
    stg_step_free(s);
    if (rep->late_head_dw)
        fprintf(stderr, "stg: memory budget %.2f GiB: the fused head's weight gradient made late (late_dw=1: the logits once more, "
                        "+%.1f%% FLOPs): planned peak %.2f GiB (%.2f GiB without)\n",
                (double)budget / (1 << 30), rep->step_flops > 0 ? 100 * rep->late_flops / rep->step_flops : 0,
                (double)rep->peak_late / (1 << 30), (double)rep->peak_before / (1 << 30));
    if (rep->n_recomputed)
        fprintf(stderr, "stg: memory budget %.2f GiB: recomputing %d activations (%.2f GiB) in the backward pass, +%.1f%% FLOPs; "
                        "planned peak %.2f GiB (%.2f GiB without)\n",
                (double)budget / (1 << 30), rep->n_recomputed, (double)rep->bytes_dropped / (1 << 30),
                rep->step_flops > 0 ? 100 * rep->extra_flops / rep->step_flops : 0, (double)rep->peak_after / (1 << 30),
                (double)(rep->late_head_dw ? rep->peak_late : rep->peak_before) / (1 << 30));
    return 0;
}

void cli_fwd_free(cli_fwd *x) {
    rt_exec_free(x->e);
    if (x->own) x->own->ops->destroy(x->own);
    plan_free(x->p);
    graph_free(x->g);
    memset(x, 0, sizeof *x);
}

int cli_fwd_open(const cli_model_opts *m0, int64_t rows, rt_backend *b, int device, cli_fwd *x) {
    cli_model_opts m = *m0;
    m.train = false;
    m.budget = 0;
    char set[64];
    if (rows > 0) { // after every --set: the short last batch
        snprintf(set, sizeof set, "%s=%lld", graph_role_key(STG_DIM_BATCH), (long long)rows); // the loader finds the role's dim
        m.sets[m.nsets++] = set; // sets has a slot beyond CLI_MAX_SETS for this
    }
    memset(x, 0, sizeof *x);
    stg_err err;
    stg_budget_report rep;
    if (!(x->g = cli_build(&m))) return -1;
    rt_exec_opts eo = {.graph = true};
    if (cli_plan(&m, &x->g, b, &x->p, &rep) || cli_check_fit(&m, x->g, x->p, b)) {
        cli_fwd_free(x);
        return -1;
    }
    if (strcmp(b->ops->name, "cpu") != 0) {
        if (!(x->own = cli_open_backend_at(b->ops->name, m.precision, 0, device))) {
            cli_fwd_free(x);
            return -1;
        }
        b = x->own;
    }
    if (rt_exec_new(x->g, x->p, b, &eo, &x->e, &err) || rt_exec_init_params(x->e, 0, &err)) {
        fprintf(stderr, "stg: %s\n", err.msg);
        cli_fwd_free(x);
        return -1;
    }
    return 0;
}
