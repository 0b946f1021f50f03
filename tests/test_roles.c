// Dim roles (batch, ctx, vocab): a model whose dims are called otherwise (B, T, V) and declares
// them with `roles:` builds, plans, trains, samples and reports exactly as the model that names
// them batch, ctx and vocab; every derived graph keeps the roles; bad declarations are refused with
// file:line:col (exit 2 from the program).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph/loader.h"
#include "planner/formula.h"
#include "planner/infer.h"
#include "tests/rig.h"

static char dir[256];
static char conv[320], renamed[320], arch[320]; // the conventional tiny LM, the renamed one, its architecture

static const char *const from[3] = {"batch", "ctx", "vocab"}, *const to[3] = {"B", "T", "V"};

static bool ident_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

// s with every whole word batch, ctx, vocab replaced by B, T, V.
static char *rename_words(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n + 1), *q = o;
    assert_non_null(o);
    for (size_t i = 0; i < n;) {
        int hit = -1;
        for (int k = 0; k < 3 && hit < 0; k++) {
            size_t m = strlen(from[k]);
            if (strncmp(s + i, from[k], m) == 0 && (i == 0 || !ident_char(s[i - 1])) && !ident_char(s[i + m])) hit = k;
        }
        if (hit < 0) {
            *q++ = s[i++];
            continue;
        }
        size_t m = strlen(to[hit]);
        memcpy(q, to[hit], m);
        q += m;
        i += strlen(from[hit]);
    }
    *q = 0;
    return o;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

// Both tiny LMs (models/tiny.yaml's sizes), one including models/cs336/lm.yaml as it is, the other
// a copy of it with batch, ctx and vocab renamed, the roles declared by the size file.
static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/stg_test_roles_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(conv, sizeof conv, "%s/tiny.yaml", dir);
    snprintf(renamed, sizeof renamed, "%s/tiny_btv.yaml", dir);
    snprintf(arch, sizeof arch, "%s/lm_btv.yaml", dir);
    char *lm = slurp(STG_SOURCE_DIR "/models/cs336/lm.yaml"), *r = rename_words(lm);
    assert_null(strstr(r, "batch"));
    assert_non_null(strstr(r, "shape=[B, T, n_heads, head_dim]"));
    spit(arch, r);
    free(lm);
    free(r);
    spit(conv, "include: " STG_SOURCE_DIR "/models/cs336/lm.yaml\nname: tiny-lm\n"
               "dims: {vocab: 256, d_model: 64, d_ff: 176, n_layers: 2, n_heads: 4, batch: 8, ctx: 64}\n");
    spit(renamed, "include: lm_btv.yaml\nname: tiny-lm\nroles: {batch: B, ctx: T, vocab: V}\n"
                  "dims: {V: 256, d_model: 64, d_ff: 176, n_layers: 2, n_heads: 4, B: 8, T: 64}\n");
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static stg_step *build(const char *model, const char *const *sets, int nsets, bool train, int64_t budget) {
    stg_step_opts o = rig_opts(model, STG_PREC_FP32, sets, nsets);
    o.train = train;
    o.budget = budget;
    return rig_step(&o);
}

static void expect_roles(const stg_graph *g, const char *b, const char *c, const char *v, int64_t bv, int64_t cv, int64_t vv) {
    const char *names[3] = {b, c, v};
    int64_t vals[3] = {bv, cv, vv};
    for (int r = 0; r < STG_DIM_ROLES; r++) {
        const char *n = graph_role_name(g, (stg_dim_role)r);
        if (!n || strcmp(n, names[r]) != 0) fail_msg("role %s: dim '%s', expected '%s'", graph_role_key((stg_dim_role)r), n ? n : "(none)", names[r]);
        bool found = false;
        assert_int_equal(graph_role_value(g, (stg_dim_role)r, &found), vals[r]);
        assert_true(found);
        assert_string_equal(g->dims[graph_role_index(g, (stg_dim_role)r)].name, names[r]);
    }
}

static void test_roles_by_name_and_declared(void **s) {
    (void)s;
    stg_step *a = build(conv, NULL, 0, false, 0), *b = build(renamed, NULL, 0, false, 0);
    expect_roles(a->g, "batch", "ctx", "vocab", 8, 64, 256);
    expect_roles(b->g, "B", "T", "V", 8, 64, 256);
    bool found = true;
    assert_int_equal(graph_dim(b->g, "batch", &found), 0); // no dim is named batch there
    assert_false(found);
    stg_step_free(a);
    stg_step_free(b);
    // --set by the dim's name, or by the role (the loader gives it to the role's dim)
    const char *by_name[] = {"B=3", "T=16", "V=100"}, *by_role[] = {"batch=3", "ctx=16", "vocab=100"};
    stg_step *c = build(renamed, by_name, 3, true, 0), *d = build(renamed, by_role, 3, true, 0);
    expect_roles(c->g, "B", "T", "V", 3, 16, 100);
    expect_roles(d->g, "B", "T", "V", 3, 16, 100);
    stg_step_free(c);
    stg_step_free(d);
    // a model without the roles has none
    stg_graph *g;
    stg_err err;
    stg_load_opts lo = {STG_PREC_FP32, NULL, 0};
    assert_int_equal(graph_load(STG_SOURCE_DIR "/models/toy.yaml", &lo, &g, &err), 0);
    assert_non_null(graph_role_name(g, STG_DIM_BATCH));
    assert_null(graph_role_name(g, STG_DIM_CTX));
    assert_null(graph_role_name(g, STG_DIM_VOCAB));
    assert_int_equal(graph_role_value(g, STG_DIM_VOCAB, &found), 0);
    assert_false(found);
    graph_free(g);
}

// The same step from both: the same tensors and ops, the same plan, the same formula.
static void test_same_step_and_plan(void **s) {
    (void)s;
    for (int train = 0; train < 2; train++) {
        stg_step *a = build(conv, NULL, 0, train, 0), *b = build(renamed, NULL, 0, train, 0);
        stg_plan *pa, *pb;
        stg_err err;
        assert_int_equal(plan_build(a->g, NULL, &pa, &err), 0);
        assert_int_equal(plan_build(b->g, NULL, &pb, &err), 0);
        assert_int_equal(a->g->nt, b->g->nt);
        assert_int_equal(a->g->nops, b->g->nops);
        for (int t = 0; t < a->g->nt; t++) {
            assert_string_equal(a->g->t[t].name, b->g->t[t].name);
            assert_true(stg_same_shape(&a->g->t[t], &b->g->t[t]));
            assert_int_equal(pa->offset[t], pb->offset[t]);
        }
        assert_int_equal(pa->peak_bytes, pb->peak_bytes);
        assert_int_equal(pa->arena_bytes, pb->arena_bytes);
        stg_formula fa, fb;
        assert_int_equal(formula_compute(a->g, train, &fa, &err), 0);
        assert_int_equal(formula_compute(b->g, train, &fb, &err), 0);
        assert_true(fa.available);
        if (!fb.available) fail_msg("no formula for the renamed model: %s", fb.reason);
        assert_int_equal(fa.total, fb.total);
        assert_int_equal(fb.batch, 8);
        assert_int_equal(fb.ctx, 64);
        assert_int_equal(fb.vocab, 256);
        plan_free(pa);
        plan_free(pb);
        stg_step_free(a);
        stg_step_free(b);
    }
}

// Training from the same seeds gives bit-identical losses and parameters.
static void test_same_training(void **s) {
    (void)s;
    const char *sc[] = {RIG_TINY}, *sr[] = {"d_model=32", "d_ff=48", "n_layers=2", "n_heads=2", "V=64"};
    double la[4], lb[4];
    rig ra, rb;
    rig_cfg c = {.init_seed = 7, .feed_seed = 11, .rng_seed = 13};
    rig_open(&ra, build(conv, sc, 5, true, 0), &c);
    rig_open(&rb, build(renamed, sr, 5, true, 0), &c);
    rig_steps(&ra, 4, la);
    rig_steps(&rb, 4, lb);
    for (int i = 0; i < 4; i++) {
        assert_true(la[i] == lb[i]);
        assert_true(la[i] > 0);
    }
    rig_state_equal(&ra, &rb);
    rig_close(&ra);
    rig_close(&rb);
}

// Every derived graph keeps the roles: autodiff (with accumulation, with the optimizer in the
// backward), the budget search's rebuilt step, and the sampler's prefill and decode graphs.
static void test_derived_graphs_keep_roles(void **s) {
    (void)s;
    stg_step_opts o = rig_opts(renamed, STG_PREC_FP32, NULL, 0);
    stg_step *st = rig_step(&o);
    expect_roles(st->g, "B", "T", "V", 8, 64, 256);
    stg_step_free(st);
    o.optim.grad_accum = 2;
    st = rig_step(&o);
    expect_roles(st->g, "B", "T", "V", 8, 64, 256);
    stg_step_free(st);
    o.optim.grad_accum = 0;
    o.optim.in_backward = true;
    st = rig_step(&o);
    expect_roles(st->g, "B", "T", "V", 8, 64, 256);
    stg_step_free(st);
    // within a budget below the plain peak: activations recomputed in a step the search rebuilds
    o = rig_opts(renamed, STG_PREC_FP32, NULL, 0);
    o.no_plan = false;
    st = rig_step(&o);
    int64_t peak = st->p->peak_bytes;
    stg_step_free(st);
    o.budget = peak - peak / 20;
    st = rig_step(&o);
    assert_true(st->budget.n_recomputed > 0);
    assert_true(st->p->peak_bytes <= o.budget);
    expect_roles(st->g, "B", "T", "V", 8, 64, 256);
    stg_step_free(st);
    // sampling: the prefill at (batch 3, prompt 5), the decode step at (3, 1); the cache of ctx 64
    stg_infer_opts io = stg_infer_defaults();
    io.model_path = renamed;
    io.batch = 3;
    io.prompt = 5;
    stg_infer *inf;
    stg_err err;
    if (stg_infer_build(&io, &inf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(inf->ctx, 64);
    expect_roles(inf->g[STG_INFER_PREFILL], "B", "T", "V", 3, 5, 256);
    expect_roles(inf->g[STG_INFER_DECODE], "B", "T", "V", 3, 1, 256);
    stg_infer_mem m;
    assert_int_equal(stg_infer_memory(inf, &m, &err), 0);
    assert_true(m.formula_total > 0); // the closed form reads the vocab role of the prefill graph
    stg_infer_free(inf);
}

// Loader errors: file:line:col and what is wrong.
static void expect_load_error(const char *text, const char *want) {
    stg_graph *g = NULL;
    stg_err err;
    stg_load_opts lo = {STG_PREC_FP32, NULL, 0};
    if (graph_load_string(text, strlen(text), "m.yaml", &lo, &g, &err) == 0) fail_msg("loaded; expected '%s'", want);
    assert_null(g);
    if (!strstr(err.msg, want)) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

#define BODY "inputs: {tokens: [B, T, i32], targets: [B, T, i32]}\n" \
             "graph:\n  - param e [V, d] init=embedding\n  - param w [V, d] init=linear\n" \
             "  - loss = cross_entropy(linear(embedding(tokens, e), w), targets)\nloss: loss\n"

static void test_bad_roles(void **s) {
    (void)s;
    // the good one, for reference
    stg_graph *g;
    stg_err err;
    const char *good = "dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: B, ctx: T, vocab: V}\n" BODY;
    stg_load_opts lo = {STG_PREC_FP32, NULL, 0};
    if (graph_load_string(good, strlen(good), "m.yaml", &lo, &g, &err)) fail_msg("%s", err.msg);
    expect_roles(g, "B", "T", "V", 2, 4, 16);
    graph_free(g);
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: B, seq: T}\n" BODY,
                      "m.yaml:2:19: unknown role 'seq'; expected batch, ctx or vocab");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: B, ctx: S}\n" BODY,
                      "m.yaml:2:24: role ctx is given to 'S', which is not a dim of this model; expected one of B, T, V, d");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: B, batch: T}\n" BODY, "m.yaml:2:19: duplicate key 'batch'");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: B, ctx: B}\n" BODY,
                      "m.yaml:2:24: dim 'B' is given two roles, batch and ctx");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8, ctx: 3}\nroles: {ctx: T}\n" BODY,
                      "m.yaml:2:14: role ctx is given to 'T', but another dim is named 'ctx'");
    expect_load_error("dims: {batch: 2, T: 4, V: 16, d: 8}\nroles: {ctx: batch}\n" BODY,
                      "m.yaml:2:14: dim 'batch' is given two roles, batch and ctx");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: [batch, B]\n" BODY, "m.yaml:2:8: 'roles' is a list; expected a mapping");
    expect_load_error("dims: {B: 2, T: 4, V: 16, d: 8}\nroles: {batch: 2x}\n" BODY, "m.yaml:2:16: '2x' is not a dim name");
    // --set by a role the model does not have
    const char *sets[] = {"vocab=8"};
    stg_load_opts ls = {STG_PREC_FP32, sets, 1};
    const char *novocab = "dims: {B: 2, T: 4, W: 16, d: 8}\nroles: {batch: B, ctx: T}\n" BODY;
    assert_int_equal(graph_load_string(novocab, strlen(novocab), "m.yaml", &ls, &g, &err), -1);
    assert_non_null(strstr(err.msg, "'vocab' is neither a dim nor an option of this model"));
    assert_non_null(strstr(err.msg, "roles: {vocab: DIM}"));
}

// ---- the program ----------------------------------------------------------------------------------

// Runs `stg ARGS` from the source directory; its exit status, and stdout (+ stderr when `both`) in out.
static int stg(char *out, size_t n, bool both, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s%s", STG_SOURCE_DIR, STG_BINARY, args, both ? " 2>&1" : " 2>/dev/null");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// a and b line by line, skipping lines that hold any of `skip` (the model file's path, the dims).
static void same_but(const char *a, const char *b, const char *const *skip, int nskip) {
    int line = 0;
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        line++;
        bool skipped = false;
        for (int i = 0; i < nskip; i++) skipped |= strstr(a, skip[i]) && strstr(a, skip[i]) < a + la;
        if (!skipped && (la != lb || memcmp(a, b, la) != 0)) fail_msg("line %d differs:\n%.*s\n%.*s", line, (int)la, a, (int)lb, b);
        a += la + (ea != NULL);
        b += lb + (eb != NULL);
    }
}

// Drops the measured rates: " tok/s N" to the end of each line.
static void cut_timings(char *s) {
    char *o = s;
    while (*s) {
        char *t = strstr(s, " tok/s "), *e = strchr(s, '\n');
        size_t keep = e ? (size_t)(e - s) : strlen(s);
        if (t && (!e || t < e)) keep = (size_t)(t - s);
        memmove(o, s, keep);
        o += keep;
        s = e ? e + 1 : s + strlen(s);
        if (e) *o++ = '\n';
    }
    *o = 0;
}

static void test_cli_same_reports(void **s) {
    (void)s;
    static char a[1 << 17], b[1 << 17];
    const char *skip[] = {"model file", "dims", "model_path", "\"model\":"};
    const char *modes[] = {"", "--format json", "--mode forward", "--mode sample", "--mode sample --format json --prompt 9",
                           "--set fused_head=on --format md", "--memory-budget 6M"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        assert_int_equal(stg(a, sizeof a, false, "memreport '%s' %s", conv, modes[i]), 0);
        assert_int_equal(stg(b, sizeof b, false, "memreport '%s' %s", renamed, modes[i]), 0);
        assert_true(strlen(a) > 200);
        same_but(a, b, skip, 4);
    }
    // the dims line names them as the model does
    assert_int_equal(stg(b, sizeof b, false, "memreport '%s' --set batch=2 --set T=32", renamed), 0);
    assert_non_null(strstr(b, "V=256 d_model=64 d_ff=176 n_layers=2 n_heads=4 head_dim=16 B=2 T=32"));
    // training: the same losses
    assert_int_equal(stg(a, sizeof a, true, "train '%s' --device cpu --steps 3 --set d_model=32 --set n_layers=1", conv), 0);
    assert_int_equal(stg(b, sizeof b, true, "train '%s' --device cpu --steps 3 --set d_model=32 --set n_layers=1", renamed), 0);
    cut_timings(a);
    cut_timings(b);
    assert_non_null(strstr(a, "step 3/3 loss "));
    same_but(a, b, NULL, 0);
}

static void test_cli_bad_roles(void **s) {
    (void)s;
    char path[320], out[8192];
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    spit(path, "include: lm_btv.yaml\nroles: {batch: B, context: T}\n");
    assert_int_equal(stg(out, sizeof out, true, "check '%s'", path), 2);
    assert_non_null(strstr(out, "bad.yaml:2:19: unknown role 'context'; expected batch, ctx or vocab"));
    spit(path, "include: lm_btv.yaml\nroles: {batch: B, ctx: seq}\n");
    assert_int_equal(stg(out, sizeof out, true, "memreport '%s'", path), 2);
    assert_non_null(strstr(out, "bad.yaml:2:24: role ctx is given to 'seq', which is not a dim of this model"));
    spit(path, "include: lm_btv.yaml\nroles: {batch: B, ctx: T, ctx: T}\n");
    assert_int_equal(stg(out, sizeof out, true, "train '%s' --device cpu --steps 1", path), 2);
    assert_non_null(strstr(out, "bad.yaml:2:27: duplicate key 'ctx'"));
    // the architecture alone declares no roles: a token model without a vocab is refused by train
    assert_int_equal(stg(out, sizeof out, true, "train '%s' --device cpu --steps 1", arch), 2);
    assert_non_null(strstr(out, "the model has no vocab dim: name one `vocab`, or declare it in the model file: roles: {vocab: DIM}"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles_by_name_and_declared), cmocka_unit_test(test_same_step_and_plan),
        cmocka_unit_test(test_same_training), cmocka_unit_test(test_derived_graphs_keep_roles),
        cmocka_unit_test(test_bad_roles), cmocka_unit_test(test_cli_same_reports), cmocka_unit_test(test_cli_bad_roles),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
