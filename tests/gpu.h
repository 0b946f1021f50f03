// The frame of a GPU test program (tests/test_gpu_*.c). Include it first, outside the program's
// `#ifdef STG_HAVE_CUDA` block: built without CUDA, this header is the whole program (a main that
// says so and exits 77, ctest's skip code); with CUDA, main ends in `return GPU_RUN(tests);`, which
// runs the cmocka group where a GPU is present and otherwise reports skipped (77) too.
#ifndef STG_TEST_GPU_H
#define STG_TEST_GPU_H

#include <stdio.h>
#include <stdlib.h>

#ifdef STG_HAVE_CUDA

#include "runtime/cuda/backend_cuda.h"

// Says why the program is skipped; 77.
static inline int gpu_skipped(const char *why) {
    printf("skipped: %s\n", why);
    return 77;
}

// STG_TEST_FILTER (a cmocka pattern such as '*attention*'): only the tests whose names match; STG_TEST_SKIP
// (a pattern too): not the tests whose names match. For a compute-sanitizer run that must leave out a
// test whose library kernels trip the tool. Expands where cmocka.h has been included.
#define GPU_FILTER()                                                                                                      \
    ((getenv("STG_TEST_FILTER") && *getenv("STG_TEST_FILTER") ? cmocka_set_test_filter(getenv("STG_TEST_FILTER")) : (void)0), \
     (getenv("STG_TEST_SKIP") && *getenv("STG_TEST_SKIP") ? cmocka_set_skip_filter(getenv("STG_TEST_SKIP")) : (void)0))

// The cmocka group `tests` (an array) where a GPU is present (STG_TEST_FILTER applied); else skipped.
#define GPU_RUN(tests) \
    (rt_cuda_available() ? (GPU_FILTER(), cmocka_run_group_tests(tests, NULL, NULL)) : gpu_skipped("no GPU"))

#else

int main(void) {
    printf("skipped: built without CUDA\n");
    return 77;
}

#endif

#endif
