// The op list's derived files are not stale: every op kind's name is in the fuzz dictionary
// (tests/fuzz/stg.dict, `op_<name>="<name>"`), and every kind a model file may write (a row with a
// gradient rule: the forward ops) has a row in docs/MODEL_FORMAT.md's op table. Both sections are
// generated from the rows by tools/gen_optable.c, which ctest test_optable runs over the checked-in
// files; here: that it tells a stale copy (exit 1, the difference shown), rewrites it, and refuses a
// file without its markers. Each kind has a rules row, a CPU record and (checked by cuda_prepare and
// test_gpu_ops) a CUDA record; here: the rules row's name is the op list's name.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ops/cpu/cpu.h"
#include "ops/registry.h"
#include "tests/testutil.h"

static char *slurp(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", STG_SOURCE_DIR, rel);
    char *s = tu_slurp(path, NULL);
    assert_non_null(s);
    return s;
}

static const char *const list_names[STG_OP_COUNT] = {
#define X_NAME(e, n, f, a) [STG_OP_##e] = #n,
    STG_OP_LIST(X_NAME)
#undef X_NAME
};

static void test_rows_and_records(void **state) {
    (void)state;
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = ops_def((stg_op_kind)k);
        assert_non_null(d);
        assert_string_equal(d->name, list_names[k]);
        assert_int_equal(ops_lookup(d->name), k);
        assert_non_null(d->infer);
        assert_non_null(d->flops);
        assert_true(cpu_op_supported((stg_op_kind)k));
    }
    assert_int_equal(ops_lookup("no_such_op"), -1);
}

static void test_fuzz_dict_has_every_op(void **state) {
    (void)state;
    char *dict = slurp("tests/fuzz/stg.dict");
    for (int k = 0; k < STG_OP_COUNT; k++) {
        char want[160];
        snprintf(want, sizeof want, "op_%s=\"%s\"\n", ops_name((stg_op_kind)k), ops_name((stg_op_kind)k));
        if (!strstr(dict, want)) fail_msg("tests/fuzz/stg.dict lacks the line %s", want);
    }
    free(dict);
}

static void test_model_format_lists_every_forward_op(void **state) {
    (void)state;
    char *doc = slurp("docs/MODEL_FORMAT.md");
    for (int k = 0; k < STG_OP_COUNT; k++) {
        const stg_op_def *d = ops_def((stg_op_kind)k);
        if (!d->grad) continue; // backward, optimizer and internal ops are not written in model files
        char want[160];
        snprintf(want, sizeof want, "`%s`", d->name);
        if (!strstr(doc, want)) fail_msg("docs/MODEL_FORMAT.md's op table lacks %s", want);
    }
    free(doc);
}

// A copy of the two generated files under dir (docs/, tests/fuzz/), the op table's row of `relu`
// replaced by `row` (NULL: unchanged).
static void copy_tree(const char *dir, const char *row) {
    char p[512];
    snprintf(p, sizeof p, "%s/docs", dir);
    assert_int_equal(mkdir(p, 0777) == 0 || access(p, F_OK) == 0, 1);
    snprintf(p, sizeof p, "%s/tests", dir);
    assert_int_equal(mkdir(p, 0777) == 0 || access(p, F_OK) == 0, 1);
    snprintf(p, sizeof p, "%s/tests/fuzz", dir);
    assert_int_equal(mkdir(p, 0777) == 0 || access(p, F_OK) == 0, 1);
    char *doc = slurp("docs/MODEL_FORMAT.md"), *dict = slurp("tests/fuzz/stg.dict");
    if (row) {
        char *at = strstr(doc, "| `relu` |");
        assert_non_null(at);
        char *end = strchr(at, '\n');
        assert_non_null(end);
        size_t n = strlen(doc) + strlen(row) + 1;
        char *d2 = malloc(n);
        assert_non_null(d2);
        snprintf(d2, n, "%.*s%s%s", (int)(at - doc), doc, row, end);
        free(doc);
        doc = d2;
    }
    snprintf(p, sizeof p, "%s/docs/MODEL_FORMAT.md", dir);
    tu_write(p, doc, strlen(doc));
    snprintf(p, sizeof p, "%s/tests/fuzz/stg.dict", dir);
    tu_write(p, dict, strlen(dict));
    free(doc);
    free(dict);
}

static void test_generator_tells_stale_copies(void **state) {
    (void)state;
    char dir[256], cmd[1024], out[1 << 16];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_oplist"), 0);
    // the checked-in files as they are: up to date
    copy_tree(dir, NULL);
    snprintf(cmd, sizeof cmd, "'%s' --check '%s' 2>&1", STG_GEN_OPTABLE, dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    // one row changed by hand: stale, with the row as it is and as the rows give it
    copy_tree(dir, "| `relu` | x → y | |");
    assert_int_equal(tu_run(cmd, out, sizeof out), 1);
    if (!strstr(out, "MODEL_FORMAT.md:") || !strstr(out, "is stale") || !strstr(out, "\n-| `relu` | x → y | |\n") ||
        !strstr(out, "\n+| `relu` | x → max(x, 0) | |\n") || !strstr(out, "--target optable"))
        fail_msg("gen_optable --check on a stale table said:\n%s", out);
    assert_null(strstr(out, "`gelu`")); // only the lines that differ
    assert_null(strstr(out, "stg.dict:"));
    // --write brings it back, and then it checks clean
    snprintf(cmd, sizeof cmd, "'%s' --write '%s' 2>&1", STG_GEN_OPTABLE, dir);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    snprintf(cmd, sizeof cmd, "%s/docs/MODEL_FORMAT.md", dir);
    char *fixed = tu_slurp(cmd, NULL), *want = slurp("docs/MODEL_FORMAT.md");
    assert_string_equal(fixed, want);
    free(fixed);
    free(want);
    // a file without its end marker: refused (exit 2), naming the marker
    snprintf(cmd, sizeof cmd, "%s/tests/fuzz/stg.dict", dir);
    const char *cut = "op_add=\"add\"\n# ops:begin\n";
    tu_write(cmd, cut, strlen(cut));
    snprintf(cmd, sizeof cmd, "'%s' --check '%s' 2>&1", STG_GEN_OPTABLE, dir);
    assert_int_equal(tu_run(cmd, out, sizeof out), 2);
    if (!strstr(out, "# ops:end")) fail_msg("%s", out);
    assert_int_equal(tu_rmtree(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_and_records),
        cmocka_unit_test(test_fuzz_dict_has_every_op),
        cmocka_unit_test(test_model_format_lists_every_forward_op),
        cmocka_unit_test(test_generator_tells_stale_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
