// The CUDA backend's kernels: one entry point that enqueues any op of a graph on the context's
// stream. fp32 and bf16 (bf16 storage, fp32 accumulation; norms, softmax statistics and the loss
// in fp32). Nothing here allocates, synchronises or copies to the host while a step runs, so every
// op can be captured into a CUDA Graph.
#ifndef STG_OPS_CUDA_H
#define STG_OPS_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { // the base headers are C: their functions (stg_errf, ...) have C linkage
#endif

#include "ops/base/ir.h"
#include "ops/base/tensor.h"

typedef struct stg_cuda stg_cuda; // per-device context (ops/cuda/internal.h)

typedef struct stg_cuda_opts {
    int device;  // CUDA device ordinal
    bool tf32;   // allow TF32 tensor cores for fp32 matmuls (off by default)
    bool gemm_tune; // choose each matmul shape's cuBLASLt algorithm by timing the heuristic's
                    // first candidates (ops/matmul/cuda.cu), not the heuristic's first answer alone
} stg_cuda_opts;

// How many CUDA devices there are (0 when there is no driver or no GPU: never an error).
int cuda_device_count(void);

// Creates the context: binds the device, a non-blocking stream, a cuBLASLt handle.
int cuda_new(const stg_cuda_opts *o, stg_cuda **out, stg_err *err);
void cuda_free(stg_cuda *c);
// The stream every op is enqueued on (a cudaStream_t).
void *cuda_stream(stg_cuda *c);
// Device name and its dense peak (TFLOP/s) for the given precision, 0 when unknown.
const char *cuda_device_name(const stg_cuda *c);
double cuda_peak_tflops(const stg_cuda *c, stg_precision p);

// Called once after the plan's memory is allocated, before the first step and outside any capture:
// runs every op's record's prepare (cuBLASLt algorithms for every matmul shape of g, cached by
// shape; the ops' device tables from ptr) and each group's (tables shared by several ops), and
// allocates the context's workspace: the cuBLASLt workspaces and the kernels' scratch. Calling it
// again with another graph replaces it.
int cuda_prepare(stg_cuda *c, const stg_graph *g, void *const *ptr, stg_err *err);
// Device bytes the context holds beyond the plan: cuBLASLt workspace, kernel scratch, tables.
size_t cuda_workspace_bytes(const stg_cuda *c);
// The same bytes by purpose: up to max named parts into names/bytes; returns how many.
int cuda_workspace_parts(const stg_cuda *c, const char **names, int64_t *bytes, int max);

// Enqueues op `op` of g on the context's stream; ptr[t] is tensor t's device address.
int cuda_op_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err);
int cuda_op_supported(stg_op_kind k);
// Gradient accumulation: whether the ops marked to accumulate (stg_op.accum) add into those outputs
// (on: a micro-batch after the first) or write them (off, the default). Read when an op is
// enqueued, so a captured run keeps the mode it was captured with.
void cuda_set_accumulate(stg_cuda *c, bool on);

// Concurrency for captured runs. cuda_stream_count streams (0 is cuda_stream's); cuda_stream_at
// gives one (a cudaStream_t). cuda_op_lane: CUDA_LANE_MAIN for ops that must run on stream 0 (they
// use the context's shared scratch), CUDA_LANE_BARRIER for those that must also follow everything
// enqueued before them (the multi-tensor global norm and AdamW touch tensors they do not name),
// CUDA_LANE_ANY for the rest. cuda_op_run_on enqueues op on stream s.
// CUDA_LANE_COMM: communication (NCCL) ops, or the optimizer in backward's updates (never both in
// one run), on their own stream, index cuda_stream_count(c).
enum { CUDA_LANE_MAIN = 0, CUDA_LANE_ANY = 1, CUDA_LANE_BARRIER = 2, CUDA_LANE_COMM = 3 };
// The NCCL communicator (an ncclComm_t) the allreduce op uses; the caller keeps it. 0, or -1 when
// this build has no NCCL.
int cuda_set_comm(stg_cuda *c, void *nccl_comm, stg_err *err);
int cuda_have_nccl(void);
int cuda_stream_count(const stg_cuda *c);
void *cuda_stream_at(stg_cuda *c, int s);
int cuda_op_lane(const stg_graph *g, int op);
int cuda_op_run_on(stg_cuda *c, int s, const stg_graph *g, int op, void *const *ptr, stg_err *err);

// Test mode: fills every multiprocessor's shared memory with NaN bytes (enqueued on the stream): what
// a later kernel reads of shared memory it never wrote is then NaN (shared memory is not cleared
// between kernels), so a test sees such a read instead of whatever finite bits were left.
int cuda_poison_shared(stg_cuda *c, stg_err *err);

// Copies n bytes of host memory at src to device memory dst on the context's stream. Pinned host memory
// (cudaMallocHost) is read by a kernel over the bus, so a captured step uploads its inputs in kernel nodes
// beside the others, not in copy-engine nodes; other host memory goes through cudaMemcpyAsync.
int cuda_upload(stg_cuda *c, void *dst, const void *src, size_t n, stg_err *err);

// Rewrites a captured graph (a cudaGraph_t, before it is instantiated): every memset node becomes a kernel node
// doing its work, with the same parents and children (a memset node costs the step ~5 us of idle device on each
// side: the copy engine's hand-offs; cuBLASLt captures a 4-byte one before some of its algorithms). *converted: how
// many. Errors leave the graph to be destroyed.
int cuda_graph_memsets_to_kernels(void *graph, int *converted, stg_err *err);

// Measures device-to-device copy bandwidth (bytes read plus bytes written per second): the median
// of `reps` cudaMemcpyAsync of `bytes` between two fresh buffers, timed with events on c->stream
// (ops/optim/cuda.cu). Allocates and frees 2 x bytes of device memory; not for use in a capture.
int cuda_copy_bandwidth(stg_cuda *c, size_t bytes, int reps, double *bytes_per_s, stg_err *err);

// The cuBLASLt algorithm chosen for MATMUL / LINEAR op `op` (after cuda_prepare): our (m, n, k) and
// batch, cuBLASLt's configuration ids (-1 where it does not report one), the workspace; tuned
// (gemm_tune): candidates timed, the one chosen in the heuristic's order (0: its first), and the
// device time of one product with the heuristic's first and with the chosen (-1 when not tuned).
// Returns -1 when op has no matmul plan.
typedef struct cuda_mm_info {
    int64_t m, n, k, batch;
    int algo_id, tile, stages, splitk, cluster;
    size_t workspace;
    int pick, candidates;
    float ms_first, ms_pick;
    int gemv; // 1: the few-rows kernel runs the product (bf16, at most 8 rows), not cuBLASLt's choice
    int gemv_rows, gemv_split; // its rows of W a warp and warps sharing a row's k (0 when not gemv)
    int64_t gemv_blocks;       // with k split: the grid asked for (one wave; each group of warps takes several rows), 0: a
                               // block a group of rows
    int gemv_fold;             // 1: it writes the output of the swiglu that reads its two outputs, not them
    int gemv_norm;             // 1: it reads the input of the RMSNorm whose output it multiplies, folded in
    int gemv_tc;               // 1: the few-rows kernel on the tensor cores (2 to 8 rows); gemv_split is then its
                               // warps sharing a tile of 8 features' k
} cuda_mm_info;
int cuda_mm_describe(const stg_cuda *c, int op, cuda_mm_info *out);
// Decided at cuda_prepare, for inference graphs (ops/matmul/cuda.cu, mm_fold_plan); op's run then
// enqueues nothing. 1: op's output is written by the op that makes its inputs (a decoding graph's
// swiglu, by the few-rows product of w1 and w3). 2: op is absorbed by the op that reads its output,
// and its outputs are never written (an RMSNorm, by the few-rows product of its rows). 0: neither.
int cuda_op_folded(const stg_cuda *c, int op);

#ifdef __cplusplus
}
#endif

#endif
