// stg eval and stg train --val-full (runtime/eval.h) on the CPU backend: the mean loss over every
// non-overlapping ctx-window equals a reference that runs each window alone (batch 1, fp64) and
// averages, whatever the batch (so the short last batch is exact, neither padded nor repeated);
// --tokens; deterministic output; bits per byte from the detokenized targets; --val-full's logged
// validation loss equals stg eval on the same checkpoint; bad input ends in exit 2.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/rig.h"
#include "tests/testutil.h"

#define STG "'" STG_BINARY "'"
#define TINY "'" STG_SOURCE_DIR "/models/tiny.yaml' --set n_layers=1 --set d_model=32 --set d_ff=64 --set ctx=16"

static char dir[64];       // a temporary directory with the token file and a checkpoint
static char data[128], ckpt[128];

static int setup(void **s) {
    if (tu_mkdtemp(dir, sizeof dir, "eval")) return -1;
    snprintf(data, sizeof data, "%s/docs.bin", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ck/ckpt.safetensors", dir);
    char cmd[2048], out[8192];
    // 2,001 byte tokens: 125 windows of 16 (and none dropped) at --tokens 2001; from the file all of
    // ARCHITECTURE.md
    snprintf(cmd, sizeof cmd,
             STG " tokens '" STG_SOURCE_DIR "/docs/ARCHITECTURE.md' -o %s >/dev/null && " STG " train " TINY
                 " --device cpu --data %s --steps 6 --lr 1e-2 --ckpt %s/ck 2>&1",
             data, data, dir);
    if (tu_run(cmd, out, sizeof out) != 0) {
        fprintf(stderr, "%s\n%s\n", cmd, out);
        return -1;
    }
    return 0;
}

static int teardown(void **s) { return tu_rmtree(dir); }

// The mean over windows of the first n tokens, each window alone (batch 1), in fp64.
static double reference(int64_t n) {
    const char *sets[] = {"n_layers=1", "d_model=32", "d_ff=64", "ctx=16", "batch=1"};
    stg_step_opts o = rig_opts(MODEL("tiny.yaml"), STG_PREC_FP64, sets, 5);
    o.train = false;
    rig r;
    rig_open(&r, rig_step(&o), &(rig_cfg){.init_seed = 0, .feed_seed = -1});
    stg_err err;
    if (rt_params_load(r.e, ckpt, &err)) fail_msg("%s", err.msg);
    rt_tokens *tk;
    if (rt_tokens_open(data, 256, &tk, &err)) fail_msg("%s", err.msg);
    if (n <= 0) n = rt_tokens_count(tk);
    int tok = graph_find_tensor(r.g, "tokens"), tgt = graph_find_tensor(r.g, "targets");
    double sum = 0;
    int64_t windows = (n - 1) / 16;
    for (int64_t w = 0; w < windows; w++) {
        int32_t a[16], b[16];
        for (int t = 0; t < 16; t++) {
            a[t] = (int32_t)rt_tokens_at(tk, w * 16 + t);
            b[t] = (int32_t)rt_tokens_at(tk, w * 16 + t + 1);
        }
        rt_exec_results res;
        if (rt_exec_write(r.e, tok, a, sizeof a, &err) || rt_exec_write(r.e, tgt, b, sizeof b, &err) ||
            rt_exec_run_results(r.e, RT_PHASE_FORWARD, &res, &err))
            fail_msg("%s", err.msg);
        sum += res.loss;
    }
    rt_tokens_free(tk);
    rig_close(&r);
    return sum / (double)windows;
}

// A field of stg eval --json's object.
static double field(const char *json, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    if (!p) fail_msg("no %s in %s", key, json);
    return strtod(p + strlen(k), NULL);
}

static double eval_json(const char *opts, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, STG " eval " TINY " --device cpu --init %s --data %s --json %s 2>&1", ckpt, data, opts);
    if (tu_run(cmd, out, n) != 0) fail_msg("%s\n%s", cmd, out);
    return field(out, "loss");
}

static void test_reference(void **s) {
    double ref = reference(0);
    char out[4096];
    const char *batches[] = {"--set batch=8 --precision fp64", "--set batch=1 --precision fp64", "--set batch=7 --precision fp64",
                             "--set batch=500 --precision fp64"};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
        double l = eval_json(batches[i], out, sizeof out);
        print_message("%-35s loss %.15f (reference %.15f) windows %g dropped %g\n", batches[i], l, ref, field(out, "windows"), field(out, "dropped"));
        assert_true(fabs(l - ref) <= 1e-12 * ref);
    }
    double l32 = eval_json("", out, sizeof out);
    assert_true(fabs(l32 - ref) <= 1e-6 * ref);
    // --tokens: the first 2001 tokens are exactly 125 windows of 16
    double ref2 = reference(2001);
    double l2 = eval_json("--tokens 2001 --set batch=8 --precision fp64", out, sizeof out);
    assert_true(fabs(l2 - ref2) <= 1e-12 * ref2);
    assert_int_equal((int)field(out, "windows"), 125);
    assert_int_equal((int)field(out, "dropped"), 0);
    assert_int_equal((int)field(out, "targets"), 2000);
    l2 = eval_json("--tokens 2016 --set batch=8 --precision fp64", out, sizeof out); // 15 targets over: not scored
    assert_true(fabs(l2 - ref2) <= 1e-12 * ref2);
    assert_int_equal((int)field(out, "dropped"), 15);
    assert_true(fabs(field(out, "perplexity") - exp(l2)) <= 1e-6 * exp(l2));
}

static void test_deterministic(void **s) {
    char cmd[2048], a[4096], b[4096];
    // 3000 tokens: 187 windows of 16 (23 batches of 8 and one of 3), the last 7 targets not scored
    snprintf(cmd, sizeof cmd, STG " eval " TINY " --device cpu --init %s --data %s --tokens 3000 2>&1", ckpt, data);
    assert_int_equal(tu_run(cmd, a, sizeof a), 0);
    assert_int_equal(tu_run(cmd, b, sizeof b), 0);
    assert_string_equal(a, b);
    if (!strstr(a, "3000 tokens, 187 windows of 16 (2992 targets) in 23 batches of 8 and one of 3; the last 7 targets (less than a window) not scored"))
        fail_msg("%s", a);
}

// Bits per byte: a BPE tokenizer's ids, and the bytes of exactly the scored targets.
static void test_bits_per_byte(void **s) {
    char cmd[4096], out[8192], tokp[160], bin[160];
    snprintf(tokp, sizeof tokp, "%s/tok.json", dir);
    snprintf(bin, sizeof bin, "%s/bpe.bin", dir);
    snprintf(cmd, sizeof cmd,
             STG " tokenizer train '" STG_SOURCE_DIR "/docs/ARCHITECTURE.md' --vocab 300 -o %s >/dev/null 2>&1 && " STG
                 " tokenize --tokenizer %s '" STG_SOURCE_DIR "/docs/ARCHITECTURE.md' -o %s >/dev/null 2>&1 && " STG " train " TINY
                 " --device cpu --tokenizer %s --data %s --steps 3 --ckpt %s/ck300 >/dev/null 2>&1 && " STG " eval " TINY
                 " --device cpu --tokenizer %s --init %s/ck300/ckpt.safetensors --data %s --json 2>&1",
             tokp, tokp, bin, tokp, bin, dir, tokp, dir, bin);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    rt_tok *t;
    rt_tokens *tk;
    stg_err err;
    if (rt_tok_load(tokp, &t, &err) || rt_tokens_open(bin, 300, &tk, &err)) fail_msg("%s", err.msg);
    int64_t targets = (int64_t)field(out, "targets");
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)targets);
    assert_non_null(ids);
    for (int64_t i = 0; i < targets; i++) ids[i] = (uint32_t)rt_tokens_at(tk, i + 1);
    uint8_t *text = NULL;
    size_t len = 0, cap = 0;
    if (rt_tok_decode(t, ids, (size_t)targets, &text, &len, &cap, &err)) fail_msg("%s", err.msg);
    print_message("%lld targets, %zu bytes; %s", (long long)targets, len, out);
    assert_int_equal((int64_t)field(out, "bytes"), (int64_t)len);
    assert_true(len > (size_t)targets); // merges: more than a byte per token
    double want = field(out, "loss") * (double)targets / (log(2.0) * (double)len);
    assert_true(fabs(field(out, "bits_per_byte") - want) <= 1e-6 * want);
    free(text);
    free(ids);
    rt_tokens_free(tk);
    rt_tok_free(t);
}

// The validation loss stg train --val-full logs at its last step is stg eval's on the checkpoint.
static void test_val_full(void **s) {
    char cmd[4096], out[8192], log[160];
    snprintf(log, sizeof log, "%s/vf.jsonl", dir);
    snprintf(cmd, sizeof cmd,
             STG " train " TINY " --device cpu --data %s --val %s --val-full --val-every 4 --steps 8 --lr 1e-2 --ckpt %s/ckv --log %s 2>&1",
             data, data, dir, log);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    assert_non_null(strstr(out, "validation: exact, every window of"));
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[1024];
    double last = NAN;
    int vals = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"val_loss\": ");
        if (p) last = strtod(p + 12, NULL), vals++;
    }
    fclose(f);
    assert_int_equal(vals, 2);
    snprintf(cmd, sizeof cmd, STG " eval " TINY " --device cpu --init %s/ckv/ckpt.safetensors --data %s --json 2>&1", dir, data);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    double ev = field(out, "loss");
    print_message("--val-full at step 8: %.9g; stg eval on its checkpoint: %.9g\n", last, ev);
    assert_true(fabs(last - ev) <= 1e-7 * ev);
}

// Bad input: a message, exit 2.
static void test_refusals(void **s) {
    char shortf[160], badf[160];
    snprintf(shortf, sizeof shortf, "%s/short.bin", dir);
    snprintf(badf, sizeof badf, "%s/bad.bin", dir);
    FILE *f = fopen(shortf, "wb");
    uint16_t v[16] = {1, 2, 3};
    assert_int_equal(fwrite(v, 2, 16, f), 16); // 16 tokens: no window of 16 + 1
    fclose(f);
    f = fopen(badf, "wb");
    v[5] = 300; // outside vocab 256
    assert_int_equal(fwrite(v, 2, 16, f), 16);
    fclose(f);
    struct {
        const char *args, *want;
    } rows[] = {
        {"--data DATA", "--init CKPT (the parameters) is needed"},
        {"--init CKPT", "--data FILE (the tokens) is needed"},
        {"--init CKPT --data /nonexistent.bin", "/nonexistent.bin"},
        {"--init /nonexistent.safetensors --data DATA", "/nonexistent.safetensors"},
        {"--init CKPT --data DATA --tokens 1", "--tokens '1' is not an integer"},
        {"--init CKPT --data SHORT", "16 tokens hold no whole window: one needs ctx + 1 = 17"},
        {"--init CKPT --data DATA --tokens 16", "16 tokens hold no whole window"},
        {"--init CKPT --data BAD", "value 300, outside the vocabulary"},
        {"--init CKPT --data DATA --set d_model=48", "'tok_emb' has shape [256, 32]; the model's is [256, 48]"},
        {"--init CKPT --data DATA --optimizer-in-backward", "--optimizer-in-backward is for training steps"},
        {"--init CKPT --data DATA --bogus", "unexpected argument '--bogus'"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char args[1024] = "", cmd[2048], out[8192];
        const char *p = rows[i].args;
        while (*p) { // the placeholders CKPT, DATA, SHORT, BAD by their paths
            const char *names[] = {"CKPT", "DATA", "SHORT", "BAD"}, *paths[] = {ckpt, data, shortf, badf};
            int k = 0;
            while (k < 4 && strncmp(p, names[k], strlen(names[k])) != 0) k++;
            size_t at = strlen(args);
            if (k < 4) {
                snprintf(args + at, sizeof args - at, "%s", paths[k]);
                p += strlen(names[k]);
            } else {
                snprintf(args + at, sizeof args - at, "%c", *p);
                p++;
            }
        }
        snprintf(cmd, sizeof cmd, STG " eval " TINY " --device cpu %s 2>&1", args);
        int rc = tu_run(cmd, out, sizeof out);
        if (rc != 2 || !strstr(out, rows[i].want)) fail_msg("%s: exit %d (want 2), '%s' not in\n%s", cmd, rc, rows[i].want, out);
    }
    // train --val-full without --val
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, STG " train " TINY " --device cpu --val-full --steps 2 2>&1");
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--val-full scores every window of a validation file: give --val FILE"));
    snprintf(cmd, sizeof cmd, STG " train " TINY " --device cpu --val %s --val-full --steps 2 2>&1", shortf);
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "hold no whole window"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference), cmocka_unit_test(test_deterministic), cmocka_unit_test(test_bits_per_byte),
        cmocka_unit_test(test_val_full),  cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
