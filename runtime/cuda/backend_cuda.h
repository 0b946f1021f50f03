// The CUDA backend (built when CUDA is found; STG_HAVE_CUDA is then defined for its users).
#ifndef STG_BACKEND_CUDA_H
#define STG_BACKEND_CUDA_H

#include <stdbool.h>

#include "ops/cuda/cuda.h"
#include "runtime/backend.h"

// A backend on CUDA device `device`; tf32 allows TF32 tensor cores for fp32 matmuls.
int rt_backend_cuda_new(int device, bool tf32, rt_backend **out, stg_err *err);
// The kernel context behind a CUDA backend (device name, peak, workspace bytes).
stg_cuda *rt_backend_cuda_context(rt_backend *b);
// Whether a CUDA device is present (false without a driver or GPU).
bool rt_cuda_available(void);

#endif
