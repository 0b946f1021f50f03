// The CUDA matmul (cuBLASLt) and fused attention against the CPU reference: every ta/tb
// combination, batched A with a 2-D B, batched B, grad_out (bf16 in, f32 out), linear with a 3-D
// input, the model's large shapes, algorithms chosen by timing, grouped products (matmul_group:
// one pointer-array batched call), products of at most 8 rows on the few-rows kernel (decoding; with a
// bias, f32 output, accumulation, groups, and the shapes that stay on cuBLASLt); attention forward
// and backward at the model's head dims and
// context lengths, f32 and bf16; two eager runs and a CUDA Graph replay bitwise equal.
//
// Each case builds a tiny graph twice (the device's precision, and f32 for the CPU), fills the
// inputs with fresh random values (bf16-rounded when the device runs bf16, so both sides see the
// same numbers), poisons every device output with 0xFF bytes (NaN) and runs the schedule op by
// op. The CPU runs each op on the device's results of the earlier ops, so every op is checked on
// its own. Error: max |gpu - cpu| / max |cpu| per output; NaN fails.
//
// STG_GPU_TEST_SMALL=1 leaves out the large shapes (for compute-sanitizer).
// STG_BENCH_ATTN=1 instead only prints attention timings at B=4, H=16, Dh=64, S=4096 (f32, bf16)
// and B=4, H=32, Dh=80, S=512 (bf16), no check; STG_BENCH_ATTN=bf16 leaves out the f32 one.
#include "tests/gpu.h"

#ifdef STG_HAVE_CUDA
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/registry.h"
#include "tests/gpu_kernels.h"

static int small_only;

// ---- helpers ----------------------------------------------------------------------------------

static uint64_t rng_state = 0x5eed1234abcdull;

static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_sym(void) { return (float)((double)(rng_u64() >> 11) * 0x1.0p-53 * 2.0 - 1.0); } // [-1, 1)

// A graph under construction: the device's and the CPU's version side by side.
typedef struct {
    stg_graph *dev, *ref;
} pair;

static void pair_open(pair *p, stg_precision prec) {
    stg_err err;
    p->dev = graph_new(prec, &err);
    p->ref = graph_new(STG_PREC_FP32, &err);
    assert_non_null(p->dev);
    assert_non_null(p->ref);
}

static void pair_close(pair *p) {
    graph_free(p->dev);
    graph_free(p->ref);
}

static int pair_input(pair *p, const char *name, int ndim, const int64_t *shape) {
    stg_err err;
    stg_loc loc = {0};
    int a = graph_add_tensor(p->dev, name, ndim, shape, p->dev->act_dtype, STG_CLASS_INPUT, loc, &err);
    int b = graph_add_tensor(p->ref, name, ndim, shape, STG_F32, STG_CLASS_INPUT, loc, &err);
    if (a < 0 || b < 0) fail_msg("%s", err.msg);
    assert_int_equal(a, b);
    return a;
}

// Adds an op to both graphs; out receives the output tensor ids.
static void pair_op(pair *p, stg_op_kind k, const int *in, int n_in, const stg_attrs *a, int *out) {
    stg_err err;
    stg_loc loc = {0};
    int o2[STG_MAX_OUT];
    if (graph_add_op(p->dev, k, in, n_in, a, STG_PHASE_FORWARD, NULL, loc, out, &err) < 0) fail_msg("%s", err.msg);
    if (graph_add_op(p->ref, k, in, n_in, a, STG_PHASE_FORWARD, NULL, loc, o2, &err) < 0) fail_msg("%s", err.msg);
    for (int i = 0; i < p->dev->ops[p->dev->nops - 1].n_out; i++) assert_int_equal(out[i], o2[i]);
}

// Device memory and host values of every tensor of a pair.
typedef struct {
    pair *p;
    void **dptr;   // (nt) device buffers
    float **host;  // (nt) values as f32: inputs (rounded), then the device's outputs
    float **cpu;   // (nt) the CPU's outputs
} rig;

static bool is_bf16(const stg_graph *g, int t) { return g->t[t].dtype == STG_BF16; }

static void upload(rig *r, int t) { gk_upload(&r->p->dev->t[t], r->host[t], r->dptr[t]); }

static void download(rig *r, int t, float *dst) { free(gk_read(&r->p->dev->t[t], r->dptr[t], dst)); }

// Allocates everything, fills the inputs and prepares the context (the real cuda_prepare path).
static void rig_open(rig *r, pair *p) {
    stg_err err;
    r->p = p;
    if (graph_schedule(p->dev, &err) || graph_schedule(p->ref, &err)) fail_msg("%s", err.msg);
    int nt = p->dev->nt;
    r->dptr = calloc((size_t)nt, sizeof(void *));
    r->host = calloc((size_t)nt, sizeof(float *));
    r->cpu = calloc((size_t)nt, sizeof(float *));
    for (int t = 0; t < nt; t++) {
        int64_t n = stg_numel(&p->dev->t[t]);
        CK(cudaMalloc(&r->dptr[t], (size_t)stg_bytes(&p->dev->t[t]) + 16));
        r->host[t] = malloc(sizeof(float) * (size_t)n);
        r->cpu[t] = malloc(sizeof(float) * (size_t)n);
        if (p->dev->t[t].producer < 0) {
            for (int64_t i = 0; i < n; i++) {
                float v = rng_sym();
                r->host[t][i] = is_bf16(p->dev, t) ? gk_round_bf(v) : v;
            }
            upload(r, t);
        }
    }
    if (cuda_prepare(ctx, p->dev, r->dptr, &err)) fail_msg("%s", err.msg);
}

static void rig_close(rig *r) {
    for (int t = 0; t < r->p->dev->nt; t++) {
        cudaFree(r->dptr[t]);
        free(r->host[t]);
        free(r->cpu[t]);
    }
    free(r->dptr);
    free(r->host);
    free(r->cpu);
}

static void poison_outputs(rig *r, int op) {
    const stg_op *o = &r->p->dev->ops[op];
    for (int i = 0; i < o->n_out; i++)
        CK(cudaMemsetAsync(r->dptr[o->out[i]], 0xff, (size_t)stg_bytes(&r->p->dev->t[o->out[i]]),
                           (cudaStream_t)cuda_stream(ctx)));
}

static void run_op(rig *r, int op) {
    stg_err err;
    poison_outputs(r, op);
    if (cuda_op_run(ctx, r->p->dev, op, r->dptr, &err)) fail_msg("%s", err.msg);
    CK(cudaStreamSynchronize((cudaStream_t)cuda_stream(ctx)));
    CK(cudaGetLastError());
}

// Runs the schedule on both sides and checks every output against tol. Prints the errors.
static void check_all(rig *r, const char *what, double tol) {
    stg_err err;
    const stg_graph *g = r->p->dev;
    for (int s = 0; s < g->nsched; s++) {
        int op = g->schedule[s];
        const stg_op *o = &g->ops[op];
        // folded 1: the op before it wrote its output (not launched, not poisoned); 2: absorbed by the op after it
        // (not launched, its outputs poisoned and never written)
        const int folded = cuda_op_folded(ctx, op);
        cuda_mm_info mi;
        const bool replaced = cuda_mm_describe(ctx, op, &mi) == 0 && mi.gemv_fold; // writes its swiglu's output, not its own
        if (!folded) run_op(r, op);
        if (folded == 2) {
            poison_outputs(r, op);
            CK(cudaStreamSynchronize((cudaStream_t)cuda_stream(ctx)));
        }
        void *data[64];
        assert_true(g->nt <= 64);
        for (int t = 0; t < g->nt; t++) data[t] = r->host[t];
        for (int i = 0; i < o->n_out; i++) data[o->out[i]] = r->cpu[o->out[i]];
        size_t nscr = cpu_op_scratch_bytes(r->p->ref, op);
        void *scr = nscr ? malloc(nscr) : NULL;
        if (cpu_op_run(r->p->ref, op, data, scr, nscr, &err)) fail_msg("%s", err.msg);
        free(scr);
        for (int i = 0; i < o->n_out; i++) {
            int t = o->out[i];
            int64_t n = stg_numel(&g->t[t]);
            if (replaced || folded == 2) { // not written: the op after it reads the CPU's values
                memcpy(r->host[t], r->cpu[t], sizeof(float) * (size_t)n);
                printf("  %-40s %-13s out %d not written (%s)\n", what, ops_name(o->kind), i,
                       replaced ? "the swiglu's output is" : "folded into the product after it");
                continue;
            }
            download(r, t, r->host[t]); // later ops read the device's values
            double e = rel_err_f32(r->host[t], r->cpu[t], n, false, NULL);
            char sh[128];
            printf("  %-40s %-13s out %d %-22s %-4s rel err %.3g\n", what, ops_name(o->kind), i,
                   stg_shape_str(&g->t[t], sh, sizeof sh), stg_dtype_name(g->t[t].dtype), e);
            if (!(e < tol)) fail_msg("%s: %s output %d: relative error %g (tolerance %g)", what, ops_name(o->kind), i, e, tol);
        }
    }
}

// ---- matmul -----------------------------------------------------------------------------------

typedef struct {
    int ndim_a, ndim_b;
    int64_t a[4], b[4];
    int ta, tb, grad_out;
} mm_spec;

static bool expect_tuned; // test_matmul_tuned: the op's algorithm must come from timed candidates
static int expect_gemv = -1; // test_matmul_few_rows: 1 when the few-rows kernel must run the product, 0 when not

static void mm_case(stg_precision prec, stg_op_kind kind, const mm_spec *s) {
    pair p;
    pair_open(&p, prec);
    int in[2] = {pair_input(&p, "a", s->ndim_a, s->a), pair_input(&p, "b", s->ndim_b, s->b)};
    stg_attrs a;
    memset(&a, 0, sizeof a);
    if (kind == STG_OP_MATMUL) {
        a.matmul.ta = s->ta;
        a.matmul.tb = s->tb;
        a.matmul.grad_out = s->grad_out;
    }
    int out[STG_MAX_OUT];
    pair_op(&p, kind, in, 2, &a, out);
    rig r;
    rig_open(&r, &p);
    char what[128], sa[64], sb[64];
    snprintf(what, sizeof what, "%s%s%s ta%d tb%d%s", ops_name(kind), stg_shape_str(&p.dev->t[in[0]], sa, sizeof sa),
             stg_shape_str(&p.dev->t[in[1]], sb, sizeof sb), s->ta, s->tb, s->grad_out ? " grad_out" : "");
    check_all(&r, what, prec == STG_PREC_BF16 ? 2e-2 : 1e-4);
    cuda_mm_info info;
    assert_int_equal(cuda_mm_describe(ctx, p.dev->nops - 1, &info), 0);
    if (expect_tuned) { // timed: more than one candidate, a time for the choice, the choice among them
        assert_true(info.candidates > 1);
        assert_true(info.ms_pick > 0 && info.pick >= 0 && info.pick < info.candidates);
    } else {
        assert_int_equal(info.candidates, 0);
    }
    rig_close(&r);
    pair_close(&p);
}

static void test_matmul_transposes(void **state) {
    (void)state;
    const int64_t m = 72, k = 56, n = 88;
    for (int prec = 0; prec < 2; prec++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                mm_spec s = {2, 2, {ta ? k : m, ta ? m : k}, {tb ? n : k, tb ? k : n}, ta, tb, 0};
                mm_case(prec ? STG_PREC_BF16 : STG_PREC_FP32, STG_OP_MATMUL, &s);
            }
    // odd sizes (leading dimensions not 16-byte multiples), f32
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mm_spec s = {2, 2, {ta ? 29 : 37, ta ? 37 : 29}, {tb ? 45 : 29, tb ? 29 : 45}, ta, tb, 0};
            mm_case(STG_PREC_FP32, STG_OP_MATMUL, &s);
        }
}

static void test_matmul_batched(void **state) {
    (void)state;
    const int64_t m = 40, k = 48, n = 24;
    for (int prec = 0; prec < 2; prec++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                // batched B: (2, 3, ...) both
                mm_spec s = {4, 4, {2, 3, ta ? k : m, ta ? m : k}, {2, 3, tb ? n : k, tb ? k : n}, ta, tb, 0};
                mm_case(prec ? STG_PREC_BF16 : STG_PREC_FP32, STG_OP_MATMUL, &s);
                if (!ta) { // batched A, 2-D B: the batch folds into m
                    mm_spec s2 = {3, 2, {5, m, k}, {tb ? n : k, tb ? k : n}, 0, tb, 0};
                    mm_case(prec ? STG_PREC_BF16 : STG_PREC_FP32, STG_OP_MATMUL, &s2);
                }
            }
}

static void test_matmul_grad_out(void **state) {
    (void)state;
    // dW (out, in) = dyᵀ (out, N) · x (N, in), bf16 in, f32 out; and the 2-D and batched forms.
    mm_spec s1 = {2, 2, {96, 64}, {96, 80}, 1, 0, 1};
    mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s1);
    mm_spec s2 = {3, 3, {2, 48, 32}, {2, 40, 32}, 0, 1, 1};
    mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s2);
    if (!small_only) {
        mm_spec s3 = {2, 2, {800, 6400}, {800, 1600}, 1, 0, 1};
        mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s3);
    }
}

static void test_linear(void **state) {
    (void)state;
    mm_spec s0 = {3, 2, {3, 50, 64}, {96, 64}, 0, 0, 0};
    mm_case(STG_PREC_FP32, STG_OP_LINEAR, &s0);
    mm_case(STG_PREC_BF16, STG_OP_LINEAR, &s0);
    if (small_only) return;
    // the xl model's MLP: (4·200, 1600) · (6400, 1600)ᵀ, and its backward dx = dy · W
    mm_spec s1 = {3, 2, {4, 200, 1600}, {6400, 1600}, 0, 0, 0};
    mm_case(STG_PREC_FP32, STG_OP_LINEAR, &s1);
    mm_case(STG_PREC_BF16, STG_OP_LINEAR, &s1);
    mm_spec s2 = {3, 2, {4, 200, 6400}, {6400, 1600}, 0, 0, 0};
    mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s2);
    // the LM head at vocab 10000, d_model 2560
    mm_spec s3 = {3, 2, {4, 200, 2560}, {10000, 2560}, 0, 0, 0};
    mm_case(STG_PREC_BF16, STG_OP_LINEAR, &s3);
}

// The same products on a context that chooses algorithms by timing (gemm_tune): the candidates run
// on the rig's tensors while it prepares, then the outputs are poisoned and the chosen algorithm
// must still agree with the CPU.
// Runs cases() on a context that times its algorithms (then the plain one again).
static void on_tuned_context(void (*cases)(void)) {
    stg_cuda *plain = ctx, *tuned = NULL;
    stg_err err;
    stg_cuda_opts o = {.device = 0, .gemm_tune = true};
    if (cuda_new(&o, &tuned, &err)) fail_msg("cuda_new: %s", err.msg);
    ctx = tuned;
    expect_tuned = true;
    cases();
    ctx = plain;
    expect_tuned = false;
    cuda_free(tuned);
}

static void tuned_cases(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mm_spec s = {2, 2, {ta ? 56 : 72, ta ? 72 : 56}, {tb ? 88 : 56, tb ? 56 : 88}, ta, tb, 0};
            mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s);
        }
    mm_spec s0 = {3, 2, {3, 50, 64}, {96, 64}, 0, 0, 0};
    mm_case(STG_PREC_FP32, STG_OP_LINEAR, &s0);
    mm_spec s1 = {2, 2, {96, 64}, {96, 80}, 1, 0, 1};
    mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s1);
    if (!small_only) {
        mm_spec s2 = {3, 2, {4, 200, 1600}, {6400, 1600}, 0, 0, 0};
        mm_case(STG_PREC_BF16, STG_OP_LINEAR, &s2);
        mm_spec s3 = {2, 2, {800, 6400}, {800, 1600}, 1, 0, 1};
        mm_case(STG_PREC_BF16, STG_OP_MATMUL, &s3);
    }
}

static void test_matmul_tuned(void **state) {
    (void)state;
    on_tuned_context(tuned_cases);
}

// matmul_group of n pairs of spec s's shapes (the second operand shared by every pair when
// `shared`, as the q, k, v projections share their input), in the device's precision; on the plain
// context and on one that times its algorithms.
static void group_case(stg_precision prec, int n, const mm_spec *s, bool shared) {
    pair p;
    pair_open(&p, prec);
    int in[2 * STG_MAX_OUT];
    int b0 = shared ? pair_input(&p, "b", s->ndim_b, s->b) : -1;
    for (int q = 0; q < n; q++) {
        char na[8], nb[8];
        snprintf(na, sizeof na, "a%d", q);
        snprintf(nb, sizeof nb, "b%d", q);
        in[2 * q] = pair_input(&p, na, s->ndim_a, s->a);
        in[2 * q + 1] = shared ? b0 : pair_input(&p, nb, s->ndim_b, s->b);
    }
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.matmul.ta = s->ta;
    a.matmul.tb = s->tb;
    a.matmul.grad_out = s->grad_out;
    int out[STG_MAX_OUT];
    pair_op(&p, STG_OP_MATMUL_GROUP, in, 2 * n, &a, out);
    rig r;
    rig_open(&r, &p);
    char what[128], sa[64], sb[64];
    snprintf(what, sizeof what, "group of %d %s%s ta%d tb%d%s%s", n, stg_shape_str(&p.dev->t[in[0]], sa, sizeof sa),
             stg_shape_str(&p.dev->t[in[1]], sb, sizeof sb), s->ta, s->tb, s->grad_out ? " grad_out" : "",
             shared ? " shared" : "");
    check_all(&r, what, prec == STG_PREC_BF16 ? 2e-2 : 1e-4);
    cuda_mm_info info;
    assert_int_equal(cuda_mm_describe(ctx, p.dev->nops - 1, &info), 0);
    assert_int_equal(info.batch, n);
    if (expect_gemv >= 0) assert_int_equal(info.gemv, expect_gemv);
    if (expect_tuned) assert_true(info.candidates > 1 && info.ms_pick > 0);
    else assert_int_equal(info.candidates, 0);
    rig_close(&r);
    pair_close(&p);
}

static void group_cases(void) {
    // the forward projections: x (B, T, in) · Wᵀ; the weight gradients: dyᵀ · x in f32
    mm_spec fwd = {3, 2, {2, 36, 64}, {80, 64}, 0, 1, 0};
    mm_spec wgrad = {2, 2, {72, 80}, {72, 64}, 1, 0, 1};
    mm_spec odd = {2, 2, {37, 29}, {45, 29}, 0, 1, 0};
    for (int n = 2; n <= 3; n++) {
        group_case(STG_PREC_FP32, n, &fwd, true);
        group_case(STG_PREC_BF16, n, &fwd, true);
        group_case(STG_PREC_BF16, n, &wgrad, true);
        group_case(STG_PREC_FP32, n, &odd, false);
        group_case(STG_PREC_BF16, n, &odd, false);
    }
    if (!small_only) { // the 2.7B model's q, k, v weight gradients at ctx 256 (k = 1024 tokens)
        mm_spec big = {2, 2, {1024, 2560}, {1024, 2560}, 1, 0, 1};
        group_case(STG_PREC_BF16, 3, &big, true);
    }
}

static void test_matmul_group(void **state) {
    (void)state;
    group_cases();
    on_tuned_context(group_cases);
}

// ---- products of few rows (decoding) ------------------------------------------------------------

// x (m, k) · Wᵀ (W: n, k) in bf16: a linear [with a bias], or with `f32_out` a matmul giving f32
// (grad_out). The few-rows kernel must run it when gemv (cuda_mm_describe says so), cuBLASLt
// otherwise; against the CPU, then (accum) run again adding into its output, as gradient accumulation
// does (beta 1 with C the output): twice the product.
static int expect_split = 0; // few_rows_case: the warps sharing a row's k the few-rows kernel must use (0: any, -1: more than 1)
static int expect_loop = 0;  // few_rows_case: 1 when the grid must hold fewer blocks than row groups (unless STG_NO_GV_LOOP)
// Which few-rows kernels the tests take (tc_set): 0 the CUDA-core kernels at every row count (STG_NO_GEMV_TC=1), 1
// the tensor-core kernels from 2 rows on (the default). A split expectation is of the CUDA-core kernels.
static int tc_on = 1;
static void tc_set(int on) {
    tc_on = on;
    if (on) unsetenv("STG_NO_GEMV_TC");
    else setenv("STG_NO_GEMV_TC", "1", 1);
}

static void few_rows_case(int64_t m, int64_t k, int64_t n, bool bias, bool f32_out, bool accum, int gemv) {
    pair p;
    pair_open(&p, STG_PREC_BF16);
    const int64_t xs[2] = {m, k}, ws[2] = {n, k}, bs[1] = {n};
    int in[3] = {pair_input(&p, "x", 2, xs), pair_input(&p, "w", 2, ws), bias ? pair_input(&p, "b", 1, bs) : -1};
    stg_attrs a;
    memset(&a, 0, sizeof a);
    int out[STG_MAX_OUT];
    if (f32_out) {
        a.matmul.tb = 1;
        a.matmul.grad_out = 1;
        pair_op(&p, STG_OP_MATMUL, in, 2, &a, out);
    } else {
        a.linear.bias = bias;
        pair_op(&p, STG_OP_LINEAR, in, bias ? 3 : 2, &a, out);
    }
    rig r;
    rig_open(&r, &p);
    char what[128];
    snprintf(what, sizeof what, "few rows %lldx%lld . (%lldx%lld)T%s%s", (long long)m, (long long)k, (long long)n, (long long)k,
             bias ? " + bias" : "", f32_out ? " -> f32" : "");
    check_all(&r, what, 2e-2);
    const int op = p.dev->nops - 1;
    cuda_mm_info info;
    assert_int_equal(cuda_mm_describe(ctx, op, &info), 0);
    assert_int_equal(info.gemv, gemv);
    assert_int_equal(info.gemv_tc, gemv && tc_on && m >= 2);
    if (info.gemv_tc) printf("  %-40s tensor cores, k split %d ways\n", what, info.gemv_split);
    if (gemv && expect_split && !info.gemv_tc) {
        printf("  %-40s few-rows kernel: %d rows a warp, k split %d ways, %lld blocks\n", what, info.gemv_rows, info.gemv_split,
               (long long)info.gemv_blocks);
        if (expect_split > 0) assert_int_equal(info.gemv_split, expect_split);
        else assert_true(info.gemv_split > 1);
        const char *nl = getenv("STG_NO_GV_LOOP");
        if (expect_loop && !(nl && *nl && *nl != '0')) {
            assert_true(info.gemv_blocks > 0);
            assert_true(info.gemv_blocks < n * info.gemv_split / 8); // fewer than a block a row group: the loop runs
        }
    }
    if (accum) { // the output holds the product: add it once more
        stg_err err;
        const int y = out[0];
        const int64_t ny = stg_numel(&p.dev->t[y]);
        p.dev->ops[op].accum = 1;
        cuda_set_accumulate(ctx, true);
        if (cuda_op_run(ctx, p.dev, op, r.dptr, &err)) fail_msg("%s", err.msg);
        CK(cudaStreamSynchronize((cudaStream_t)cuda_stream(ctx)));
        cuda_set_accumulate(ctx, false);
        p.dev->ops[op].accum = 0;
        float *twice = malloc(sizeof(float) * (size_t)ny);
        for (int64_t i = 0; i < ny; i++) twice[i] = 2.0f * r.cpu[y][i];
        download(&r, y, r.host[y]);
        double e = rel_err_f32(r.host[y], twice, ny, false, NULL);
        printf("  %-40s accumulated: rel err %.3g\n", what, e);
        free(twice);
        if (!(e < 2e-2)) fail_msg("%s: accumulated output: relative error %g", what, e);
    }
    rig_close(&r);
    pair_close(&p);
}

static void few_rows_cases(void) {
    // one row (a sequence) up to eight, an output count that is a multiple of nothing
    const int64_t ms[5] = {1, 2, 3, 5, 8};
    for (int i = 0; i < 5; i++) few_rows_case(ms[i], 64, 77, false, false, false, 1);
    few_rows_case(4, 200, 300, true, false, true, 1); // a bias; k of 25 vectors (part of a lane's last batch)
    few_rows_case(3, 72, 50, false, true, true, 1);   // bf16 -> f32 (grad_out), accumulated
    few_rows_case(1, 2560, 2560, false, false, true, 1); // the 2.7B model's wo: R = 1 (few output rows)
    // split k (few output rows: the warps of a row's group add their slices' sums in shared memory)
    expect_split = 8;
    few_rows_case(3, 8192, 77, true, false, true, 1); // 10 blocks at one row a warp: 8 slices of 128 vectors
    expect_split = 2;
    few_rows_case(5, 2056, 300, false, true, false, 1); // 257 vectors: two slices (129 and 128), no more (128 a warp at least)
    expect_split = -1; // 250 blocks at one row a warp: k split; then more row groups than one wave of blocks holds, so
                       // each takes several rows, the last ones fewer (mm_gv_kernel's loop; STG_NO_GV_LOOP=1: a block a group)
    expect_loop = 1;
    few_rows_case(4, 10240, 2000, true, false, true, 1);
    expect_loop = 0;
    expect_split = 0;
    few_rows_case(2, 36, 40, false, false, false, 0); // k not a multiple of 8: cuBLASLt
    few_rows_case(9, 64, 40, false, false, false, 0); // nine rows: cuBLASLt
    if (!small_only) { // the 2.7B model's w1, w2 and head at one and at eight sequences
        few_rows_case(1, 2560, 10240, false, false, false, 1);
        expect_split = -1; // 320 blocks at one row a warp: fewer than the slots of any H100 or H200
        few_rows_case(1, 10240, 2560, false, false, false, 1);
        expect_split = 0;
        few_rows_case(1, 2560, 10000, false, false, false, 1);
        few_rows_case(8, 2560, 10240, false, false, false, 1);
    }
    // a group (q, k and v; w1 and w3): one launch over its pairs
    mm_spec g1 = {2, 2, {1, 64}, {80, 64}, 0, 1, 0}, g2 = {2, 2, {5, 128}, {33, 128}, 0, 1, 0};
    expect_gemv = 1;
    for (int n = 2; n <= 3; n++) {
        group_case(STG_PREC_BF16, n, &g1, false);
        group_case(STG_PREC_BF16, n, &g2, false);
    }
    expect_gemv = 0; // f32 stays on cuBLASLt
    group_case(STG_PREC_FP32, 3, &g1, false);
    expect_gemv = -1;
}

// Every case twice: the CUDA-core kernels at every row count, then the tensor-core kernels from 2 rows on.
static void test_matmul_few_rows(void **state) {
    (void)state;
    for (int on = 0; on <= 1; on++) {
        printf("few-rows kernels: %s\n", on ? "tensor cores from 2 rows" : "CUDA cores (STG_NO_GEMV_TC=1)");
        tc_set(on);
        few_rows_cases();
    }
    tc_set(1);
}

// ---- the swiglu written by the product that makes its inputs (decoding) ---------------------------

// x (m, k) · [W1; W3]ᵀ (each n, k) as one group, then swiglu(a, b) (a the first pair's output, or the
// second's when `swap`), in bf16; `extra`: an add reads b too (so no fold). Against the CPU op by op;
// then, when k is not split (split: the warps sharing a row pair's k the product must use, 0 any), the
// swiglu's output against the same graph prepared with STG_NO_FOLD=1, bitwise.
static void glu_case(int64_t m, int64_t k, int64_t n, bool swap, bool extra, int fold, int split) {
    pair p;
    pair_open(&p, STG_PREC_BF16);
    const int64_t xs[2] = {m, k}, Ws[2] = {n, k};
    const int x = pair_input(&p, "x", 2, xs);
    int in[4] = {x, pair_input(&p, "w1", 2, Ws), x, pair_input(&p, "w3", 2, Ws)};
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.matmul.tb = 1;
    int ab[STG_MAX_OUT], y[STG_MAX_OUT];
    pair_op(&p, STG_OP_MATMUL_GROUP, in, 4, &a, ab);
    const int prod = p.dev->nops - 1;
    memset(&a, 0, sizeof a);
    int sin[2] = {ab[swap ? 1 : 0], ab[swap ? 0 : 1]};
    pair_op(&p, STG_OP_SWIGLU, sin, 2, &a, y);
    const int sw = p.dev->nops - 1;
    if (extra) {
        int ain[2] = {ab[1], ab[1]}, o2[STG_MAX_OUT];
        pair_op(&p, STG_OP_ADD, ain, 2, &a, o2);
    }
    rig r;
    rig_open(&r, &p);
    char what[128];
    snprintf(what, sizeof what, "w1/w3 %lldx%lld . %lld -> swiglu%s%s", (long long)m, (long long)k, (long long)n, swap ? " (swapped)" : "",
             extra ? ", b read by an add" : "");
    check_all(&r, what, 2e-2);
    cuda_mm_info info;
    assert_int_equal(cuda_mm_describe(ctx, prod, &info), 0);
    printf("  %-40s swiglu folded: %d (product: gemv %d, tensor cores %d, split %d, fold %d)\n", what, cuda_op_folded(ctx, sw),
           info.gemv, info.gemv_tc, info.gemv_split, info.gemv_fold);
    assert_int_equal(cuda_op_folded(ctx, sw), fold);
    assert_int_equal(info.gemv_fold, fold);
    if (fold && split) assert_int_equal(info.gemv_split, split);
    if (fold) { // run both ways; k whole in both: the two ops' bits
        const int t = y[0];
        const size_t nb = (size_t)stg_bytes(&p.dev->t[t]);
        unsigned char *h1 = malloc(nb), *h2 = malloc(nb);
        stg_err err;
        for (int pass = 0; pass < 2; pass++) {
            if (pass) {
                setenv("STG_NO_FOLD", "1", 1);
                if (cuda_prepare(ctx, p.dev, r.dptr, &err)) fail_msg("%s", err.msg);
                unsetenv("STG_NO_FOLD");
                assert_int_equal(cuda_op_folded(ctx, sw), 0);
                cuda_mm_info apart;
                assert_int_equal(cuda_mm_describe(ctx, prod, &apart), 0);
                if (apart.gemv_split != 1 || info.gemv_split != 1) break; // sums in other orders
            }
            for (int s2 = 0; s2 < p.dev->nsched; s2++) // (a folded op is not launched, so not poisoned either)
                if (!cuda_op_folded(ctx, p.dev->schedule[s2])) run_op(&r, p.dev->schedule[s2]);
            CK(cudaMemcpy(pass ? h2 : h1, r.dptr[t], nb, cudaMemcpyDeviceToHost));
        }
        cuda_mm_info apart;
        assert_int_equal(cuda_mm_describe(ctx, prod, &apart), 0);
        if (apart.gemv_split == 1 && info.gemv_split == 1) {
            if (memcmp(h1, h2, nb)) fail_msg("%s: the folded swiglu's output differs from the two ops'", what);
            printf("  %-40s bitwise equal to the product and swiglu apart\n", what);
        } else {
            printf("  %-40s k split (%d folded, %d apart): compared with the CPU only\n", what, info.gemv_split, apart.gemv_split);
        }
        free(h1);
        free(h2);
    }
    rig_close(&r);
    pair_close(&p);
}

static void test_matmul_glu(void **state) {
    (void)state;
    for (int on = 0; on <= 1; on++) { // the CUDA-core kernels, then the tensor-core ones from 2 rows on (splits: the former's)
        tc_set(on);
        glu_case(1, 2560, 10240, false, false, 1, 0); // the 2.7B model's w1/w3 at batch 1 (k split in two on an H100 or H200)
        glu_case(3, 512, 700, true, false, 1, on ? 0 : 1); // a from the second pair; a row count that fits no warp's multiple
        glu_case(8, 256, 4096, false, false, 1, on ? 0 : 1); // eight rows
        glu_case(2, 4096, 300, false, false, 1, on ? 0 : 2); // few rows of W: k in two slices of 256 vectors
        glu_case(2, 256, 600, false, true, 0, 0);     // b read by an add too: not folded
        glu_case(9, 256, 600, false, false, 0, 0);    // nine rows: cuBLASLt, not folded
        if (on) glu_case(5, 8200, 90, false, false, 1, 0); // k of 1025 vectors: a last chunk of one vector, the tiles split
    }
    tc_set(1);
}

// ---- the RMSNorm read by a few-rows product (decoding) ---------------------------------------------

// rmsnorm(x (m, k), g) -> h, then h times `npairs` weights (n, k): one linear (npairs 1) or a group; with
// `glu` (two pairs) a swiglu of the two outputs. `extra`: 1 an add reads h too, 2 an add reads rstd (so
// no fold), 3 a second linear reads h (of n / 2 + 3 outputs: a grouped-query layer's q beside k and v). Against the CPU op by op (the folded norm's outputs poisoned and never written: the product
// must read x and g); `fold`: whether the norm must be folded. split: the warps sharing a row's k the
// product must use (0 any).
static void norm_case(int64_t m, int64_t k, int64_t n, int npairs, bool glu, int extra, int fold, int split) {
    pair p;
    pair_open(&p, STG_PREC_BF16);
    const int64_t xs[2] = {m, k}, gs[1] = {k}, Ws[2] = {n, k};
    const int x = pair_input(&p, "x", 2, xs), gn = pair_input(&p, "g", 1, gs);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.norm.eps = 1e-5;
    int nin[2] = {x, gn}, hn[STG_MAX_OUT];
    pair_op(&p, STG_OP_RMSNORM, nin, 2, &a, hn);
    const int nop = p.dev->nops - 1;
    int in[2 * STG_MAX_OUT], y[STG_MAX_OUT];
    for (int q = 0; q < npairs; q++) {
        char nw[8];
        snprintf(nw, sizeof nw, "w%d", q);
        in[2 * q] = hn[0];
        in[2 * q + 1] = pair_input(&p, nw, 2, Ws);
    }
    memset(&a, 0, sizeof a);
    if (npairs == 1) {
        pair_op(&p, STG_OP_LINEAR, in, 2, &a, y);
    } else {
        a.matmul.tb = 1;
        pair_op(&p, STG_OP_MATMUL_GROUP, in, 2 * npairs, &a, y);
    }
    const int prod = p.dev->nops - 1;
    memset(&a, 0, sizeof a);
    int o2[STG_MAX_OUT];
    if (glu) pair_op(&p, STG_OP_SWIGLU, y, 2, &a, o2);
    int prod2 = -1;
    if (extra == 3) {
        const int64_t W2[2] = {n / 2 + 3, k};
        int lin[2] = {hn[0], pair_input(&p, "wb", 2, W2)};
        pair_op(&p, STG_OP_LINEAR, lin, 2, &a, o2);
        prod2 = p.dev->nops - 1;
    } else if (extra) {
        int ain[2] = {hn[extra - 1], hn[extra - 1]};
        pair_op(&p, STG_OP_ADD, ain, 2, &a, o2);
    }
    rig r;
    rig_open(&r, &p);
    char what[128];
    snprintf(what, sizeof what, "rmsnorm %lldx%lld . %d x %lld%s%s", (long long)m, (long long)k, npairs, (long long)n,
             glu ? " -> swiglu" : "",
             extra == 1 ? ", h read by an add" : extra == 2 ? ", rstd read by an add" : extra == 3 ? " and a second linear" : "");
    check_all(&r, what, 2e-2);
    cuda_mm_info info;
    assert_int_equal(cuda_mm_describe(ctx, prod, &info), 0);
    printf("  %-40s norm folded: %d (product: gemv %d, rows %d, split %d, swiglu %d, norm %d)\n", what, cuda_op_folded(ctx, nop),
           info.gemv, info.gemv_rows, info.gemv_split, info.gemv_fold, info.gemv_norm);
    assert_int_equal(cuda_op_folded(ctx, nop), fold ? 2 : 0);
    assert_int_equal(info.gemv_norm, fold);
    assert_int_equal(info.gemv_fold, glu ? 1 : 0);
    if (split && info.gemv && !info.gemv_tc) assert_int_equal(info.gemv_split, split); // (the CUDA-core kernels' split)
    if (prod2 >= 0) {
        assert_int_equal(cuda_mm_describe(ctx, prod2, &info), 0);
        assert_int_equal(info.gemv_norm, fold);
    }
    rig_close(&r);
    pair_close(&p);
}

static void test_matmul_norm_fold(void **state) {
    (void)state;
    norm_case(1, 2560, 7680 / 3, 3, false, 0, 1, 0); // the 2.7B model's q, k, v at batch 1
    norm_case(1, 2560, 10240, 2, true, 0, 1, 0);     // w1 / w3 and their swiglu (k split in two on an H100 or H200)
    for (int on = 0; on <= 1; on++) { // from 2 rows: not folded, on the CUDA-core kernels (one row only) and the tensor cores
        tc_set(on);
        norm_case(2, 512, 700, 1, false, 0, 0, 1); // two rows
        norm_case(2, 4096, 300, 2, true, 0, 0, 2); // two rows, the swiglu's product split in two
        norm_case(8, 256, 300, 1, false, 0, 0, 1); // eight rows
    }
    tc_set(1);
    norm_case(1, 1024, 512, 2, false, 3, 1, 1);       // a grouped-query layer: k, v a group, q apart; both fold it
    norm_case(1, 8192, 77, 1, false, 0, 0, 8);        // few rows of W, k in 8 slices: the prologues would read 4x W
    norm_case(1, 256, 300, 1, false, 1, 0, 0);        // h read by an add too: not folded
    norm_case(1, 256, 300, 1, false, 2, 0, 0);        // rstd read: not folded
    norm_case(9, 256, 300, 1, false, 0, 0, 0);        // nine rows: cuBLASLt, not folded
}

// ---- attention --------------------------------------------------------------------------------

// attention(q, k, v) -> (o, lse), then attention_bwd(q, k, v, o, lse, do) -> (dq, dk, dv).
static void attn_pair(pair *p, stg_precision prec, int64_t B, int64_t S, int64_t H, int64_t Dh, double scale) {
    pair_open(p, prec);
    int64_t sh[4] = {B, S, H, Dh};
    int q = pair_input(p, "q", 4, sh), k = pair_input(p, "k", 4, sh), v = pair_input(p, "v", 4, sh);
    int dout = pair_input(p, "do", 4, sh);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.attention.scale = scale;
    int in[3] = {q, k, v}, out[STG_MAX_OUT], out2[STG_MAX_OUT];
    pair_op(p, STG_OP_ATTENTION, in, 3, &a, out);
    int in2[6] = {q, k, v, out[0], out[1], dout};
    pair_op(p, STG_OP_ATTENTION_BWD, in2, 6, &a, out2);
}

static void attn_case(stg_precision prec, int64_t B, int64_t S, int64_t H, int64_t Dh, double scale) {
    pair p;
    attn_pair(&p, prec, B, S, H, Dh, scale);
    rig r;
    rig_open(&r, &p);
    char what[128];
    snprintf(what, sizeof what, "attention B%lld S%lld H%lld Dh%lld %s%s", (long long)B, (long long)S, (long long)H,
             (long long)Dh, prec == STG_PREC_BF16 ? "bf16" : "f32", scale != 0.0 ? " scale" : "");
    check_all(&r, what, prec == STG_PREC_BF16 ? 2e-2 : 1e-5);
    rig_close(&r);
    pair_close(&p);
}

static void test_attention_model_shapes(void **state) {
    (void)state;
    const int64_t dhs[2] = {64, 80}, ss[2] = {200, 1024};
    for (int prec = 0; prec < 2; prec++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                if (small_only && ss[j] > 200) continue;
                attn_case(prec ? STG_PREC_BF16 : STG_PREC_FP32, 2, ss[j], 25, dhs[i], 0.0);
            }
}

// bf16 on the tensor-core paths (wgmma forward at head dims 64 and 128 on an H100, mma.sync else):
// every head dim that is a multiple of 16 the users run or might, at one token, a partial tile,
// several tiles with a partial last one, and many full tiles; then the other multiples of 8.
static void test_attention_bf16_tensor_cores(void **state) {
    (void)state;
    const int64_t dhs[6] = {16, 32, 48, 64, 80, 128}, ss[4] = {1, 17, 200, 1024};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) {
            if (small_only && ss[j] > 200) continue;
            attn_case(STG_PREC_BF16, 2, ss[j], 3, dhs[i], 0.0);
        }
    attn_case(STG_PREC_BF16, 1, 129, 2, 64, 0.3); // explicit scale, one row past a 128-query tile
    attn_case(STG_PREC_BF16, 1, 300, 2, 128, 0.0); // several 128-query tiles at the largest head dim
    // head dims that are multiples of 8 but not 16: padded with zeros inside the kernels
    const int64_t odd[5] = {8, 24, 40, 72, 120};
    for (int i = 0; i < 5; i++) {
        attn_case(STG_PREC_BF16, 2, 17, 3, odd[i], 0.0);
        attn_case(STG_PREC_BF16, 1, 200, 2, odd[i], 0.0);
    }
}

static void test_attention_odd_shapes(void **state) {
    (void)state;
    attn_case(STG_PREC_FP32, 1, 1, 1, 8, 0.0);      // one token
    attn_case(STG_PREC_FP32, 2, 70, 3, 8, 0.0);     // smallest head dim
    attn_case(STG_PREC_FP32, 1, 129, 2, 128, 0.0);  // largest head dim, one row past two tiles
    attn_case(STG_PREC_FP32, 2, 65, 2, 24, 0.3);    // explicit scale
    attn_case(STG_PREC_BF16, 1, 100, 2, 40, 0.0);
}

// ---- determinism: two eager runs and a captured graph's replay, bitwise ------------------------

static void outputs_bytes(rig *r, unsigned char **buf, size_t *n) {
    const stg_graph *g = r->p->dev;
    size_t total = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].producer >= 0) total += (size_t)stg_bytes(&g->t[t]);
    unsigned char *b = malloc(total), *q = b;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].producer >= 0) {
            CK(cudaMemcpy(q, r->dptr[t], (size_t)stg_bytes(&g->t[t]), cudaMemcpyDeviceToHost));
            q += stg_bytes(&g->t[t]);
        }
    *buf = b;
    *n = total;
}

static void determinism_case(pair *p, const char *what) {
    rig r;
    rig_open(&r, p);
    const stg_graph *g = p->dev;
    cudaStream_t st = (cudaStream_t)cuda_stream(ctx);
    unsigned char *run[3];
    size_t n[3];
    for (int rep = 0; rep < 2; rep++) {
        for (int s = 0; s < g->nsched; s++) run_op(&r, g->schedule[s]);
        outputs_bytes(&r, &run[rep], &n[rep]);
    }
    for (int s = 0; s < g->nsched; s++) poison_outputs(&r, g->schedule[s]);
    CK(cudaStreamSynchronize(st));
    gk_run(g, r.dptr, true);
    outputs_bytes(&r, &run[2], &n[2]);
    assert_true(n[0] == n[1] && n[0] == n[2]);
    int same01 = memcmp(run[0], run[1], n[0]) == 0, same02 = memcmp(run[0], run[2], n[0]) == 0;
    printf("  %-40s eager twice %s, graph replay %s (%zu bytes)\n", what, same01 ? "equal" : "DIFFER",
           same02 ? "equal" : "DIFFER", n[0]);
    assert_true(same01);
    assert_true(same02);
    for (int i = 0; i < 3; i++) free(run[i]);
    rig_close(&r);
}

static void test_determinism(void **state) {
    (void)state;
    for (int prec = 0; prec < 2; prec++) {
        stg_precision pr = prec ? STG_PREC_BF16 : STG_PREC_FP32;
        pair p;
        attn_pair(&p, pr, 2, 200, 5, 80, 0.0);
        determinism_case(&p, prec ? "attention fwd+bwd bf16" : "attention fwd+bwd f32");
        pair_close(&p);
        if (prec) {
            attn_pair(&p, pr, 2, 1024, 3, 64, 0.0);
            determinism_case(&p, "attention fwd+bwd bf16 S1024 Dh64");
            pair_close(&p);
        }

        pair_open(&p, pr);
        int64_t xs[3] = {4, 50, 320}, ws[2] = {640, 320};
        int in[2] = {pair_input(&p, "x", 3, xs), pair_input(&p, "w", 2, ws)}, out[STG_MAX_OUT];
        stg_attrs a;
        memset(&a, 0, sizeof a);
        pair_op(&p, STG_OP_LINEAR, in, 2, &a, out);
        int in2[2] = {out[0], in[1]}, out2[STG_MAX_OUT]; // dx-like: y · W
        pair_op(&p, STG_OP_MATMUL, in2, 2, &a, out2);
        determinism_case(&p, prec ? "linear + matmul bf16" : "linear + matmul f32");
        pair_close(&p);
        if (prec) { // the few-rows kernel (decoding's products)
            pair_open(&p, pr);
            int64_t fx[2] = {3, 256}, fw[2] = {500, 256};
            int fin[2] = {pair_input(&p, "x", 2, fx), pair_input(&p, "w", 2, fw)}, fout[STG_MAX_OUT];
            memset(&a, 0, sizeof a);
            pair_op(&p, STG_OP_LINEAR, fin, 2, &a, fout);
            determinism_case(&p, "linear of 3 rows bf16 (few-rows kernel)");
            pair_close(&p);
        }
    }
}

// ---- optional timing --------------------------------------------------------------------------

static void bench_attention(stg_precision prec, int64_t B, int64_t S, int64_t H, int64_t Dh) {
    pair p;
    attn_pair(&p, prec, B, S, H, Dh, 0.0);
    rig r;
    rig_open(&r, &p);
    stg_err err;
    cudaStream_t st = (cudaStream_t)cuda_stream(ctx);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int s = 0; s < 2; s++) {
        int op = p.dev->schedule[s];
        float best[15];
        for (int it = 0; it < 17; it++) {
            CK(cudaEventRecord(e0, st));
            if (cuda_op_run(ctx, p.dev, op, r.dptr, &err)) fail_msg("%s", err.msg);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 2) best[it - 2] = ms;
        }
        for (int i = 0; i < 15; i++) // sort for the median
            for (int j = i + 1; j < 15; j++)
                if (best[j] < best[i]) {
                    float x = best[i];
                    best[i] = best[j];
                    best[j] = x;
                }
        double flops = (s == 0 ? 2.0 : 5.0) * 2.0 * (double)(B * H * Dh) * ((double)S * (double)(S + 1) / 2.0); // causal pairs
        printf("  bench attention %s %s B%lld H%lld Dh%lld S%lld: median %.3f ms, %.1f TFLOP/s (causal, %s matmuls)\n",
               prec == STG_PREC_BF16 ? "bf16" : "f32", s == 0 ? "fwd" : "bwd", (long long)B, (long long)H,
               (long long)Dh, (long long)S, best[7], flops / (best[7] * 1e-3) / 1e12, s == 0 ? "2" : "5");
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    rig_close(&r);
    pair_close(&p);
}

static void test_bench(void **state) {
    (void)state;
    const char *b = getenv("STG_BENCH_ATTN");
    if (!b || strcmp(b, "bf16") != 0) bench_attention(STG_PREC_FP32, 4, 4096, 16, 64);
    bench_attention(STG_PREC_BF16, 4, 4096, 16, 64);
    bench_attention(STG_PREC_BF16, 4, 512, 32, 80); // the 2.7B model's attention shape
}

int main(void) {
    const char *s = getenv("STG_GPU_TEST_SMALL");
    small_only = s && *s && *s != '0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_transposes),
        cmocka_unit_test(test_matmul_batched),
        cmocka_unit_test(test_matmul_grad_out),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_matmul_tuned),
        cmocka_unit_test(test_matmul_group),
        cmocka_unit_test(test_matmul_few_rows),
        cmocka_unit_test(test_matmul_glu),
        cmocka_unit_test(test_matmul_norm_fold),
        cmocka_unit_test(test_attention_odd_shapes),
        cmocka_unit_test(test_attention_model_shapes),
        cmocka_unit_test(test_attention_bf16_tensor_cores),
        cmocka_unit_test(test_determinism),
    };
    const struct CMUnitTest bench[] = {cmocka_unit_test(test_bench)};
    const char *b = getenv("STG_BENCH_ATTN");
    if (b && *b && *b != '0') return GK_RUN(bench);
    return GK_RUN(tests);
}

#endif
