// The PyTorch peer of `stg sample` (tools/ref/torch_decode.py) computes what stg computes: its
// static-KV-cache decode's logits equal an independent full forward's at every position (float64,
// 1e-10), its greedy tokens equal the argmax chain of repeated full forwards, and equal this build's
// `stg sample` greedy tokens (CPU, fp64) from the same checkpoint. Skipped (77) where no python3
// imports torch.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/testutil.h"

static const char *python;

static void test_check_against_full_forward_and_stg(void **state) {
    (void)state;
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/torch_decode.py' --check --stg '%s' 2>&1", python, STG_SOURCE_DIR, STG_BINARY);
    int rc = tu_run(cmd, out, sizeof out);
    printf("%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "torch_decode.py --check: passed"));
    assert_non_null(strstr(out, "check stg: "));
    assert_null(strstr(out, "FAIL"));
    assert_null(strstr(out, "DIFFER"));
}

// A failing comparison must fail the check: the same checks against a model whose decode step reads
// RoPE at the wrong position.
static void test_check_can_fail(void **state) {
    (void)state;
    char cmd[4096], out[16384];
    snprintf(cmd, sizeof cmd,
             "d=$(mktemp -d) && sed 's/cos, sin = self.cos\\[pos\\], self.sin\\[pos\\]/cos, sin = self.cos[pos - 1], self.sin[pos - 1]/' "
             "'%s/tools/ref/torch_decode.py' > $d/broken.py && grep -q 'self.cos\\[pos - 1\\]' $d/broken.py && '%s' $d/broken.py --check 2>&1; "
             "rc=$?; rm -rf $d; exit $rc",
             STG_SOURCE_DIR, python);
    int rc = tu_run(cmd, out, sizeof out);
    printf("%s", out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "torch_decode.py --check: FAILED"));
}

int main(void) {
    static const char *const candidates[] = {"python3", "/usr/bin/python3"};
    char cmd[512], out[256];
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !python; i++) {
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' 2>&1", candidates[i]);
        if (tu_run(cmd, out, sizeof out) == 0) python = candidates[i];
    }
    if (!python) {
        printf("skipped: no python3 that imports torch (Debian: apt-get install python3-torch)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_against_full_forward_and_stg),
        cmocka_unit_test(test_check_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
