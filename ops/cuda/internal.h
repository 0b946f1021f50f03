// Internals shared by the CUDA kernel files (not for use outside ops/cuda/).
#ifndef STG_OPS_CUDA_INTERNAL_H
#define STG_OPS_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "ops/cuda/cuda.h"
#include "ops/registry.h"

// Checks a CUDA runtime call; on failure fills err with the call, the file:line and the CUDA
// message and returns -1 from the enclosing function.
#define CUDA_CHECK(err, call)                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess)                                                                         \
            return stg_errf((err), "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

#define CUBLAS_CHECK(err, call)                                                                        \
    do {                                                                                               \
        cublasStatus_t s_ = (call);                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                               \
            return stg_errf((err), "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_); \
    } while (0)

// After a kernel launch: reports a bad launch configuration (never synchronises).
#define CUDA_LAUNCH_CHECK(err, what) CUDA_CHECK(err, cudaGetLastError())

// One cuBLASLt matmul configuration, chosen before capture and reused (ops/cuda/matmul.cu).
typedef struct cuda_mm_plan cuda_mm_plan;

struct stg_cuda {
    int device;
    bool tf32;
    char name[256];
    int sm_count;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;      // cuBLASLt workspace (set explicitly on every matmul)
    size_t lt_workspace_bytes;
    void *scratch;           // kernels' scratch (reductions, attention row statistics, tables)
    size_t scratch_bytes;
    // per-op state built by cuda_prepare (indexed by op id; NULL/0 where unused)
    cuda_mm_plan **mm;       // (nops) matmul plans
    int nops;
    // multi-tensor tables (device memory inside scratch), built by cuda_prepare
    void *adamw_table;       // cuda_adamw_entry[n_adamw]
    int n_adamw;
    int first_adamw_op;      // the op that launches the one multi-tensor AdamW kernel
    void *norm_table;        // cuda_norm_entry[n_norm] for global_norm
    int n_norm;
    void *norm_partials;     // float partial sums of the global norm
    int norm_blocks;
};

// ---- ops/cuda/matmul.cu: MATMUL and LINEAR through cuBLASLt -------------------------------------
// Builds c->mm[op] for a MATMUL or LINEAR op: layouts, the matmul descriptor (bf16 in and out with
// fp32 compute; fp32 with TF32 only when c->tf32; fp32 output for grad_out), the algorithm from the
// heuristic (cached by shape across ops), using c->lt_workspace.
int cuda_mm_prepare(stg_cuda *c, const stg_graph *g, int op, stg_err *err);
void cuda_mm_free(cuda_mm_plan *p);
size_t cuda_mm_workspace_bytes(void); // the cuBLASLt workspace to allocate
int cuda_mm_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err);

// ---- ops/cuda/attention.cu: fused causal attention, (B, S, H, Dh) layout -------------------------
size_t cuda_attention_scratch_bytes(const stg_graph *g, int op); // ATTENTION or ATTENTION_BWD
int cuda_attention_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err);
int cuda_attention_bwd_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err);

#endif
