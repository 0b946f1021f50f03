// The IR: tensors, ops and dims of one training step. Built by the loader (forward), extended by
// autodiff (backward and optimizer), ordered by the scheduler. Knows nothing of memory or devices.
//
// Conventions: shapes are PyTorch order, outermost first. Tensor and op ids are indices into
// g->t and g->ops. Every tensor is written by exactly one op (SSA) except persistent tensors
// (parameters, optimizer state), which only the optimizer op mutates in place.
#ifndef STG_GRAPH_H
#define STG_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/err.h"
#include "ops/oplist.h"

#define STG_MAX_DIMS 6
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
} stg_init;

// Typed op parameters. Each op kind names its struct in ops/oplist.h.
typedef struct { int unused; } stg_no_attrs;
typedef struct { int64_t vocab; } stg_embedding_bwd_attrs;          // rows of the weight
typedef struct { int ta, tb, grad_out; } stg_matmul_attrs;          // op(A) op(B), op = transpose if set;
                                                                    // grad_out: output in the graph's grad dtype
typedef struct { double eps; } stg_norm_attrs;
typedef struct { double theta; int inverse; } stg_rope_attrs;       // inverse: rotate by -angle (the backward)
typedef struct { double fill; } stg_mask_attrs;                     // value written above the diagonal
typedef struct { double scale; } stg_attention_attrs;               // 0 means 1/sqrt(head_dim)
typedef struct { double factor; } stg_scale_attrs;
typedef struct { int ndim; int64_t shape[STG_MAX_DIMS]; } stg_reshape_attrs;
typedef struct { int d0, d1; } stg_transpose_attrs;                 // swaps two dims (a copy)
// slot > 0: the optimizer-in-backward form: the op's last input is the per-parameter slots of the
// squared gradient norms (WORKSPACE), and the op writes the sum of squares of its (unclipped)
// gradient into element slot - 1; input 4 (the clipping norm) is then the previous step's norm.
typedef struct { double beta1, beta2, eps, weight_decay, max_norm; int slot; } stg_adamw_attrs;
// CS336's cosine schedule with linear warm-up, advanced on the device: step += 1, lr = f(step - 1).
// cosine_steps 0: constant lr after the warm-up.
typedef struct { double lr, min_lr; int64_t warmup, cosine_steps; } stg_lr_attrs;
typedef struct { int64_t root; } stg_comm_attrs; // broadcast: the rank whose values everyone gets

typedef union stg_attrs {
    stg_no_attrs none;
    stg_embedding_bwd_attrs embedding_bwd;
    stg_matmul_attrs matmul;
    stg_norm_attrs norm;
    stg_rope_attrs rope;
    stg_mask_attrs mask;
    stg_attention_attrs attention;
    stg_scale_attrs scale;
    stg_reshape_attrs reshape;
    stg_transpose_attrs transpose;
    stg_adamw_attrs adamw;
    stg_lr_attrs lr;
    stg_comm_attrs comm;
} stg_attrs;

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
    stg_loc loc;
} stg_op;

typedef struct stg_dim {
    char name[64];
    int64_t value;
} stg_dim;

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
    char (*opt_names)[64]; // string options (e.g. attention) and their resolved values
    char (*opt_values)[64];
    int nopts;

    int loss;              // tensor id of the scalar loss, -1 before the loader sets it
    int grad_norm;         // tensor id of the global gradient norm (after autodiff), -1 before
    int sched_state;       // tensor id of the optimizer's [steps done, lr] (WORKSPACE), -1 before

    int *schedule;         // op ids in execution order (graph_schedule)
    int nsched;

    char **strings;        // owned strings (file names referenced by locs)
    int nstrings;
} stg_graph;

stg_graph *graph_new(stg_precision prec, stg_err *err);
void graph_free(stg_graph *g);

size_t stg_dtype_size(stg_dtype d);
const char *stg_dtype_name(stg_dtype d);
const char *stg_class_name(stg_tclass c);
const char *stg_precision_name(stg_precision p);
const char *stg_phase_name(stg_phase p);
bool stg_class_persistent(stg_tclass c);

int64_t graph_numel(const stg_tensor *t);
int64_t graph_bytes(const stg_tensor *t);
// "[4, 256, 768]" into buf.
const char *graph_shape_str(const stg_tensor *t, char *buf, size_t n);

// Keeps a copy of s for the graph's lifetime (file names for locs).
const char *graph_intern(stg_graph *g, const char *s, stg_err *err);

// Adds a tensor; returns its id or -1.
int graph_add_tensor(stg_graph *g, const char *name, int ndim, const int64_t *shape, stg_dtype dt,
                     stg_tclass cls, stg_loc loc, stg_err *err);
// Fails unless every size is >= 0 and the element count is at most STG_MAX_NUMEL (no overflow).
int graph_shape_check(const char *name, int ndim, const int64_t *shape, stg_loc loc, stg_err *err);
// Finds a tensor by exact name; -1 when absent.
int graph_find_tensor(const stg_graph *g, const char *name);

// Adds an op with the given inputs, creates its outputs (named out_names[i] or derived from
// name_hint), runs the registry's shape rule and fills out_ids. Returns the op id or -1.
int graph_add_op(stg_graph *g, stg_op_kind kind, const int *in, int n_in, const stg_attrs *a,
                 stg_phase phase, const char *name_hint, stg_loc loc, int *out_ids, stg_err *err);

// Dims and options.
// add(prod, addend) folded into the op that makes prod: when that op (id first_op or later) takes an
// addend (its registry entry's addend_in; matmul and linear: cuBLASLt's beta = 1) and has none yet,
// prod is its output 0, nothing else reads prod (as input or through a view) and addend has prod's
// shape and dtype, the op takes addend as its extra input (one pass over the bytes fewer) and prod
// is renamed `name` (unless NULL). Returns 1 when folded (prod is the sum), 0 when not (the caller
// emits the add), -1 on error.
int graph_fold_add(stg_graph *g, int prod, int addend, const char *name, int first_op, stg_err *err);

int64_t graph_dim(const stg_graph *g, const char *name, bool *found);
const char *graph_option(const stg_graph *g, const char *name);

// Parameter count (elements of PARAM tensors).
int64_t graph_param_count(const stg_graph *g);

// ---- autodiff (graph/autodiff.c) ----
typedef struct stg_optim_config {
    double beta1, beta2, eps, weight_decay, max_norm;
    double lr, min_lr;              // the learning-rate schedule (lr_schedule op)
    int64_t warmup, cosine_steps;
    bool decay_exempt_norms_embeddings; // no weight decay on norm gains and embeddings
    // Optimizer in backward: each parameter's AdamW op runs as soon as its gradient is final and
    // the parameter has no reader left in the step (graph_schedule places it), so the gradient dies
    // there; clipping uses the previous step's global norm (none on a run's first step).
    bool in_backward;
    // Data parallelism (graph/dp.c): with dp_world >= 1 the gradients are averaged over dp_world
    // processes before clipping, in buckets of about dp_bucket_bytes (0: one bucket after the whole
    // backward pass) whose first holds about dp_first_bucket_bytes; the loss is averaged too.
    int dp_world;
    int64_t dp_bucket_bytes, dp_first_bucket_bytes;
    // ZeRO stage 1 (dp_zero 1): each parameter has one owner rank (graph_dp_owners), which alone
    // keeps its AdamW state (and fp32 master weight) and updates it; a broadcast op from the owner
    // then gives every rank the new values. dp_rank: this process.
    int dp_zero, dp_rank;
} stg_optim_config;

stg_optim_config graph_optim_defaults(void);

// Appends the backward graph (from the registry's gradient rules), the global gradient norm and
// one AdamW op per parameter (which applies clipping by that norm). Sets the PARAM -> GRAD links,
// the OPTIMIZER tensors and the final classes (activation vs temporary).
int graph_autodiff(stg_graph *g, const stg_optim_config *oc, stg_err *err);

// The backward pass alone from output `out` with the given gradient tensor `seed` (same shape;
// an INPUT, for benchmarks of a part of a model): parameter gradients, no optimizer.
int graph_backward(stg_graph *g, int out, int seed, stg_err *err);

// Data parallelism, called by graph_autodiff when oc->dp_world >= 1, after the gradients are final
// and before the optimizer: the gradients go into buckets in the order the backward pass finishes
// them (each bucket a contiguous placement group for the planner), each bucket gets one allreduce
// op (mean over the ranks, in place), and the loss one more. Returns the number of buckets.
int graph_data_parallel(stg_graph *g, const stg_optim_config *oc, stg_err *err);
// ZeRO-1 owners: owner[t] for every PARAM tensor t (-1 for other tensors), balancing parameter
// elements over oc->dp_world ranks (largest first, each to the least loaded rank; the same on every
// rank). owner has g->nt entries.
void graph_dp_owners(const stg_graph *g, const stg_optim_config *oc, int *owner);

// Marks tensors written in forward and read later as ACTIVATION, the rest TEMPORARY. Called by
// graph_autodiff; call it directly for forward-only graphs.
void graph_classify(stg_graph *g);

// ---- recomputation (graph/recompute.c) ----
// Drops saved activation t (a forward tensor read in backward, or its base): copies of the forward
// ops that make it, from tensors still available in backward (parameters, inputs, activations that
// stay saved), are added to the backward pass and its backward readers read the copy instead, so t
// dies at its last forward use. Fails (changing nothing) when t cannot be recomputed that way.
int graph_recompute(stg_graph *g, int t, stg_err *err);
// Whether t can be dropped, and the FLOPs its recomputation costs (the copied ops' FLOPs).
bool graph_recompute_cost(const stg_graph *g, int t, double *flops);

// ---- grouped products (graph/group.c) ----
// Replaces each set of 2 or 3 independent linear / matmul ops of one phase, with equal shapes,
// transposes and dtypes, that share (the view root of) an operand, by one matmul_group op with the
// same outputs (one batched product on a GPU): q, k, v and their weight gradients, w1 and w3 and
// theirs in the CS336 LM. Call after graph_autodiff and before graph_schedule (it reorders the ops,
// forward ones first, and drops the schedule). Returns the number of groups made, -1 on error.
int graph_group_matmuls(stg_graph *g, stg_err *err);

// A topological order of all ops: creation order, with every recomputation copy placed just before
// the first op that reads what it makes. With the optimizer in backward (adamw ops with a slot),
// each such adamw op moves to just after the last op that writes its gradient or reads its
// parameter (or a view of it), lr_schedule to just before the first of them, and slot_norm stays
// last. Fails on a cycle or a tensor read before it is written.
int graph_schedule(stg_graph *g, stg_err *err);
// Whether g's optimizer runs in the backward pass (graph_autodiff with in_backward).
bool graph_optim_in_backward(const stg_graph *g);

// Checks the invariants: SSA, every input defined, shapes consistent with the registry, every
// parameter has exactly one gradient (after autodiff). Used by tests and after loading.
int graph_validate(const stg_graph *g, stg_err *err);

// FLOPs of one op (from the registry) and of a phase.
double graph_op_flops(const stg_graph *g, int op);
double graph_phase_flops(const stg_graph *g, stg_phase ph);

// Graphviz.
int graph_write_dot(const stg_graph *g, const char *path, stg_err *err);

#endif
