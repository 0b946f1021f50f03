// The model families beyond CS336 (models/gpt2, models/llama3): `stg check` prints their exact
// parameter counts; tied parameters (GPT-2's wte is its LM head, Llama 3.2's tok_embeddings) have
// one gradient, the sum over their uses (checked by finite differences in fp64), one AdamW state and
// one place in the plan and the memory report; bad input (a GQA model whose query heads are not a
// multiple of its kv heads, a tied parameter used with the wrong shape) gives file:line:col and
// exit status 2.
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

#include "ops/cpu/kernels.h"
#include "planner/formula.h"
#include "planner/plan.h"
#include "runtime/backend.h"
#include "runtime/exec.h"
#include "runtime/train.h"
#include "tests/rig.h"
#include "tests/testutil.h"

static char dir[256];

static int setup(void **s) { return tu_mkdtemp(dir, sizeof dir, "test_families"); }
static int teardown(void **s) { return tu_rmtree(dir); }

// ---- parameter counts -----------------------------------------------------------------------------

static void test_parameter_counts(void **state) {
    static const struct {
        const char *args;
        const char *want; // the line stg check prints
    } c[] = {
        {"models/gpt2/124M.yaml", "parameters: 148 tensors, 124439808 elements"},
        {"models/gpt2/124M.yaml --set fused_head=off --attention naive", "parameters: 148 tensors, 124439808 elements"},
        // llm.c's padded vocabulary: 47 more rows of wte
        {"models/gpt2/124M.yaml --set vocab=50304", "parameters: 148 tensors, 124475904 elements"},
        {"models/gpt2/350M.yaml", "parameters: 292 tensors, 354823168 elements"},
        {"models/gpt2/774M.yaml", "parameters: 436 tensors, 774030080 elements"},
        {"models/gpt2/1558M.yaml", "parameters: 580 tensors, 1557611200 elements"},
        {"models/llama3/1B.yaml", "parameters: 146 tensors, 1235814400 elements"},
        {"models/llama3/3B.yaml", "parameters: 254 tensors, 3212749824 elements"},
        {"models/llama3/8B.yaml", "parameters: 291 tensors, 8030261248 elements"},
        {"models/llama3/8B.yaml --set fused_head=off --attention naive", "parameters: 291 tensors, 8030261248 elements"},
        {"models/llama3/8B-v131k.yaml", "parameters: 291 tensors, 8053329920 elements"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char out[1 << 16];
        int rc = tu_stg(out, sizeof out, "check %s", c[i].args);
        if (rc != 0) fail_msg("stg check %s: exit %d\n%s", c[i].args, rc, out);
        if (!strstr(out, c[i].want)) fail_msg("stg check %s printed\n%.2000s\nwithout '%s'", c[i].args, out, c[i].want);
    }
}

// ---- tied parameters ------------------------------------------------------------------------------

static int count_kind(const stg_graph *g, stg_op_kind k, int in0) {
    int n = 0;
    for (int o = 0; o < g->nops; o++) n += g->ops[o].kind == k && (in0 < 0 || g->ops[o].in[0] == in0);
    return n;
}

// GPT-2 (wte is the embedding and the plain LM head) and Llama 3.2 (tok_embeddings, through the
// fused head): the tied parameter is one tensor with one gradient that sums both uses, one AdamW
// op, and its bytes are planned once; the parameter count is the sum over distinct tensors.
static void test_tied_one_state(void **state) {
    static const struct {
        const char *model, *param;
        const char *sets[10];
        int nsets;
        int64_t params;
    } c[] = {
        {"gpt2/124M.yaml", "wte.weight", {"fused_head=off", "n_layers=2", "batch=2", "ctx=16"}, 4, 124439808 - 10 * 7087872},
        {"llama3/1B.yaml", "tok_embeddings.weight", {"n_layers=2", "batch=1", "ctx=16"}, 3, 1235814400 - 14 * 60821504},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", STG_SOURCE_DIR, c[i].model);
        stg_step_opts o = rig_opts(path, STG_PREC_FP32, c[i].sets, c[i].nsets);
        stg_step *s = rig_step(&o);
        const stg_graph *g = s->g;
        int p = graph_find_tensor(g, c[i].param);
        assert_true(p >= 0);
        assert_int_equal(g->t[p].cls, STG_CLASS_PARAM);
        assert_int_equal(graph_param_count(g), c[i].params);
        // used twice in the forward graph: the embedding and the head
        int uses = 0;
        for (int k = 0; k < g->n_fwd_ops; k++)
            for (int j = 0; j < g->ops[k].n_in; j++) uses += g->ops[k].in[j] == p;
        assert_int_equal(uses, 2);
        // one gradient tensor (the sum: an add or a folded addend), one AdamW op with its m and v
        int grads = 0, states = 0;
        for (int t = 0; t < g->nt; t++) {
            grads += g->t[t].cls == STG_CLASS_GRAD && g->t[t].param == p;
            states += g->t[t].cls == STG_CLASS_OPTIMIZER && g->t[t].param == p;
        }
        assert_int_equal(grads, 1);
        assert_int_equal(states, 2);
        assert_int_equal(count_kind(g, STG_OP_ADAMW, p), 1);
        assert_true(g->t[p].grad >= 0 && g->t[g->t[p].grad].cls == STG_CLASS_GRAD);
        // the plan holds every parameter once: its param bytes are 4 B x the parameter count (the
        // tensors' bytes exactly; the plan's with each tensor's alignment padding at most)
        int64_t param_bytes = 0;
        int nparam = 0;
        for (int t = 0; t < g->nt; t++)
            if (g->t[t].cls == STG_CLASS_PARAM) param_bytes += stg_bytes(&g->t[t]), nparam++;
        assert_int_equal(param_bytes, 4 * c[i].params);
        assert_non_null(s->p);
        assert_true(s->p->by_class[STG_CLASS_PARAM] >= param_bytes);
        assert_true(s->p->by_class[STG_CLASS_PARAM] < param_bytes + (int64_t)nparam * s->p->alignment);
        stg_step_free(s);
    }
    // stg memreport counts it once: GPT-2 124M's parameter line is the parameter count, and its
    // planned parameter bytes are 4 B each
    char out[1 << 16];
    int rc = tu_stg(out, sizeof out, "memreport models/gpt2/124M.yaml --set fused_head=off");
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "parameters:  124,439,808"));
    const char *line = strstr(out, "\n  param ");
    assert_non_null(line);
    assert_non_null(strstr(line, "(497,759,232 B)")); // 4 x 124,439,808
}

// Central differences of the loss against the backward pass in fp64 on entries of the tied
// parameter (its gradient is the sum over its two uses) and of a few others (biases, the position
// table, the fused qkv weight), for GPT-2 with the plain head and Llama with the fused head.
static void test_tied_gradient_is_the_sum(void **state) {
    static const struct {
        const char *model;
        const char *sets[12];
        int nsets;
        const char *params[6];
    } c[] = {
        {"gpt2/124M.yaml",
         {"fused_head=off", "n_layers=2", "batch=2", "ctx=11", "vocab=53", "d_model=24", "n_heads=2", "n_positions=13"},
         8,
         {"wte.weight", "wpe.weight", "h.1.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.1.mlp.c_proj.bias", "ln_f.bias"}},
        {"llama3/1B.yaml",
         {"n_layers=2", "batch=2", "ctx=11", "vocab=53", "d_model=32", "n_heads=4", "n_kv_heads=2", "d_ff=40"},
         8,
         {"tok_embeddings.weight", "layers.1.attention.wk.weight", "norm.weight", NULL, NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", STG_SOURCE_DIR, c[i].model);
        stg_step_opts o = rig_opts(path, STG_PREC_FP64, c[i].sets, c[i].nsets);
        rig r;
        rig_cfg cfg = {.init_seed = 3, .feed_seed = 7, .rng_seed = 11};
        rig_open(&r, rig_step(&o), &cfg);
        stg_err err;
        if (rt_feed_next(r.f, r.e, &r.rng, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err))
            fail_msg("%s", err.msg);
        for (int k = 0; k < 6 && c[i].params[k]; k++) {
            int p = graph_find_tensor(r.g, c[i].params[k]);
            assert_true(p >= 0);
            int64_t n = stg_numel(&r.g->t[p]);
            double *w = malloc(sizeof(double) * (size_t)n), *gr = malloc(sizeof(double) * (size_t)n);
            assert_non_null(w);
            assert_non_null(gr);
            if (rt_exec_run(r.e, RT_PHASE_FORWARD | RT_PHASE_BACKWARD, &err) || rt_exec_read_f64(r.e, p, w, &err) ||
                rt_exec_read_f64(r.e, r.g->t[p].grad, gr, &err))
                fail_msg("%s", err.msg);
            for (int j = 0; j < 4; j++) {
                int64_t at = (int64_t)rt_rng_below(&r.rng, (uint64_t)n);
                double h = 1e-5, orig = w[at], lp, lm;
                w[at] = orig + h;
                if (rt_exec_write_f64(r.e, p, w, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err) ||
                    rt_exec_read_f64(r.e, r.g->loss, &lp, &err))
                    fail_msg("%s", err.msg);
                w[at] = orig - h;
                if (rt_exec_write_f64(r.e, p, w, &err) || rt_exec_run(r.e, RT_PHASE_FORWARD, &err) ||
                    rt_exec_read_f64(r.e, r.g->loss, &lm, &err))
                    fail_msg("%s", err.msg);
                w[at] = orig;
                if (rt_exec_write_f64(r.e, p, w, &err)) fail_msg("%s", err.msg);
                double fd = (lp - lm) / (2 * h), an = gr[at];
                double rel = fabs(fd - an) / fmax(1e-7, fmax(fabs(fd), fabs(an)));
                if (rel > 1e-5)
                    fail_msg("%s: d loss / d %s[%lld]: finite difference %.10g, backward %.10g", c[i].model, c[i].params[k],
                             (long long)at, fd, an);
            }
            free(w);
            free(gr);
        }
        rig_close(&r);
    }
}

// ---- the memory formula ---------------------------------------------------------------------------

// The closed form covers the families: its parameter count is the graph's (tied heads counted once,
// GQA's narrower k and v, GPT-2's positions and biases), and its per-layer saved activations follow
// the family's list; a model of another shape with the CS336 dims gets no formula, with the reason.
static void test_formula_families(void **state) {
    static const struct {
        const char *model;
        stg_precision prec;
        const char *sets[4];
        int nsets;
        int64_t params, per_layer;
    } c[] = {
        // N = 4096 tokens; GPT-2 124M: (8ND + 2NF) a + (4N + BHS) s, D 768, F 3072, H 12, S 1024
        {"gpt2/124M.yaml", STG_PREC_FP32, {"fused_head=off"}, 1, 124439808,
         (8LL * 4096 * 768 + 2LL * 4096 * 3072) * 4 + (4LL * 4096 + 4LL * 12 * 1024) * 4},
        // Llama 3.1-8B bf16: (6ND + 2N Dkv + 3NF) a + (2N + BHS) s, D 4096, Dkv 1024, F 14336, H 32, S 4096
        {"llama3/8B.yaml", STG_PREC_BF16, {"fused_head=on"}, 1, 8030261248LL,
         (6LL * 4096 * 4096 + 2LL * 4096 * 1024 + 3LL * 4096 * 14336) * 2 + (2LL * 4096 + 32LL * 4096) * 4},
        // Llama 3.2-1B, tied head
        {"llama3/1B.yaml", STG_PREC_BF16, {"fused_head=on"}, 1, 1235814400LL,
         (6LL * 4096 * 2048 + 2LL * 4096 * 512 + 3LL * 4096 * 8192) * 2 + (2LL * 4096 + 32LL * 4096) * 4},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", STG_SOURCE_DIR, c[i].model);
        stg_step_opts o = rig_opts(path, c[i].prec, c[i].sets, c[i].nsets);
        o.no_plan = true;
        stg_step *s = rig_step(&o);
        stg_formula f;
        stg_err err;
        if (formula_compute(s->g, true, &f, &err)) fail_msg("%s", err.msg);
        if (!f.available) fail_msg("%s: no formula: %s", c[i].model, f.reason);
        assert_int_equal(f.params, c[i].params);
        assert_int_equal(f.params, graph_param_count(s->g));
        assert_int_equal(f.activation_per_layer, c[i].per_layer);
        int64_t sum = 0;
        for (int k = 0; k < f.nterms; k++)
            if (strcmp(f.terms[k].name, "activation per layer") != 0) sum += f.terms[k].bytes;
        assert_int_equal(sum, f.total);
        stg_step_free(s);
    }
    // the CS336 dims on another architecture: no formula, and why
    char path[400];
    snprintf(path, sizeof path, "%s/other.yaml", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("dims: {vocab: 50, d_model: 16, d_ff: 32, n_layers: 1, n_heads: 2, batch: 2, ctx: 4}\n"
          "options: {attention: [flash, naive]}\n"
          "inputs: {tokens: [batch, ctx, i32], targets: [batch, ctx, i32]}\n"
          "graph:\n"
          "  - param wte [vocab, d_model] init=normal std=0.02\n"
          "  - loss = cross_entropy(linear(embedding(tokens, wte), wte), targets)\n"
          "loss: loss\n",
          fp);
    assert_int_equal(fclose(fp), 0);
    stg_step_opts o = rig_opts(path, STG_PREC_FP32, NULL, 0);
    o.no_plan = true;
    stg_step *s = rig_step(&o);
    stg_formula f;
    stg_err err;
    assert_int_equal(formula_compute(s->g, true, &f, &err), 0);
    assert_false(f.available);
    assert_non_null(strstr(f.reason, "the model's 800 parameters are not the closed form's"));
    stg_step_free(s);
}

// ---- ignored targets through the fused head --------------------------------------------------------

// A value in [-0.5, 0.5) from a 64-bit LCG.
static double lcg_half(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*st >> 11) / 9007199254740992.0 - 0.5;
}

// Targets of -1 (packed documents' --doc-loss-mask) are ignored by linear_cross_entropy as by
// cross_entropy: the fused head's loss, dx and dw equal linear + cross_entropy's in fp64 (the mean
// over the kept rows, no gradient from an ignored row), with several chunks.
static void test_fused_head_ignored_targets(void **state) {
    enum { R = 13, D = 7, V = 11, C = 4 };
    double x[R * D], w[V * D], lse[R], lse2[R], logits[R * V], dl[R * V], dx[R * D], dw[V * D], dx2[R * D], dw2[V * D];
    double loss = NAN, loss2 = NAN, sc[C * V];
    int32_t tgt[R];
    uint64_t st = 42;
    for (int i = 0; i < R * D; i++) x[i] = lcg_half(&st);
    for (int i = 0; i < V * D; i++) w[i] = lcg_half(&st);
    for (int r = 0; r < R; r++) tgt[r] = r % 4 == 1 ? -1 : (int32_t)((r * 7) % V);
    stg_err err;
    size_t sb = cpu_lce_scratch_f64(D, C), mb = cpu_matmul_scratch_f64(1, R, V, D, 0, 1, 0);
    size_t mb2 = cpu_matmul_scratch_f64(1, R, D, V, 0, 0, 0), mb3 = cpu_matmul_scratch_f64(1, V, D, R, 1, 0, 0);
    size_t most = sb > mb ? sb : mb;
    most = most > mb2 ? most : mb2;
    most = most > mb3 ? most : mb3;
    void *scratch = malloc(most);
    assert_non_null(scratch);
    if (cpu_lce_fwd_f64(x, w, tgt, &loss, lse, sc, R, D, V, C, scratch, sb, &err) ||
        cpu_lce_bwd_f64(x, w, tgt, lse, dx, dw, sc, R, D, V, C, 1.0, scratch, sb, &err))
        fail_msg("%s", err.msg);
    // the plain path: logits = x wᵀ, cross_entropy, dlogits, dx = dlogits w, dw = dlogitsᵀ x
    if (cpu_matmul_f64(x, w, logits, 1, R, V, D, 0, 1, 0, 0, scratch, mb, &err) ||
        cpu_cross_entropy_fwd_f64(logits, tgt, &loss2, lse2, R, V, &err) ||
        cpu_cross_entropy_bwd_f64(logits, tgt, lse2, dl, R, V, &err) ||
        cpu_matmul_f64(dl, w, dx2, 1, R, D, V, 0, 0, 0, 0, scratch, mb2, &err) ||
        cpu_matmul_f64(dl, x, dw2, 1, V, D, R, 1, 0, 0, 0, scratch, mb3, &err))
        fail_msg("%s", err.msg);
    free(scratch);
    assert_true(fabs(loss - loss2) <= 1e-13 * fabs(loss2));
    assert_true(rel_err(dx, dx2, R * D) < 1e-12);
    assert_true(rel_err(dw, dw2, V * D) < 1e-12);
    for (int r = 0; r < R; r++) // an ignored row gives x no gradient
        if (tgt[r] == -1)
            for (int k = 0; k < D; k++) assert_true(dx[r * D + k] == 0.0);
}

// ---- bad input ------------------------------------------------------------------------------------

static void expect_bad(const char *args, const char *needle) {
    char out[16384];
    int rc = tu_stg(out, sizeof out, "%s", args);
    if (rc != 2) fail_msg("stg %s: exit %d, expected 2\n%s", args, rc, out);
    if (!strstr(out, needle)) fail_msg("stg %s printed\n%s\nwithout '%s'", args, out, needle);
}

static void test_bad_input(void **state) {
    // query heads not a multiple of kv heads: the dims' exact division, or (with the group size
    // forced) the attention op's rule, each at its place in the architecture file
    expect_bad("check models/llama3/8B.yaml --set n_kv_heads=3",
               "models/llama3/llama3.yaml:27:22: 32 / 3 is not an integer in expression 'n_heads / n_kv_heads'");
    expect_bad("check models/llama3/8B.yaml --set n_kv_heads=3 --set kv_groups=11",
               "models/llama3/llama3.yaml:71:26: attention: query heads (32) must be a multiple of kv heads (3)");
    expect_bad("memreport models/llama3/1B.yaml --set n_kv_heads=5 --attention naive",
               "models/llama3/llama3.yaml:27:22: 32 / 5 is not an integer in expression 'n_heads / n_kv_heads'");
    // a tied parameter used with the wrong shape: the head's features differ from the embedding's
    char path[400], args[600], text[1024];
    snprintf(path, sizeof path, "%s/tied.yaml", dir);
    for (int fused = 0; fused < 2; fused++) {
        snprintf(text, sizeof text,
                 "dims: {vocab: 50, d: 16, e: 12, n: 4}\n"
                 "inputs: {tokens: [n, i32], targets: [n, i32]}\n"
                 "graph:\n"
                 "  - param wte [vocab, d] init=normal std=0.02\n"
                 "  - param proj [e, d] init=normal std=0.02\n"
                 "  - h = linear(embedding(tokens, wte), proj)\n"
                 "  - loss = %s\n"
                 "loss: loss\n",
                 fused ? "linear_cross_entropy(h, wte, targets)" : "cross_entropy(linear(h, wte), targets)");
        tu_write(path, text, strlen(text));
        snprintf(args, sizeof args, "check %s", path);
        // the second time through the fused head
        expect_bad(args, fused ? "tied.yaml:7:12: linear_cross_entropy:"
                               : "tied.yaml:7:26: linear: 'h' [4, 12] has 12 features but weight 'wte' [50, 16] expects 16");
    }
    // a position table too short for the context
    expect_bad("check models/gpt2/124M.yaml --set ctx=1025",
               "models/gpt2/gpt2.yaml:37:9: pos_embedding: 'x/embedding' [4, 1025, 768] has 1025 positions but the position "
               "table 'wpe.weight' [1024, 768] has only 1024 rows");
}

// Both families train on packed documents (docs=on through --doc-sep; the fused attention reads each
// row's document starts) and on the plain rows, on the CPU: finite losses that go down.
static void test_train_packed(void **state) {
    static const char *const runs[] = {
        "train models/llama3/1B.yaml --device cpu --set d_model=64 --set n_heads=4 --set n_kv_heads=2 --set d_ff=96 "
        "--set n_layers=2 --set vocab=64 --set batch=2 --set ctx=40 --steps 6 --lr 3e-3 --doc-sep 0",
        "train models/gpt2/124M.yaml --device cpu --set d_model=64 --set n_heads=4 --set n_layers=2 --set vocab=64 "
        "--set n_positions=48 --set batch=2 --set ctx=40 --steps 6 --lr 3e-3 --doc-sep 0 --doc-loss-mask on",
        "train models/gpt2/124M.yaml --device cpu --set d_model=64 --set n_heads=4 --set n_layers=2 --set vocab=64 "
        "--set n_positions=48 --set batch=2 --set ctx=40 --steps 6 --lr 3e-3 --attention naive --set fused_head=off",
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char out[16384];
        int rc = tu_stg(out, sizeof out, "%s", runs[i]);
        if (rc != 0) fail_msg("stg %s: exit %d\n%s", runs[i], rc, out);
        double first, last;
        const char *d = strstr(out, "done: 6 steps, loss ");
        if (!d || sscanf(d, "done: 6 steps, loss %lf -> %lf", &first, &last) != 2) fail_msg("stg %s printed\n%s", runs[i], out);
        if (!(isfinite(last) && last < first)) fail_msg("stg %s: loss %g -> %g", runs[i], first, last);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_tied_one_state),
        cmocka_unit_test(test_tied_gradient_is_the_sum),
        cmocka_unit_test(test_formula_families),
        cmocka_unit_test(test_fused_head_ignored_targets),
        cmocka_unit_test(test_train_packed),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
