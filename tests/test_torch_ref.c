// `stg step` at --precision fp64 on the CPU against the plain-PyTorch float64 references of the model
// families (tools/ref/gpt2_ref.py, tools/ref/llama3_ref.py): the loss, the logits (plain head) and
// every gradient, by parameter name, to relative error 1e-10 (max |stg - ref| / max |ref| per tensor).
//   GPT-2: the 124M shape (d_model 768, 12 heads, vocab 50257, 1024 positions) with 2 layers and
//          ctx 37; plain and fused head.
//   Llama 3: grouped-query attention 4:1 with head dim 64 and 8:1 with head dim 128, ctx 37 and 71
//          (not multiples of 64), fused and written-out attention, tied and untied heads, plain and
//          fused head; small widths.
// The parameters come from the reference's own init (N(0, 0.02) and so on, written as F64), with the
// norm gains and biases perturbed so that every term is exercised.
//
// Needs a Python with PyTorch (python3 or /usr/bin/python3, the first that imports torch); exits 77
// (skipped) without one.
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

static char dir[256];
static const char *python;

static int setup(void **s) { return tu_mkdtemp(dir, sizeof dir, "test_torch_ref"); }
static int teardown(void **s) { return tu_rmtree(dir); }

static char out[1 << 16];

// Runs a shell command (from the source directory); fails the test with its output unless it exits 0.
static void must(const char *fmt, ...) {
    char c[4096], cmd[4400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c, sizeof c, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s 2>&1", STG_SOURCE_DIR, c);
    int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s\n%s", rc, c, out);
}

typedef struct {
    const char *what;
    const char *ref;      // tools/ref/<ref>_ref.py
    const char *model;    // models/<model>.yaml
    const char *ref_dims; // --dims for the reference
    const char *sets;     // stg's --set options (the same dims)
    const char *shape;    // B,S
    bool fused;           // fused_head=on: no logits in the dump
} ref_case;

// One comparison: parameters and a batch from the reference, a step of stg, the reference's check.
static void compare(const ref_case *c, int i) {
    char p[400], b[400], d[400];
    snprintf(p, sizeof p, "%s/p%d.safetensors", dir, i);
    snprintf(b, sizeof b, "%s/b%d.npy", dir, i);
    snprintf(d, sizeof d, "%s/d%d.safetensors", dir, i);
    int B = 0, S = 0;
    assert_int_equal(sscanf(c->shape, "%d,%d", &B, &S), 2);
    must("'%s' tools/ref/%s_ref.py --dims %s --make-params '%s' --make-batch '%s' --batch-shape %s --perturb 0.1 --seed %d", python,
         c->ref, c->ref_dims, p, b, c->shape, i);
    must("'%s' step models/%s.yaml --device cpu --precision fp64 %s --set batch=%d --set ctx=%d --set fused_head=%s --init '%s' "
         "--batch '%s' --dump '%s'",
         STG_BINARY, c->model, c->sets, B, S, c->fused ? "on" : "off", p, b, d);
    must("'%s' tools/ref/%s_ref.py --dims %s --params '%s' --batch '%s' --dump '%s' --tol 1e-10%s", python, c->ref, c->ref_dims, p, b,
         d, c->fused ? " --fused-head" : "");
    const char *w = strstr(out, "worst relative error");
    print_message("%s: %s", c->what, w ? w : out);
}

#define GPT2_DIMS "n_layers=2"
#define GPT2_SETS "--set n_layers=2"
#define L41_DIMS "vocab=300,d_model=512,n_layers=2,n_heads=8,n_kv_heads=2,d_ff=256,tie=1"
#define L41_SETS "--set vocab=300 --set d_model=512 --set n_layers=2 --set n_heads=8 --set n_kv_heads=2 --set d_ff=256 --set tie_embeddings=on"
#define L81_DIMS "vocab=300,d_model=1024,n_layers=2,n_heads=8,n_kv_heads=1,d_ff=256,tie=0"
#define L81_SETS "--set vocab=300 --set d_model=1024 --set n_layers=2 --set n_heads=8 --set n_kv_heads=1 --set d_ff=256 --set tie_embeddings=off"

static void test_gpt2(void **state) {
    static const ref_case c[] = {
        {"gpt2 124M shape, 2 layers, ctx 37, plain head", "gpt2", "gpt2/124M", GPT2_DIMS, GPT2_SETS, "2,37", false},
        {"gpt2 124M shape, 2 layers, ctx 37, fused head, written-out attention", "gpt2", "gpt2/124M", GPT2_DIMS,
         GPT2_SETS " --attention naive", "2,37", true},
    };
    for (int i = 0; i < (int)(sizeof c / sizeof *c); i++) compare(&c[i], i);
}

static void test_llama3(void **state) {
    static const ref_case c[] = {
        {"llama3 GQA 4:1, head dim 64, ctx 37, tied, flash, plain head", "llama3", "llama3/1B", L41_DIMS, L41_SETS, "2,37", false},
        {"llama3 GQA 4:1, head dim 64, ctx 37, tied, naive, fused head", "llama3", "llama3/1B", L41_DIMS, L41_SETS " --attention naive",
         "2,37", true},
        {"llama3 GQA 8:1, head dim 128, ctx 71, untied, flash, fused head", "llama3", "llama3/8B", L81_DIMS, L81_SETS, "2,71", true},
        {"llama3 GQA 8:1, head dim 128, ctx 71, untied, naive, plain head", "llama3", "llama3/8B", L81_DIMS,
         L81_SETS " --attention naive", "2,71", false},
    };
    for (int i = 0; i < (int)(sizeof c / sizeof *c); i++) compare(&c[i], 10 + i);
}

// The timed peer of issue 24's Llama row (tools/ref/llama3_peer.py) is the same function as the
// reference: its --check compares its module with llama3_ref.py in float64 (exit 1 past 1e-10).
static void test_llama3_peer(void **state) {
    (void)state;
    must("'%s' tools/ref/llama3_peer.py --check", python);
}

int main(void) {
    static const char *const cand[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cand / sizeof *cand && !python; i++) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' 2>&1", cand[i]);
        if (tu_run(cmd, out, sizeof out) == 0) python = cand[i];
    }
    if (!python) {
        printf("test_torch_ref: skipped: no python3 with torch and numpy\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama3_peer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
