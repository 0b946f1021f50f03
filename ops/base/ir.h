// The IR's types and limits: tensors, ops, dims and the graph of one step (built by graph/, read by
// the op rules, the planner and the backends). Part of the base layer: includes nothing outside
// ops/base/.
#ifndef STG_BASE_IR_H
#define STG_BASE_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/oplist.h"

#define STG_MAX_OUT 3
#define STG_NAME_MAX 96
// Limits that keep sizes far from int64 overflow (every byte count, and the planner's sums over all
// tensors, stay below 2^62): elements of one tensor, and tensors in one graph.
#define STG_MAX_NUMEL (INT64_C(1) << 36)
#define STG_MAX_TENSORS (1 << 22)

typedef enum stg_dtype { STG_F32, STG_BF16, STG_F64, STG_I32, STG_DTYPE_COUNT } stg_dtype;

typedef enum stg_precision {
    STG_PREC_FP32, // everything float32
    STG_PREC_BF16, // bf16 working weights and activations; fp32 master weights, grads, AdamW state
    STG_PREC_FP64, // everything float64 (CPU reference only: finite-difference checks)
} stg_precision;

// What a tensor is, for the planner and the report. Persistent: PARAM, OPTIMIZER, INPUT, WORKSPACE.
typedef enum stg_tclass {
    STG_CLASS_PARAM,      // a trained parameter (in bf16 mode: the bf16 working copy)
    STG_CLASS_GRAD,       // the final gradient of a parameter
    STG_CLASS_OPTIMIZER,  // AdamW m and v, and the fp32 master weights in bf16 mode
    STG_CLASS_INPUT,      // a batch input (tokens, targets)
    STG_CLASS_ACTIVATION, // written in forward and read in backward: saved for backward
    STG_CLASS_TEMPORARY,  // everything else the step writes and reads
    STG_CLASS_WORKSPACE,  // small persistent runtime state (optimizer step and learning rate)
    STG_CLASS_COUNT
} stg_tclass;

typedef enum stg_phase { STG_PHASE_FORWARD, STG_PHASE_BACKWARD, STG_PHASE_OPTIMIZER } stg_phase;

typedef enum stg_init {
    STG_INIT_NONE,
    STG_INIT_LINEAR,    // truncated normal, std sqrt(2/(d_in+d_out)), clipped at +-3 std; shape [d_out, d_in]
    STG_INIT_EMBEDDING, // truncated normal, std 1, clipped at +-3
    STG_INIT_ONES,
    STG_INIT_ZEROS,
    STG_INIT_NORMAL,    // normal, std init_std, not truncated (GPT-2's and Llama's N(0, 0.02))
} stg_init;

// What an OPTIMIZER tensor holds for its parameter (set where autodiff makes it; names are for
// people and checkpoints, never looked up to find a role).
typedef enum stg_role {
    STG_ROLE_NONE,
    STG_ROLE_ADAM_M,  // AdamW's first moment
    STG_ROLE_ADAM_V,  // AdamW's second moment
    STG_ROLE_MASTER,  // the fp32 master weight of a bf16 parameter
} stg_role;



typedef struct stg_tensor {
    char name[STG_NAME_MAX];
    int ndim;
    int64_t shape[STG_MAX_DIMS];
    stg_dtype dtype;
    stg_tclass cls;
    int producer;   // op id that writes it, -1 for parameters, inputs and state
    int base;       // tensor id this is a view of (same bytes), -1 if it owns its storage
    int param;      // GRAD / OPTIMIZER: the parameter it belongs to; -1 otherwise
    int grad;       // PARAM: its gradient tensor after autodiff; -1 otherwise
    int group;      // contiguous placement group (planner), -1 for none
    stg_init init;  // PARAM
    stg_role role;  // OPTIMIZER: which state of `param` it is
    double init_std; // PARAM with STG_INIT_NORMAL
    stg_loc loc;    // where it was declared or made
} stg_tensor;

typedef struct stg_op {
    stg_op_kind kind;
    int n_in;
    int *in;                  // tensor ids (owned)
    int n_out;
    int out[STG_MAX_OUT];     // tensor ids
    stg_attrs a;
    stg_phase phase;
    int fwd;                  // backward ops: the forward op whose gradient rule made it; else -1
    int recompute_of;         // a backward-phase copy of forward op k that recomputes a dropped activation; else -1
    // Gradient accumulation (stg_graph.grad_accum > 1): bit k set when output k is a parameter
    // gradient that this op adds into (its row's accum_out) in every micro-batch after the first;
    // the first writes it. The backends read the micro-batch's mode (first or later) at run time.
    uint8_t accum;
    stg_loc loc;
} stg_op;

typedef struct stg_dim {
    char name[64];
    int64_t value;
} stg_dim;

// What a dim is to the runtime and the tools, whatever the model calls it (graph_role_value and
// graph_role_name in graph/graph.h; the loader sets them: docs/MODEL_FORMAT.md's `roles:`).
typedef enum stg_dim_role {
    STG_DIM_BATCH, // sequences (or examples) per step
    STG_DIM_CTX,   // positions per sequence
    STG_DIM_VOCAB, // token ids are in [0, vocab)
    STG_DIM_ROLES
} stg_dim_role;

#define STG_MAX_MODEL_FILES 4 // a size file, the architecture it includes, and two more levels

typedef struct stg_graph {
    char name[64];
    stg_precision precision;
    stg_dtype act_dtype;   // activations and working weights
    stg_dtype grad_dtype;  // parameter gradients, master weights and AdamW state

    stg_tensor *t;
    int nt, cap_t;
    stg_op *ops;
    int nops, cap_ops;
    int n_fwd_ops;         // ops[0, n_fwd_ops) are the forward graph (set by autodiff)

    stg_dim *dims;         // resolved dims, in declaration order
    int ndims;
    int role_dim[STG_DIM_ROLES]; // index into dims of each role's dim; -1 when the model has none
    char (*opt_names)[64]; // string options (e.g. attention) and their resolved values
    char (*opt_values)[64];
    int nopts;

    int loss;              // tensor id of the scalar loss, -1 before the loader sets it
    int grad_norm;         // tensor id of the global gradient norm (after autodiff), -1 before
    int sched_state;       // tensor id of the optimizer's [steps done, lr] (WORKSPACE), -1 before
    // Micro-batches per optimizer step (graph_autodiff; 0 or 1: none). With more, every run of the
    // executor does this many forward and backward passes over as many batches, the parameter
    // gradients persist across them (the planner puts them in the persistent region) and sum the
    // passes' gradients, the loss gradient is 1/grad_accum (the mean), and the optimizer runs once.
    int grad_accum;
    // Parameter gradients stored in bf16 where a bf16 product writes them whole (graph_autodiff with
    // bf16_grads: the weights of linear and matmul, as autocast rounds dW); the others stay grad_dtype.
    int bf16_grads;

    int *schedule;         // op ids in execution order (graph_schedule)
    int nsched;

    char **strings;        // owned strings (file names referenced by locs)
    int nstrings;
    // The model files read (the one named, then each file it includes), as the loader opened them:
    // the inputs no output may replace. Point into strings.
    const char *files[STG_MAX_MODEL_FILES];
    int nfiles;
} stg_graph;

#endif
