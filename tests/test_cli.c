// The stg program as users meet it: bad command lines, bad model files, outputs that must not be
// clobbered on failure, and the happy paths of check, graph, memreport, tokens, train and step.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

static char dir[256];

static int setup(void **s) { return tu_mkdtemp(dir, sizeof dir, "test_cli"); }
static int teardown(void **s) { return tu_rmtree(dir); }

static void expect_fail(const char *needle, const char *fmt, const char *arg) {
    char out[16384];
    int rc = tu_stg(out, sizeof out, fmt, arg);
    if (rc == 0) fail_msg("stg %s succeeded; expected failure with '%s'", arg, needle);
    if (rc > 2) fail_msg("stg exited %d (a crash?) on: %s\n%s", rc, arg, out);
    if (!strstr(out, needle)) fail_msg("stg output\n%s\nlacks '%s'", out, needle);
}

// stg CMD must succeed, and its output hold `want` (present) or not hold it.
static void expect_output(const char *cmd, const char *want, bool present) {
    char out[16384];
    int rc = tu_stg(out, sizeof out, "%s", cmd);
    if (rc != 0) fail_msg("stg %s exited %d:\n%s", cmd, rc, out);
    if ((strstr(out, want) != NULL) != present) fail_msg("stg %s: output\n%s\n%s '%s'", cmd, out, present ? "lacks" : "holds", want);
}

static void test_bad_command_lines(void **s) {
    expect_fail("unknown command 'frob'", "%s", "frob");
    expect_fail("usage: stg COMMAND", "%s", "");
    expect_fail("unknown option '--bogus'", "check models/tiny.yaml %s", "--bogus");
    expect_fail("--attention 'fast': expected naive or flash", "check models/tiny.yaml --attention %s", "fast");
    expect_fail("--precision 'fp8'", "check models/tiny.yaml --precision %s", "fp8");
    expect_fail("--set needs a value", "check models/tiny.yaml %s", "--set");
    expect_fail("'ctx' is not name=value", "check models/tiny.yaml --set %s", "ctx");
    expect_fail("--steps 'ten' is not an integer", "train models/tiny.yaml --device cpu --steps %s", "ten");
    expect_fail("--lr '-1' is not a number in", "train models/tiny.yaml --device cpu --lr %s", "-1");
    expect_fail("--format 'pdf'", "memreport models/tiny.yaml --format %s", "pdf");
    expect_fail("--device 'tpu'", "train models/tiny.yaml --device %s", "tpu");
    expect_fail("--gemm-tune 'fast': expected on or off", "train models/tiny.yaml --device cpu --gemm-tune %s", "fast");
    expect_fail("--gemm-tune '1': expected on or off", "bench models/tiny.yaml --device cpu --gemm-tune %s", "1");
    expect_fail("--gemm-tune 'maybe': expected on or off", "sample models/tiny.yaml --init random --prompt hi --device cpu --gemm-tune %s", "maybe");
    expect_fail("--group-matmuls 'yes': expected on or off", "memreport models/tiny.yaml --group-matmuls %s", "yes");
    expect_fail("--grad-dtype 'fp16': expected fp32 or bf16", "memreport models/tiny.yaml --precision bf16 --grad-dtype %s", "fp16");
    expect_fail("--grad-dtype bf16 needs --precision bf16", "memreport models/tiny.yaml --grad-dtype %s", "bf16");
    expect_fail("--grad-dtype bf16 cannot combine with gradient accumulation",
                "memreport models/tiny.yaml --precision bf16 --grad-accum 2 --grad-dtype %s", "bf16");
    expect_fail("--group-matmuls needs a value", "train models/tiny.yaml --device cpu --group-matmuls%s", "");
    expect_fail("cannot open the model file", "check %s", "/nonexistent.yaml");
    expect_fail("bf16 needs --device cuda", "train models/tiny.yaml --device cpu --precision %s", "bf16");
    expect_fail("usage: stg step", "step models/tiny.yaml %s", "--device cpu");
    expect_fail("--optimizer-in-backward updates each parameter as soon as its local gradient is final",
                "memreport models/tiny.yaml --world 2 %s", "--optimizer-in-backward");
    expect_fail("stg step dumps the gradients", "step models/tiny.yaml --init a --batch b --dump c %s", "--optimizer-in-backward");
}

static void test_bad_model_file(void **s) {
    char path[400], out[8192];
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("dims: {a: 2}\ninputs: {tokens: [a, i32], targets: [a, i32]}\ngraph:\n  - x = nosuchop(tokens)\nloss: x\n", f);
    assert_int_equal(fclose(f), 0);
    int rc = tu_stg(out, sizeof out, "check %s", path);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "bad.yaml:4:9: unknown op 'nosuchop'"));
}

// A failed memreport leaves an existing -o file as it was; a good one replaces it.
static void test_output_not_clobbered(void **s) {
    char path[400], out[8192], cmd[600];
    snprintf(path, sizeof path, "%s/report.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("precious\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "memreport models/tiny.yaml --set ctx=0 -o %s", path);
    assert_int_not_equal(tu_stg(out, sizeof out, "%s", cmd), 0);
    f = fopen(path, "r");
    char buf[64] = {0};
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "precious\n");
    snprintf(cmd, sizeof cmd, "memreport models/tiny.yaml --format json -o %s", path);
    assert_int_equal(tu_stg(out, sizeof out, "%s", cmd), 0);
    f = fopen(path, "r");
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_int_equal(buf[0], '{');
}

static void test_happy_paths(void **s) {
    char out[65536], cmd[1200];
    assert_int_equal(tu_stg(out, sizeof out, "check models/cs336/small.yaml"), 0);
    assert_non_null(strstr(out, "parameters: 111 tensors, 128625408 elements"));
    snprintf(cmd, sizeof cmd, "graph models/toy.yaml --dot -o %s/toy.dot", dir);
    assert_int_equal(tu_stg(out, sizeof out, "%s", cmd), 0);
    assert_int_equal(tu_stg(out, sizeof out, "memreport models/cs336/2.7B.yaml --format svg"), 0);
    assert_non_null(strstr(out, "<svg"));
    assert_non_null(strstr(out, "backward"));
    // tokens from a text, then training on them with a checkpoint, then one dumped step
    snprintf(cmd, sizeof cmd, "tokens README.md -o %s/readme.bin", dir);
    assert_int_equal(tu_stg(out, sizeof out, "%s", cmd), 0);
    snprintf(cmd, sizeof cmd,
             "train models/tiny.yaml --device cpu --data %s/readme.bin --steps 3 --set n_layers=1 --ckpt %s/ck --log %s/log.jsonl",
             dir, dir, dir);
    if (tu_stg(out, sizeof out, "%s", cmd) != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "done: 3 steps"));
    snprintf(cmd, sizeof cmd, "%s/log.jsonl", dir);
    FILE *f = fopen(cmd, "r");
    assert_non_null(f);
    int lines = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        assert_non_null(strstr(line, "\"loss\": "));
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 3);
    // a batch file: int32 [2, 8, 64] written as .npy by hand (header padded to 128 bytes)
    snprintf(cmd, sizeof cmd, "%s/batch.npy", dir);
    f = fopen(cmd, "wb");
    assert_non_null(f);
    char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 8, 64), }";
    memcpy(hdr, "\x93NUMPY\x01\x00\x76\x00", 10); // header length 118: the whole header is 128 bytes
    memcpy(hdr + 10, dict, strlen(dict));
    hdr[127] = '\n';
    fwrite(hdr, 1, sizeof hdr, f);
    for (int i = 0; i < 2 * 8 * 64; i++) {
        int32_t v = (i * 37) % 256;
        fwrite(&v, 4, 1, f);
    }
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "step models/tiny.yaml --set n_layers=1 --device cpu --init %s/ck/ckpt.safetensors --batch %s/batch.npy --dump %s/out.safetensors",
             dir, dir, dir);
    if (tu_stg(out, sizeof out, "%s", cmd) != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "wrote the loss, the logits and 12 gradients"));
    // the same step against a batch of the wrong shape
    snprintf(cmd, sizeof cmd, "step models/tiny.yaml --device cpu --set ctx=32 --init %s/ck/ckpt.safetensors --batch %s/batch.npy --dump %s/o2.safetensors",
             dir, dir, dir);
    assert_int_not_equal(tu_stg(out, sizeof out, "%s", cmd), 0);
}

// stg bench --profile on the CPU (profiling marks are host clock readings there): with one stream
// the critical path is every op, its length the profile's total, and each by-name row is all on it.
static void test_bench_profile(void **s) {
    char out[65536];
    int rc = tu_stg(out, sizeof out, "bench models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 --profile --warmup 0 --iters 1");
    if (rc != 0) fail_msg("%s", out);
    double total = -1, len = -1, off = -1;
    int nops = -1, non = -1, nst = -1, rows = 0;
    const char *p = strstr(out, "  profile   "), *c = strstr(out, "  critical  ");
    assert_non_null(p);
    assert_non_null(c);
    assert_int_equal(sscanf(p, "  profile %lf ms of device time in %d ops", &total, &nops), 2);
    assert_int_equal(sscanf(c, "  critical %lf ms in %d ops: the longest chain of ops on the %d stream", &len, &non, &nst), 3);
    const char *o = strstr(c, "; ");
    assert_non_null(o);
    assert_int_equal(sscanf(o, "; %lf ms of device time lies off it", &off), 1);
    assert_int_equal(nst, 1);
    assert_int_equal(non, nops);
    assert_true(fabs(len - total) < 2e-3 && off == 0.0 && total > 0);
    const char *t = strstr(c, "by op name");
    assert_non_null(t);
    for (const char *line = strchr(t, '\n') + 1; *line == ' '; line = strchr(line, '\n') + 1) {
        double ms, on;
        if (sscanf(line, " %lf ms %lf", &ms, &on) != 2) break;
        assert_true(on == ms);
        rows++;
    }
    assert_true(rows >= 10);
    // with one stream, an op name taking no time shortens the chain by its whole time
    const char *wi = strstr(c, "  what if   ");
    assert_non_null(wi);
    int nwi = 0;
    for (const char *line = strchr(wi, '\n') + 1; *line == ' '; line = strchr(line, '\n') + 1) {
        double less, own;
        if (sscanf(line, " %lf ms shorter without %lf ms of", &less, &own) != 2) break;
        assert_true(fabs(less - own) < 2e-3 && own > 0);
        nwi++;
    }
    assert_int_equal(nwi, 10);
}

// stg bench on the CPU: several --what values in one process, one JSON line each, with every
// iteration's time (warm-up ones first) in times_ms.
// The smallest peak `stg memreport ARGS --memory-budget 1000` reports (it cannot fit), in bytes.
static long long smallest_peak(const char *args) {
    char out[16384];
    int rc = tu_stg(out, sizeof out, "memreport models/tiny.yaml --precision bf16 --memory-budget 1000 %s", args);
    assert_int_not_equal(rc, 0);
    const char *at = strstr(out, "the smallest planned peak the search found is");
    if (!at) fail_msg("%s", out);
    const char *paren = strchr(at, '(');
    assert_non_null(paren);
    return strtoll(paren + 1, NULL, 10);
}

// A budget the search cannot fit says which lever left off would fit it: --grad-dtype bf16 between the
// two smallest peaks; nothing below both.
static void test_budget_levers(void **s) {
    long long f32 = smallest_peak(""), b16 = smallest_peak("--grad-dtype bf16");
    print_message("tiny bf16: the smallest peaks %lld (fp32 gradients), %lld (bf16)\n", f32, b16);
    assert_true(b16 < f32);
    char out[16384], cmd[256];
    int rc;
    snprintf(cmd, sizeof cmd, "memreport models/tiny.yaml --precision bf16 --memory-budget %lld", (b16 + f32) / 2);
    rc = tu_stg(out, sizeof out, "%s", cmd);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "cannot fit"));
    if (!strstr(out, "with --grad-dtype bf16 (the products' weight gradients in bf16) the step fits")) fail_msg("%s\n%s", cmd, out);
    snprintf(cmd, sizeof cmd, "memreport models/tiny.yaml --precision bf16 --memory-budget %lld", b16 - 1);
    rc = tu_stg(out, sizeof out, "%s", cmd);
    assert_int_not_equal(rc, 0);
    assert_null(strstr(out, "--grad-dtype bf16 ("));
}

static void test_bench_json(void **s) {
    char out[65536];
    int rc = tu_stg(out, sizeof out, "bench models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 --what forward,step --warmup 2 --iters 3 --json");
    if (rc != 0) fail_msg("%s", out);
    const char *fwd = strstr(out, "\"what\": \"forward\"");
    const char *step = strstr(out, "\"what\": \"step\"");
    assert_non_null(fwd);
    assert_non_null(step);
    assert_true(fwd < step); // in the order given
    assert_null(strstr(out, "forward-backward"));
    for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *t = strstr(line, "\"times_ms\": [");
        const char *nl = strchr(line, '\n');
        assert_non_null(t);
        assert_true(!nl || t < nl);
        int n = 1; // count the list's elements: warm-up + timed
        for (const char *c = t + 13; *c && *c != ']'; c++) n += *c == ',';
        assert_int_equal(n, 5);
        // submit_median_ms: the median of the timed (not warm-up) submits, the last 3 of submit_ms
        const char *sm = strstr(line, "\"submit_ms\": [");
        const char *md = strstr(line, "\"submit_median_ms\": ");
        assert_non_null(sm);
        assert_non_null(md);
        assert_true(!nl || (sm < nl && md < nl));
        double v[5];
        char *e = (char *)sm + 14;
        for (int i = 0; i < 5; i++) {
            v[i] = strtod(e, &e);
            assert_true(*e == ',' || *e == ']');
            e++;
        }
        double a = v[2], b = v[3], c = v[4];
        double med = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        assert_true(fabs(strtod(md + 20, NULL) - med) <= 1e-4);
        // the record says the gradients' dtype (fp32 here: --grad-dtype bf16 needs --precision bf16)
        const char *gd = strstr(line, "\"precision\": \"fp32\", \"grad_dtype\": \"fp32\", \"optimizer\": \"after_backward\"");
        assert_non_null(gd);
        assert_true(!nl || gd < nl);
        // the CPU backend holds nothing beside the plan: an empty, well-formed list closes the record
        const char *w = strstr(line, "\"workspace_bytes\": 0, \"workspaces\": {}}");
        assert_non_null(w);
        assert_true(!nl || w < nl);
    }
    // the optimizer in backward: the record and the text header say so, and stg train's header explains the clipping
    const char *b1 = "bench models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 --warmup 0 --iters 1";
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s --optimizer-in-backward --json", b1);
    expect_output(cmd, "\"grad_dtype\": \"fp32\", \"optimizer\": \"in_backward\"", true);
    snprintf(cmd, sizeof cmd, "%s --optimizer-in-backward", b1);
    expect_output(cmd, "fp32, AdamW in backward, flash attention", true);
    expect_output(b1, "AdamW in backward", false);
    rc = tu_stg(out, sizeof out, "train models/tiny.yaml --device cpu --set n_layers=1 --set ctx=16 --steps 2 --optimizer-in-backward");
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "optimizer: AdamW in backward"));
    assert_non_null(strstr(out, "clipping by the previous step's gradient norm"));
    // memreport names bf16 weight gradients in its precision line
    rc = tu_stg(out, sizeof out, "memreport models/tiny.yaml --precision bf16 --grad-dtype bf16");
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "bf16 working weights, activations and the products' weight gradients"));
    expect_fail("'step' is named twice", "bench models/tiny.yaml --device cpu --what %s", "step,step");
    expect_fail("--what 'backward'", "bench models/tiny.yaml --device cpu --what %s", "backward");
    expect_fail("--what 'forward,'", "bench models/tiny.yaml --device cpu --what %s", "forward,");
}

// stg attn-bench --attention: the rows of the paths asked for, in order, and nothing else.
static void attn_rows(const char *opts, const char *const *want, int n) {
    char out[16384];
    int rc = tu_stg(out, sizeof out, "attn-bench --device cpu --precision fp32 --batch 1 --heads 2 --kv-heads 1 --dims 16 --seqs 32,48 "
                                     "--iters 1 --json %s", opts);
    if (rc != 0) fail_msg("attn-bench %s: exit %d\n%s", opts, rc, out);
    int k = 0;
    for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "{\"attention\": \"", 15) != 0) continue;
        if (k == n) fail_msg("attn-bench %s: more rows than %d\n%s", opts, n, out);
        if (strncmp(line + 15, want[k], strlen(want[k])) != 0 || line[15 + strlen(want[k])] != '"')
            fail_msg("attn-bench %s: row %d is not '%s'\n%s", opts, k, want[k], out);
        if (!strstr(line, "\"forward_ms\": ")) fail_msg("attn-bench %s: row %d has no time\n%s", opts, k, out);
        // the order the iterations ran in, as asked (--order phases; alternating otherwise)
        const char *want_order = strstr(opts, "--order phases") ? "\"order\": \"phases\"" : "\"order\": \"alternate\"";
        const char *eol = strchr(line, '\n'), *hit = strstr(line, want_order);
        if (!hit || (eol && hit > eol)) fail_msg("attn-bench %s: row %d does not say %s\n%s", opts, k, want_order, out);
        k++;
    }
    if (k != n) fail_msg("attn-bench %s: %d rows, expected %d\n%s", opts, k, n, out);
}

static void test_attn_bench_paths(void **s) {
    attn_rows("", (const char *const[]){"naive", "flash", "naive", "flash"}, 4);
    attn_rows("--attention both", (const char *const[]){"naive", "flash", "naive", "flash"}, 4);
    attn_rows("--attention flash", (const char *const[]){"flash", "flash"}, 2);
    attn_rows("--attention naive", (const char *const[]){"naive", "naive"}, 2);
    attn_rows("--docs 2 --attention flash", (const char *const[]){"flash", "flash, 2 docs", "flash", "flash, 2 docs"}, 4);
    attn_rows("--attention flash --order phases", (const char *const[]){"flash", "flash"}, 2);
    attn_rows("--order alternate", (const char *const[]){"naive", "flash", "naive", "flash"}, 4);
    expect_fail("--order 'mixed': expected alternate or phases", "attn-bench --device cpu --order %s", "mixed");
    expect_fail("--attention 'fused': expected naive, flash or both", "attn-bench --device cpu --attention %s", "fused");
    expect_fail("--attention naive has no document mask", "attn-bench --device cpu --docs 2 --attention %s", "naive");
    expect_fail("--seqs '1,2,3,4,5,6,7,8,9': at most 8 values", "attn-bench --device cpu --seqs %s", "1,2,3,4,5,6,7,8,9");
    expect_fail("--dims '16,,32': an empty element", "attn-bench --device cpu --dims %s", "16,,32");
    expect_fail("--dims '64,': an empty element", "attn-bench --device cpu --dims %s", "64,");
    expect_fail("--dims 'x' is not an integer", "attn-bench --device cpu --dims %s", "64,x");
}

// stg memreport --world N --zero K: the per-device section in text and JSON; bad values refused.
static void test_memreport_world(void **s) {
    char out[1 << 17];
    int rc = tu_stg(out, sizeof out, "memreport models/tiny.yaml --world 4 --zero 1 --device-memory 0.001");
    if (rc != 0) fail_msg("%s", out);
    assert_non_null(strstr(out, "Data parallel: 4 devices, ZeRO stage 1"));
    assert_non_null(strstr(out, "devices needed for"));
    rc = tu_stg(out, sizeof out, "memreport models/tiny.yaml --world 2 --zero 3 --format json");
    if (rc != 0) fail_msg("%s", out);
    const char *dp = strstr(out, "\"data_parallel\": {\"world\": 2, \"zero\": 3");
    assert_non_null(dp);
    assert_non_null(strstr(dp, "\"per_device_bytes\": "));
    assert_non_null(strstr(dp, "\"devices_needed\": ["));
    expect_fail("--zero", "memreport models/tiny.yaml --world 2 --zero %s", "4");
    expect_fail("--world", "memreport models/tiny.yaml --world %s", "0");
    expect_fail("not svg", "memreport models/tiny.yaml --world 2 --format %s", "svg");
    expect_fail("stg launch", "train models/tiny.yaml --device cpu --zero %s", "1");
    // the other data-parallel and stream options: bad values are refused with the option named
    expect_fail("--bucket-mb", "train models/tiny.yaml --device cpu --bucket-mb %s", "-1");
    expect_fail("--zero", "bench models/tiny.yaml --device cpu --zero %s", "x");
    expect_fail("--streams", "bench models/tiny.yaml --device cpu --streams %s", "0");
    expect_fail("-n", "launch -n %s -- true", "x");
    expect_fail("unexpected argument '--bogus'", "launch -n 1 %s -- true", "--bogus");
    expect_fail("--node-rank 2 is not below --nnodes 2", "launch -n 1 --nnodes 2 --node-rank 2 --port 1234 %s", "-- true");
    expect_fail("--iters", "comm-bench --iters %s", "0");
    expect_fail("unexpected argument", "comm-bench %s", "--bogus");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memreport_world),
        cmocka_unit_test(test_bad_command_lines), cmocka_unit_test(test_bad_model_file),
        cmocka_unit_test(test_output_not_clobbered), cmocka_unit_test(test_happy_paths), cmocka_unit_test(test_bench_json), cmocka_unit_test(test_budget_levers), cmocka_unit_test(test_attn_bench_paths), cmocka_unit_test(test_bench_profile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
