// stg bench: timed iterations of a captured (or eagerly launched) step.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/registry.h"
#include "planner/budget.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "runtime/dist.h"
#include "tools/stg/cli.h"
#ifdef STG_HAVE_CUDA
#include "runtime/cuda/backend_cuda.h"
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_sorted(const double *v, int64_t n) { return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]); }

static double now_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0; // CLOCK_MONOTONIC is always there (POSIX)
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#define BENCH_MAX_WHAT 3

// Parses "forward,step,..." into phase masks; prints the error and returns -1.
static int parse_what(const char *v, unsigned *masks, const char **names, int *n) {
    static const char *const known[] = {"forward", "forward-backward", "step"};
    static const unsigned kmask[] = {RT_PHASE_FORWARD, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, RT_PHASE_ALL};
    *n = 0;
    const char *s = v;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int k = -1;
        for (int j = 0; j < 3; j++)
            if (strlen(known[j]) == len && strncmp(s, known[j], len) == 0) k = j;
        if (k < 0) {
            fprintf(stderr, "stg bench: --what '%s': expected forward, forward-backward or step (or several, comma-separated)\n", v);
            return -1;
        }
        for (int j = 0; j < *n; j++)
            if (masks[j] == kmask[k]) {
                fprintf(stderr, "stg bench: --what '%s': '%s' is named twice\n", v, known[k]);
                return -1;
            }
        masks[*n] = kmask[k];
        names[(*n)++] = known[k];
        if (!e) return 0;
        s = e + 1;
    }
}

static void print_list(const double *x, int64_t n) {
    putchar('[');
    for (int64_t i = 0; i < n; i++) printf(i ? ", %.4f" : "%.4f", x[i]);
    putchar(']');
}

// Bytes the optimizer's memory-bound ops move (each read once, each write once).
static double optim_op_bytes(const stg_graph *g, const stg_op *op) {
    double by = 0;
    if (op->kind == STG_OP_GLOBAL_NORM)
        for (int i = 0; i < op->n_in; i++) by += (double)stg_bytes(&g->t[op->in[i]]);
    if (op->kind == STG_OP_ADAMW) {
        int nin = op->n_in - (op->a.adamw.slot > 0);
        by = (double)stg_bytes(&g->t[op->in[1]]) + 2.0 * (double)(stg_bytes(&g->t[op->in[2]]) + stg_bytes(&g->t[op->in[3]]));
        by += nin > 6 ? 2.0 * (double)stg_bytes(&g->t[op->in[6]]) + (double)stg_bytes(&g->t[op->in[0]])
                      : 2.0 * (double)stg_bytes(&g->t[op->in[0]]);
    }
    return by;
}

// After --profile: the bandwidth of AdamW and the global norm, against the device's copy bandwidth.
static void print_optim_bandwidth(const stg_graph *g, rt_backend *b, const double *pm) {
    const stg_op_kind kinds[2] = {STG_OP_ADAMW, STG_OP_GLOBAL_NORM};
    double ms[2] = {0, 0}, by[2] = {0, 0}, bw = 0;
    for (int s = 0; s < g->nsched; s++)
        for (int k = 0; k < 2; k++)
            if (g->ops[g->schedule[s]].kind == kinds[k]) {
                ms[k] += pm[s];
                by[k] += optim_op_bytes(g, &g->ops[g->schedule[s]]);
            }
    if (ms[0] <= 0 && ms[1] <= 0) return;
#ifdef STG_HAVE_CUDA
    if (strcmp(b->ops->name, "cuda") == 0) {
        stg_err err;
        if (cuda_copy_bandwidth(rt_backend_cuda_context(b), (size_t)256 << 20, 20, &bw, &err)) {
            fprintf(stderr, "stg bench: copy bandwidth: %s\n", err.msg);
            bw = 0;
        } else {
            printf("  copy      %.3f TB/s (cudaMemcpyAsync device to device of 256 MiB, median of 20; bytes read + written)\n", bw / 1e12);
        }
    }
#endif
    for (int k = 0; k < 2; k++) {
        if (ms[k] <= 0) continue;
        printf("  %-9s %.3f ms moving %.2f GB: %.3f TB/s", ops_name(kinds[k]), ms[k], by[k] / 1e9, by[k] / (ms[k] * 1e-3) / 1e12);
        if (bw > 0) printf(" (%.0f%% of copy; at copy bandwidth %.3f ms)", 100 * by[k] / (ms[k] * 1e-3) / bw, by[k] / bw * 1e3);
        printf("\n");
    }
}

// After --profile on CUDA: every matmul shape's cuBLASLt algorithm (configuration ids; with
// --gemm-tune on, the candidate chosen and its time against the heuristic's first, one product
// alone) and the device time of its ops in the profile, largest first.
static int print_gemm_algos(const stg_graph *g, rt_backend *b, const double *pm) {
#ifdef STG_HAVE_CUDA
    if (strcmp(b->ops->name, "cuda") != 0) return 0;
    stg_cuda *c = rt_backend_cuda_context(b);
    int n = 0, *rep = malloc(sizeof(int) * (size_t)(g->nsched ? g->nsched : 1)), *cnt = calloc((size_t)(g->nsched ? g->nsched : 1), sizeof(int));
    double *tot = calloc((size_t)(g->nsched ? g->nsched : 1), sizeof(double));
    cuda_mm_info *inf = malloc(sizeof *inf * (size_t)(g->nsched ? g->nsched : 1));
    if (!rep || !cnt || !tot || !inf) {
        free(rep), free(cnt), free(tot), free(inf);
        return -1;
    }
    for (int s = 0; s < g->nsched; s++) {
        cuda_mm_info x;
        if (cuda_mm_describe(c, g->schedule[s], &x)) continue;
        int j = 0;
        for (; j < n; j++)
            if (inf[j].m == x.m && inf[j].n == x.n && inf[j].k == x.k && inf[j].batch == x.batch && inf[j].algo_id == x.algo_id &&
                inf[j].tile == x.tile && inf[j].stages == x.stages && inf[j].splitk == x.splitk && inf[j].cluster == x.cluster &&
                inf[j].gemv == x.gemv && inf[j].gemv_rows == x.gemv_rows && inf[j].gemv_split == x.gemv_split &&
                inf[j].gemv_blocks == x.gemv_blocks && inf[j].gemv_fold == x.gemv_fold)
                break;
        if (j == n) inf[n] = x, rep[n] = g->schedule[s], n++;
        cnt[j]++;
        tot[j] += pm[s];
    }
    if (n) printf("  gemms     %d shapes: device ms (ops), m x n x k [batch], algo/tile/stages/splitK/cluster, tuning, first op\n", n);
    for (int r = 0; r < n; r++) {
        int j = -1;
        for (int i = 0; i < n; i++)
            if (cnt[i] > 0 && (j < 0 || tot[i] > tot[j])) j = i;
        const cuda_mm_info *x = &inf[j];
        char tune[96] = "heuristic";
        if (x->candidates > 0 && x->ms_pick >= 0)
            snprintf(tune, sizeof tune, "pick %d of %d, %.4f -> %.4f ms", x->pick, x->candidates, x->ms_first, x->ms_pick);
        printf("            %9.3f ms (%3d)  %5lld x %5lld x %5lld", tot[j], cnt[j], (long long)x->m, (long long)x->n, (long long)x->k);
        if (x->batch > 1) printf(" [%lld]", (long long)x->batch);
        if (x->gemv) {
            char loop[64] = "";
            if (x->gemv_blocks > 0) snprintf(loop, sizeof loop, " (at most %lld blocks, looping)", (long long)x->gemv_blocks);
            printf("  few-rows kernel, %d rows a warp, k split %d ways%s%s  %s\n", x->gemv_rows, x->gemv_split, loop,
                   x->gemv_fold ? ", writing its swiglu's output" : "", g->t[g->ops[rep[j]].out[0]].name);
        }
        else
            printf("  %d/%d/%d/%d/%d  %s  %s\n", x->algo_id, x->tile, x->stages, x->splitk, x->cluster, tune,
                   g->t[g->ops[rep[j]].out[0]].name);
        cnt[j] = 0;
    }
    free(rep), free(cnt), free(tot), free(inf);
#else
    (void)g, (void)b, (void)pm;
#endif
    return 0;
}

int cmd_bench(int argc, char **argv) {
    double t_start = now_ms();
    cli_model_opts m;
    cli_model_opts_init(&m);
    const char *device = NULL;
    unsigned masks[BENCH_MAX_WHAT] = {RT_PHASE_ALL};
    const char *whats[BENCH_MAX_WHAT] = {"step"};
    int nwhat = 1;
    bool eager = false, json = false, tf32 = false, fast_init = true, profile = false, tune = false;
    const char *exec_given = NULL; // --exec and --streams as given: errors on the cpu backend, which has neither
    int64_t warmup = 5, iters = 10, streams = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_arg(&m, argc, argv, &i);
        if (r == 0) r = cli_gemm_tune_arg(argc, argv, &i, &tune);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (strcmp(a, "--json") == 0) json = true;
        else if (strcmp(a, "--real-init") == 0) fast_init = false;
        else if (strcmp(a, "--profile") == 0) profile = true;
        else if (strcmp(a, "--tf32") == 0) tf32 = true;
        else if (strcmp(a, "--device") == 0) {
            if (!(device = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--exec") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (strcmp(v, "graph") && strcmp(v, "eager")) {
                fprintf(stderr, "stg bench: --exec '%s': expected graph or eager\n", v);
                return 2;
            }
            eager = strcmp(v, "eager") == 0;
            exec_given = v;
        } else if (strcmp(a, "--what") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || parse_what(v, masks, whats, &nwhat)) return 2;
        } else if (strcmp(a, "--warmup") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, 100000, &warmup)) return 2;
        } else if (strcmp(a, "--streams") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 8, &streams)) return 2;
        } else if (strcmp(a, "--iters") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 100000, &iters)) return 2;
        } else if (a[0] == '-' || m.model) {
            fprintf(stderr, "stg bench: unexpected argument '%s'\n", a);
            cli_usage(stderr, "bench");
            return 2;
        } else
            m.model = a;
    }
    if (!m.model) {
        cli_usage(stderr, "bench");
        return 2;
    }
    double t0 = now_ms();
    rt_dist dist; // under stg launch: a data-parallel step (allreduce ops); rank 0 reports
    if (cli_dist_env(&m, &dist) || cli_resolve_accum(&m, dist.world, "bench")) return 2;
    rt_backend *b = cli_open_backend_at(device, m.precision, (tf32 ? CLI_CUDA_TF32 : 0u) | (tune ? CLI_CUDA_GEMM_TUNE : 0u),
                                        dist.local_rank);
    if (!b) return 2;
    if (strcmp(b->ops->name, "cpu") == 0 && (exec_given || streams)) {
        if (exec_given) fprintf(stderr, "stg bench: --exec %s chooses how CUDA launches a step; the cpu backend runs every op in turn: drop it\n", exec_given);
        else fprintf(stderr, "stg bench: --streams spreads a captured CUDA step over streams; the cpu backend has one: drop it\n");
        b->ops->destroy(b);
        rt_dist_close(&dist);
        return 2;
    }
    if (cli_dist_join(&dist, b)) {
        b->ops->destroy(b);
        rt_dist_close(&dist);
        return 1;
    }
    if (dist.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        b->ops->destroy(b);
        rt_dist_close(&dist);
        return 1;
    }
    double backend_ms = now_ms() - t0;
    stg_graph *g = cli_build(&m);
    stg_plan *p = NULL;
    rt_exec *e = NULL;
    rt_feed *f = NULL;
    double *ms = NULL, *all = NULL, *host = NULL;
    stg_err err;
    int rc = g ? 1 : 2; // a model that does not load is bad input
    if (!g) goto out;
    stg_budget_report brep;
    if (cli_plan(&m, &g, b, &p, &brep)) goto out;
    int64_t free_before = b->ops->mem_free(b);
    if (cli_check_fit(&m, g, p, b)) {
        if (json) // the refusal as data: the plan says beforehand that the step will not fit
            printf("{\"model\": \"%s\", \"precision\": \"%s\", \"what\": \"%s\", \"batch\": %lld, \"ctx\": %lld, \"fits\": false, "
                   "\"planned_bytes\": %lld, \"free_bytes\": %lld}\n",
                   g->name, stg_precision_name(g->precision), whats[0], (long long)graph_role_value(g, STG_DIM_BATCH, NULL),
                   (long long)graph_role_value(g, STG_DIM_CTX, NULL), (long long)p->peak_bytes, (long long)free_before);
        goto out;
    }
    rt_exec_opts eo = {.graph = !eager, .streams = (int)streams};
    rt_rng rng;
    rt_rng_seed(&rng, 1);
    if (rt_exec_new(g, p, b, &eo, &e, &err) || (fast_init ? rt_exec_init_params_fast(e, &err) : rt_exec_init_params(e, 0, &err)) || rt_exec_set_steps_done(e, 0, &err) ||
        rt_feed_new(g, NULL, 4, 1, &f, &err) || rt_feed_next(f, e, &rng, &err)) {
        fprintf(stderr, "stg bench: %s\n", err.msg);
        goto out;
    }
    double setup_ms = now_ms() - t_start;
    ms = calloc((size_t)iters, sizeof *ms);
    all = calloc((size_t)(warmup + iters), sizeof *all);
    host = calloc((size_t)(warmup + iters), sizeof *host);
    if (!ms || !all || !host) {
        fprintf(stderr, "stg bench: out of memory\n");
        goto out;
    }
    for (int w = 0; w < nwhat; w++) {
        unsigned mask = masks[w];
        const char *what = whats[w];
        for (int64_t i = 0; i < warmup + iters; i++) {
            double t, h0 = now_ms();
            if (b->ops->timer_mark(b, 0, &err) || rt_exec_submit(e, mask, &err) || (host[i] = now_ms() - h0, 0) ||
                b->ops->timer_mark(b, 1, &err) || rt_exec_collect(e, NULL, &err) || b->ops->elapsed_ms(b, &t, &err)) {
                fprintf(stderr, "stg bench: %s, iteration %lld: %s\n", what, (long long)i, err.msg);
                goto out;
            }
            all[i] = t;
            if (i >= warmup) ms[i - warmup] = t;
        }
        double first_ms = all[0];
        int64_t free_after = b->ops->mem_free(b);
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < iters; i++) sum += ms[i];
        double mean = sum / (double)iters;
        for (int64_t i = 0; i < iters; i++) sq += (ms[i] - mean) * (ms[i] - mean);
        double sd = iters > 1 ? sqrt(sq / (double)(iters - 1)) : 0;
        qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
        double med = median_sorted(ms, iters);
        // the host's time in each timed submit (graph: one launch; eager: every op's launch), median
        double *hsort = malloc((size_t)iters * sizeof *hsort);
        if (!hsort) {
            fprintf(stderr, "stg bench: out of memory\n");
            goto out;
        }
        memcpy(hsort, host + warmup, (size_t)iters * sizeof *hsort);
        qsort(hsort, (size_t)iters, sizeof *hsort, cmp_double);
        double hmed = median_sorted(hsort, iters);
        free(hsort);
        // FLOPs: the graph's own count of what runs, and the peers' model-FLOPs convention
        // (6·params·tokens + 12·layers·batch·ctx²·d_model per step, /3 for forward, 2/3 for fwd+bwd).
        // gradient accumulation: every timed run is micro forward and backward passes, one optimizer
        int micro = rt_exec_micro(e);
        double gflops = 0;
        for (int s = 0; s < g->nsched; s++) {
            const stg_op *op = &g->ops[g->schedule[s]];
            if (mask & (1u << op->phase)) gflops += graph_op_flops(g, g->schedule[s]) * (op->phase == STG_PHASE_OPTIMIZER ? 1 : micro);
        }
        bool f1, f2, f3, f4;
        double B = (double)graph_role_value(g, STG_DIM_BATCH, &f1), S = (double)graph_role_value(g, STG_DIM_CTX, &f2),
               L = (double)graph_dim(g, "n_layers", &f3), D = (double)graph_dim(g, "d_model", &f4);
        double tokens = ((f1 && f2) ? B * S : (double)rt_feed_tokens_per_batch(f)) * micro; // per timed run
        double mflops = -1;
        if (f1 && f2 && f3 && f4) {
            mflops = (6.0 * (double)graph_param_count(g) * B * S + 12.0 * L * B * S * S * D) * micro;
            mflops *= mask == RT_PHASE_FORWARD ? 1.0 / 3 : mask == (RT_PHASE_FORWARD | RT_PHASE_BACKWARD) ? 1.0 : 1.0;
        }
        double peak = 0;
        const char *devname = b->ops->name;
#ifdef STG_HAVE_CUDA
        if (strcmp(b->ops->name, "cuda") == 0) {
            peak = cuda_peak_tflops(rt_backend_cuda_context(b), g->precision);
            devname = cuda_device_name(rt_backend_cuda_context(b));
        }
#endif
        double tflops = mflops > 0 ? mflops / (med * 1e-3) / 1e12 : gflops / (med * 1e-3) / 1e12;
        int64_t measured = rt_exec_measured_bytes(e);
        // Device bytes the process gained from before the executor's allocation to the end of these
        // runs: the plan's regions plus what running adds (captured graphs, lazily loaded kernels).
        // (not on the cpu: its free memory is the host's MemAvailable, which every other process moves)
        int64_t grown = strcmp(b->ops->name, "cpu") != 0 && free_before >= 0 && free_after >= 0 ? free_before - free_after : -1;
        // what the backend holds beside the plan, by name (library workspaces, scratch)
        const char *wname[8];
        int64_t wbytes[8], wsum = 0;
        int nw = b->ops->workspaces ? b->ops->workspaces(b, wname, wbytes, 8) : 0;
        for (int i = 0; i < nw; i++) wsum += wbytes[i];
        if (json) {
            printf("{\"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"grad_dtype\": \"%s\", \"optimizer\": \"%s\", \"attention\": \"%s\", \"exec\": \"%s\", \"what\": \"%s\", "
                   "\"batch\": %g, \"ctx\": %g, \"grad_accum\": %d, \"tokens_per_run\": %.0f, \"params\": %lld, \"warmup\": %lld, \"iters\": %lld, \"first_ms\": %.4f, \"mean_ms\": %.4f, "
                   "\"std_ms\": %.4f, \"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, \"tokens_per_s\": %.1f, \"graph_flops\": %.6g, "
                   "\"model_flops\": %.6g, \"tflops\": %.2f, \"mfu\": %.4f, \"planned_bytes\": %lld, \"measured_bytes\": %lld, "
                   "\"recomputed\": %d, \"extra_flops\": %.6g, \"bytes_after_runs\": %lld, \"backend_ms\": %.3f, \"setup_ms\": %.3f, \"submit_median_ms\": %.4f, \"times_ms\": ",
                   g->name, devname, stg_precision_name(g->precision), g->bf16_grads ? "bf16" : g->grad_dtype == STG_F64 ? "fp64" : "fp32",
                   graph_optim_in_backward(g) ? "in_backward" : "after_backward",
                   graph_option(g, "attention") ? graph_option(g, "attention") : "",
                   eager || !b->ops->capture_begin ? "eager" : "graph", what, f1 ? B : 0, f2 ? S : 0, micro, tokens,
                   (long long)graph_param_count(g), (long long)warmup,
                   (long long)iters, first_ms, mean, sd, med, ms[0], ms[iters - 1], tokens / (med * 1e-3), gflops, mflops, tflops,
                   peak > 0 ? tflops / peak : 0, (long long)p->peak_bytes, (long long)measured, brep.n_recomputed, brep.extra_flops,
                   (long long)grown, backend_ms, setup_ms, hmed);
            print_list(all, warmup + iters);
            printf(", \"submit_ms\": ");
            print_list(host, warmup + iters);
            printf(", \"workspace_bytes\": %lld, \"workspaces\": {", (long long)wsum);
            for (int i = 0; i < nw; i++) printf("%s\"%s\": %lld", i ? ", " : "", wname[i], (long long)wbytes[i]);
            printf("}}\n");
        } else {
            printf("%s on %s: %s%s%s, %s attention, %s, %s; batch %g ctx %g", g->name, devname, stg_precision_name(g->precision),
                   g->bf16_grads ? " with bf16 weight gradients" : "", graph_optim_in_backward(g) ? ", AdamW in backward" : "",
                   graph_option(g, "attention") ? graph_option(g, "attention") : "-", eager || !b->ops->capture_begin ? "eager launch" : "graph replay", what,
                   f1 ? B : 0, f2 ? S : 0);
            if (micro > 1) printf("; %d micro-batches per run (gradient accumulation): %.0f tokens", micro, tokens);
            printf("\n");
            printf("  %lld iterations after %lld warm-up (the first took %.2f ms)\n", (long long)iters, (long long)warmup, first_ms);
            printf("  time      mean %.3f ms +- %.3f, median %.3f, min %.3f, max %.3f\n", mean, sd, med, ms[0], ms[iters - 1]);
            if (b->ops->capture_begin) // a device backend: the host only launches
                printf("  host      %.3f ms to submit a step (median; %s)\n", hmed,
                       eager ? "every op's launch: eager launch waits on the host when this nears the time" : "one graph launch");
            printf("  speed     %.0f tokens/s, %.1f TFLOP/s", tokens / (med * 1e-3), tflops);
            if (peak > 0) printf(" (MFU %.1f%% of %.0f)", 100 * tflops / peak, peak);
            printf("\n  memory    planned %.3f GiB", (double)p->peak_bytes / (1 << 30));
            if (nw > 0) printf(" + %.1f MiB beside it = %.3f GiB", (double)wsum / (1 << 20), (double)(p->peak_bytes + wsum) / (1 << 30));
            if (measured >= 0) {
                printf(", measured %.3f GiB (%+.2f%% vs the plan", (double)measured / (1 << 30), 100.0 * ((double)measured / (double)p->peak_bytes - 1));
                if (nw > 0) printf(", %+.2f%% vs the plan and what is beside it", 100.0 * ((double)measured / (double)(p->peak_bytes + wsum) - 1));
                printf(")");
            }
#ifdef STG_HAVE_CUDA
            if (strcmp(b->ops->name, "cuda") == 0 && rt_backend_cuda_comm_bytes(b) != 0)
                printf("; NCCL communicator %.3f GiB beside the plan", (double)rt_backend_cuda_comm_bytes(b) / (1 << 30));
#endif
            printf("\n");
            for (int i = 0; i < nw; i++) printf("            beside the plan: %-40s %8.1f MiB\n", wname[i], (double)wbytes[i] / (1 << 20));
        }
        if (profile) { // device time per op kind (eager, one mark around every op)
            double *pm = calloc((size_t)g->nsched, sizeof *pm);
            if (!pm || rt_exec_profile(e, mask, pm, &err)) {
                fprintf(stderr, "stg bench: --profile: %s\n", pm ? err.msg : "out of memory");
                free(pm);
                goto out;
            }
            double total = cli_profile_kinds(stdout, g, pm);
            double len = -1, on_ms = 0;
            bool *on = calloc((size_t)g->nsched, sizeof *on);
            rt_dag *dag = NULL;
            if (!on || rt_exec_dag(e, mask, &dag, &err) || (len = rt_dag_length(dag, pm, on, NULL)) < 0) {
                fprintf(stderr, "stg bench: --profile: %s\n", on && dag ? err.msg : "out of memory");
                free(pm), free(on), rt_dag_free(dag);
                goto out;
            }
            int non = 0;
            for (int s = 0; s < g->nsched; s++) on_ms += on[s] ? pm[s] : 0, non += on[s];
            int nst = rt_exec_streams(e);
            printf("  critical  %.3f ms in %d ops: the longest chain of ops on the %d stream%s a run uses (each op as long as it "
                   "took alone, sharing the device not modeled); %.3f ms of device time lies off it\n",
                   len, non, nst, nst == 1 ? "" : "s", total - on_ms);
            if (b->ops->op_lane) { // the same model with the lanes planned for other stream counts
                printf("  streams   critical path if a captured step used 1..6 compute streams:");
                for (int k = 1; k <= 6; k++) {
                    rt_dag *dk = NULL;
                    double lk = -1;
                    if (rt_exec_dag_streams(e, mask, k, &dk, &err) == 0 && (lk = rt_dag_length(dk, pm, NULL, NULL)) < 0)
                        stg_errf(&err, "out of host memory");
                    rt_dag_free(dk);
                    if (lk < 0) {
                        fprintf(stderr, "\nstg bench: --profile: %s\n", err.msg);
                        free(pm), free(on), rt_dag_free(dag);
                        goto out;
                    }
                    printf(" %.3f", lk);
                }
                printf(" ms\n");
            }
            int pr = cli_profile_names(stdout, g, pm, on, dag, len, 30, 10);
            free(on), rt_dag_free(dag);
            if (pr) {
                fprintf(stderr, "stg bench: --profile: out of memory\n");
                free(pm);
                goto out;
            }
            print_optim_bandwidth(g, b, pm);
            if (print_gemm_algos(g, b, pm)) {
                fprintf(stderr, "stg bench: --profile: out of memory\n");
                free(pm);
                goto out;
            }
            free(pm);
        }
        if (fflush(stdout)) goto out;
    }
    rc = 0;
out:
    free(ms);
    free(all);
    free(host);
    rt_feed_free(f);
    rt_exec_free(e);
    plan_free(p);
    graph_free(g);
    b->ops->destroy(b);
    rt_dist_close(&dist);
    return rc;
}
