// The op list's derived files are not stale: every op kind's name is in the fuzz dictionary
// (tests/fuzz/stg.dict, `op_<name>="<name>"`), and every kind a model file may write (a row with a
// gradient rule: the forward ops) has a row in docs/MODEL_FORMAT.md's op table. Each kind has a
// rules row, a CPU record and (checked by cuda_prepare and test_gpu_ops) a CUDA record; here: the
// rules row's name is the op list's name.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/cpu/cpu.h"
#include "ops/registry.h"
#include "tests/testutil.h"

static char *slurp(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", STG_SOURCE_DIR, rel);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *s = tu_read_all(f, NULL);
    assert_non_null(s);
    fclose(f);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_and_records),
        cmocka_unit_test(test_fuzz_dict_has_every_op),
        cmocka_unit_test(test_model_format_lists_every_forward_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
