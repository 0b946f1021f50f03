// The CUDA backend end to end: training steps of the tiny LM against the CPU reference (fp32 and
// bf16), graph replay bitwise equal to eager launch, NaN-poisoned arena equal to a clean one, and
// one forward+backward (what `stg step` dumps) against the CPU.
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

#include "tests/testutil.h"

#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p

static const char *lm_sets[] = {"d_model=64", "d_ff=160", "n_layers=2", "n_heads=2", "vocab=256", "batch=2", "ctx=40", NULL};
#define NLM 7

// --grad-dtype bf16 for the GPU steps opened while set (the products' weight gradients in bf16)
static bool g_bf16_grads;

static void open_sets(rig *r, bool cuda, stg_precision prec, const char **sets, int nsets, const rt_exec_opts *eo) {
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), prec, sets, nsets);
    o.optim = rig_optim(1e-2, 1e-3, 1, 5);
    o.optim.bf16_grads = g_bf16_grads && cuda;
    // the GPU graph with grouped products, as `stg` builds it; the CPU reference without
    o.ungrouped = !cuda;
    rig_open(r, rig_step(&o), &(rig_cfg){.cuda = cuda, .eo = eo, .init_seed = 3, .feed_seed = 9, .rng_seed = 17});
    if (o.optim.bf16_grads) { // the products' weight gradients are bf16, the rest fp32
        int nb = 0, nf = 0;
        for (int t = 0; t < r->s->g->nt; t++)
            if (r->s->g->t[t].cls == STG_CLASS_GRAD) {
                nb += r->s->g->t[t].dtype == STG_BF16;
                nf += r->s->g->t[t].dtype == STG_F32;
            }
        assert_true(nb > 0 && nf > 0);
    }
}

static void open_lm(rig *r, bool cuda, stg_precision prec, const char *attention, const rt_exec_opts *eo) {
    const char *sets[NLM + 1];
    memcpy(sets, lm_sets, sizeof(char *) * NLM);
    sets[NLM] = attention;
    open_sets(r, cuda, prec, sets, NLM + 1, eo);
}

// Runs `steps` training steps (batches from the rig's sampler, seeded 17); returns the losses and
// the fp32 truth of every parameter.
static void train(rig *r, int steps, double *losses, double **params, int64_t *n) {
    rig_steps(r, steps, losses);
    *params = rig_params(r, n);
}

static void against_cpu(stg_precision prec, const char *attention, double tol) {
    rig c, g;
    double lc[3], lg[3], *pc, *pg;
    int64_t nc, ng;
    open_lm(&c, false, STG_PREC_FP32, attention, NULL);
    train(&c, 3, lc, &pc, &nc);
    rt_exec_opts eo = {.graph = true};
    open_lm(&g, true, prec, attention, &eo);
    train(&g, 3, lg, &pg, &ng);
    assert_int_equal(nc, ng);
    double el = rel_err(lg, lc, 3), ep = rel_err(pg, pc, nc);
    print_message("%s %s: losses %.6f %.6f %.6f (cpu %.6f %.6f %.6f); rel err losses %.2e, params %.2e\n",
                  prec == STG_PREC_BF16 ? "bf16" : "fp32", attention, lg[0], lg[1], lg[2], lc[0], lc[1], lc[2], el, ep);
    assert_true(el < tol);
    assert_true(ep < tol);
    free(pc);
    free(pg);
    rig_close(&c);
    rig_close(&g);
}

static void test_fp32_flash(void **s) { against_cpu(STG_PREC_FP32, "attention=flash", 1e-4); }
static void test_fp32_naive(void **s) { against_cpu(STG_PREC_FP32, "attention=naive", 1e-4); }
static void test_bf16_flash(void **s) { against_cpu(STG_PREC_BF16, "attention=flash", 2e-2); }
static void test_bf16_naive(void **s) { against_cpu(STG_PREC_BF16, "attention=naive", 2e-2); }

// bf16 with flash attention at the CS336 models' head dims (64: small to xl; 80: 2.7B; on an H100
// both run the wgmma attention kernels) and a ctx that is not a multiple of their 64-row tiles: the
// losses of 20 graph-replayed training steps against the CPU backend's (fp32), relative error under
// 2e-2 (the speed issue's check that the fused and tensor-core kernels train as before).
#define NSTEPS20 20
static void bf16_steps_head_dim(int hd) {
    char dm[32];
    snprintf(dm, sizeof dm, "d_model=%d", 2 * hd);
    const char *sets[] = {dm, "d_ff=192", "n_layers=2", "n_heads=2", "vocab=256", "batch=2", "ctx=72", "attention=flash"};
    const int ns = (int)(sizeof sets / sizeof sets[0]);
    rig c, g;
    double lc[NSTEPS20], lg[NSTEPS20], *pc, *pg;
    int64_t nc, ng;
    open_sets(&c, false, STG_PREC_FP32, sets, ns, NULL);
    train(&c, NSTEPS20, lc, &pc, &nc);
    rt_exec_opts eo = {.graph = true};
    open_sets(&g, true, STG_PREC_BF16, sets, ns, &eo);
    train(&g, NSTEPS20, lg, &pg, &ng);
    assert_int_equal(nc, ng);
    double el = rel_err(lg, lc, NSTEPS20), ep = rel_err(pg, pc, nc);
    print_message("bf16 head dim %d, %d steps: losses %.5f .. %.5f (cpu %.5f .. %.5f); rel err losses %.2e, params %.2e\n",
                  hd, NSTEPS20, lg[0], lg[NSTEPS20 - 1], lc[0], lc[NSTEPS20 - 1], el, ep);
    assert_true(lc[NSTEPS20 - 1] < lc[0]); // the reference learns: the comparison is over a moving loss
    assert_true(el < 2e-2);
    free(pc);
    free(pg);
    rig_close(&c);
    rig_close(&g);
}

static void test_bf16_20_steps_head_dim_64(void **s) { bf16_steps_head_dim(64); }
static void test_bf16_20_steps_head_dim_80(void **s) { bf16_steps_head_dim(80); }

// Graph replay (ops spread over concurrent streams) == eager launch == eager with a NaN-poisoned
// arena == graph replay on one stream == graph replay with a poisoned arena, bitwise.
#define NMODES 5
static void modes_bitwise_sets(stg_precision prec, const char **sets, int nsets) {
    rt_exec_opts modes[NMODES] = {{.graph = true}, {.graph = false}, {.poison = true}, {.graph = true, .streams = 1},
                                  {.graph = true, .poison = true}};
    double l[NMODES][4], *p[NMODES];
    int64_t n[NMODES];
    for (int m = 0; m < NMODES; m++) {
        rig r;
        open_sets(&r, true, prec, sets, nsets, &modes[m]);
        train(&r, 4, l[m], &p[m], &n[m]);
        rig_close(&r);
    }
    for (int m = 1; m < NMODES; m++) {
        assert_memory_equal(l[m], l[0], sizeof l[0]);
        assert_int_equal(n[m], n[0]);
        assert_memory_equal(p[m], p[0], sizeof(double) * (size_t)n[0]);
    }
    for (int m = 0; m < NMODES; m++) free(p[m]);
}

static void modes_bitwise(stg_precision prec) {
    const char *sets[NLM + 1];
    memcpy(sets, lm_sets, sizeof(char *) * NLM);
    sets[NLM] = "attention=flash";
    modes_bitwise_sets(prec, sets, NLM + 1);
}

static void test_graph_equals_eager_fp32(void **s) { modes_bitwise(STG_PREC_FP32); }
static void test_graph_equals_eager_bf16(void **s) { modes_bitwise(STG_PREC_BF16); }
// The same at head dim 64 in bf16, where an H100 or H200 runs the warp-specialised attention kernels (the backward's
// dq launch on a stream of its own beside the dk/dv launch), with a ctx that is not a multiple of their tiles.
static void test_graph_equals_eager_bf16_head_dim_64(void **s) {
    const char *sets[] = {"d_model=128", "d_ff=192", "n_layers=2", "n_heads=2", "vocab=256", "batch=2", "ctx=136", "attention=flash"};
    modes_bitwise_sets(STG_PREC_BF16, sets, (int)(sizeof sets / sizeof sets[0]));
}

// --grad-dtype bf16: 3 steps and 20 steps against the CPU (fp32) to 2e-2, and graph replay bitwise
// equal to eager launch.
static void test_bf16_grads(void **s) {
    g_bf16_grads = true;
    against_cpu(STG_PREC_BF16, "attention=flash", 2e-2);
    bf16_steps_head_dim(64);
    modes_bitwise(STG_PREC_BF16);
    g_bf16_grads = false;
}

// What `stg step` dumps: loss and every gradient after one forward and backward, GPU vs CPU.
static void test_step_against_cpu(void **s) {
    rig c, g;
    open_lm(&c, false, STG_PREC_FP32, "attention=flash", NULL);
    open_lm(&g, true, STG_PREC_FP32, "attention=flash", NULL);
    double lc, lg;
    int ng;
    rig_grads_against(&c, &g, 5, 1e-5, 1e-4, "fp32 step", &lc, &lg, &ng);
    rig_close(&c);
    rig_close(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_flash),         cmocka_unit_test(test_fp32_naive),
        cmocka_unit_test(test_bf16_flash),         cmocka_unit_test(test_bf16_naive),
        cmocka_unit_test(test_graph_equals_eager_fp32), cmocka_unit_test(test_graph_equals_eager_bf16),
        cmocka_unit_test(test_graph_equals_eager_bf16_head_dim_64),
        cmocka_unit_test(test_step_against_cpu),   cmocka_unit_test(test_bf16_grads),
        cmocka_unit_test(test_bf16_20_steps_head_dim_64), cmocka_unit_test(test_bf16_20_steps_head_dim_80),
    };
    return GPU_RUN(tests);
}

#endif
