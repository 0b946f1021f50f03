// The model families (models/gpt2, models/llama3) on the CUDA backend against the CPU reference, at
// small widths: one forward and backward (what `stg step` dumps) in fp32, the loss to 1e-5 and every
// gradient to 1e-4 (relative, max |gpu - cpu| / max |cpu| per tensor; NaN fails); and three bf16
// training steps whose losses stay within 2e-2 of the fp32 CPU's. GPT-2: biases, learned positions,
// the split of the fused qkv, the tied head; Llama 3: grouped-query attention 4:1 (head dim 64) and
// 8:1 (head dim 128), ctx not a multiple of 64; fused and written-out attention, plain and fused head.
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

#include "tests/testutil.h"

#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"

#define MODEL(p) STG_SOURCE_DIR "/models/" p

typedef struct {
    const char *what, *model;
    const char *sets[14];
} fam_case;

static const fam_case cases[] = {
    {"gpt2, flash, plain head", "gpt2/124M.yaml",
     {"d_model=256", "n_heads=4", "n_layers=2", "vocab=300", "n_positions=80", "batch=2", "ctx=70", "attention=flash",
      "fused_head=off", NULL}},
    {"gpt2, naive, fused head", "gpt2/124M.yaml",
     {"d_model=256", "n_heads=4", "n_layers=2", "vocab=300", "n_positions=80", "batch=2", "ctx=70", "attention=naive",
      "fused_head=on", NULL}},
    {"llama3 4:1 Dh 64, flash, fused head, tied", "llama3/1B.yaml",
     {"d_model=512", "n_heads=8", "n_kv_heads=2", "d_ff=384", "n_layers=2", "vocab=300", "batch=2", "ctx=70",
      "attention=flash", "fused_head=on", NULL}},
    {"llama3 4:1 Dh 64, naive, plain head, tied", "llama3/1B.yaml",
     {"d_model=512", "n_heads=8", "n_kv_heads=2", "d_ff=384", "n_layers=2", "vocab=300", "batch=2", "ctx=70",
      "attention=naive", "fused_head=off", NULL}},
    {"llama3 8:1 Dh 128, flash, plain head, untied", "llama3/8B.yaml",
     {"d_model=1024", "n_heads=8", "n_kv_heads=1", "d_ff=384", "n_layers=2", "vocab=300", "batch=2", "ctx=70",
      "attention=flash", "fused_head=off", NULL}},
    {"llama3 8:1 Dh 128, naive, fused head, untied", "llama3/8B.yaml",
     {"d_model=1024", "n_heads=8", "n_kv_heads=1", "d_ff=384", "n_layers=2", "vocab=300", "batch=2", "ctx=70",
      "attention=naive", "fused_head=on", NULL}},
    // the head's weight gradient made late (late_dw=1): tied (the embedding's backward adds its
    // part in place) and untied
    {"gpt2, flash, fused head, late dW", "gpt2/124M.yaml",
     {"d_model=256", "n_heads=4", "n_layers=2", "vocab=300", "n_positions=80", "batch=2", "ctx=70", "attention=flash",
      "fused_head=late", NULL}},
    {"llama3 8:1 Dh 128, flash, fused head, late dW, untied", "llama3/8B.yaml",
     {"d_model=1024", "n_heads=8", "n_kv_heads=1", "d_ff=384", "n_layers=2", "vocab=300", "batch=2", "ctx=70",
      "attention=flash", "fused_head=late", NULL}},
};

static int nsets(const fam_case *c) {
    int n = 0;
    while (c->sets[n]) n++;
    return n;
}

static void open_case(rig *r, const fam_case *c, bool cuda, stg_precision prec) {
    char path[512];
    snprintf(path, sizeof path, "%s", MODEL(""));
    snprintf(path + strlen(path), sizeof path - strlen(path), "%s", c->model);
    stg_step_opts o = rig_opts(path, prec, c->sets, nsets(c));
    o.optim = rig_optim(1e-3, 1e-4, 1, 5);
    o.ungrouped = !cuda; // the GPU graph as `stg` builds it (grouped products); the CPU reference without
    rig_open(r, rig_step(&o), &(rig_cfg){.cuda = cuda, .init_seed = 3, .feed_seed = 9});
}

// One forward and backward in fp32: the loss and every gradient, GPU against CPU.
static void test_step_fp32(void **s) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rig c, g;
        open_case(&c, &cases[i], false, STG_PREC_FP32);
        open_case(&g, &cases[i], true, STG_PREC_FP32);
        double lc, lg;
        int ng;
        double worst = rig_grads_against(&c, &g, 5, 1e-5, 1e-4, cases[i].what, &lc, &lg, &ng), le = fabs(lg - lc) / fabs(lc);
        printf("  %-46s loss rel err %.2e, worst of %d gradients %.2e\n", cases[i].what, le, ng, worst);
        rig_close(&c);
        rig_close(&g);
    }
}

// Three bf16 training steps on the GPU against fp32 on the CPU: the losses within 2e-2.
static void test_train_bf16(void **s) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rig c, g;
        open_case(&c, &cases[i], false, STG_PREC_FP32);
        open_case(&g, &cases[i], true, STG_PREC_BF16);
        stg_err err;
        rt_rng r1, r2;
        rt_rng_seed(&r1, 17);
        rt_rng_seed(&r2, 17);
        for (int k = 0; k < 3; k++) {
            rt_exec_results rc, rg;
            if (rt_feed_next(c.f, c.e, &r1, &err) || rt_feed_next(g.f, g.e, &r2, &err) ||
                rt_exec_run_results(c.e, RT_PHASE_ALL, &rc, &err) || rt_exec_run_results(g.e, RT_PHASE_ALL, &rg, &err))
                fail_msg("%s: %s", cases[i].what, err.msg);
            double e = fabs(rg.loss - rc.loss) / fabs(rc.loss);
            if (!(e < 2e-2)) fail_msg("%s: step %d: bf16 loss %.6g, fp32 CPU %.6g", cases[i].what, k, rg.loss, rc.loss);
        }
        rig_close(&c);
        rig_close(&g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_fp32),
        cmocka_unit_test(test_train_bf16),
    };
    return GPU_RUN(tests);
}

#endif
