// The raw CPU reference kernels of every family (each family's ops/<family>/kernels.h, included
// here): pointers and explicit sizes, no graph. Each kernel exists twice, over float (suffix _f32)
// and over double (suffix _f64); both are written once, over `real`, in ops/<family>/real.c. Every reduction accumulates in double. Shapes are PyTorch order, outermost
// first; "rows" is the product of all dims but the last.
//
// Kernels that can fail (a bad index, too little scratch) return 0 or -1 with a message in err;
// the rest return nothing. Unless a comment says an output may alias an input, it may not.
//
// No kernel allocates. The few that need working memory take `scratch` (scratch_bytes long,
// aligned to at least 8 bytes; its contents on entry do not matter) and fail, without touching
// their outputs, when it is smaller than their cpu_*_scratch_* function says. Those sizes count the
// OpenMP threads the kernel may use (omp_get_max_threads() at the call; 1 without OpenMP), so a
// buffer sized for one thread count is too small after the count is raised.
#ifndef STG_OPS_CPU_KERNELS_H
#define STG_OPS_CPU_KERNELS_H

#include "ops/embedding/kernels.h"
#include "ops/matmul/kernels.h"
#include "ops/norm/kernels.h"
#include "ops/rope/kernels.h"
#include "ops/softmax/kernels.h"
#include "ops/attention/kernels.h"
#include "ops/elementwise/kernels.h"
#include "ops/layout/kernels.h"
#include "ops/loss/kernels.h"
#include "ops/optim/kernels.h"
#include "ops/decode/kernels.h"

#endif
