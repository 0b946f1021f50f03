// Sampling on CUDA (issue 26): the decode ops against the CPU reference on fresh random inputs
// (attention_cached over a multi-chunk cache with grouped heads, RoPE, head dims 16 to 128, groups of
// 1 to 8, one split a pair or many; kv_write; sample), outputs poisoned with NaN first; the decode
// path's logits against the full forward of the same prefix at every position (fp32 1e-4, bf16 2e-2)
// on the tiny LM and the CS336 LM at head dim 80 with a cache of several chunks; the captured decode
// graph bitwise equal to eager decoding.
//
// Exits 77 (skipped) without CUDA or without a GPU.
#include "tests/gpu.h"

#ifdef STG_HAVE_CUDA
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/cpu/kernels.h"
#include "ops/decode/uniform.h"
#include "planner/infer.h"
#include "planner/plan.h"
#include "planner/step.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/sample.h"
#include "tests/rig.h"
#include "tests/testutil.h"

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static double nrand(void) { return tu_nrand(&rs); }
static double round_bf(double x) { return stg_bf16_to_f32(stg_f32_to_bf16((float)x)); }

// ---- one op on both backends --------------------------------------------------------------------

// Runs graph g (built here, the rig owns it) forward on a CPU or CUDA backend with the persistent
// tensors' values from vals; NaN wherever nothing was written.
static void one_run(rig *x, stg_graph *g, bool cuda, double *const *vals) {
    stg_err err;
    if (graph_schedule(g, &err) || graph_validate(g, &err)) fail_msg("%s", err.msg);
    rt_exec_opts eo = {.separate = true, .poison = true};
    rig_open(x, rig_step_of(g), &(rig_cfg){.cuda = cuda, .eo = &eo, .init_seed = -1, .feed_seed = -1});
    for (int t = 0; t < g->nt; t++)
        if (vals[t] && stg_class_persistent(g->t[t].cls) && rt_exec_write_f64(x->e, t, vals[t], &err)) fail_msg("%s", err.msg);
    if (rt_exec_run(x->e, RT_PHASE_FORWARD, &err)) fail_msg("%s", err.msg);
}

// attention_cached(q, k, v, kc, vc, pos) and kv_write of the same k, v into second caches.
static stg_graph *attn_graph(stg_precision prec, const int64_t *dims, double theta, int *ids) {
    stg_err err;
    stg_graph *g = graph_new(prec, &err);
    stg_loc none = {0};
    int64_t B = dims[0], C = dims[1], Hq = dims[2], Hkv = dims[3], D = dims[4];
    int64_t sq[4] = {B, 1, Hq, D}, sk[4] = {B, 1, Hkv, D}, sc[4] = {B, Hkv, C, D}, sp[1] = {1};
    const char *names[8] = {"q", "k", "v", "kc", "vc", "pos", "kc2", "vc2"};
    for (int i = 0; i < 8; i++) {
        const int64_t *s = i == 0 ? sq : i < 3 ? sk : i == 5 ? sp : sc;
        ids[i] = graph_add_tensor(g, names[i], i == 5 ? 1 : 4, s, i == 5 ? STG_I32 : g->act_dtype, STG_CLASS_WORKSPACE, none, &err);
        assert_true(ids[i] >= 0);
    }
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.attention_cached.rope_theta = theta;
    int out[STG_MAX_OUT];
    if (graph_add_op(g, STG_OP_ATTENTION_CACHED, ids, 6, &a, STG_PHASE_FORWARD, "o", none, out, &err) < 0) fail_msg("%s", err.msg);
    ids[8] = out[0];
    int w[5] = {ids[1], ids[2], ids[6], ids[7], ids[5]};
    if (graph_add_op(g, STG_OP_KV_WRITE, w, 5, NULL, STG_PHASE_FORWARD, "w", none, NULL, &err) < 0) fail_msg("%s", err.msg);
    g->n_fwd_ops = g->nops;
    graph_classify(g);
    return g;
}

static void attention_case(stg_precision prec, int64_t B, int64_t C, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos, double theta) {
    int64_t dims[5] = {B, C, Hq, Hkv, D};
    int ids[9];
    stg_graph *gc = attn_graph(STG_PREC_FP32, dims, theta, ids), *gg = attn_graph(prec, dims, theta, ids);
    double *vals[16] = {0};
    bool bf = prec == STG_PREC_BF16;
    for (int i = 0; i < 8; i++) {
        int64_t n = stg_numel(&gc->t[ids[i]]);
        vals[ids[i]] = malloc(sizeof(double) * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            double x = i == 5 ? (double)pos : nrand();
            vals[ids[i]][j] = bf && i != 5 ? round_bf(x) : x;
        }
    }
    rig c, d;
    one_run(&c, gc, false, vals);
    one_run(&d, gg, true, vals);
    const int check[3] = {ids[8], ids[3], ids[6]}; // o, the cache with the new row, kv_write's cache
    for (int k = 0; k < 3; k++) {
        int64_t n = stg_numel(&gc->t[check[k]]);
        double *x = rig_read(c.e, check[k]), *y = rig_read(d.e, check[k]);
        double e = rel_err(y, x, n), tol = bf ? 2e-2 : 1e-5;
        print_message("attention_cached %s B %lld C %lld Hq %lld Hkv %lld Dh %lld pos %lld theta %g: %s rel err %.2e\n", bf ? "bf16" : "fp32",
                      (long long)B, (long long)C, (long long)Hq, (long long)Hkv, (long long)D, (long long)pos, theta,
                      k == 0 ? "o" : k == 1 ? "kc" : "kv_write", e);
        if (!(e < tol)) fail_msg("relative error %.3g (tolerance %.1g)", e, tol);
        free(x);
        free(y);
    }
    for (int i = 0; i < 16; i++) free(vals[i]);
    rig_close(&c);
    rig_close(&d);
}

static void test_attention_cached(void **state) {
    (void)state;
    // multi-chunk caches (about 32 positions a chunk at these sizes), a partial chunk at the end, grouped heads
    attention_case(STG_PREC_FP32, 2, 300, 8, 2, 64, 257, 10000);
    attention_case(STG_PREC_FP32, 3, 97, 4, 4, 80, 96, 10000);
    attention_case(STG_PREC_FP32, 1, 40, 6, 3, 16, 0, 0);
    attention_case(STG_PREC_BF16, 2, 300, 8, 2, 64, 257, 10000);
    attention_case(STG_PREC_BF16, 3, 97, 4, 4, 80, 50, 500000);
    attention_case(STG_PREC_BF16, 2, 1030, 4, 1, 128, 1029, 10000);
    attention_case(STG_PREC_BF16, 1, 16, 2, 2, 16, 5, 0);
    // the kernel's lane layouts (ops/decode/cuda.cu): groups of 3, 5 and 8 (a pass of 4 heads with heads
    // masked, two passes), chunk slots past the row (head dims 40 and 80), long chunks of one split a pair
    // (B x Hkv above the blocks that fit at once) and of two
    attention_case(STG_PREC_BF16, 2, 300, 6, 2, 128, 200, 500000);
    attention_case(STG_PREC_FP32, 2, 70, 10, 2, 32, 60, 10000);
    attention_case(STG_PREC_BF16, 1, 100, 16, 2, 64, 99, 10000);
    attention_case(STG_PREC_BF16, 2, 90, 4, 2, 40, 89, 10000);
    attention_case(STG_PREC_BF16, 140, 200, 4, 4, 64, 180, 10000);
    // the new row in the first trips, copied ahead of the kernel's own write of it (one split a pair)
    attention_case(STG_PREC_BF16, 140, 200, 4, 4, 64, 3, 10000);
    attention_case(STG_PREC_FP32, 140, 200, 2, 2, 80, 17, 10000);
    // the ring over chunks of about 137 positions (34 pairs of a 2048-position cache) with groups of 8: two
    // passes, each refilling the ring
    attention_case(STG_PREC_BF16, 17, 2048, 16, 2, 64, 2000, 10000);
    attention_case(STG_PREC_FP32, 17, 2048, 16, 2, 64, 1500, 10000);
    // the current position just past a split's start (2 pairs of a 200-position cache: 7 splits of 29), where the
    // previous split's last trip holds masked rows up to and including it: that block has no new row to read
    attention_case(STG_PREC_BF16, 1, 200, 2, 2, 80, 58, 10000);
    // 17 splits of 32 positions (one pair): the combine's second batch of splits (ops/decode/cuda.cu, DEC_CB 16)
    // empty behind a running maximum, and holding the current position
    attention_case(STG_PREC_BF16, 1, 544, 4, 1, 64, 40, 10000);
    attention_case(STG_PREC_FP32, 1, 544, 2, 1, 64, 530, 10000);
    attention_case(STG_PREC_BF16, 1, 200, 2, 2, 80, 176, 10000);
    attention_case(STG_PREC_FP32, 1, 200, 2, 2, 80, 88, 10000);
    attention_case(STG_PREC_BF16, 64, 200, 4, 4, 80, 150, 10000);
    attention_case(STG_PREC_FP32, 64, 130, 4, 4, 80, 129, 0);
    attention_case(STG_PREC_FP32, 2, 120, 4, 4, 48, 100, 10000); // 6 chunk slots a lane (fp32, head dim 48)
}

// ---- sample -------------------------------------------------------------------------------------

// The kept weights of the sampling rule in double (ops/decode/real.c), and the interval of the
// cumulative weight (token-id order) each kept token covers: [lo[i], hi[i]), total in *tot.
static void rule_intervals(const double *row, int64_t V, const stg_sample_attrs *a, double *lo, double *hi, double *tot) {
    double *w = malloc(sizeof(double) * (size_t)(2 * V)), m = -INFINITY;
    assert_non_null(w);
    for (int64_t i = 0; i < V; i++) m = fmax(m, row[i] / a->temperature);
    double zk = -INFINITY;
    if (a->top_k > 0 && a->top_k < V) {
        for (int64_t i = 0; i < V; i++) w[V + i] = row[i] / a->temperature;
        for (int64_t r = 0; r < a->top_k; r++) { // selection: the top_k-th largest
            int64_t best = r;
            for (int64_t i = r + 1; i < V; i++)
                if (w[V + i] > w[V + best]) best = i;
            double t = w[V + r];
            w[V + r] = w[V + best], w[V + best] = t;
        }
        zk = w[V + a->top_k - 1];
    }
    double W = 0;
    for (int64_t i = 0; i < V; i++) W += w[i] = row[i] / a->temperature >= zk ? exp(row[i] / a->temperature - m) : 0;
    if (a->top_p < 1) { // tau: the weight where the descending cumulative first reaches top_p W
        double c = 0, tau = 0;
        for (;;) {
            double best = -1;
            for (int64_t i = 0; i < V; i++)
                if (w[i] > 0 && (tau == 0 || w[i] < tau) && w[i] > best) best = w[i];
            if (best < 0) break;
            for (int64_t i = 0; i < V; i++)
                if (w[i] == best) c += best;
            tau = best;
            if (c >= a->top_p * W) break;
        }
        for (int64_t i = 0; i < V; i++)
            if (w[i] < tau) w[i] = 0;
    }
    double c = 0;
    for (int64_t i = 0; i < V; i++) {
        lo[i] = c;
        c += w[i];
        hi[i] = w[i] > 0 ? c : lo[i];
    }
    *tot = c;
    free(w);
}

static stg_graph *sample_graph(stg_precision prec, int64_t B, int64_t S, int64_t V, int64_t C, const stg_sample_attrs *sa, int *ids) {
    stg_err err;
    stg_graph *g = graph_new(prec, &err);
    stg_loc none = {0};
    int64_t sl[3] = {B, S, V}, st[2] = {B, 1}, sp[1] = {1}, si[2] = {B, C};
    ids[0] = graph_add_tensor(g, "logits", 3, sl, g->act_dtype, STG_CLASS_WORKSPACE, none, &err);
    ids[1] = graph_add_tensor(g, "token", 2, st, STG_I32, STG_CLASS_WORKSPACE, none, &err);
    ids[2] = graph_add_tensor(g, "pos", 1, sp, STG_I32, STG_CLASS_WORKSPACE, none, &err);
    ids[3] = graph_add_tensor(g, "ids", 2, si, STG_I32, STG_CLASS_WORKSPACE, none, &err);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.sample = *sa;
    if (graph_add_op(g, STG_OP_SAMPLE, ids, 4, &a, STG_PHASE_FORWARD, "s", none, NULL, &err) < 0) fail_msg("%s", err.msg);
    g->n_fwd_ops = g->nops;
    graph_classify(g);
    return g;
}

static void sample_case(stg_precision prec, double T, int64_t k, double p, int *exact, int *near) {
    const int64_t B = 40, S = 2, V = 1000, C = 9, pos = 3;
    stg_sample_attrs sa = {.temperature = T, .top_p = p, .top_k = k, .seed = 77, .advance = 2};
    int ids[4];
    stg_graph *g = sample_graph(prec, B, S, V, C, &sa, ids);
    double *vals[8] = {0};
    bool bf = prec == STG_PREC_BF16;
    vals[ids[0]] = malloc(sizeof(double) * (size_t)(B * S * V));
    vals[ids[1]] = calloc((size_t)B, sizeof(double));
    vals[ids[2]] = calloc(1, sizeof(double));
    vals[ids[3]] = calloc((size_t)(B * C), sizeof(double));
    for (int64_t i = 0; i < B * S * V; i++) vals[ids[0]][i] = bf ? round_bf(2.5 * nrand()) : 2.5 * nrand();
    vals[ids[2]][0] = (double)pos;
    rig d;
    one_run(&d, g, true, vals);
    double *tok = rig_read(d.e, ids[1]), *np = rig_read(d.e, ids[2]), *idv = rig_read(d.e, ids[3]);
    assert_int_equal((int)np[0], pos + 2);
    double *lo = malloc(sizeof(double) * (size_t)V), *hi = malloc(sizeof(double) * (size_t)V), work[2000];
    float rowf[1000];
    for (int64_t b = 0; b < B; b++) {
        const double *row = vals[ids[0]] + (b * S + S - 1) * V;
        for (int64_t i = 0; i < V; i++) rowf[i] = (float)row[i];
        double u = stg_sample_uniform(77, pos + 2, b);
        int64_t want = cpu_sample_row_f32(rowf, V, T, k, p, u, work), got = (int64_t)tok[b];
        assert_int_equal((int64_t)idv[b * C + pos + 2], got);
        if (got == want) {
            (*exact)++;
            continue;
        }
        // float sums on the device, double here: only a target within 1e-4 of the total from the
        // boundary between the two tokens may go either way
        assert_true(T > 0);
        double tot;
        rule_intervals(row, V, &sa, lo, hi, &tot);
        double target = u * tot, eps = 1e-4 * tot;
        bool ok = got >= 0 && got < V && hi[got] > lo[got] && target >= lo[got] - eps && target <= hi[got] + eps;
        if (!ok) fail_msg("T %g top-k %lld top-p %g sequence %lld: the device drew %lld, the reference %lld (u %.9f)", T, (long long)k, p,
                          (long long)b, (long long)got, (long long)want, u);
        (*near)++;
    }
    free(lo), free(hi), free(tok), free(np), free(idv);
    for (int i = 0; i < 8; i++) free(vals[i]);
    rig_close(&d);
}

static bool quick(void);

static void test_sample_op(void **state) {
    (void)state;
    const double T[] = {0.0, 1.0, 0.7};
    const int64_t K[] = {0, 40, 1};
    const double P[] = {1.0, 0.8, 0.3};
    for (int pr = 0; pr < 2; pr++) {
        int exact = 0, near = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int l = 0; l < 3; l++)
                    if (!quick() || (i + j + l) % 4 == 0) sample_case(pr ? STG_PREC_BF16 : STG_PREC_FP32, T[i], K[j], P[l], &exact, &near);
        print_message("sample %s: %d draws equal to the CPU rule's, %d within 1e-4 of a boundary\n", pr ? "bf16" : "fp32", exact, near);
        assert_true(near * 100 <= exact); // rare, or the device's rule differs
    }
}

// ---- decode = full forward ------------------------------------------------------------------------

static void decode_vs_forward(const char *model, const char *const *sets, int nsets, stg_precision prec, int64_t B, int64_t P, int64_t n,
                              const int64_t *check, int ncheck, double tol) {
    stg_sample_attrs sa = {.temperature = 1.0, .top_p = 0.9, .top_k = 0, .seed = 5};
    rig_smp x;
    rig_smp_open(&x, model, sets, nsets, prec, B, P, sa, 3, true, (rt_sampler_opts){.separate = true});
    const int64_t C = x.inf->ctx;
    const graph_infer_info *ip = &x.inf->info[STG_INFER_PREFILL], *id = &x.inf->info[STG_INFER_DECODE];
    const int64_t V = ip->vocab;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)P), *ids = malloc(sizeof(int32_t) * (size_t)(B * C)),
            *tok = malloc(sizeof(int32_t) * (size_t)(B * C));
    double *lg = malloc(sizeof(double) * (size_t)(B * P * V));
    assert_true(prompt && ids && tok && lg);
    for (int64_t i = 0; i < P; i++) prompt[i] = (int32_t)((i * 131 + 7) % V);
    stg_err err;
    if (rt_sampler_prefill(x.s, prompt, &err)) fail_msg("%s", err.msg);
    double worst = 0;
    int ci = 0;
    for (int64_t k = 0; k < n; k++) {
        if (k > 0 && rt_sampler_step(x.s, &err)) fail_msg("%s", err.msg);
        int64_t L = P + k;
        if (ci >= ncheck || check[ci] != k) continue; // the full forward at chosen positions only
        ci++;
        if (rt_sampler_ids(x.s, ids, &err)) fail_msg("%s", err.msg);
        int64_t rows = k == 0 ? P : 1;
        rt_exec *e = rt_sampler_exec(x.s, k == 0 ? STG_INFER_PREFILL : STG_INFER_DECODE);
        if (rt_exec_read_f64(e, k == 0 ? ip->logits : id->logits, lg, &err)) fail_msg("%s", err.msg);
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < L; j++) tok[b * L + j] = ids[b * C + j];
        int64_t Vf;
        double *ref = rig_full_forward(model, sets, nsets, prec, B, L, tok, 3, true, &Vf);
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < rows; r++) {
                double e1 = rel_err(lg + (b * rows + r) * V, ref + (b * L + L - rows + r) * V, V);
                if (e1 > worst) worst = e1;
                if (!(e1 < tol)) fail_msg("%s position %lld of sequence %lld: rel err %.3g against the full forward (tolerance %.0e)",
                                          prec == STG_PREC_BF16 ? "bf16" : "fp32", (long long)(L - rows + r), (long long)b, e1, tol);
            }
        free(ref);
    }
    print_message("%s %s B %lld P %lld: decode logits against the full forward at %d positions: worst rel err %.2e\n", model,
                  prec == STG_PREC_BF16 ? "bf16" : "fp32", (long long)B, (long long)P, ncheck, worst);
    free(prompt), free(ids), free(tok), free(lg);
    rig_smp_close(&x);
}

static const char *const tiny_sets[] = {"d_model=64", "d_ff=160", "n_layers=2", "n_heads=4", "vocab=256", "ctx=24"};
// head dim 80 (the 2.7B's), a cache of 200 positions: several chunks of the split
static const char *const hd80_sets[] = {"d_model=160", "d_ff=256", "n_layers=2", "n_heads=2", "vocab=300", "ctx=200"};

// Under compute-sanitizer (STG_GPU_TEST_SMALL=1, as every GPU program takes it) the model-level cases
// run at fewer positions.
static bool quick(void) { return getenv("STG_GPU_TEST_SMALL") != NULL; }

static void test_decode_vs_forward(void **state) {
    (void)state;
    const int64_t every[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
    if (quick()) {
        const int64_t few[] = {0, 1, 5};
        decode_vs_forward(MODEL("tiny.yaml"), tiny_sets, 6, STG_PREC_BF16, 2, 4, 6, few, 3, 2e-2);
        decode_vs_forward(MODEL("cs336/lm.yaml"), hd80_sets, 6, STG_PREC_FP32, 2, 50, 20, few, 3, 1e-4);
        return;
    }
    decode_vs_forward(MODEL("tiny.yaml"), tiny_sets, 6, STG_PREC_FP32, 2, 4, 20, every, 20, 1e-4);
    decode_vs_forward(MODEL("tiny.yaml"), tiny_sets, 6, STG_PREC_BF16, 2, 4, 20, every, 20, 2e-2);
    const int64_t some[] = {0, 1, 2, 15, 16, 17, 40, 90, 139};
    decode_vs_forward(MODEL("cs336/lm.yaml"), hd80_sets, 6, STG_PREC_FP32, 2, 50, 140, some, 9, 1e-4);
    decode_vs_forward(MODEL("cs336/lm.yaml"), hd80_sets, 6, STG_PREC_BF16, 2, 50, 140, some, 9, 2e-2);
}

// The captured decode step replayed equals eager launching, bitwise (ids and the last logits).
static bool quick(void);

static void graph_vs_eager(stg_precision prec) {
    stg_sample_attrs sa = {.temperature = 0.8, .top_p = 0.95, .top_k = 50, .seed = 9};
    rig_smp x[2];
    int32_t prompt[6] = {1, 22, 3, 44, 5, 66}, *ids[2];
    double *lg[2];
    stg_err err;
    for (int m = 0; m < 2; m++) {
        rig_smp_open(&x[m], MODEL("cs336/lm.yaml"), hd80_sets, 6, prec, 3, 6, sa, 3, true, (rt_sampler_opts){.graph = m == 0});
        // the decode step captured on one stream (runtime/sample.c: on the backend's three, the views of k and v
        // took idle streams and chained every earlier layer's product onto each attention node)
        assert_int_equal(rt_exec_streams(rt_sampler_exec(x[m].s, STG_INFER_DECODE)), 1);
        const int64_t C = x[m].inf->ctx, B = 3, V = x[m].inf->info[1].vocab;
        ids[m] = malloc(sizeof(int32_t) * (size_t)(B * C));
        lg[m] = malloc(sizeof(double) * (size_t)(B * V));
        if (rt_sampler_prefill(x[m].s, prompt, &err)) fail_msg("%s", err.msg);
        for (int k = 0; k < (quick() ? 12 : 60); k++)
            if (rt_sampler_submit(x[m].s, &err)) fail_msg("%s", err.msg); // pipelined: two steps in flight
        if (rt_sampler_ids(x[m].s, ids[m], &err) ||
            rt_exec_read_f64(rt_sampler_exec(x[m].s, STG_INFER_DECODE), x[m].inf->info[1].logits, lg[m], &err))
            fail_msg("%s", err.msg);
    }
    const int64_t n = 3 * x[0].inf->ctx;
    assert_memory_equal(ids[0], ids[1], sizeof(int32_t) * (size_t)n);
    assert_memory_equal(lg[0], lg[1], sizeof(double) * (size_t)(3 * x[0].inf->info[1].vocab));
    int distinct = 0; // the sequences really were sampled (not all one token)
    for (int64_t j = 7; j < (quick() ? 19 : 67); j++) distinct += ids[0][j] != ids[0][j - 1];
    assert_true(distinct > 3);
    print_message("%s: %d captured decode steps equal eager ones bitwise\n", prec == STG_PREC_BF16 ? "bf16" : "fp32", quick() ? 12 : 60);
    for (int m = 0; m < 2; m++) {
        free(ids[m]), free(lg[m]);
        rig_smp_close(&x[m]);
    }
}

static void test_graph_equals_eager_fp32(void **s) { graph_vs_eager(STG_PREC_FP32); }
static void test_graph_equals_eager_bf16(void **s) { graph_vs_eager(STG_PREC_BF16); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_cached),
        cmocka_unit_test(test_sample_op),
        cmocka_unit_test(test_decode_vs_forward),
        cmocka_unit_test(test_graph_equals_eager_fp32),
        cmocka_unit_test(test_graph_equals_eager_bf16),
    };
    return GPU_RUN(tests);
}

#endif
