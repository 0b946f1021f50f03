// Internals shared by the CUDA kernel files (not for use outside ops/cuda/).
//
// Layout of the context's device memory beyond the plan:
//   lt_workspace  the cuBLASLt workspace (cuda_mm_workspace_bytes)
//   scratch       [AdamW table][global-norm tables][work], one cudaMalloc made by cuda_prepare:
//                 the tables are built once from the plan's pointers; `work` is shared by every
//                 op that needs temporary device memory (they run one after another on c->stream):
//                 norm-backward partial sums, cross-entropy row losses, global-norm partials,
//                 attention scratch.
#ifndef STG_OPS_CUDA_INTERNAL_H
#define STG_OPS_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops/cuda/cuda.h"

#ifdef __cplusplus
extern "C" { // C headers: ops_name, ops_def, ... have C linkage
#endif
#include "ops/registry.h"
#ifdef __cplusplus
}
#endif

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

// After a kernel launch: reports a bad launch configuration (never synchronises). `what` names
// the kernel in the message.
#define CUDA_LAUNCH_CHECK(err, what)                                                                   \
    do {                                                                                               \
        cudaError_t e_ = cudaGetLastError();                                                           \
        if (e_ != cudaSuccess)                                                                         \
            return stg_errf((err), "%s:%d: launching %s: %s", __FILE__, __LINE__, (what),               \
                            cudaGetErrorString(e_));                                                   \
    } while (0)

// Streams a captured run may spread its ops over (cuda_op_lane says which ops may leave stream 0).
#define CUDA_STREAMS 3

// One cuBLASLt matmul configuration, chosen before capture and reused (ops/matmul/cuda.cu).
typedef struct cuda_mm_plan cuda_mm_plan;

// ---- multi-tensor tables (ops/optim/cuda.cu) ----------------------------------------------------
// Elements per block of the multi-tensor kernels. Multiples of 4 (float4 alignment of chunks) and
// of the elements one block covers per loop trip (CUDA_OPTIM_THREADS x 4 x the unroll), so only an
// entry's last chunk has a remainder. Large chunks amortise each block's table lookup and constants;
// AdamW's one loop trip per block (2048 elements) measured fastest all the same: 2.7B at ctx 1024,
// 161.2-161.6 ms a step against 161.9-162.1 with 8192 (docs/PERF.md). Both settable at build time
// (-DCUDA_ADAMW_CHUNK=...) for such measurements.
#define CUDA_OPTIM_THREADS 256
#ifndef CUDA_NORM_CHUNK
#define CUDA_NORM_CHUNK 65536
#endif
#ifndef CUDA_ADAMW_CHUNK
#define CUDA_ADAMW_CHUNK 2048
#endif

// One input of a global_norm op.
typedef struct cuda_norm_entry {
    const void *p;     // (n) F32 or BF16
    int64_t n;
    int64_t block0;    // first block of this entry within its op's launch
    int bf16;          // element type
    int vec;           // p is 16-byte aligned: float4 / 4 x bf16 loads
} cuda_norm_entry;

// One parameter of the AdamW update.
typedef struct cuda_adamw_entry {
    void *param;       // (n) F32 or BF16 working weight
    const void *grad;  // (n) F32 or BF16
    float *m, *v;      // (n) F32
    float *master;     // (n) F32 master weight (bf16 training), NULL when param is updated directly
    int64_t n;
    int64_t block0;    // first block of this entry in the launch
    float beta1, beta2, eps, weight_decay, max_norm;
    int param_bf16, grad_bf16;
    int vec;           // every pointer is 16-byte aligned (param 8-byte when bf16)
    int op;            // the ADAMW op it came from (host-side check of the pointers)
    int slot;          // optimizer in backward: 1 + the index in `slots` of this gradient's sum of
                       // squares; 0 in the ordinary form (one launch for every parameter)
    void *slots;       // (k) F32 or BF16 slots (optimizer in backward), else NULL
    int slots_bf16;
    int64_t grid;      // with a slot: blocks of the op's own launch (a few per SM), else 0
} cuda_adamw_entry;

struct stg_cuda {
    int device;
    bool tf32;
    bool gemm_tune; // choose matmul algorithms by timing (cuda_mm_prepare)
    char name[256];
    int sm_count;
    cudaStream_t stream;     // where runners enqueue: streams[0], or another for cuda_op_run_on
    // Concurrent streams for captured runs (streams[0] is the main one). Ops that use `work` or the
    // multi-tensor tables run on streams[0] only; matmuls on stream s > 0 use side_ws[s].
    cudaStream_t streams[CUDA_STREAMS + 1]; // + the communication stream (cuda_op_lane: CUDA_LANE_COMM)
    void *nccl;              // ncclComm_t for data parallelism (cuda_set_comm), NULL when none
    void *side_ws[CUDA_STREAMS];
    size_t side_ws_bytes;
    cublasLtHandle_t lt;
    void *lt_workspace;      // cuBLASLt workspace (set explicitly on every matmul)
    size_t lt_workspace_bytes;
    void *scratch;           // kernels' scratch (reductions, attention row statistics, tables)
    size_t scratch_bytes;
    void *op_tab;            // the ops' device tables (each record's table_bytes, op after op:
    size_t op_tab_bytes;     // the matmul_group address tables)
    // per-op state built by the records' prepare (indexed by op id; NULL where unused), each freed
    // by the free_state of the record that made it (the matmul family's GEMM plans)
    void **state;            // (nops)
    void (**state_free)(void *); // (nops)
    int nops;
    size_t side_ws_need;     // the largest cuBLASLt workspace an op's algorithm needs (matmul prepare)
    // multi-tensor tables (device memory inside scratch), built by cuda_prepare
    void *adamw_table;       // cuda_adamw_entry[n_adamw]
    int n_adamw;
    int first_adamw_op;      // the op that launches the one multi-tensor AdamW kernel (-1: none)
    void *norm_table;        // cuda_norm_entry[n_norm] for every global_norm op, op after op
    int n_norm;
    void *norm_partials;     // double partial sums of the global norm (inside work)
    int norm_blocks;         // the largest block count of one global_norm launch
    // added by the kernels' owner
    void *work;              // shared per-op scratch (inside scratch, after the tables)
    size_t work_bytes;
    cuda_adamw_entry *adamw_host; // host copy of the AdamW table (checked against ptr at run time)
    int64_t adamw_blocks;    // blocks of the one AdamW launch
    const void *adamw_norm;  // the global norm () and schedule state (2) every AdamW op reads
    const void *adamw_sched;
    int adamw_norm_bf16, adamw_sched_bf16;
    cuda_norm_entry *norm_host; // host copy of the global-norm tables
    int *norm_first;         // (2 nops): [0, nops) the first table entry of each global_norm op, -1
                             // for other ops; [nops, 2 nops) the AdamW entry of each adamw op, -1 else
    // the rope ops' cos/sin tables (device memory inside scratch), one per (positions, head dim,
    // theta), built by cuda_prepare (ops/rope/cuda.cu)
    struct cuda_rope_key *rope_keys;
    int n_rope;
    void *rope_tab;
    bool accumulate;         // cuda_set_accumulate: ops marked in stg_op.accum add into those outputs
};

// Whether op o adds into its output k now (gradient accumulation, after the first micro-batch).
static inline bool cuda_accumulating(const stg_cuda *c, const stg_op *o, int k) {
    return c->accumulate && ((o->accum >> k) & 1u);
}

// A rope table: float2 (cos, sin) [S][Dh / 2] at byte `off` of c->rope_tab.
struct cuda_rope_key {
    int64_t S;
    int64_t Dh;
    double theta;
    size_t off;
};

// ---- shared host helpers (ops/cuda/cuda.cu) -----------------------------------------------------
#ifdef __cplusplus
extern "C" {
#endif

int64_t cuda_numel(const stg_tensor *t);
int64_t cuda_rows(const stg_tensor *t);  // product of all dims but the last
int64_t cuda_last(const stg_tensor *t);  // the last dim (1 for a scalar)
// 1 when tensor t is BF16, 0 when F32; -1 with a message naming the op and tensor otherwise.
int cuda_is_bf16(const stg_graph *g, const stg_op *op, int t, stg_err *err);
// Same, and the tensor must have the dtype of tensor `like`.
int cuda_same_float(const stg_graph *g, const stg_op *op, int t, int like, stg_err *err);
// Blocks for a grid-stride loop over n items of `per_block` each, capped to a few waves.
unsigned cuda_blocks(const stg_cuda *c, int64_t n, int per_block);

// Per-op scratch (bytes of c->work) of the kernel files' ops; 0 when the op needs none.
size_t cuda_norm_bwd_work_bytes(const stg_graph *g, int op);      // ops/norm/cuda.cu
// The rope tables the graph's rope ops need (c->rope_keys, c->n_rope) and their bytes; then, with
// c->rope_tab set, their values (a kernel on c->stream). ops/rope/cuda.cu
int cuda_rope_plan(stg_cuda *c, const stg_graph *g, size_t *bytes, stg_err *err);
int cuda_rope_fill(stg_cuda *c, stg_err *err);
size_t cuda_cross_entropy_work_bytes(const stg_graph *g, int op); // ops/loss/cuda.cu
size_t cuda_embedding_bwd_work_bytes(const stg_graph *g, int op); // ops/embedding/cuda.cu (sort scratch)
// Builds the global-norm and AdamW host tables from ptr (ops/optim/cuda.cu): sets norm_host,
// norm_first, n_norm, adamw_host, n_adamw, first_adamw_op, adamw_blocks; returns the table bytes in
// *table_bytes and the largest global-norm partials in *work_bytes.
int cuda_optim_plan(stg_cuda *c, const stg_graph *g, void *const *ptr, size_t *table_bytes, size_t *work_bytes,
                    stg_err *err);

// ---- the records --------------------------------------------------------------------------------
// One per op kind: each family's ops/<family>/cuda.cu defines `stg_cuda_<name>`; ops/cuda/cuda.cu
// dispatches through the table of them generated from ops/base/oplist.h (a kind without a record
// does not link; a record without a run function or a lane fails cuda_prepare).
// Lanes of a record: the public CUDA_LANE_* + 1, so that 0 means "not set".
enum { CUDA_REC_MAIN = 1 + CUDA_LANE_MAIN, CUDA_REC_ANY = 1 + CUDA_LANE_ANY, CUDA_REC_BARRIER = 1 + CUDA_LANE_BARRIER,
       CUDA_REC_COMM = 1 + CUDA_LANE_COMM };

typedef struct cuda_rec {
    // Enqueues op `op` of g on c->stream; ptr[t] is tensor t's device address.
    int (*run)(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err);
    // Before the first step, outside any capture (NULL: nothing to prepare): may set *state (freed
    // with free_state when the context is re-prepared or freed), fill its `table` (device memory of
    // table_bytes, NULL when 0) and ask for *work bytes of the shared scratch c->work.
    int (*prepare)(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                   size_t *work, stg_err *err);
    void (*free_state)(void *state);
    size_t (*table_bytes)(const stg_graph *g, int op); // NULL: none
    // The stream lane (CUDA_REC_*): ANY for kernels that use nothing of the context but the stream
    // (and, for matmuls, the workspace cuda_op_run_on swaps in); MAIN for those that use the shared
    // scratch c->work; BARRIER for those that also touch tensors they do not name; COMM for NCCL.
    int lane;
    int (*lane_of)(const stg_graph *g, int op); // when set, the lane of each op (CUDA_REC_*)
} cuda_rec;
// Gradient accumulation: the run of a kind whose row has accum_out adds its output k into what the
// buffer holds when cuda_accumulating(c, op, k).

#define CUDA_X_REC_DECL(e, n, f, a) extern const cuda_rec stg_cuda_##n;
STG_OP_LIST(CUDA_X_REC_DECL)
#undef CUDA_X_REC_DECL

// ---- ops/matmul/cuda.cu: MATMUL, LINEAR and MATMUL_GROUP through cuBLASLt -------------------------------------
// Builds the plan (*state) of a MATMUL or LINEAR op: layouts, the matmul descriptor (bf16 in and out with
// fp32 compute; fp32 with TF32 only when c->tf32; fp32 output for grad_out), the algorithm from the
// heuristic (cached by shape across ops), using c->lt_workspace; with c->gemm_tune the fastest of
// the heuristic's first answers, timed on the op's tensors in ptr (NULL: the heuristic's first).
// MATMUL_GROUP: one batched product over its pairs through tables of addresses, written from ptr
// into `table` (device memory of cuda_mm_table_bytes; ignored by the other kinds).
int cuda_mm_prepare(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                    stg_err *err);
size_t cuda_mm_table_bytes(const stg_graph *g, int op); // 0 but for MATMUL_GROUP
void cuda_mm_free(void *plan);
size_t cuda_mm_workspace_bytes(void); // the cuBLASLt workspace to allocate
int cuda_mm_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, stg_err *err);

// ---- ops/attention/cuda.cu: fused causal attention, (B, S, H, Dh) layout -------------------------
size_t cuda_attention_scratch_bytes(const stg_graph *g, int op); // ATTENTION or ATTENTION_BWD
int cuda_attention_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err);
int cuda_attention_bwd_run(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *scratch, stg_err *err);

#ifdef __cplusplus
}
#endif

#endif
