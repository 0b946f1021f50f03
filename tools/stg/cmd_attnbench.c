// stg attn-bench: CS336's attention study. Forward and backward time and memory of causal attention
// written out (scores, mask, softmax, weighted sum; the S×S probabilities kept for backward) and
// fused (flash), for batch 8, one head, head dims and sequence lengths given; points that do not
// fit the device are reported as out of memory, from the plan, before anything is allocated.
// --kv-heads: grouped-query attention (k, v with fewer heads; the written-out path repeats them with
// repeat_kv). --docs N: each row packed with N documents of S / N tokens; the fused attention with
// its docs input is timed beside the full causal row (the written-out path has no document mask).
// --attention flash|naive: only one of the two (the written-out path at long sequences takes most of
// a run's time: S x S scores, and its inputs drawn on the host). --order: the forward and backward iterations
// alternate (as in a training step; the default), or (phases) every forward iteration runs before the first backward
// one, so that neither is timed just after the other.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/rng.h"
#include "tools/stg/cli.h"

// q (B, S, H, D), k, v (B, S, Hkv, D) as parameters, o from the chosen attention (with a docs (B, S)
// input when `docs`), and its backward from an input gradient d.o.
static stg_graph *build(stg_precision prec, int64_t B, int64_t S, int64_t H, int64_t Hkv, int64_t D, bool naive, bool docs,
                        stg_err *err) {
    stg_graph *g = graph_new(prec, err);
    if (!g) return NULL;
    stg_loc none = {NULL, 0, 0};
    int64_t shape[4] = {B, S, H, D}, kshape[4] = {B, S, Hkv, D}, dshape[2] = {B, S};
    int q = graph_add_tensor(g, "q", 4, shape, g->act_dtype, STG_CLASS_PARAM, none, err);
    int k = graph_add_tensor(g, "k", 4, kshape, g->act_dtype, STG_CLASS_PARAM, none, err);
    int v = graph_add_tensor(g, "v", 4, kshape, g->act_dtype, STG_CLASS_PARAM, none, err);
    // The backward seed (and the document starts) are written once and stay on the device (a batch
    // input would be copied up from the host inside every timed run).
    int dout = graph_add_tensor(g, "d.o", 4, shape, g->act_dtype, STG_CLASS_WORKSPACE, none, err);
    int dc = docs ? graph_add_tensor(g, "docs", 2, dshape, STG_I32, STG_CLASS_WORKSPACE, none, err) : 0;
    if (q < 0 || k < 0 || v < 0 || dout < 0 || dc < 0) goto fail;
    int o;
    stg_attrs a;
    memset(&a, 0, sizeof a);
    if (!naive) {
        int outs[STG_MAX_OUT];
        if (graph_add_op(g, STG_OP_ATTENTION, (int[]){q, k, v, dc}, docs ? 4 : 3, &a, STG_PHASE_FORWARD, "o", none, outs, err) < 0)
            goto fail;
        o = outs[0];
    } else {
        int t[3], x;
        int in3[3] = {q, k, v};
        a.repeat_kv.n = H / Hkv;
        for (int i = 1; i < 3 && Hkv < H; i++)
            if (graph_add_op(g, STG_OP_REPEAT_KV, &in3[i], 1, &a, STG_PHASE_FORWARD, "rep", none, &in3[i], err) < 0) goto fail;
        memset(&a, 0, sizeof a);
        a.transpose.d0 = 1;
        a.transpose.d1 = 2;
        for (int i = 0; i < 3; i++)
            if (graph_add_op(g, STG_OP_TRANSPOSE, &in3[i], 1, &a, STG_PHASE_FORWARD, "t", none, &t[i], err) < 0) goto fail;
        memset(&a, 0, sizeof a);
        a.matmul.tb = 1;
        if (graph_add_op(g, STG_OP_MATMUL, (int[]){t[0], t[1]}, 2, &a, STG_PHASE_FORWARD, "scores", none, &x, err) < 0) goto fail;
        memset(&a, 0, sizeof a);
        a.scale.factor = 1.0 / sqrt((double)D);
        if (graph_add_op(g, STG_OP_SCALE, &x, 1, &a, STG_PHASE_FORWARD, "scaled", none, &x, err) < 0) goto fail;
        a.mask.fill = -INFINITY;
        if (graph_add_op(g, STG_OP_CAUSAL_MASK, &x, 1, &a, STG_PHASE_FORWARD, "masked", none, &x, err) < 0) goto fail;
        if (graph_add_op(g, STG_OP_SOFTMAX, &x, 1, NULL, STG_PHASE_FORWARD, "p", none, &x, err) < 0) goto fail;
        memset(&a, 0, sizeof a);
        if (graph_add_op(g, STG_OP_MATMUL, (int[]){x, t[2]}, 2, &a, STG_PHASE_FORWARD, "o_heads", none, &x, err) < 0) goto fail;
        a.transpose.d0 = 1;
        a.transpose.d1 = 2;
        if (graph_add_op(g, STG_OP_TRANSPOSE, &x, 1, &a, STG_PHASE_FORWARD, "o", none, &o, err) < 0) goto fail;
    }
    g->n_fwd_ops = g->nops;
    // q, k, v stand for activations: their gradients stay in the working precision (no optimizer and
    // no f32 master copies here; in bf16 the kernels write bf16 dq, dk, dv). Set after the forward
    // ops, whose outputs (the f32 log-sum-exp) keep the graph's own types.
    g->grad_dtype = g->act_dtype;
    if (graph_backward(g, o, dout, err) || graph_schedule(g, err)) goto fail;
    return g;
fail:
    graph_free(g);
    return NULL;
}

// A comma-separated list of at most max integers in [1, 2^22]; -1 (after a message) otherwise.
static int parse_list(const char *opt, const char *s, int64_t *v, int max) {
    char buf[256];
    if (strlen(s) >= sizeof buf) return fprintf(stderr, "stg: %s: the list is longer than %zu characters\n", opt, sizeof buf - 1), -1;
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    for (char *tok = buf, *end;; tok = end + 1) {
        end = strchr(tok, ',');
        if (end) *end = '\0';
        if (!*tok) return fprintf(stderr, "stg: %s '%s': an empty element\n", opt, s), -1;
        if (n == max) return fprintf(stderr, "stg: %s '%s': at most %d values\n", opt, s, max), -1;
        if (cli_int(opt, tok, 1, 1 << 22, &v[n])) return -1;
        n++;
        if (!end) return n;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int time_run(rt_exec *e, rt_backend *b, unsigned mask, double *ms, stg_err *err) {
    return b->ops->timer_mark(b, 0, err) || rt_exec_submit(e, mask, err) || b->ops->timer_mark(b, 1, err) ||
                   rt_exec_collect(e, NULL, err) || b->ops->elapsed_ms(b, ms, err)
               ? -1
               : 0;
}

int cmd_attnbench(int argc, char **argv) {
    const char *device = NULL;
    stg_precision prec = STG_PREC_BF16;
    int64_t batch = 8, heads = 1, kv_heads = 0, ndocs = 0, iters = 10, dims[8] = {16, 32, 64, 128},
            seqs[8] = {256, 1024, 4096, 8192, 16384};
    int nd = 4, ns = 5;
    bool json = false;
    int only = -1; // --attention: -1 both, 0 naive only, 1 flash only (with --docs both rows are flash)
    bool phases = false; // --order phases: every forward iteration timed, then every backward one (else alternating)
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--json") == 0) json = true;
        else if (strcmp(a, "--device") == 0) {
            if (!(device = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--precision") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (strcmp(v, "bf16") == 0) prec = STG_PREC_BF16;
            else if (strcmp(v, "fp32") == 0) prec = STG_PREC_FP32;
            else return fprintf(stderr, "stg attn-bench: --precision '%s': expected bf16 or fp32\n", v), 2;
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--heads") == 0 || strcmp(a, "--iters") == 0) {
            int64_t x;
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &x)) return 2;
            *(a[2] == 'b' ? &batch : a[2] == 'h' ? &heads : &iters) = x;
        } else if (strcmp(a, "--kv-heads") == 0 || strcmp(a, "--docs") == 0) {
            int64_t x;
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &x)) return 2;
            *(a[2] == 'k' ? &kv_heads : &ndocs) = x;
        } else if (strcmp(a, "--attention") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (strcmp(v, "naive") == 0) only = 0;
            else if (strcmp(v, "flash") == 0) only = 1;
            else if (strcmp(v, "both") == 0) only = -1;
            else return fprintf(stderr, "stg attn-bench: --attention '%s': expected naive, flash or both\n", v), 2;
        } else if (strcmp(a, "--order") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (strcmp(v, "alternate") == 0) phases = false;
            else if (strcmp(v, "phases") == 0) phases = true;
            else return fprintf(stderr, "stg attn-bench: --order '%s': expected alternate or phases\n", v), 2;
        } else if (strcmp(a, "--dims") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || (nd = parse_list(a, v, dims, 8)) < 1) return 2;
        } else if (strcmp(a, "--seqs") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || (ns = parse_list(a, v, seqs, 8)) < 1) return 2;
        } else {
            fprintf(stderr, "usage: stg attn-bench [--device cuda] [--precision bf16|fp32] [--batch 8] [--heads 1] "
                            "[--kv-heads N] [--docs N] [--attention naive|flash|both] [--dims 16,32,64,128] "
                            "[--seqs 256,1024,4096,8192,16384] [--iters 10] [--order alternate|phases] [--json]\n");
            return 2;
        }
    }
    if (only == 0 && ndocs)
        return fprintf(stderr, "stg attn-bench: --attention naive has no document mask: leave out --docs\n"), 2;
    if (!kv_heads) kv_heads = heads;
    if (heads % kv_heads)
        return fprintf(stderr, "stg attn-bench: query heads (%lld) must be a multiple of kv heads (%lld)\n", (long long)heads,
                       (long long)kv_heads),
               2;
    for (int si = 0; si < ns; si++)
        if (ndocs && seqs[si] % ndocs)
            return fprintf(stderr, "stg attn-bench: --docs %lld does not divide the sequence length %lld\n", (long long)ndocs,
                           (long long)seqs[si]),
                   2;
    rt_backend *b = cli_open_backend(device, prec, false);
    if (!b) return 2;
    if (!json)
        printf("| attention | d_head | seq | forward ms | backward ms | forward TFLOP/s | backward TFLOP/s | planned GiB | measured GiB |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    // The inputs' values: n normals drawn once a shape (both paths read the same ones), then repeated
    // once, so that tensor j reads n values from its own offset into them (drawing every tensor afresh
    // took seconds a row at the long sequences; the times do not depend on the values).
    double *rnd = NULL;
    int64_t rnd_n = 0;
    for (int di = 0; di < nd; di++)
        for (int si = 0; si < ns; si++)
            for (int variant = 0; variant < 2; variant++) { // naive, flash; with --docs: flash, flash over docs
                if (only == 0 && variant == 1) continue;
                if (only == 1 && variant == 0 && !ndocs) continue;
                const bool naive = !ndocs && variant == 0, docs = ndocs && variant == 1;
                int64_t D = dims[di], S = seqs[si];
                stg_err err;
                stg_graph *g = build(prec, batch, S, heads, kv_heads, D, naive, docs, &err);
                stg_plan *p = NULL;
                rt_exec *e = NULL;
                double *tf = NULL, *tb = NULL;
                int32_t *dbuf = NULL;
                char name[48];
                snprintf(name, sizeof name, "%s", naive ? "naive" : "flash");
                if (docs) snprintf(name, sizeof name, "flash, %lld docs", (long long)ndocs);
                if (!g || plan_build(g, NULL, &p, &err)) {
                    fprintf(stderr, "stg attn-bench: %s d=%lld S=%lld: %s\n", name, (long long)D, (long long)S, err.msg);
                    rc = 1;
                    goto next;
                }
                int64_t fr = b->ops->mem_free(b);
                if (fr >= 0 && p->peak_bytes > fr - ((int64_t)256 << 20)) {
                    if (json)
                        printf("{\"attention\": \"%s\", \"d_head\": %lld, \"seq\": %lld, \"oom\": true, \"planned_bytes\": %lld}\n", name,
                               (long long)D, (long long)S, (long long)p->peak_bytes);
                    else
                        printf("| %s | %lld | %lld | OOM | OOM | | | %.2f (device has %.2f free) | |\n", name, (long long)D, (long long)S,
                               (double)p->peak_bytes / (1 << 30), (double)fr / (1 << 30));
                    goto next;
                }
                if (rt_exec_new(g, p, b, NULL, &e, &err)) {
                    if (!strstr(err.msg, "out of memory")) goto fail;
                    if (json)
                        printf("{\"attention\": \"%s\", \"d_head\": %lld, \"seq\": %lld, \"oom\": true, \"planned_bytes\": %lld}\n", name,
                               (long long)D, (long long)S, (long long)p->peak_bytes);
                    else
                        printf("| %s | %lld | %lld | OOM | OOM | | | %.2f (allocation failed) | |\n", name, (long long)D, (long long)S,
                               (double)p->peak_bytes / (1 << 30));
                    goto next;
                }
                const int64_t n = batch * S * heads * D; // q's and d.o's elements; k and v have as many or fewer
                if (rnd_n != n) {
                    free(rnd);
                    rnd_n = 0;
                    if (!(rnd = malloc(sizeof(double) * 2 * (size_t)n))) {
                        snprintf(err.msg, sizeof err.msg, "out of host memory");
                        goto fail;
                    }
                    rt_rng rng;
                    rt_rng_seed(&rng, 1);
                    for (int64_t i = 0; i < n; i++) rnd[i] = rt_rng_normal(&rng);
                    memcpy(rnd + n, rnd, sizeof(double) * (size_t)n);
                    rnd_n = n;
                }
                dbuf = malloc(sizeof(int32_t) * (size_t)(batch * S));
                tf = malloc(sizeof(double) * (size_t)iters);
                tb = malloc(sizeof(double) * (size_t)iters);
                if (!dbuf || !tf || !tb) {
                    snprintf(err.msg, sizeof err.msg, "out of host memory");
                    goto fail;
                }
                int64_t j = 0; // the tensors drawn so far
                for (int t = 0; t < g->nt; t++) {
                    if (docs && strcmp(g->t[t].name, "docs") == 0) { // documents of S / ndocs tokens
                        for (int64_t i = 0; i < batch * S; i++) dbuf[i] = (int32_t)(i % S / (S / ndocs) * (S / ndocs));
                        if (rt_exec_write(e, t, dbuf, sizeof(int32_t) * (size_t)(batch * S), &err)) goto fail;
                        continue;
                    }
                    if (g->t[t].cls != STG_CLASS_PARAM && strcmp(g->t[t].name, "d.o") != 0) continue;
                    // offsets 0, n/4 + 1, ... apart: no two tensors see the same values at the same index
                    if (rt_exec_write_f64(e, t, rnd + (j++ * (n / 4 + 1)) % n, &err)) goto fail;
                }
                if (rt_exec_run(e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err)) goto fail; // warm-up
                if (phases) { // the forward's iterations after one another, then the backward's (each reads the last forward's)
                    for (int64_t it = 0; it < iters; it++)
                        if (time_run(e, b, RT_PHASE_FORWARD, &tf[it], &err)) goto fail;
                    for (int64_t it = 0; it < iters; it++)
                        if (time_run(e, b, RT_PHASE_BACKWARD, &tb[it], &err)) goto fail;
                } else {
                    for (int64_t it = 0; it < iters; it++)
                        if (time_run(e, b, RT_PHASE_FORWARD, &tf[it], &err) || time_run(e, b, RT_PHASE_BACKWARD, &tb[it], &err)) goto fail;
                }
                double f = median(tf, iters), bw = median(tb, iters); // ms
                // causal FLOPs: half of 4·B·H·S²·D forward (over docs: half of 4·B·H·Σ L²·D, the pairs
                // that are computed); backward 2.5× forward
                double pairs = docs ? (double)S * (double)S / (double)ndocs : (double)S * (double)S;
                double ff = 2.0 * (double)batch * (double)heads * pairs * (double)D, fb = 2.5 * ff;
                int64_t meas = rt_exec_measured_bytes(e);
                if (json)
                    printf("{\"attention\": \"%s\", \"d_head\": %lld, \"seq\": %lld, \"order\": \"%s\", \"forward_ms\": %.4f, "
                           "\"backward_ms\": %.4f, \"forward_tflops\": %.2f, \"backward_tflops\": %.2f, \"planned_bytes\": %lld, "
                           "\"measured_bytes\": %lld}\n",
                           name, (long long)D, (long long)S, phases ? "phases" : "alternate", f, bw, ff / f / 1e9, fb / bw / 1e9,
                           (long long)p->peak_bytes, (long long)meas);
                else { // measured: "-" where the device's free bytes did not drop (small plans fit in memory the
                       // driver kept from the previous row: below what cudaMemGetInfo resolves)
                    char mb[32] = "-";
                    if (meas >= 0) snprintf(mb, sizeof mb, "%.3f", (double)meas / (1 << 30));
                    printf("| %s | %lld | %lld | %.3f | %.3f | %.1f | %.1f | %.3f | %s |\n", name, (long long)D, (long long)S, f, bw,
                           ff / f / 1e9, fb / bw / 1e9, (double)p->peak_bytes / (1 << 30), mb);
                }
                fflush(stdout);
                goto next;
            fail:
                fprintf(stderr, "stg attn-bench: %s d=%lld S=%lld: %s\n", name, (long long)D, (long long)S, err.msg);
                rc = 1;
            next:
                free(dbuf);
                free(tf);
                free(tb);
                rt_exec_free(e);
                plan_free(p);
                graph_free(g);
            }
    free(rnd);
    b->ops->destroy(b);
    return rc;
}
