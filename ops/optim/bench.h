// The optimizer family's benchmark harness (a study tool, not part of a step): kept out of the
// backend's interface (ops/cuda/cuda.h).
#ifndef STG_OPTIM_BENCH_H
#define STG_OPTIM_BENCH_H

#include <stdint.h>

#include "ops/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

// Times variants of the AdamW and global-norm kernels (unroll, cache hints, chunk) and a copy on
// synthetic tensors of about n elements in all (AdamW in the bf16 form: fp32 master, m, v and
// gradient, bf16 weight), each the median of `reps` runs: one row per variant with the bytes it
// moves (ops/optim/cuda.cu; printed by tests/test_gpu_optim.c under STG_BENCH_OPTIM=1).
typedef struct cuda_optim_bench_row {
    char name[80];
    double ms, bytes;
} cuda_optim_bench_row;
int cuda_optim_bench(stg_cuda *c, int64_t n, int reps, cuda_optim_bench_row *rows, int max_rows, int *nrows, stg_err *err);

#ifdef __cplusplus
}
#endif

#endif
