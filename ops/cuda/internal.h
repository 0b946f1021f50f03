// Internals shared by the CUDA kernel files (not for use outside ops/cuda/).
//
// Layout of the context's device memory beyond the plan:
//   lt_workspace  the cuBLASLt workspace (cuda_mm_workspace_bytes)
//   side_ws       the other streams' cuBLASLt workspaces
//   op_tab        the ops' device tables (each record's table_bytes), op after op
//   scratch       [each group's table][work], one cudaMalloc made by cuda_prepare: the groups'
//                 tables (cuda_group: preparation shared by several ops) are built once from the
//                 plan's pointers; `work` is shared by every op that needs temporary device memory
//                 (they run one after another on c->stream): norm-backward partial sums,
//                 cross-entropy row losses, global-norm partials, attention scratch.
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

// Streams a captured run may spread its ops over (cuda_op_lane says which ops may leave stream 0);
// settable at build time (-DCUDA_STREAMS=N, 1 to 7) for comparisons.
#ifndef CUDA_STREAMS
#define CUDA_STREAMS 3
#endif
static_assert(CUDA_STREAMS >= 1 && CUDA_STREAMS <= 7, "1 to 7 compute streams (runtime/exec.c: MAX_STREAMS with the communication stream)");

// One cuBLASLt matmul configuration, chosen before capture and reused (ops/matmul/cuda.cu).
typedef struct cuda_mm_plan cuda_mm_plan;

// A preparation shared by several ops (ops/cuda/cuda.cu: cuda_prepare); see cuda_rec.group.
typedef struct cuda_group cuda_group;

// A group of the prepared graph: its state (freed by its free_state) and the bytes of its table
// inside scratch (256-byte aligned).
typedef struct cuda_group_slot {
    const cuda_group *group;
    void *state;
    size_t table_bytes;
} cuda_group_slot;

struct stg_cuda {
    int device;
    bool tf32;
    bool gemm_tune; // choose matmul algorithms by timing (cuda_mm_prepare)
    char name[256];
    int sm_count;
    bool pdl;                // programmatic dependent launch (sm_90 and later; STG_NO_PDL=1 in the environment: off)
    cudaStream_t stream;     // where runners enqueue: streams[0], or another for cuda_op_run_on
    // Concurrent streams for captured runs (streams[0] is the main one). Ops that use `work` run on
    // streams[0] only; matmuls on stream s > 0 use side_ws[s].
    cudaStream_t streams[CUDA_STREAMS + 1]; // + the communication stream (cuda_op_lane: CUDA_LANE_COMM)
    // A stream of the attention backward's own and its fork / join events (att_side in
    // ops/attention/sm90a/attention_wgmma.h: its dq launch beside its dk/dv launch), made with the streams.
    cudaStream_t side;
    cudaEvent_t side_ev[2];
    void *nccl;              // ncclComm_t for data parallelism (cuda_set_comm), NULL when none
    void *side_ws[CUDA_STREAMS];
    size_t side_ws_bytes;
    cublasLtHandle_t lt;
    void *lt_workspace;      // cuBLASLt workspace (set explicitly on every matmul)
    size_t lt_workspace_bytes;
    void *scratch;           // the groups' tables and the kernels' scratch `work`
    size_t scratch_bytes;
    void *op_tab;            // the ops' device tables (each record's table_bytes, op after op:
    size_t op_tab_bytes;     // the matmul_group address tables)
    // per-op state built by the records' prepare (indexed by op id; NULL where unused), each freed
    // by the free_state of the record that made it (the matmul family's GEMM plans)
    void **state;            // (nops)
    void (**state_free)(void *); // (nops)
    int nops;
    size_t side_ws_need;     // the largest cuBLASLt workspace an op's algorithm needs (matmul prepare)
    cuda_group_slot *groups; // the groups of the prepared graph, in the order of their first op
    int ngroups;
    void *work;              // shared per-op scratch (inside scratch, after the groups' tables)
    size_t work_bytes;
    bool accumulate;         // cuda_set_accumulate: ops marked in stg_op.accum add into those outputs
    // (nops) 1 for an op whose work the op before it does (a decoding graph's swiglu, written by the
    // few-rows w1/w3 product that makes its inputs, ops/matmul/cuda.cu): its run enqueues nothing.
    // Set by the groups' plans.
    unsigned char *folded;
};

// Whether op o adds into its output k now (gradient accumulation, after the first micro-batch).
static inline bool cuda_accumulating(const stg_cuda *c, const stg_op *o, int k) {
    return c->accumulate && ((o->accum >> k) & 1u);
}

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
// The state group gr's plan made for the prepared graph; NULL when the graph has no op of its kinds
// or cuda_prepare was not called.
void *cuda_group_state(const stg_cuda *c, const cuda_group *gr);

// Per-op scratch (bytes of c->work) of the kernel files' ops; 0 when the op needs none.
size_t cuda_norm_bwd_work_bytes(const stg_graph *g, int op);      // ops/norm/cuda.cu
size_t cuda_cross_entropy_work_bytes(const stg_graph *g, int op); // ops/loss/cuda.cu
size_t cuda_embedding_bwd_work_bytes(const stg_graph *g, int op); // ops/embedding/cuda.cu (sort scratch)

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
    // table_bytes inside c->op_tab, NULL when 0; table_bytes a multiple of 256 keeps the next op's
    // aligned) and ask for *work bytes of the shared scratch c->work.
    int (*prepare)(stg_cuda *c, const stg_graph *g, int op, void *const *ptr, void *table, void **state,
                   size_t *work, stg_err *err);
    void (*free_state)(void *state);
    size_t (*table_bytes)(const stg_graph *g, int op); // NULL: none
    // The stream lane (CUDA_REC_*): ANY for kernels that use nothing of the context but the stream
    // (and, for matmuls, the workspace cuda_op_run_on swaps in); MAIN for those that use the shared
    // scratch c->work; BARRIER for those that also touch tensors they do not name; COMM for NCCL, and
    // for the optimizer in backward's updates (a run never has both: data parallelism refuses it).
    int lane;
    int (*lane_of)(const stg_graph *g, int op); // when set, the lane of each op (CUDA_REC_*)
    // Preparation that spans several ops (NULL: none): the records of the kinds that share it point
    // to one cuda_group; their runs find its state with cuda_group_state.
    const cuda_group *group;
} cuda_rec;

// A preparation shared by several ops, of one kind or of several (the multi-tensor AdamW table over
// every parameter, the rope cos/sin tables shared by the rope ops of one shape). cuda_prepare runs
// each group its graph's records name once, after every record's prepare: plan, then, with the
// device memory in place, fill. The group itself names its state (cuda_group_state).
struct cuda_group {
    const char *name; // what its table holds, for cuda_workspace_parts
    // Builds the host side from the graph and ptr: *state (freed with free_state, also when plan
    // fails), the bytes of its device table (*table_bytes, 0 for none) and of the shared scratch
    // c->work its ops need (*work).
    int (*plan)(stg_cuda *c, const stg_graph *g, void *const *ptr, void **state, size_t *table_bytes, size_t *work,
                stg_err *err);
    // Fills its table (device memory of table_bytes inside c->scratch, NULL when 0) before the first
    // step, outside any capture; the ops read it from every stream.
    int (*fill)(stg_cuda *c, void *state, void *table, stg_err *err);
    void (*free_state)(void *state);
};
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
