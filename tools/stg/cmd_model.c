// stg check, stg graph, stg memreport: what a model file declares and what its step needs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/base/file.h"
#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/formula.h"
#include "planner/infer.h"
#include "planner/plan.h"
#include "planner/shard.h"
#include "planner/report.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/sample.h"
#include "tools/stg/cli.h"

static int usage_model(const char *cmd, const char *extra) {
    (void)extra; // the table in tools/stg/usage.c has every command's options
    cli_usage(stderr, cmd);
    return 2;
}

// Parses MODEL and the model options; `extra` handles command-specific options (returns 1 when
// consumed, 0 unknown, -1 bad).
typedef int (*extra_fn)(void *ctx, int argc, char **argv, int *i);

static int parse_model_cmd(int argc, char **argv, cli_model_opts *m, extra_fn extra, void *ctx, const char *usage) {
    for (int i = 1; i < argc; i++) {
        int r = cli_model_arg(m, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        if (extra) {
            r = extra(ctx, argc, argv, &i);
            if (r < 0) return -1;
            if (r > 0) continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "stg %s: unknown option '%s'\n", argv[0], argv[i]);
            usage_model(argv[0], usage);
            return -1;
        }
        if (m->model) {
            fprintf(stderr, "stg %s: more than one model file ('%s' and '%s')\n", argv[0], m->model, argv[i]);
            return -1;
        }
        m->model = argv[i];
    }
    if (!m->model) {
        usage_model(argv[0], usage);
        return -1;
    }
    return 0;
}

// -o naming the model file (directly, through a link or another path) would replace it with the
// output: refused before anything is written.
static int out_is_input(const cli_model_opts *m, const char *out, const char *cmd) {
    stg_err err;
    const char *in[STG_MAX_MODEL_FILES], *inw[STG_MAX_MODEL_FILES];
    int n = cli_model_inputs(m->model, in, inw);
    if (!out || strcmp(out, "-") == 0 || !stg_check_output(out, "-o", in, inw, n, &err)) return 0;
    fprintf(stderr, "stg %s: %s\n", cmd, err.msg);
    return 1;
}

int cmd_check(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    if (parse_model_cmd(argc, argv, &m, NULL, NULL, "") || cli_resolve_accum(&m, 1, "check")) return 2;
    stg_graph *g = cli_build(&m);
    if (!g) return 2; // the model file (or a --set) is bad input
    int nparam = 0, counts[STG_PHASE_OPTIMIZER + 1] = {0};
    for (int t = 0; t < g->nt; t++) nparam += g->t[t].cls == STG_CLASS_PARAM;
    for (int o = 0; o < g->nops; o++) counts[g->ops[o].phase]++;
    printf("model %s (%s), precision %s\n", g->name, m.model, stg_precision_name(g->precision));
    printf("dims:");
    for (int i = 0; i < g->ndims; i++) printf(" %s=%lld", g->dims[i].name, (long long)g->dims[i].value);
    printf("\n");
    for (int i = 0; i < g->nopts; i++) printf("option %s = %s\n", g->opt_names[i], g->opt_values[i]);
    printf("ops: %d forward, %d backward, %d optimizer (%d in all)\n", counts[STG_PHASE_FORWARD],
           counts[STG_PHASE_BACKWARD], counts[STG_PHASE_OPTIMIZER], g->nops);
    int ncls[STG_CLASS_COUNT] = {0};
    for (int t = 0; t < g->nt; t++) ncls[g->t[t].cls]++;
    printf("tensors: %d (", g->nt);
    for (int c = 0; c < STG_CLASS_COUNT; c++) printf("%s%d %s", c ? ", " : "", ncls[c], stg_class_name(c));
    printf(")\n");
    double ff = graph_phase_flops(g, STG_PHASE_FORWARD), fb = graph_phase_flops(g, STG_PHASE_BACKWARD);
    printf("FLOPs per step: forward %.4g, backward %.4g\n", ff, fb);
    printf("parameters: %d tensors, %lld elements\n", nparam, (long long)graph_param_count(g));
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_PARAM) continue;
        char sb[128];
        printf("  %-28s %-14s %12lld\n", x->name, stg_shape_str(x, sb, sizeof sb), (long long)stg_numel(x));
    }
    int rc = fflush(stdout) || ferror(stdout) ? 1 : 0;
    graph_free(g);
    return rc;
}

typedef struct {
    const char *out;
    bool dot;
} graph_ctx;

static int graph_extra(void *ctx, int argc, char **argv, int *i) {
    graph_ctx *c = ctx;
    if (strcmp(argv[*i], "--dot") == 0) {
        c->dot = true;
        return 1;
    }
    if (strcmp(argv[*i], "-o") == 0) return (c->out = cli_value(argc, argv, i)) ? 1 : -1;
    return 0;
}

int cmd_graph(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    graph_ctx c = {NULL, false};
    const char *usage = " --dot [-o FILE.dot]";
    if (parse_model_cmd(argc, argv, &m, graph_extra, &c, usage)) return 2;
    if (!c.dot) return usage_model("graph", usage);
    if (out_is_input(&m, c.out, "graph") || cli_resolve_accum(&m, 1, "graph")) return 2;
    stg_graph *g = cli_build(&m);
    if (!g) return 2; // the model file (or a --set) is bad input
    stg_err err;
    int rc = 0;
    const char *path = c.out ? c.out : "/dev/stdout";
    if (graph_write_dot(g, path, &err)) {
        fprintf(stderr, "stg graph: %s\n", err.msg);
        rc = 1;
    }
    graph_free(g);
    return rc;
}

typedef struct {
    const char *out;
    stg_report_format fmt;
    bool forward;
    bool sample;    // --mode sample: the inference graphs (planner/infer.h)
    int64_t prompt; // --prompt N (sample mode): prompt tokens per sequence, 0: the whole ctx
    bool device_memory_given;
    const char *device;
    int64_t world, zero; // --world N --zero K: per-device bytes under data parallelism (0: not asked)
    double device_gib;   // --device-memory: capacity for "how many devices" (GiB)
} mem_ctx;

static int mem_extra(void *ctx, int argc, char **argv, int *i) {
    mem_ctx *c = ctx;
    const char *a = argv[*i], *v;
    if (strcmp(a, "-o") == 0) return (c->out = cli_value(argc, argv, i)) ? 1 : -1;
    if (strcmp(a, "--world") == 0) return (v = cli_value(argc, argv, i)) && !cli_int(a, v, 1, 1 << 20, &c->world) ? 1 : -1;
    if (strcmp(a, "--device-memory") == 0) {
        c->device_memory_given = true;
        return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0.001, 1e9, &c->device_gib) ? 1 : -1;
    }
    if (strcmp(a, "--prompt") == 0) return (v = cli_value(argc, argv, i)) && !cli_int(a, v, 1, INT64_C(1) << 40, &c->prompt) ? 1 : -1;
    if (strcmp(a, "--device") == 0) return (c->device = cli_value(argc, argv, i)) ? 1 : -1;
    if (strcmp(a, "--format") == 0) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (strcmp(v, "text") == 0) c->fmt = STG_REPORT_TEXT;
        else if (strcmp(v, "md") == 0) c->fmt = STG_REPORT_MD;
        else if (strcmp(v, "json") == 0) c->fmt = STG_REPORT_JSON;
        else if (strcmp(v, "svg") == 0) c->fmt = STG_REPORT_SVG;
        else {
            fprintf(stderr, "stg memreport: --format '%s': expected text, md, json or svg\n", v);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--mode") == 0) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (strcmp(v, "train") == 0) c->forward = false;
        else if (strcmp(v, "forward") == 0) c->forward = true;
        else if (strcmp(v, "sample") == 0) c->sample = true;
        else {
            fprintf(stderr, "stg memreport: --mode '%s': expected train, forward or sample\n", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

// --mode sample: the prefill and decode graphs of `stg sample` at the model's batch and ctx, planned
// term by term against the formula, the largest batch and context that fit the device (its free
// memory with --device cuda, else --device-memory GIB), and with --device the bytes measured.
static int memreport_sample(cli_model_opts *m, const mem_ctx *c) {
    if (c->fmt == STG_REPORT_MD || c->fmt == STG_REPORT_SVG || c->world || m->budget || m->optim.in_backward) {
        fprintf(stderr, "stg memreport: --mode sample reports as text or json, without --world, --zero, --memory-budget or "
                        "--optimizer-in-backward\n");
        return 2;
    }
    m->train = false;
    stg_graph *g = cli_build(m);
    if (!g) return 2;
    bool fb, fc;
    int64_t batch = graph_role_value(g, STG_DIM_BATCH, &fb), ctx = graph_role_value(g, STG_DIM_CTX, &fc);
    graph_free(g);
    if (!fb || !fc) {
        fprintf(stderr, "stg memreport: --mode sample needs a batch and a ctx (sequences, and the KV cache's positions): %s\n",
                graph_role_missing(fb ? STG_DIM_CTX : STG_DIM_BATCH));
        return 2;
    }
    if (c->prompt > ctx) {
        fprintf(stderr, "stg memreport: --prompt %lld is longer than the context %lld (ctx)\n", (long long)c->prompt, (long long)ctx);
        return 2;
    }
    const char *sets[CLI_MAX_SETS + 3];
    int ns = 0;
    if (m->vocab_set[0]) sets[ns++] = m->vocab_set;
    for (int i = 0; i < m->nsets; i++) sets[ns++] = m->sets[i];
    stg_infer_opts io = stg_infer_defaults();
    io.model_path = m->model;
    io.sets = sets;
    io.nsets = ns;
    io.precision = m->precision;
    io.batch = batch;
    io.prompt = c->prompt ? c->prompt : ctx;
    io.ungrouped = m->ungrouped;
    stg_err err;
    stg_infer *s = NULL;
    stg_infer_mem mem;
    int rc = 1;
    rt_backend *bp = NULL, *bd = NULL;
    rt_sampler *smp = NULL;
    int64_t measured = -1, capacity = (int64_t)(c->device_gib * (double)(1LL << 30));
    if (stg_infer_build(&io, &s, &err) || stg_infer_memory(s, &mem, &err)) {
        fprintf(stderr, "stg memreport: %s\n", err.msg);
        goto out;
    }
    if (c->device) {
        if (!(bp = cli_open_backend(c->device, m->precision, 0)) || !(bd = cli_open_backend(c->device, m->precision, 0))) goto out;
        int64_t fr = bp->ops->mem_free(bp);
        if (fr >= 0 && !c->device_memory_given) capacity = fr - ((int64_t)512 << 20); // contexts, workspaces and scratch beside the plan
        if (fr >= 0 && mem.total > fr) {
            fprintf(stderr, "stg memreport: the plan needs %.2f GiB and the device has %.2f GiB free: not allocated\n",
                    (double)mem.total / (1 << 30), (double)fr / (1 << 30));
        } else {
            rt_sampler_opts so = {0};
            if (rt_sampler_new(s, bp, bd, &so, &smp, &err)) {
                fprintf(stderr, "stg memreport: %s\n", err.msg);
                goto out;
            }
            measured = rt_sampler_measured(smp);
        }
    }
    char tmp[4200];
    FILE *f = cli_out_open(c->out, tmp, sizeof tmp);
    if (!f) goto out;
    if (stg_infer_report(f, c->fmt == STG_REPORT_JSON, &io, s, &mem, measured, capacity, &err)) {
        fprintf(stderr, "stg memreport: %s\n", err.msg);
        if (f != stdout) {
            fclose(f);
            remove(tmp);
        }
        goto out;
    }
    rc = cli_out_close(f, c->out, tmp) ? 1 : 0;
out:
    rt_sampler_free(smp);
    stg_infer_free(s);
    if (bp) bp->ops->destroy(bp);
    if (bd) bd->ops->destroy(bd);
    return rc;
}

int cmd_memreport(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    mem_ctx c = {.fmt = STG_REPORT_TEXT, .device_gib = 80.0};
    if (parse_model_cmd(argc, argv, &m, mem_extra, &c,
                        " [--mode train|forward] [--format text|md|json|svg] [-o FILE] [--device cuda] [--memory-budget BYTES|auto]"
                        " [--optimizer-in-backward] [--group-matmuls on|off] [--world N [--zero 0|1|2|3] [--device-memory GIB]]"))
        return 2;
    if (out_is_input(&m, c.out, "memreport")) return 2;
    if (c.sample) return memreport_sample(&m, &c);
    if (c.prompt) {
        fprintf(stderr, "stg memreport: --prompt is for --mode sample\n");
        return 2;
    }
    m.train = !c.forward;
    c.zero = m.optim.dp_zero; // --zero is a model option (cli_model_arg)
    m.optim.dp_zero = 0;
    if ((c.zero || c.world) && c.fmt == STG_REPORT_SVG) {
        fprintf(stderr, "stg memreport: --world and --zero add to the text, md and json formats, not svg\n");
        return 2;
    }
    if (c.zero && !c.world) c.world = 1;
    // the step of one rank before sharding (gradient buckets and their allreduce ops); the ZeRO stage
    // is then accounted for by planner/shard.c
    if (c.world > 1 && m.train) m.optim.dp_world = (int)c.world;
    if (cli_resolve_accum(&m, c.world > 1 ? (int)c.world : 1, "memreport")) return 2;
    stg_graph *g = cli_build(&m);
    if (!g) return 2; // the model file (or a --set) is bad input
    stg_err err;
    stg_plan *p = NULL;
    stg_formula fm;
    int rc = 1;
    rt_backend *dev = NULL;
    if (c.device && !(dev = cli_open_backend(c.device, m.precision, false))) goto out;
    stg_budget_report brep;
    if (cli_plan(&m, &g, dev, &p, &brep)) goto out;
    if (formula_compute(g, m.train, &fm, &err)) {
        fprintf(stderr, "stg memreport: %s\n", err.msg);
        goto out;
    }
    stg_report_extra x = {.measured_bytes = -1, .mode = c.forward ? "forward" : "train", .model_path = m.model, .budget = m.budget ? &brep : NULL};
    if (dev) { // allocate the plan on the device and measure what it really holds
        rt_backend *b = dev;
        dev = NULL;
        rt_exec *e = NULL;
        int fit = cli_check_fit(&m, g, p, b);
        if (!fit && rt_exec_new(g, p, b, NULL, &e, &err)) fprintf(stderr, "stg memreport: %s\n", err.msg);
        if (e) x.measured_bytes = rt_exec_measured_bytes(e);
        if (e && b->ops->workspaces) x.nbeside = b->ops->workspaces(b, x.beside_name, x.beside_bytes, 8);
        if (e && x.measured_bytes < 0) fprintf(stderr, "stg memreport: the %s backend cannot measure device bytes\n", b->ops->name);
        rt_exec_free(e);
        b->ops->destroy(b);
        if (fit || x.measured_bytes < 0) goto out;
    }
    char tmp[4200];
    FILE *f = cli_out_open(c.out, tmp, sizeof tmp);
    if (!f) goto out;
    stg_shard_report sr;
    if (c.world && plan_shard(g, p, (int)c.world, (int)c.zero, m.optim.dp_zero, m.optim.dp_bucket_bytes, &sr, &err)) {
        fprintf(stderr, "stg memreport: %s\n", err.msg);
        if (f != stdout) {
            fclose(f);
            remove(tmp);
        }
        goto out;
    }
    if (c.world) {
        x.shard = &sr;
        x.shard_bucket = m.optim.dp_bucket_bytes;
        x.shard_capacity = m.train ? (int64_t)(c.device_gib * (double)(1LL << 30)) : 0;
    }
    if (report_write(f, c.fmt, g, p, &fm, &x, &err) ||
        (c.world && c.fmt != STG_REPORT_JSON && plan_shard_write(f, c.fmt == STG_REPORT_MD, g, p, &sr, m.optim.dp_bucket_bytes,
                                     m.train ? (int64_t)(c.device_gib * (double)(1LL << 30)) : 0, &err))) {
        fprintf(stderr, "stg memreport: %s\n", err.msg);
        if (f != stdout) {
            fclose(f);
            remove(tmp);
        }
        goto out;
    }
    rc = cli_out_close(f, c.out, tmp) ? 1 : 0;
out:
    if (dev) dev->ops->destroy(dev);
    plan_free(p);
    graph_free(g);
    return rc;
}
