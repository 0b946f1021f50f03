// The learning-rate schedules on CUDA: the lr_schedule kernel against each schedule's closed form at
// every iteration (tests/schedule_cases.h, the cases test_schedule runs on the CPU), fp32 and bf16
// graphs (the schedule state is fp32 in both). Exits 77 (skipped) without CUDA or without a GPU.
#include "tests/gpu.h"

#ifdef STG_HAVE_CUDA
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/cuda/backend_cuda.h"
#include "tests/schedule_cases.h"

static void test_cuda_op(void **s) {
    rt_backend *b = rig_backend(true);
    sched_run_all(b, STG_PREC_FP32, "cuda fp32");
    sched_run_all(b, STG_PREC_BF16, "cuda bf16");
    b->ops->destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_op)};
    return GPU_RUN(tests);
}

#endif
