// Replays every saved fuzz finding (tests/fuzz/regressions/<target>/*) through the same entry
// points as the libFuzzer targets (tests/fuzz/fuzz_entry.h), and checks the limits that keep
// hostile input cheap, each with its message. Runs under the sanitizer build of the CPU tests.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/fuzz/fuzz_entry.h"
#include "tests/testutil.h"

typedef int (*fuzz_fn)(const uint8_t *, size_t);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Every saved finding of target: each was a crash or a timeout (> 1 s under the fuzzer's
// instrumentation); now it ends in an error message or a result, cheaply.
static int replay_dir(const char *target, fuzz_fn fn) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/%s", STG_SOURCE_DIR, target);
    return tu_replay(dir, fn, 5.0);
}

static void test_replay(void **state) {
    (void)state;
    int n = replay_dir("model", stg_fuzz_model) + replay_dir("expr", stg_fuzz_expr) + replay_dir("npy", stg_fuzz_npy) +
            replay_dir("safetensors", stg_fuzz_safetensors) + replay_dir("tokens", stg_fuzz_tokens);
    print_message("replayed %d regression inputs\n", n);
    assert_true(n >= 1);
}

// The seed corpora go through the same entry points (a quick check that the targets build and
// accept their seeds).
static void test_seeds(void **state) {
    (void)state;
    char dir[4096];
    const char *t[] = {"model", "expr", "npy", "safetensors", "tokens"};
    fuzz_fn fn[] = {stg_fuzz_model, stg_fuzz_expr, stg_fuzz_npy, stg_fuzz_safetensors, stg_fuzz_tokens};
    for (int k = 0; k < 5; k++) {
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", STG_SOURCE_DIR, t[k]);
        if (tu_replay(dir, fn[k], 0) == 0) fail_msg("no seeds in %s", dir);
    }
}

// ---- limits ---------------------------------------------------------------------------------------

// Loads text as models/limits.yaml and expects failure with `want` in the message.
static void load_fails(const char *text, const char *const *sets, int nsets, const char *want) {
    stg_load_opts o = {STG_PREC_FP32, sets, nsets};
    stg_graph *g = NULL;
    stg_err err;
    err.msg[0] = 0;
    double t0 = now();
    int r = graph_load_string(text, strlen(text), STG_SOURCE_DIR "/models/limits.yaml", &o, &g, &err);
    double dt = now() - t0;
    if (r == 0) {
        graph_free(g);
        fail_msg("expected the load to fail with '%s'", want);
    }
    if (!strstr(err.msg, want)) fail_msg("message '%s' does not contain '%s'", err.msg, want);
    if (dt > 5.0) fail_msg("rejecting took %.1f s", dt);
}

static void test_limit_repeat_count(void **state) {
    (void)state;
    load_fails("inputs: {x: [2, f32]}\ngraph:\n  - repeat: 100001\n    do: [y = relu(x)]\nloss: y\n", NULL, 0,
               "repeat count 100001 is out of range; expected 1 to 100000");
}

static void test_limit_ops(void **state) {
    (void)state;
    const char *sets[] = {"n_layers=5000", "d_model=8", "n_heads=2", "d_ff=8", "vocab=16", "ctx=4", "batch=1"};
    load_fails("include: cs336/lm.yaml\n", sets, 7, "the forward graph has more than 30000 ops");
}

static void test_limit_statements(void **state) {
    (void)state;
    // No op at all: only rebinding, 10^10 times.
    load_fails("dims: {a: 100000}\ninputs: {x: [2, f32]}\ngraph:\n  - repeat: a\n    do:\n      - repeat: a\n"
               "        do: [y = x]\nloss: y\n",
               NULL, 0, "expands to more than 300000 statements");
}

static void test_limit_call_nesting(void **state) {
    (void)state;
    char text[4096];
    size_t k = (size_t)snprintf(text, sizeof text, "inputs: {x: [2, f32]}\ngraph:\n  - y = ");
    for (int i = 0; i < 70; i++) k += (size_t)snprintf(text + k, sizeof text - k, "relu(");
    k += (size_t)snprintf(text + k, sizeof text - k, "x");
    for (int i = 0; i < 70; i++) k += (size_t)snprintf(text + k, sizeof text - k, ")");
    snprintf(text + k, sizeof text - k, "\nloss: y\n");
    load_fails(text, NULL, 0, "op calls nest more than 64 deep");
}

static void test_limit_expr_nesting(void **state) {
    (void)state;
    char e[512];
    size_t k = 0;
    for (int i = 0; i < 100; i++) e[k++] = '(';
    e[k++] = '1';
    for (int i = 0; i < 100; i++) e[k++] = ')';
    stg_loc loc = {"x", 1, 1};
    stg_err err;
    int64_t v;
    assert_int_equal(expr_eval_int(e, k, NULL, NULL, loc, &v, &err), -1);
    assert_non_null(strstr(err.msg, "expression nested too deeply"));
    k = 0;
    for (int i = 0; i < 200; i++) e[k++] = '-';
    e[k++] = '1';
    assert_int_equal(expr_eval_int(e, k, NULL, NULL, loc, &v, &err), -1);
    assert_non_null(strstr(err.msg, "expression nested too deeply"));
}

static void test_limit_dim_chain(void **state) {
    (void)state;
    char *text = malloc(1 << 16);
    size_t k = (size_t)snprintf(text, 1 << 16, "dims:\n");
    for (int i = 0; i < 150; i++) k += (size_t)snprintf(text + k, (1 << 16) - k, "  d%d: d%d\n", i, i + 1);
    snprintf(text + k, (1 << 16) - k, "  d150: 4\ninputs: {x: [d0, f32]}\ngraph: [y = relu(x)]\nloss: y\n");
    load_fails(text, NULL, 0, "is defined through a chain of more than 100 other dims");
    free(text);
}

static void test_limit_dim_count(void **state) {
    (void)state;
    char *text = malloc(1 << 20);
    size_t k = (size_t)snprintf(text, 1 << 20, "dims:\n");
    for (int i = 0; i < 1001; i++) k += (size_t)snprintf(text + k, (1 << 20) - k, "  d%d: 1\n", i);
    snprintf(text + k, (1 << 20) - k, "inputs: {x: [2, f32]}\ngraph: [y = relu(x)]\nloss: y\n");
    load_fails(text, NULL, 0, "more than 1000 dims");
    free(text);
}

static void test_limit_shape_product(void **state) {
    (void)state;
    // Each size fine, the product past 2^36 (and, in the last, past int64).
    load_fails("inputs: {x: [1048576, 1048576, f32]}\ngraph: [y = relu(x)]\nloss: y\n", NULL, 0,
               "would have more than 2^36");
    load_fails("inputs: {x: [2, f32]}\ngraph:\n  - param w [4294967296, 4294967296, 4294967296] init=ones\n"
               "  - y = relu(x)\nloss: y\n",
               NULL, 0, "would have more than 2^36");
    load_fails("inputs: {x: [2, f32]}\ngraph: ['y = reshape(x, shape=[4294967296, 4294967296, -1])']\nloss: y\n", NULL, 0,
               "the shape has more than 2^36 elements");
    // The graph-level check, for any caller of graph_add_tensor.
    stg_err err;
    stg_graph *g = graph_new(STG_PREC_FP32, &err);
    assert_non_null(g);
    int64_t big[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    stg_loc loc = {NULL, 0, 0};
    assert_int_equal(graph_add_tensor(g, "big", 3, big, STG_F32, STG_CLASS_INPUT, loc, &err), -1);
    assert_non_null(strstr(err.msg, "more than 2^36"));
    int64_t ok[2] = {INT64_C(1) << 18, INT64_C(1) << 18};
    assert_true(graph_add_tensor(g, "ok", 2, ok, STG_F32, STG_CLASS_INPUT, loc, &err) >= 0);
    graph_free(g);
}

static void test_limit_include_special_file(void **state) {
    (void)state;
    load_fails("include: /dev/zero\n", NULL, 0, "not a regular file");
}

static void test_limit_model_size(void **state) {
    (void)state;
    size_t n = (16u << 20) + 1;
    char *text = malloc(n + 1);
    memset(text, '#', n);
    text[n] = 0;
    load_fails(text, NULL, 0, "larger than 16 MiB");
    free(text);
}

static void test_limit_npy_header(void **state) {
    (void)state;
    // A version 2.0 header of 1,000,001 bytes, all there: refused before it is scanned.
    size_t n = 12 + 1000001 + 16;
    unsigned char *h = calloc(n, 1);
    assert_non_null(h);
    memcpy(h, "\x93NUMPY\x02\x00", 8);
    h[8] = 0x41, h[9] = 0x42, h[10] = 0x0f, h[11] = 0x00;
    memset(h + 12, ' ', 1000001);
    rt_npy_info info;
    stg_err err;
    assert_int_equal(rt_npy_parse(h, n, &info, &err), -1);
    free(h);
    assert_non_null(strstr(err.msg, "exceeds the limit of 1000000 bytes"));
}

static void test_limit_safetensors_header(void **state) {
    (void)state;
    unsigned char h[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; // 100,000,001
    rt_st *st = NULL;
    stg_err err;
    assert_int_equal(rt_st_parse(h, sizeof h, &st, &err), -1);
    assert_non_null(strstr(err.msg, "exceeds the limit of 100000000 bytes"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_limit_repeat_count),
        cmocka_unit_test(test_limit_ops),
        cmocka_unit_test(test_limit_statements),
        cmocka_unit_test(test_limit_call_nesting),
        cmocka_unit_test(test_limit_expr_nesting),
        cmocka_unit_test(test_limit_dim_chain),
        cmocka_unit_test(test_limit_dim_count),
        cmocka_unit_test(test_limit_shape_product),
        cmocka_unit_test(test_limit_include_special_file),
        cmocka_unit_test(test_limit_model_size),
        cmocka_unit_test(test_limit_npy_header),
        cmocka_unit_test(test_limit_safetensors_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
