// The CUDA backend (built when CUDA is found; STG_HAVE_CUDA is then defined for its users).
#ifndef STG_BACKEND_CUDA_H
#define STG_BACKEND_CUDA_H

#include <stdbool.h>

#include "ops/cuda/cuda.h"
#include "runtime/backend.h"
#include "runtime/dist.h"

// A backend on CUDA device `device`. flags: RT_CUDA_TF32 allows TF32 tensor cores for fp32
// matmuls; RT_CUDA_GEMM_TUNE chooses each matmul shape's algorithm by timing candidates on the
// op's tensors when the executor prepares (stg_cuda_opts.gemm_tune).
#define RT_CUDA_TF32 1u
#define RT_CUDA_GEMM_TUNE 2u
int rt_backend_cuda_new(int device, unsigned flags, rt_backend **out, stg_err *err);
// The kernel context behind a CUDA backend (device name, peak, workspace bytes).
stg_cuda *rt_backend_cuda_context(rt_backend *b);
// Joins the data-parallel group d (connected): rank 0 makes the NCCL unique id and sends it over
// d; every rank creates its communicator on this backend's device. The allreduce op then runs on
// the communication stream, and waits poll for NCCL errors and d->timeout_s without progress.
int rt_backend_cuda_join(rt_backend *b, rt_dist *d, stg_err *err);
// After rt_backend_cuda_join: mean device time (ms) of one in-place ncclAllReduce (sum) of `bytes`
// of f32 or bf16, after `warmup` untimed ones (a benchmark; allocates its own buffer).
int rt_backend_cuda_allreduce_bench(rt_backend *b, size_t bytes, bool bf16, int warmup, int iters, double *ms, stg_err *err);
// Device bytes the NCCL communicator took when it was created (outside the plan; -1 when not
// measurable, 0 without one).
int64_t rt_backend_cuda_comm_bytes(rt_backend *b);
// Whether a CUDA device is present (false without a driver or GPU).
bool rt_cuda_available(void);

#endif
