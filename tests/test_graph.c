// The loader, shape inference, autodiff and the schedule: CS336 sizes, the toy model, and every
// kind of bad model file.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "graph/loader.h"
#include "ops/registry.h"
#include "planner/formula.h"
#include "tests/rig.h"

// The model's graph after the passes (ungrouped), without a plan.
static stg_graph *load(const char *path, stg_precision prec, const char *const *sets, int nsets, bool train) {
    stg_step_opts o = rig_opts(path, prec, sets, nsets);
    o.train = train;
    return rig_graph(&o);
}

static void test_param_counts(void **state) {
    static const struct {
        const char *file;
        int64_t params;
    } sizes[] = {
        {MODEL("cs336/small.yaml"), 128625408},   {MODEL("cs336/medium.yaml"), 423183360},
        {MODEL("cs336/large.yaml"), 969411840},   {MODEL("cs336/xl.yaml"), 1998235200},
        {MODEL("cs336/2.7B.yaml"), 3406809600LL},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        stg_graph *g = load(sizes[i].file, STG_PREC_FP32, NULL, 0, false);
        assert_int_equal(graph_param_count(g), sizes[i].params);
        graph_free(g);
    }
}

// Every parameter gets exactly one gradient with its shape; the graph stays acyclic (the schedule
// is topological); SSA holds (graph_validate). Both attentions, all precisions.
static void test_autodiff_invariants(void **state) {
    const char *att[2] = {"attention=flash", "attention=naive"};
    stg_precision precs[3] = {STG_PREC_FP32, STG_PREC_BF16, STG_PREC_FP64};
    for (int a = 0; a < 2; a++)
        for (int p = 0; p < 3; p++) {
            stg_graph *g = load(MODEL("cs336/small.yaml"), precs[p], &att[a], 1, true);
            int nparams = 0, ngrads = 0, nadam = 0;
            for (int t = 0; t < g->nt; t++) {
                const stg_tensor *x = &g->t[t];
                if (x->cls == STG_CLASS_PARAM) {
                    nparams++;
                    const stg_tensor *gr = &g->t[x->grad];
                    assert_int_equal(gr->cls, STG_CLASS_GRAD);
                    assert_int_equal(gr->param, t);
                    assert_int_equal(gr->ndim, x->ndim);
                    for (int k = 0; k < x->ndim; k++) assert_int_equal(gr->shape[k], x->shape[k]);
                    assert_int_equal(gr->dtype, g->grad_dtype);
                }
                ngrads += x->cls == STG_CLASS_GRAD;
            }
            for (int o = 0; o < g->nops; o++) nadam += g->ops[o].kind == STG_OP_ADAMW;
            // gradient sums fed by a matmul are added by that matmul (an addend input): d.h of q, k, v
            // (two) and d.h2 of w1, w3 (one) per layer, and no add of a two-input matmul's fresh output
            int fused = 0;
            for (int o = g->n_fwd_ops; o < g->nops; o++) {
                const stg_op *op = &g->ops[o];
                if (op->kind == STG_OP_MATMUL && op->n_in == 3) {
                    fused++;
                    assert_int_equal(g->t[op->in[2]].dtype, g->t[op->out[0]].dtype);
                    assert_true(strncmp(g->t[op->out[0]].name, "d.", 2) == 0);
                }
                if (op->kind != STG_OP_ADD) continue;
                for (int i = 0; i < 2; i++) {
                    int pr = g->t[op->in[i]].producer;
                    int uses = 0;
                    for (int q = 0; q < g->nops; q++)
                        for (int k = 0; k < g->ops[q].n_in; k++) uses += g->ops[q].in[k] == op->in[i];
                    assert_false(pr >= g->n_fwd_ops && g->ops[pr].kind == STG_OP_MATMUL && g->ops[pr].n_in == 2 && uses == 1);
                }
            }
            assert_int_equal(fused, 3 * 12);
            // the residual stream's gradient sums are added by the RMSNorm backward that makes one
            // term (two per layer): with the forward's folds, the step has no add op left
            int nfused = 0, nadd = 0;
            for (int o = 0; o < g->nops; o++) {
                nfused += g->ops[o].kind == STG_OP_RMSNORM_BWD && g->ops[o].n_in == 5;
                nadd += g->ops[o].kind == STG_OP_ADD;
            }
            assert_int_equal(nfused, 2 * 12);
            assert_int_equal(nadd, 0);
            // the residual adds of the forward are folded into the products that feed them (wo and w2):
            // no add is left in the forward, two linears with an addend per layer, named after the sum
            int folded = 0;
            for (int o = 0; o < g->n_fwd_ops; o++) {
                const stg_op *op = &g->ops[o];
                assert_int_not_equal(op->kind, STG_OP_ADD);
                if (op->kind != STG_OP_LINEAR || op->n_in != 3) continue;
                folded++;
                const char *w = g->t[op->in[1]].name, *nm = g->t[op->out[0]].name;
                assert_true(strstr(w, ".wo") || strstr(w, ".w2"));
                assert_true(strncmp(nm, "blocks.", 7) == 0 && strstr(nm, ".x"));
            }
            assert_int_equal(folded, 2 * 12);
            assert_int_equal(nparams, 111);
            assert_int_equal(ngrads, nparams);
            assert_int_equal(nadam, nparams);
            // acyclic: every op reads only tensors written earlier in the schedule
            int *pos = calloc((size_t)g->nops, sizeof(int));
            for (int s = 0; s < g->nsched; s++) pos[g->schedule[s]] = s;
            for (int o = 0; o < g->nops; o++)
                for (int i = 0; i < g->ops[o].n_in; i++) {
                    int pr = g->t[g->ops[o].in[i]].producer;
                    if (pr >= 0) assert_true(pos[pr] < pos[o]);
                }
            free(pos);
            graph_free(g);
        }
}

static void test_shapes_and_names(void **state) {
    const char *sets[] = {"ctx=128", "batch=2"};
    stg_graph *g = load(MODEL("cs336/small.yaml"), STG_PREC_FP32, sets, 2, false);
    bool found;
    assert_int_equal(graph_dim(g, "head_dim", &found), 64);
    assert_true(found);
    int logits = graph_find_tensor(g, "logits");
    assert_true(logits >= 0);
    assert_int_equal(g->t[logits].ndim, 3);
    assert_int_equal(g->t[logits].shape[0], 2);
    assert_int_equal(g->t[logits].shape[1], 128);
    assert_int_equal(g->t[logits].shape[2], 10000);
    assert_true(graph_find_tensor(g, "blocks.11.w2") >= 0);
    assert_true(graph_find_tensor(g, "blocks.3.h") >= 0);
    assert_int_equal(g->t[g->loss].ndim, 0);
    // the flash path keeps a (B, H, S) log-sum-exp per layer
    int lse = graph_find_tensor(g, "blocks.0.lse");
    assert_true(lse >= 0);
    assert_int_equal(g->t[lse].shape[1], 12);
    graph_free(g);
}

static void test_naive_keeps_probabilities(void **state) {
    const char *set = "attention=naive";
    stg_graph *g = load(MODEL("cs336/small.yaml"), STG_PREC_FP32, &set, 1, true);
    int p = graph_find_tensor(g, "blocks.0.p");
    assert_true(p >= 0);
    assert_int_equal(g->t[p].cls, STG_CLASS_ACTIVATION);
    assert_int_equal(g->t[p].ndim, 4);
    assert_int_equal(g->t[p].shape[2], 256);
    assert_int_equal(g->t[p].shape[3], 256);
    graph_free(g);
}

static void test_toy(void **state) {
    stg_graph *g = load(MODEL("toy.yaml"), STG_PREC_FP32, NULL, 0, true);
    assert_int_equal(graph_param_count(g), 10 * 20 + 10 + 10 + 5 * 10);
    int x = graph_find_tensor(g, "x");
    assert_int_equal(g->t[x].cls, STG_CLASS_INPUT);
    graph_free(g);
}

static void test_bf16_dtypes(void **state) {
    stg_graph *g = load(MODEL("tiny.yaml"), STG_PREC_BF16, NULL, 0, true);
    int masters = 0;
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls == STG_CLASS_PARAM) assert_int_equal(x->dtype, STG_BF16);
        if (x->cls == STG_CLASS_GRAD || x->cls == STG_CLASS_OPTIMIZER) assert_int_equal(x->dtype, STG_F32);
        masters += x->cls == STG_CLASS_OPTIMIZER && x->role == STG_ROLE_MASTER;
    }
    assert_int_equal(masters, 1 + 2 * 9 + 2);
    assert_int_equal(g->t[graph_find_tensor(g, "logits")].dtype, STG_BF16);
    assert_int_equal(g->t[g->loss].dtype, STG_F32);
    graph_free(g);
}

// --grad-dtype bf16: exactly the gradients a product writes whole are bf16 (the blocks' weights; the
// plain untied head; not a tied embedding, norm gains or the fused head's weight), grouped products
// keep them so, the formula's gradient bytes equal the graph's, data-parallel buckets hold one dtype
// each, and fp32 precision or gradient accumulation is refused with a message.
static int64_t grad_bytes(const stg_graph *g, int *nbf16, int *nf32) {
    int64_t b = 0;
    *nbf16 = *nf32 = 0;
    for (int t = 0; t < g->nt; t++) {
        const stg_tensor *x = &g->t[t];
        if (x->cls != STG_CLASS_GRAD) continue;
        b += stg_bytes(x);
        int pr = x->producer;
        bool product = pr >= 0 && (g->ops[pr].kind == STG_OP_MATMUL || g->ops[pr].kind == STG_OP_MATMUL_GROUP) &&
                       g->ops[pr].n_in == 2 * g->ops[pr].n_out;
        assert_int_equal(x->dtype, product ? STG_BF16 : STG_F32);
        if (product) assert_int_equal(g->ops[pr].a.matmul.grad_out, 2);
        *nbf16 += x->dtype == STG_BF16;
        *nf32 += x->dtype == STG_F32;
    }
    return b;
}

static void test_bf16_grads(void **state) {
    static const struct {
        const char *model, *set;
        int bf16, f32; // gradients of each dtype
    } cases[] = {
        {MODEL("cs336/small.yaml"), "fused_head=off", 12 * 7 + 1, 1 + 12 * 2 + 1}, // + lm_head; tok_emb, ln1, ln2, ln_f
        {MODEL("cs336/small.yaml"), "fused_head=on", 12 * 7, 2 + 12 * 2 + 1},     // lm_head's from the fused op
        {MODEL("llama3/1B.yaml"), "fused_head=off", 16 * 7, 1 + 16 * 2 + 1},        // the tied embedding: a sum
        {MODEL("gpt2/124M.yaml"), "fused_head=on", 12 * 4, 2 + 12 * 8 + 2},         // wte, wpe; biases and norms
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int grouped = 0; grouped < 2; grouped++) {
            const char *sets[] = {cases[c].set};
            stg_step_opts o = rig_opts(cases[c].model, STG_PREC_BF16, sets, 1);
            o.optim.bf16_grads = true;
            o.ungrouped = !grouped;
            stg_graph *g = rig_graph(&o);
            int nb, nf;
            int64_t bytes = grad_bytes(g, &nb, &nf);
            print_message("%s %s%s: %d bf16 and %d fp32 gradients, %lld bytes\n", cases[c].model, cases[c].set,
                          grouped ? " grouped" : "", nb, nf, (long long)bytes);
            assert_int_equal(nb, cases[c].bf16);
            assert_int_equal(nf, cases[c].f32);
            assert_true(g->bf16_grads);
            stg_formula f;
            stg_err err;
            if (formula_compute(g, true, &f, &err)) fail_msg("formula: %s", err.msg);
            assert_true(f.available);
            assert_int_equal(f.grad, bytes);
            graph_free(g);
        }
    // data parallel: every bucket's allreduce reads one dtype
    stg_step_opts o = rig_opts(MODEL("cs336/small.yaml"), STG_PREC_BF16, NULL, 0);
    o.optim.bf16_grads = true;
    o.optim.dp_world = 2;
    o.optim.dp_bucket_bytes = 8 << 20;
    stg_graph *g = rig_graph(&o);
    int buckets[2] = {0, 0};
    for (int i = 0; i < g->nops; i++) {
        const stg_op *op = &g->ops[i];
        if (op->kind != STG_OP_ALLREDUCE || op->in[0] == g->loss) continue;
        for (int k = 1; k < op->n_in; k++) assert_int_equal(g->t[op->in[k]].dtype, g->t[op->in[0]].dtype);
        buckets[g->t[op->in[0]].dtype == STG_BF16]++;
    }
    assert_true(buckets[0] > 0 && buckets[1] > 0);
    graph_free(g);
    // refused: fp32 precision, gradient accumulation
    for (int k = 0; k < 2; k++) {
        stg_step_opts b = rig_opts(MODEL("tiny.yaml"), k == 0 ? STG_PREC_FP32 : STG_PREC_BF16, NULL, 0);
        b.optim.bf16_grads = true;
        b.optim.grad_accum = k == 0 ? 0 : 2;
        b.no_plan = true;
        stg_step *s = NULL;
        stg_err err;
        assert_int_not_equal(stg_step_build(&b, &s, &err), 0);
        assert_null(strstr(err.msg, "internal"));
        assert_non_null(strstr(err.msg, k == 0 ? "need --precision bf16" : "gradient accumulation"));
    }
}

// Weight decay everywhere by default; with the exemption, none on norm gains and embeddings.
static void test_weight_decay_exemption(void **state) {
    for (int ex = 0; ex < 2; ex++) {
        stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP32, NULL, 0);
        o.optim.decay_exempt_norms_embeddings = ex;
        const stg_optim_config oc = o.optim;
        stg_graph *g = rig_graph(&o);
        int exempt = 0, decayed = 0;
        for (int i = 0; i < g->nops; i++) {
            if (g->ops[i].kind != STG_OP_ADAMW) continue;
            const stg_tensor *p = &g->t[g->ops[i].in[0]];
            bool norm_or_emb = p->ndim == 1 || strcmp(p->name, "tok_emb") == 0;
            double wd = g->ops[i].a.adamw.weight_decay;
            if (ex && norm_or_emb) assert_true(wd == 0.0);
            else assert_true(wd == oc.weight_decay);
            exempt += wd == 0.0;
            decayed += wd > 0;
        }
        assert_int_equal(exempt, ex ? 2 * 2 + 1 + 1 : 0); // ln1, ln2 per layer, ln_f, tok_emb
        assert_true(decayed > 0);
        graph_free(g);
    }
}

// ---- bad input --------------------------------------------------------------------------------

typedef struct {
    const char *what;
    const char *yaml;
    const char *set;
    const char *expect; // substring of the message, starting with the position
} bad_case;

#define HEAD "dims: {batch: 2, d: 8}\ninputs: {tokens: [batch, i32], targets: [batch, i32]}\n"
#define TAIL "loss: loss\n"
#define HEAD_INPUTS "inputs: {tokens: [batch, i32], targets: [batch, i32]}\n" // for cases with dims of their own

static const bad_case bad[] = {
    {"malformed YAML", "dims: {batch: 2\ninputs: [", NULL, "m.yaml:2:"},
    {"unknown op", HEAD "graph:\n  - param e [10, d] init=embedding\n  - x = frobnicate(tokens, e)\n  - loss = x\n" TAIL, NULL,
     "m.yaml:5:9: unknown op 'frobnicate'"},
    {"unknown attribute", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [d] init=ones\n  - x = rmsnorm(embedding(tokens, e), w, epsilon=1)\n" TAIL,
     NULL, "m.yaml:6:42: rmsnorm has no attribute 'epsilon'; expected eps"},
    {"wrong arity", HEAD "graph:\n  - param e [10, d] init=embedding\n  - x = embedding(tokens)\n" TAIL, NULL,
     "m.yaml:5:9: embedding takes 2 inputs, got 1"},
    {"shape mismatch", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [5, 7] init=linear\n  - x = linear(embedding(tokens, e), w)\n" TAIL,
     NULL, "m.yaml:6:9: linear: 'x/embedding' [2, 8] has 8 features but weight 'w' [5, 7] expects 7"},
    {"heads not dividing d_model", "dims: {d_model: 10, n_heads: 3, head_dim: d_model / n_heads, batch: 2, d: 8}\n"
     "inputs: {tokens: [batch, i32], targets: [batch, i32]}\ngraph: []\n" TAIL, NULL,
     "m.yaml:1:51: 10 / 3 is not an integer"},
    {"unknown dim", HEAD "graph:\n  - param e [10, dd] init=embedding\n" TAIL, NULL, "m.yaml:4:18: unknown dim 'dd'"},
    {"division by zero", "dims: {a: 4, z: 0, b: a / (z), batch: 2, d: 8}\n" HEAD_INPUTS "graph: []\n" TAIL, NULL, "m.yaml:1:17: dim 'z' is 0"},
    {"division by zero in an expression", "dims: {a: 4, b: a / (a - 4), batch: 2, d: 8}\n" HEAD_INPUTS "graph: []\n" TAIL, NULL,
     "m.yaml:1:19: division by zero"},
    {"used before defined", HEAD "graph:\n  - param e [10, d] init=embedding\n  - x = add(y, embedding(tokens, e))\n" TAIL, NULL,
     "m.yaml:5:13: 'y' is used before it is defined"},
    {"duplicate parameter", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param e [10, d] init=embedding\n" TAIL, NULL,
     "m.yaml:5:11: duplicate parameter 'e' (first declared at m.yaml:4:11)"},
    {"zero size", HEAD "graph:\n  - param e [10, d - 8] init=embedding\n" TAIL, NULL, "m.yaml:4:18: parameter sizes must be positive"},
    {"negative dim", "dims: {n: -3, batch: 2, d: 8}\n" HEAD_INPUTS "graph: []\n" TAIL, NULL, "m.yaml:1:11: dim 'n' is -3; dims must be positive"},
    {"bad --set syntax", HEAD "graph:\n  - param e [10, d] init=embedding\n  - loss = e\n" TAIL, "d", "--set: 'd' is not name=value"},
    {"--set unknown name", HEAD "graph:\n  - param e [10, d] init=embedding\n  - loss = e\n" TAIL, "width=3",
     "--set: 'width=3': 'width' is neither a dim nor an option"},
    {"--set non-integer", HEAD "graph:\n  - param e [10, d] init=embedding\n  - loss = e\n" TAIL, "d=2.5",
     "dims are integers; found a decimal number"},
    {"unknown key", "dimz: {a: 1}\n" HEAD, NULL, "m.yaml:1:1: unknown key 'dimz'"},
    {"loss not scalar", HEAD "graph:\n  - param e [10, d] init=embedding\n  - loss = embedding(tokens, e)\n" TAIL, NULL,
     "m.yaml:6:7: loss 'loss' must be a scalar"},
    {"bad option value", "options: {attention: [flash, naive]}\n" HEAD "graph:\n  - if: attention == fast\n    then: []\n" TAIL, NULL,
     "m.yaml:5:9: option 'attention' has no choice 'fast'; expected flash|naive"},
    {"assign to a parameter", HEAD "graph:\n  - param e [10, d] init=embedding\n  - e = embedding(tokens, e)\n" TAIL, NULL,
     "m.yaml:5:5: 'e' is a parameter"},
    {"rope on an odd head_dim", HEAD "graph:\n  - param e [10, 9] init=embedding\n  - x = rope(reshape(embedding(tokens, e), shape=[batch, 1, 1, 9]))\n" TAIL,
     NULL, "m.yaml:5:9: rope: 'x/reshape': head_dim (the last dim) must be even"},
    {"backward op in a model file", HEAD "graph:\n  - param e [10, d] init=embedding\n  - x = softmax_bwd(e, e)\n" TAIL, NULL,
     "m.yaml:5:9: 'softmax_bwd' is a backward or optimizer op"},
    {"linear bias of another shape", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [3, d] init=linear\n"
     "  - x = linear(e, w, e)\n" TAIL, NULL, "m.yaml:6:9: linear: the bias 'e' [10, 8] f32 must be [3] f32, one value per row of the weight 'w' [3, 8]"},
    {"linear with four inputs", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [3, d] init=linear\n"
     "  - x = linear(e, w, e, e)\n" TAIL, NULL, "m.yaml:6:9: linear: takes x, w and an optional bias b"},
    {"linear with five inputs", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [3, d] init=linear\n"
     "  - x = linear(e, w, e, e, e)\n" TAIL, NULL, "m.yaml:6:9: linear takes 2 to 4 inputs, got 5"},
    // a tied parameter (the embedding as the LM head) whose second use does not fit
    {"tied parameter of the wrong shape", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [6, d] init=linear\n"
     "  - h = linear(embedding(tokens, e), w)\n  - loss = cross_entropy(linear(h, e), targets)\n" TAIL, NULL,
     "m.yaml:7:26: linear: 'h' [2, 6] has 6 features but weight 'e' [10, 8] expects 8 (weights are [d_out, d_in])"},
    {"matmul addend of another shape", HEAD "graph:\n  - param e [10, d] init=embedding\n  - param w [d, 3] init=linear\n"
     "  - x = matmul(e, w, e)\n" TAIL, NULL, "m.yaml:6:9: matmul: the addend 'e' must have the product's shape and dtype"},
    // the loss must be a loss op's output itself
    {"sum of losses", HEAD "graph:\n  - param e [10, d] init=embedding\n  - a = cross_entropy(linear(embedding(tokens, e), e), targets)\n"
     "  - loss = add(a, a)\n" TAIL, NULL,
     "m.yaml:6:12: the model's loss 'loss' is made by add; it must be the output of a loss op (cross_entropy, linear_cross_entropy) itself"},
    {"scaled loss", HEAD "graph:\n  - param e [10, d] init=embedding\n"
     "  - loss = scale(cross_entropy(linear(embedding(tokens, e), e), targets), factor=2)\n" TAIL, NULL,
     "m.yaml:5:12: the model's loss 'loss' is made by scale"},
    {"missing graph", HEAD TAIL, NULL, "no 'graph:' section"},
    {"empty file", "", NULL, "the model file is empty"},
};

static void test_bad_input(void **state) {
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const bad_case *c = &bad[i];
        const char *sets[1] = {c->set};
        stg_step_opts o = rig_opts_text("m.yaml", c->yaml, STG_PREC_FP32, sets, c->set ? 1 : 0);
        o.no_plan = true;
        stg_step *s = NULL;
        stg_err err;
        err.msg[0] = 0;
        int r = stg_step_build(&o, &s, &err);
        if (r == 0) fail_msg("case '%s' was accepted", c->what);
        assert_null(s);
        if (!strstr(err.msg, c->expect)) fail_msg("case '%s': message\n  %s\nlacks\n  %s", c->what, err.msg, c->expect);
    }
}

// Which adds fold into the product that feeds them: only a nested call's result (nothing else can
// read it) made by a two-input matmul or linear, of the other operand's shape and dtype.
static void test_fold_add(void **state) {
    static const struct {
        const char *stmts;
        int adds, folded; // forward add ops left; linear/matmul ops with an addend
    } c[] = {
        {"  - y = add(x, linear(x, w))\n", 0, 1},
        {"  - y = add(linear(x, w), x)\n", 0, 1},
        {"  - y = add(linear(x, w), linear(x, w))\n", 0, 1},           // the second takes the first
        {"  - z = linear(x, w)\n  - y = add(x, z)\n", 1, 0},            // a name may be read again
        {"  - y = add(x, add(x, linear(x, w)))\n", 1, 1},               // the outer add's operand is an add
        {"  - y = add(x, matmul(x, w, tb=1))\n", 0, 1},
        {"  - param b [d] init=zeros\n  - y = add(x, linear(x, w, b))\n", 0, 1}, // bias and addend
        {"  - y = add(x, add(x, linear(x, w)))\n  - y = add(y, linear(x, w))\n", 1, 2},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "dims: {n: 4, d: 8}\ninputs: {x: [n, d, f32], t: [n, i32]}\ngraph:\n  - param w [d, d] init=linear\n"
                 "%s  - loss = cross_entropy(y, t)\nloss: loss\n",
                 c[i].stmts);
        stg_load_opts o = {STG_PREC_FP64, NULL, 0};
        stg_graph *g = NULL;
        stg_err err;
        if (graph_load_string(yaml, strlen(yaml), "m.yaml", &o, &g, &err)) fail_msg("case %zu: %s", i, err.msg);
        int adds = 0, folded = 0;
        for (int k = 0; k < g->nops; k++) {
            adds += g->ops[k].kind == STG_OP_ADD;
            folded += (g->ops[k].kind == STG_OP_LINEAR || g->ops[k].kind == STG_OP_MATMUL) && ops_addend_of(&g->ops[k]) > 0;
        }
        if (adds != c[i].adds || folded != c[i].folded)
            fail_msg("case %zu (%s): %d adds, %d folded; expected %d, %d", i, c[i].stmts, adds, folded, c[i].adds, c[i].folded);
        int y = graph_find_tensor(g, "y");
        assert_true(y >= 0);
        assert_int_equal(g->t[y].ndim, 2);
        graph_free(g);
    }
    // graph_fold_add itself: a product another op reads, or made before first_op, is not folded
    const char *yaml = "dims: {n: 4, d: 8}\ninputs: {x: [n, d, f32], t: [n, i32]}\ngraph:\n  - param w [d, d] init=linear\n"
                       "  - z = linear(x, w)\n  - u = linear(x, w)\n  - v = linear(x, w)\n  - y = add(z, mul(z, u))\n"
                       "  - loss = cross_entropy(y, t)\nloss: loss\n";
    stg_load_opts o = {STG_PREC_FP64, NULL, 0};
    stg_graph *g = NULL;
    stg_err err;
    if (graph_load_string(yaml, strlen(yaml), "m.yaml", &o, &g, &err)) fail_msg("%s", err.msg);
    int z = graph_find_tensor(g, "z"), v = graph_find_tensor(g, "v"), x = graph_find_tensor(g, "x");
    assert_true(z >= 0 && v >= 0 && x >= 0);
    assert_int_equal(graph_fold_add(g, z, x, "s", 0, &err), 0);                   // mul and add read z
    assert_int_equal(graph_fold_add(g, v, x, "s", g->t[v].producer + 1, &err), 0); // made before first_op
    assert_int_equal(graph_fold_add(g, v, v, "s", 0, &err), 0);                   // its own addend
    assert_int_equal(g->ops[g->t[v].producer].n_in, 2);
    assert_int_equal(graph_fold_add(g, v, x, "s", 0, &err), 1);                   // nothing reads v
    assert_int_equal(g->ops[g->t[v].producer].n_in, 3);
    assert_string_equal(g->t[v].name, "s");
    assert_int_equal(graph_fold_add(g, v, x, "s2", 0, &err), 0);                  // it has its addend
    graph_free(g);
}

static void test_missing_file(void **state) {
    stg_graph *g;
    stg_err err;
    assert_int_equal(graph_load("/nonexistent/model.yaml", NULL, &g, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/model.yaml: cannot open the model file"));
    assert_int_equal(graph_load(STG_SOURCE_DIR "/models", NULL, &g, &err), -1);
}

static void test_include_error_position(void **state) {
    // an error inside an included file names that file
    stg_graph *g;
    stg_err err;
    const char *set = "n_heads=7";
    stg_load_opts o = {STG_PREC_FP32, &set, 1};
    assert_int_equal(graph_load(MODEL("cs336/small.yaml"), &o, &g, &err), -1);
    assert_non_null(strstr(err.msg, "lm.yaml:"));
    assert_non_null(strstr(err.msg, "768 / 7 is not an integer"));
}

// graph_group_matmuls on the small LM: per layer the q, k, v projections, w1 and w3, and the weight
// gradients of each set become matmul_group ops (12 x 4 groups, 72 ops fewer), the forward ops stay
// a prefix, every tensor keeps its producer, and the schedule and invariants hold; also with the
// optimizer in backward and with data-parallel buckets.
static void test_group_matmuls(void **state) {
    for (int mode = 0; mode < 3; mode++) {
        stg_step_opts o = rig_opts(MODEL("cs336/small.yaml"), STG_PREC_BF16, NULL, 0); // ungrouped
        o.optim.in_backward = mode == 1;
        o.optim.dp_world = mode == 2 ? 2 : 0;
        stg_graph *g = rig_graph(&o);
        stg_err err;
        int nops = g->nops, nfwd = g->n_fwd_ops;
        assert_int_equal(graph_group_matmuls(g, &err), 48);
        assert_int_equal(g->nops, nops - 72);
        assert_int_equal(g->n_fwd_ops, nfwd - 36);
        if (graph_schedule(g, &err)) fail_msg("schedule: %s", err.msg);
        if (graph_validate(g, &err)) fail_msg("validate: %s", err.msg);
        int groups[2][4] = {{0}}; // [phase][members - 2 + (1 for f32 outputs)]
        for (int i = 0; i < g->nops; i++) {
            const stg_op *op = &g->ops[i];
            assert_int_equal(op->phase == STG_PHASE_FORWARD, i < g->n_fwd_ops);
            for (int k = 0; k < op->n_out; k++) assert_int_equal(g->t[op->out[k]].producer, i);
            if (op->kind != STG_OP_MATMUL_GROUP) continue;
            assert_true(op->phase != STG_PHASE_OPTIMIZER);
            assert_int_equal(op->n_in, 2 * op->n_out);
            // the weight gradients are f32 (grad_out), the forward products bf16
            assert_int_equal(op->a.matmul.grad_out, op->phase == STG_PHASE_BACKWARD);
            for (int k = 0; k < op->n_out; k++)
                assert_int_equal(g->t[op->out[k]].dtype, op->phase == STG_PHASE_BACKWARD ? STG_F32 : STG_BF16);
            if (op->phase == STG_PHASE_BACKWARD)
                for (int k = 0; k < op->n_out; k++) assert_int_equal(g->t[op->out[k]].cls, STG_CLASS_GRAD);
            groups[op->phase == STG_PHASE_BACKWARD][op->n_out - 2]++;
        }
        assert_int_equal(groups[0][0], 12); // w1, w3
        assert_int_equal(groups[0][1], 12); // q, k, v
        assert_int_equal(groups[1][0], 12);
        assert_int_equal(groups[1][1], 12);
        // nothing left to group: a second pass finds none
        assert_int_equal(graph_group_matmuls(g, &err), 0);
        graph_free(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),       cmocka_unit_test(test_autodiff_invariants),
        cmocka_unit_test(test_shapes_and_names),   cmocka_unit_test(test_naive_keeps_probabilities),
        cmocka_unit_test(test_toy),                cmocka_unit_test(test_bf16_dtypes),
        cmocka_unit_test(test_bf16_grads),
        cmocka_unit_test(test_bad_input),          cmocka_unit_test(test_fold_add),
        cmocka_unit_test(test_missing_file),       cmocka_unit_test(test_group_matmuls),
        cmocka_unit_test(test_include_error_position), cmocka_unit_test(test_weight_decay_exemption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
