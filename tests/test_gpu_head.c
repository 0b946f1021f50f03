// The fused LM head + cross-entropy on the GPU (ops/loss/cuda.cu) against the CPU reference: the
// forward (loss, lse) and the backward (dx, dw) of linear_cross_entropy in one graph, in fp32
// (relative error < 1e-4) and bf16 (< 2e-2), at odd shapes (rows not a multiple of the chunk,
// vocab 1001 and 1003, d 100 with a chunk of 37 rows: operands only 8-byte aligned; a chunk of one
// row, where the backward walks row chunks rather than vocabulary blocks) and larger ones (vocab
// 16384 and 32000). Inputs are fresh random values, rounded to the device dtype for the CPU too;
// every output is poisoned (0xFF bytes: NaN) before each run; NaN fails. A second eager run and a
// replay from a captured CUDA Graph must give the same bits. Every case also runs with the backward
// in its late-dW forms (linear_cross_entropy_dx, then _dw: late_dw=1), checked the same way.
// STG_GPU_TEST_SMALL=1 leaves out the two large cases (for compute-sanitizer).
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

#include "graph/graph.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/registry.h"
#include "tests/gpu_kernels.h"

static uint64_t rs = 0x3c6ef372fe94f82bull;

static double urand(void) { return tu_urand(&rs); }

static float nrand(void) { return (float)tu_nrand(&rs); }

typedef struct {
    int64_t B, S, d, V, chunk;
} head_case;

typedef struct {
    stg_graph *g;
    int x, w, t, loss, lse, dx, dw;
} head_graph;

// x (B, S, d) input, w (V, d) parameter, targets (B, S): the fused forward and its backward (late:
// the _dx and _dw forms, each with its own scratch).
static void build(const head_case *c, stg_precision prec, int late, head_graph *h) {
    stg_err err = {{0}};
    h->g = graph_new(prec, &err);
    assert_non_null(h->g);
    int64_t xs[3] = {c->B, c->S, c->d}, ws[2] = {c->V, c->d}, ts[2] = {c->B, c->S};
    h->x = graph_add_tensor(h->g, "x", 3, xs, h->g->act_dtype, STG_CLASS_INPUT, (stg_loc){0}, &err);
    h->w = graph_add_tensor(h->g, "w", 2, ws, h->g->act_dtype, STG_CLASS_PARAM, (stg_loc){0}, &err);
    h->t = graph_add_tensor(h->g, "targets", 2, ts, STG_I32, STG_CLASS_INPUT, (stg_loc){0}, &err);
    assert_true(h->x >= 0 && h->w >= 0 && h->t >= 0);
    stg_attrs a;
    memset(&a, 0, sizeof a);
    a.lce.chunk = c->chunk;
    a.lce.grad_scale = 1.0;
    int in[4] = {h->x, h->w, h->t, -1}, out[STG_MAX_OUT];
    if (graph_add_op(h->g, STG_OP_LINEAR_CROSS_ENTROPY, in, 3, &a, STG_PHASE_FORWARD, "loss", (stg_loc){0}, out, &err) < 0)
        fail_msg("forward: %s", err.msg);
    h->loss = out[0];
    h->lse = out[1];
    in[3] = h->lse;
    if (late) {
        a.lce.late_dw = 1;
        if (graph_add_op(h->g, STG_OP_LINEAR_CROSS_ENTROPY_DX, in, 4, &a, STG_PHASE_BACKWARD, "dx", (stg_loc){0}, out, &err) < 0)
            fail_msg("backward (dx): %s", err.msg);
        h->dx = out[0];
        if (graph_add_op(h->g, STG_OP_LINEAR_CROSS_ENTROPY_DW, in, 4, &a, STG_PHASE_BACKWARD, "dw", (stg_loc){0}, out, &err) < 0)
            fail_msg("backward (dw): %s", err.msg);
        h->dw = out[0];
    } else {
        if (graph_add_op(h->g, STG_OP_LINEAR_CROSS_ENTROPY_BWD, in, 4, &a, STG_PHASE_BACKWARD, "dx", (stg_loc){0}, out, &err) < 0)
            fail_msg("backward: %s", err.msg);
        h->dx = out[0];
        h->dw = out[1];
    }
    if (graph_schedule(h->g, &err)) fail_msg("schedule: %s", err.msg);
}

static void run_case(const head_case *c, stg_precision prec, int late) {
    head_graph hd, hr;
    build(c, prec, late, &hd);
    build(c, STG_PREC_FP32, late, &hr);
    const stg_graph *g = hd.g, *gr = hr.g;
    assert_int_equal(g->nt, gr->nt);
    int bf = prec == STG_PREC_BF16;
    int64_t R = c->B * c->S;
    gk_dev d;
    gk_dev_alloc(g, -1, -1, &d);
    // inputs: x ~ N(0, 1), w ~ N(0, 1) / sqrt(d) * 3 (logits of a few units), targets in [0, V);
    // rounded to the device dtype, so the CPU sees the device's numbers
    float **host = d.host;
    for (int64_t i = 0; i < R * c->d; i++) host[hr.x][i] = nrand();
    for (int64_t i = 0; i < c->V * c->d; i++) host[hr.w][i] = nrand() * 3.0f / sqrtf((float)c->d);
    for (int64_t i = 0; i < R; i++) ((int32_t *)host[hr.t])[i] = (int32_t)(urand() * (double)c->V);
    for (int64_t i = 2; i < R; i += 5) ((int32_t *)host[hr.t])[i] = -1; // ignored rows (--doc-loss-mask): no term, no gradient
    if (bf)
        for (int k = 0; k < 2; k++) {
            int t = k ? hr.w : hr.x;
            for (int64_t i = 0; i < stg_numel(&gr->t[t]); i++) host[t][i] = gk_round_bf(host[t][i]);
        }
    // the CPU reference, fp32
    float **ref = gk_ref_alloc(gr, host);
    stg_err err = {{0}};
    for (int s = 0; s < gr->nsched; s++)
        if (gk_cpu_run(gr, gr->schedule[s], (void *const *)ref, &err)) fail_msg("cpu: %s", err.msg);
    // the device: eager, eager again, a captured graph's replay; outputs poisoned before each
    if (cuda_prepare(ctx, g, d.dptr, &err)) fail_msg("cuda_prepare: %s", err.msg);
    void *snap[3][4] = {{NULL}};
    const int outs[4] = {hd.loss, hd.lse, hd.dx, hd.dw};
    const char *names[4] = {"loss", "lse", "dx", "dw"};
    double tol = bf ? 2e-2 : 1e-4;
    for (int run = 0; run < 3; run++) {
        gk_upload_and_poison(g, &d);
        gk_run(g, d.dptr, run == 2);
        for (int k = 0; k < 4; k++) {
            const stg_tensor *t = &g->t[outs[k]];
            int64_t n = stg_numel(t);
            float *got = malloc(sizeof(float) * (size_t)n);
            assert_non_null(got);
            snap[run][k] = gk_read(t, d.dptr[outs[k]], got);
            double e = rel_err_f32(got, ref[outs[k]], n, false, NULL); // NaN or infinity fails
            if (run == 0)
                printf("  (%lld, %lld, %lld) V %lld chunk %lld %s%s %-4s rel err %.3e\n", (long long)c->B, (long long)c->S,
                       (long long)c->d, (long long)c->V, (long long)c->chunk, bf ? "bf16" : "fp32", late ? " late_dw" : "", names[k],
                       e);
            if (!(e < tol))
                fail_msg("(%lld, %lld, %lld) V %lld chunk %lld %s: %s rel err %g >= %g", (long long)c->B, (long long)c->S,
                         (long long)c->d, (long long)c->V, (long long)c->chunk, bf ? "bf16" : "fp32", names[k], e, tol);
            if (run > 0 && memcmp(snap[run][k], snap[0][k], (size_t)stg_bytes(t)))
                fail_msg("%s: %s differs from the first run", run == 2 ? "the CUDA Graph replay" : "a second eager run", names[k]);
            free(got);
        }
    }
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) free(snap[r][k]);
    gk_ref_free(gr, ref);
    gk_dev_free(&d);
    graph_free(hd.g);
    graph_free(hr.g);
}

static void test_fused_head(void **state) {
    (void)state;
    const head_case cases[] = {
        {2, 100, 256, 10000, 64}, // forward: 200 rows in 3 chunks of 64 and one of 8; backward: blocks of 3200 columns, the last 400
        {1, 77, 96, 1001, 0},     // vocab 1001, the op's chunk (all 77 rows): one chunk, one block
        {3, 50, 100, 1003, 37},   // d 100, chunks of 37 rows (x offsets 8-byte aligned); blocks of 240 columns, the last 43
        {1, 20, 64, 300, 1},      // chunks of one row: blocks would be 8 columns wide, so the backward walks row chunks
        {2, 128, 512, 16384, 64}, // 4 chunks, 4 blocks
        {1, 300, 256, 32000, 0},  // the op's chunk: 1024 rows > 300; one block
    };
    // STG_GPU_TEST_SMALL=1 (under compute-sanitizer): the first four cases only
    size_t n = getenv("STG_GPU_TEST_SMALL") ? 4 : sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) {
        for (int late = 0; late < 2; late++) {
            run_case(&cases[i], STG_PREC_FP32, late);
            run_case(&cases[i], STG_PREC_BF16, late);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_head)};
    return GK_RUN(tests);
}

#endif
