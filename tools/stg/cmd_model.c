// stg check, stg graph, stg memreport: what a model file declares and what its step needs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/base/file.h"
#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/formula.h"
#include "planner/plan.h"
#include "planner/shard.h"
#include "planner/report.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
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
    const char *in = m->model, *inw = "model file";
    if (!out || strcmp(out, "-") == 0 || !stg_check_output(out, "-o", &in, &inw, 1, &err)) return 0;
    fprintf(stderr, "stg %s: %s\n", cmd, err.msg);
    return 1;
}

int cmd_check(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    if (parse_model_cmd(argc, argv, &m, NULL, NULL, "")) return 2;
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
    if (out_is_input(&m, c.out, "graph")) return 2;
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
    const char *device;
    int64_t world, zero; // --world N --zero K: per-device bytes under data parallelism (0: not asked)
    double device_gib;   // --device-memory: capacity for "how many devices" (GiB)
} mem_ctx;

static int mem_extra(void *ctx, int argc, char **argv, int *i) {
    mem_ctx *c = ctx;
    const char *a = argv[*i], *v;
    if (strcmp(a, "-o") == 0) return (c->out = cli_value(argc, argv, i)) ? 1 : -1;
    if (strcmp(a, "--world") == 0) return (v = cli_value(argc, argv, i)) && !cli_int(a, v, 1, 1 << 20, &c->world) ? 1 : -1;
    if (strcmp(a, "--device-memory") == 0) return (v = cli_value(argc, argv, i)) && !cli_double(a, v, 0.001, 1e9, &c->device_gib) ? 1 : -1;
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
        else {
            fprintf(stderr, "stg memreport: --mode '%s': expected train or forward\n", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

int cmd_memreport(int argc, char **argv) {
    cli_model_opts m;
    cli_model_opts_init(&m);
    mem_ctx c = {NULL, STG_REPORT_TEXT, false, NULL, 0, 0, 80.0};
    if (parse_model_cmd(argc, argv, &m, mem_extra, &c,
                        " [--mode train|forward] [--format text|md|json|svg] [-o FILE] [--device cuda] [--memory-budget BYTES|auto]"
                        " [--optimizer-in-backward] [--group-matmuls on|off] [--world N [--zero 0|1|2|3] [--device-memory GIB]]"))
        return 2;
    if (out_is_input(&m, c.out, "memreport")) return 2;
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
