// Sampling on the CPU (issue 26): the prefill and decode graphs derived from the training model
// give, at every position, the logits of the full forward pass of the same prefix (fp64, 1e-10);
// greedy decoding is the argmax chain of repeated full forwards; the drawn tokens follow an
// independent reference sampler (temperature, top-k, top-p) on fixed uniforms; what the derivation
// refuses and what `stg sample` refuses (exit 2, with a message); the memory report's terms.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "ops/cpu/kernels.h"
#include "ops/decode/uniform.h"
#include "planner/infer.h"
#include "planner/step.h"
#include "runtime/exec.h"
#include "runtime/sample.h"
#include "tests/rig.h"
#include "tests/testutil.h"

#define TINY "d_model=32", "d_ff=48", "n_layers=2", "n_heads=2", "vocab=64", "ctx=16"

static const char *const tiny_sets[] = {TINY};

// ---- the reference sampler ----------------------------------------------------------------------

typedef struct {
    double z;
    int64_t i;
} zi;

static int by_z_desc(const void *a, const void *b) {
    const zi *x = a, *y = b;
    if (x->z != y->z) return x->z < y->z ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;
}

// Written apart from the kernel: tokens sorted by logit, the top k, the softmax of those, the top
// set of probability p (ties with its last member kept), then the inverse CDF at u over the kept
// probabilities in token-id order.
static int64_t ref_sample(const double *row, int64_t V, double T, int64_t k, double p, double u) {
    zi *s = malloc(sizeof *s * (size_t)V);
    double *prob = calloc((size_t)V, sizeof *prob);
    assert_true(s && prob);
    for (int64_t i = 0; i < V; i++) s[i] = (zi){row[i], i};
    qsort(s, (size_t)V, sizeof *s, by_z_desc);
    if (T == 0) {
        int64_t r = s[0].i;
        free(s), free(prob);
        return r;
    }
    int64_t keep = k > 0 && k < V ? k : V;
    while (keep < V && s[keep].z == s[keep - 1].z) keep++;
    double zmax = s[0].z / T, sum = 0;
    for (int64_t r = 0; r < keep; r++) sum += exp(s[r].z / T - zmax);
    if (p < 1) {
        double c = 0;
        int64_t r = 0;
        for (; r < keep; r++) {
            c += exp(s[r].z / T - zmax) / sum;
            if (c >= p) break;
        }
        int64_t last = r < keep ? r : keep - 1;
        while (last + 1 < keep && s[last + 1].z == s[last].z) last++;
        keep = last + 1;
    }
    double tot = 0;
    for (int64_t r = 0; r < keep; r++) tot += prob[s[r].i] = exp(s[r].z / T - zmax);
    double c = 0;
    int64_t pick = -1;
    for (int64_t i = 0; i < V; i++) {
        if (prob[i] == 0) continue;
        c += prob[i] / tot;
        pick = i;
        if (c > u) break;
    }
    free(s), free(prob);
    return pick;
}

static uint64_t rs = 0x243f6a8885a308d3ull;
static double urand(void) { return tu_urand(&rs); }

static void test_sampler_rule(void **state) {
    (void)state;
    const double temps[] = {0.0, 1.0, 0.7, 2.5};
    const int64_t ks[] = {0, 1, 5, 63};
    const double ps[] = {1.0, 0.9, 0.5, 0.05};
    const int64_t V = 64;
    double row[64], work[128];
    int cases = 0, diff_seen = 0;
    for (int ti = 0; ti < 4; ti++)
        for (int ki = 0; ki < 4; ki++)
            for (int pi = 0; pi < 4; pi++)
                for (int rep = 0; rep < 40; rep++) {
                    for (int64_t i = 0; i < V; i++) row[i] = 4 * (urand() - 0.5);
                    double u = urand();
                    int64_t want = ref_sample(row, V, temps[ti], ks[ki], ps[pi], u);
                    int64_t got = cpu_sample_row_f64(row, V, temps[ti], ks[ki], ps[pi], u, work);
                    if (got != want)
                        fail_msg("T %g, top-k %lld, top-p %g, u %.17g: the kernel drew %lld, the reference %lld", temps[ti], (long long)ks[ki],
                                 ps[pi], u, (long long)got, (long long)want);
                    cases++;
                    diff_seen += got != cpu_sample_row_f64(row, V, temps[ti], ks[ki], ps[pi], 1 - u, work);
                }
    assert_int_equal(cases, 4 * 4 * 4 * 40);
    assert_true(diff_seen > 100); // the uniform matters (a sampler that ignored it would pass the above for T = 0 only)
    // top-k 1 is greedy; top-p tiny keeps only the most likely token
    for (int rep = 0; rep < 50; rep++) {
        for (int64_t i = 0; i < V; i++) row[i] = 4 * (urand() - 0.5);
        int64_t g = cpu_sample_row_f64(row, V, 0.0, 0, 1.0, 0.5, work);
        assert_int_equal(cpu_sample_row_f64(row, V, 1.0, 1, 1.0, urand(), work), g);
        assert_int_equal(cpu_sample_row_f64(row, V, 1.0, 0, 1e-9, urand(), work), g);
    }
    // the uniforms: in [0, 1), and different for other positions, sequences and seeds
    double a = stg_sample_uniform(1, 5, 0), b = stg_sample_uniform(1, 6, 0), c = stg_sample_uniform(1, 5, 1), d = stg_sample_uniform(2, 5, 0);
    assert_true(a >= 0 && a < 1 && a != b && a != c && a != d);
}

// ---- decode = full forward ----------------------------------------------------------------------

static void check_positions(const char *model, const char *const *sets, int nsets, int64_t B, int64_t P, int64_t n, stg_sample_attrs sa) {
    const uint64_t seed = 7;
    rig_smp x;
    rig_smp_open(&x, model, sets, nsets, STG_PREC_FP64, B, P, sa, seed, false, (rt_sampler_opts){.separate = true});
    const int64_t C = x.inf->ctx;
    int32_t prompt[16];
    for (int64_t i = 0; i < P; i++) prompt[i] = (int32_t)((i * 37 + 11) % 50);
    stg_err err;
    if (rt_sampler_prefill(x.s, prompt, &err)) fail_msg("%s", err.msg);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * C)), *tok = malloc(sizeof(int32_t) * (size_t)(B * C));
    assert_true(ids && tok);
    const graph_infer_info *ip = &x.inf->info[STG_INFER_PREFILL], *id = &x.inf->info[STG_INFER_DECODE];
    int64_t V = ip->vocab, Vf;
    double *lg = malloc(sizeof(double) * (size_t)(B * P * V)), *row = malloc(sizeof(double) * (size_t)V), work[256];
    assert_true(lg && row && V <= 128);
    for (int64_t k = 0; k < n; k++) {
        int64_t L = P + k; // tokens the logits saw
        if (k > 0 && rt_sampler_step(x.s, &err)) fail_msg("%s", err.msg);
        if (rt_sampler_ids(x.s, ids, &err)) fail_msg("%s", err.msg);
        rt_exec *e = rt_sampler_exec(x.s, k == 0 ? STG_INFER_PREFILL : STG_INFER_DECODE);
        int64_t rows = k == 0 ? P : 1;
        if (rt_exec_read_f64(e, k == 0 ? ip->logits : id->logits, lg, &err)) fail_msg("%s", err.msg);
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < L; j++) tok[b * L + j] = ids[b * C + j];
        double *ref = rig_full_forward(model, sets, nsets, STG_PREC_FP64, B, L, tok, seed, false, &Vf);
        assert_int_equal(Vf, V);
        for (int64_t b = 0; b < B; b++) {
            // prefill: every prompt row; decode: the new position's row
            for (int64_t r = 0; r < rows; r++) {
                const double *mine = lg + (b * rows + r) * V, *theirs = ref + (b * L + (L - rows + r)) * V;
                double e1 = rel_err(mine, theirs, V);
                if (!(e1 < 1e-10)) fail_msg("position %lld of sequence %lld: decode logits differ from the full forward by %.3g", (long long)(L - rows + r),
                                            (long long)b, e1);
            }
            // the token drawn from the last row: the reference sampler at the op's uniform
            const double *last = lg + (b * rows + rows - 1) * V;
            double u = stg_sample_uniform((uint64_t)sa.seed, L, b);
            int64_t want = ref_sample(last, V, sa.temperature, sa.top_k, sa.top_p, u);
            (void)work;
            assert_int_equal(ids[b * C + L], want);
        }
        free(ref);
    }
    assert_int_equal(rt_sampler_length(x.s), P + n);
    free(lg), free(row), free(ids), free(tok);
    rig_smp_close(&x);
}

static void test_decode_equals_forward(void **state) {
    (void)state;
    stg_sample_attrs sa = {.temperature = 1.0, .top_p = 1.0, .seed = 3};
    check_positions(MODEL("tiny.yaml"), tiny_sets, 6, 2, 3, 10, sa);
    sa.top_k = 7;
    sa.top_p = 0.8;
    sa.temperature = 0.6;
    check_positions(MODEL("tiny.yaml"), tiny_sets, 6, 1, 1, 12, sa);
}

static void test_decode_equals_forward_cs336(void **state) {
    (void)state;
    static const char *const sets[] = {"d_model=48", "d_ff=64", "n_layers=3", "n_heads=3", "vocab=50", "ctx=12", "batch=2"};
    stg_sample_attrs sa = {.temperature = 1.3, .top_p = 0.95, .top_k = 20, .seed = 11};
    check_positions(MODEL("cs336/lm.yaml"), sets, 7, 3, 4, 8, sa);
}

// Greedy: the tokens are the argmax chain of repeated full forwards.
static void test_greedy_chain(void **state) {
    (void)state;
    const int64_t B = 2, P = 2, n = 9;
    stg_sample_attrs sa = {.temperature = 0.0, .top_p = 1.0};
    rig_smp x;
    rig_smp_open(&x, MODEL("tiny.yaml"), tiny_sets, 6, STG_PREC_FP64, B, P, sa, 5, false, (rt_sampler_opts){.separate = true});
    const int64_t C = x.inf->ctx;
    int32_t prompt[2] = {9, 40};
    stg_err err;
    if (rt_sampler_prefill(x.s, prompt, &err)) fail_msg("%s", err.msg);
    for (int64_t k = 1; k < n; k++)
        if (rt_sampler_step(x.s, &err)) fail_msg("%s", err.msg);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * C)), seq[2][16];
    assert_non_null(ids);
    if (rt_sampler_ids(x.s, ids, &err)) fail_msg("%s", err.msg);
    for (int64_t b = 0; b < B; b++) seq[b][0] = 9, seq[b][1] = 40;
    for (int64_t L = P; L < P + n; L++) {
        int32_t tok[32];
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < L; j++) tok[b * L + j] = seq[b][j];
        int64_t V;
        double *ref = rig_full_forward(MODEL("tiny.yaml"), tiny_sets, 6, STG_PREC_FP64, B, L, tok, 5, false, &V);
        for (int64_t b = 0; b < B; b++) {
            const double *r = ref + (b * L + L - 1) * V;
            int64_t best = 0;
            for (int64_t i = 1; i < V; i++)
                if (r[i] > r[best]) best = i;
            seq[b][L] = (int32_t)best;
        }
        free(ref);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < P + n; j++)
            if (ids[b * C + j] != seq[b][j]) fail_msg("sequence %lld position %lld: decoded %d, argmax chain %d", (long long)b, (long long)j, ids[b * C + j], seq[b][j]);
    // a full context: another step is refused
    for (int64_t k = rt_sampler_room(x.s); k > 0; k--)
        if (rt_sampler_step(x.s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_sampler_length(x.s), C);
    assert_int_equal(rt_sampler_step(x.s, &err), -1);
    assert_non_null(strstr(err.msg, "full"));
    free(ids);
    rig_smp_close(&x);
}

// ---- what the derivation refuses ----------------------------------------------------------------

static void build_fails(const char *model, const char *const *sets, int nsets, int64_t P, const char *want) {
    stg_infer_opts o = stg_infer_defaults();
    o.model_path = model;
    o.sets = sets;
    o.nsets = nsets;
    o.prompt = P;
    stg_infer *s = NULL;
    stg_err err = {{0}};
    assert_int_equal(stg_infer_build(&o, &s, &err), -1);
    assert_null(s);
    if (!strstr(err.msg, want)) fail_msg("expected '%s' in: %s", want, err.msg);
}

static void test_refusals(void **state) {
    (void)state;
    build_fails(MODEL("tiny.yaml"), tiny_sets, 6, 17, "does not fit a context of 16");
    build_fails(MODEL("toy.yaml"), NULL, 0, 1, "batch");
    // RoPE on something other than attention's q and k
    static const char rope_elsewhere[] =
        "name: t\ndims: {batch: 2, ctx: 8, vocab: 16, d: 8}\ninputs: {tokens: [batch, ctx, i32], targets: [batch, ctx, i32]}\n"
        "graph:\n  - param emb [vocab, d] init=embedding\n  - param w [vocab, d] init=linear\n"
        "  - x = embedding(tokens, emb)\n  - r = reshape(rope(reshape(x, shape=[batch, ctx, 2, 4])), shape=[batch, ctx, d])\n"
        "  - logits = linear(r, w)\n  - loss = cross_entropy(logits, targets)\nloss: loss\n";
    stg_infer_opts o = stg_infer_defaults();
    o.text = rope_elsewhere;
    o.text_len = strlen(rope_elsewhere);
    o.model_path = "rope.yaml";
    stg_infer *s = NULL;
    stg_err err;
    assert_int_equal(stg_infer_build(&o, &s, &err), -1);
    assert_non_null(strstr(err.msg, "rope"));
    assert_non_null(strstr(err.msg, "rope.yaml:"));
}

// ---- the command line ---------------------------------------------------------------------------

static int run(const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s sample %s/models/tiny.yaml --set d_model=32 --set d_ff=48 --set n_heads=2 --set vocab=256 --set ctx=16 "
                              "--init random --device cpu %s 2>&1",
             STG_BINARY, STG_SOURCE_DIR, args);
    return tu_run(cmd, out, n);
}

static void expect(const char *args, int code, const char *want) {
    char out[8192];
    int rc = run(args, out, sizeof out);
    if (rc != code || !strstr(out, want)) fail_msg("stg sample %s: exit %d (expected %d), output:\n%s\n(expected '%s')", args, rc, code, out, want);
}

// The caches are head-major, (B, Hkv, C, Dh): attention_cached and kv_write refuse any other shape
// (the position-major (B, C, Hkv, Dh) of the caches before 2026-11-29 among them) with what they expect.
static bool cache_op_ok(stg_op_kind kind, const int64_t *cache_shape, stg_err *err) {
    const int64_t B = 2, Hq = 4, Hkv = 2, Dh = 8;
    stg_graph *g = graph_new(STG_PREC_FP32, err);
    assert_non_null(g);
    stg_loc none = {0};
    int64_t sq[4] = {B, 1, Hq, Dh}, sk[4] = {B, 1, Hkv, Dh}, sp[1] = {1};
    int q = graph_add_tensor(g, "q", 4, sq, STG_F32, STG_CLASS_WORKSPACE, none, err);
    int k = graph_add_tensor(g, "k", 4, sk, STG_F32, STG_CLASS_WORKSPACE, none, err);
    int v = graph_add_tensor(g, "v", 4, sk, STG_F32, STG_CLASS_WORKSPACE, none, err);
    int kc = graph_add_tensor(g, "kc", 4, cache_shape, STG_F32, STG_CLASS_WORKSPACE, none, err);
    int vc = graph_add_tensor(g, "vc", 4, cache_shape, STG_F32, STG_CLASS_WORKSPACE, none, err);
    int pos = graph_add_tensor(g, "pos", 1, sp, STG_I32, STG_CLASS_WORKSPACE, none, err);
    assert_true(q >= 0 && k >= 0 && v >= 0 && kc >= 0 && vc >= 0 && pos >= 0);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    int in6[6] = {q, k, v, kc, vc, pos}, in5[5] = {k, v, kc, vc, pos}, out[STG_MAX_OUT];
    int id = kind == STG_OP_ATTENTION_CACHED ? graph_add_op(g, kind, in6, 6, &a, STG_PHASE_FORWARD, "o", none, out, err)
                                             : graph_add_op(g, kind, in5, 5, NULL, STG_PHASE_FORWARD, "w", none, NULL, err);
    graph_free(g);
    return id >= 0;
}

static void test_cache_layout(void **state) {
    (void)state;
    stg_err err;
    const int64_t head_major[4] = {2, 2, 12, 8}, position_major[4] = {2, 12, 2, 8}, short_cache[4] = {2, 2, 0, 8};
    for (int kind = 0; kind < 2; kind++) {
        stg_op_kind kd = kind ? STG_OP_KV_WRITE : STG_OP_ATTENTION_CACHED;
        assert_true(cache_op_ok(kd, head_major, &err));
        memset(&err, 0, sizeof err);
        assert_false(cache_op_ok(kd, position_major, &err));
        assert_non_null(strstr(err.msg, "expected (B, Hkv, C, Dh)"));
        memset(&err, 0, sizeof err);
        assert_false(cache_op_ok(kd, short_cache, &err)); // C = 0 < S = 1
        assert_non_null(strstr(err.msg, "C >= S"));
    }
}

static void test_cli(void **state) {
    (void)state;
    expect("--prompt 0123456789abcdefg -n 1", 2, "more than the context of 16");
    expect("--prompt 0123456789 -n 7", 2, "more than the context of 16");
    expect("--prompt '' -n 4", 2, "the prompt is empty");
    expect("--prompt ab --top-p 0", 2, "(0, 1]");
    expect("--prompt ab --top-p 1.5", 2, "(0, 1]");
    expect("--prompt ab --top-p -0.1", 2, "(0, 1]");
    expect("--prompt ab --top-k 0", 2, "--top-k 0");
    expect("--prompt ab --top-k 257", 2, "above the model's vocab of 256");
    expect("--prompt ab --temperature -1", 2, "--temperature");
    expect("-n 3", 2, "--prompt TEXT or as --prompt-ids");
    expect("--prompt ab --prompt-ids x.bin", 2, "one of them");
    expect("--prompt ab --stop 999", 2, "--stop 999");
    expect("--prompt ab --attention naive", 2, "drop --attention naive");
    expect("--prompt ab -n 4 --init /nonexistent.safetensors", 2, "/nonexistent.safetensors");
    // runs: greedy is deterministic and --json gives the ids; a stop id ends the sequence
    char a[8192], b[8192];
    assert_int_equal(run("--prompt ab -n 6 --temperature 0 --json", a, sizeof a), 0);
    assert_int_equal(run("--prompt ab -n 6 --temperature 0 --json", b, sizeof b), 0);
    assert_non_null(strstr(a, "\"ids\": [["));
    assert_non_null(strstr(b, "\"ids\": [["));
    assert_string_equal(strstr(a, "\"ids\": [["), strstr(b, "\"ids\": [[")); // timings aside
    assert_non_null(strstr(a, "\"decode_steps\": 5"));
    int first;
    const char *p = strstr(a, "\"ids\": [[");
    assert_int_equal(sscanf(p, "\"ids\": [[%d", &first), 1);
    char args[128];
    snprintf(args, sizeof args, "--prompt ab -n 6 --temperature 0 --stop %d --batch 2", first);
    assert_int_equal(run(args, b, sizeof b), 0);
    assert_non_null(strstr(b, "--- sequence 0 (1 tokens) ---"));
    assert_non_null(strstr(b, "--- sequence 1 (1 tokens) ---"));
    // --profile: one more decode step, timed op by op; the ops of the decode graph are named
    assert_int_equal(run("--prompt ab -n 3 --temperature 0 --profile", b, sizeof b), 0);
    assert_non_null(strstr(b, "--profile, one decode step"));
    assert_non_null(strstr(b, "x attention_cached"));
    assert_non_null(strstr(b, "x sample"));
    assert_non_null(strstr(b, "params "));
    expect("--prompt ab -n 13 --profile", 2, "need two positions left"); // 2 + 13 leave 1 of the context of 16
    assert_int_equal(run("--prompt ab -n 12 --temperature 0 --profile", b, sizeof b), 0); // and 2 + 12 leave 2
}

// stg train --sample-every: the samples are printed and logged, and the training run is bitwise the
// one without them (the sampler only reads the step's parameters and uses its arena between steps).
static void test_train_samples(void **state) {
    (void)state;
    char dir[] = "/tmp/stg_test_sample_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[2048], out[16384];
    const char *base = "%s train %s/models/tiny.yaml --device cpu --steps 6 --lr 1e-2 --set d_model=32 --set d_ff=48 --set ctx=24 "
                       "--log %s/%s.jsonl %s 2>&1";
    snprintf(cmd, sizeof cmd, base, STG_BINARY, STG_SOURCE_DIR, dir, "with", "--sample-every 2 --sample-prompt 'hi'");
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "sample at step 2: "));
    assert_non_null(strstr(out, "sample at step 6: "));
    snprintf(cmd, sizeof cmd, base, STG_BINARY, STG_SOURCE_DIR, dir, "without", "");
    assert_int_equal(tu_run(cmd, out, sizeof out), 0);
    assert_null(strstr(out, "sample at step"));
    char path[512];
    double loss[2][6];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", dir, k ? "without" : "with");
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char line[8192];
        int n = 0, samples = 0;
        while (fgets(line, sizeof line, f) && n < 6) {
            const char *l = strstr(line, "\"loss\": ");
            assert_non_null(l);
            loss[k][n++] = strtod(l + 8, NULL);
            samples += strstr(line, "\"sample\": \"") != NULL;
        }
        fclose(f);
        assert_int_equal(n, 6);
        assert_int_equal(samples, k ? 0 : 3);
        unlink(path);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    rmdir(dir);
    // a sample prompt without --sample-every is refused
    snprintf(cmd, sizeof cmd, "%s train %s/models/tiny.yaml --device cpu --steps 1 --sample-prompt x 2>&1", STG_BINARY, STG_SOURCE_DIR);
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--sample-every"));
}

// ---- memory -------------------------------------------------------------------------------------

static void test_memory(void **state) {
    (void)state;
    static const char *const sets[] = {"d_model=64", "d_ff=96", "n_layers=2", "n_heads=4", "vocab=100", "ctx=32"};
    stg_infer_opts o = stg_infer_defaults();
    o.model_path = MODEL("cs336/lm.yaml");
    o.sets = sets;
    o.nsets = 6;
    o.batch = 3;
    o.prompt = 10;
    stg_infer *s;
    stg_err err;
    if (stg_infer_build(&o, &s, &err)) fail_msg("%s", err.msg);
    stg_infer_mem m;
    if (stg_infer_memory(s, &m, &err)) fail_msg("%s", err.msg);
    // weights and cache are exact closed forms; the plan's persistent region is their sum with the state and prompt
    assert_int_equal(m.t[0].plan, m.t[0].formula);
    assert_int_equal(m.t[1].plan, 2 * 3 * 2 * 32 * 4 * 16 * 4);
    assert_int_equal(m.t[1].plan, m.t[1].formula);
    assert_int_equal(m.t[2].plan, m.t[2].formula);
    assert_int_equal(m.persistent, m.t[0].plan + m.t[1].plan + m.t[2].plan + m.t[3].plan);
    assert_true(m.total == m.persistent + m.arena && m.arena >= m.t[5].plan && m.arena >= m.t[4].plan);
    // the executors allocate exactly the plan: one persistent copy and the larger arena
    rt_backend *bp, *bd;
    rt_sampler *x;
    rt_sampler_opts so = {0};
    if (rt_backend_cpu_new(&bp, &err) || rt_backend_cpu_new(&bd, &err) || rt_sampler_new(s, bp, bd, &so, &x, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rt_sampler_allocated(x), m.total);
    rt_sampler_free(x);
    bp->ops->destroy(bp);
    bd->ops->destroy(bd);
    // the fit: a capacity of exactly this total fits this batch, and not one more sequence's cache
    int64_t mb, mc;
    if (stg_infer_fit(&o, 32, m.total, &mb, &mc, &err)) fail_msg("%s", err.msg);
    assert_int_equal(mb, 3);
    assert_int_equal(mc, 32);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(stg_infer_report(f, false, &o, s, &m, -1, m.total, &err), 0);
    fclose(f);
    assert_non_null(strstr(buf, "KV cache"));
    assert_non_null(strstr(buf, "batch up to 3"));
    free(buf);
    stg_infer_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_rule),
        cmocka_unit_test(test_decode_equals_forward),
        cmocka_unit_test(test_decode_equals_forward_cs336),
        cmocka_unit_test(test_greedy_chain),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cache_layout),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_train_samples),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
