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

#include "ops/base/ir.h"
#include "ops/base/tensor.h"



stg_graph *graph_new(stg_precision prec, stg_err *err);
void graph_free(stg_graph *g);



// Keeps a copy of s for the graph's lifetime (file names for locs).
const char *graph_intern(stg_graph *g, const char *s, stg_err *err);

// Adds a tensor; returns its id or -1.
int graph_add_tensor(stg_graph *g, const char *name, int ndim, const int64_t *shape, stg_dtype dt,
                     stg_tclass cls, stg_loc loc, stg_err *err);
// Fails unless every size is >= 0 and the element count is at most STG_MAX_NUMEL (no overflow).
int graph_shape_check(const char *name, int ndim, const int64_t *shape, stg_loc loc, stg_err *err);
// Finds a tensor by exact name; -1 when absent.
int graph_find_tensor(const stg_graph *g, const char *name);
// The OPTIMIZER tensor holding state `role` of parameter p; -1 when there is none (fp32 graphs
// have no master; a data-parallel rank holds only the state of the parameters it owns).
int graph_param_state(const stg_graph *g, int p, stg_role role);

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

// A dim by its name in the model file: for a model family's own sizes (d_model, n_heads, ...). What
// the runtime and the tools need whatever the model calls it (batch, ctx, vocab) is a role:
// graph_role_value.
int64_t graph_dim(const stg_graph *g, const char *name, bool *found);
// Dim roles (stg_dim_role, ops/base/ir.h): g->role_dim[r] is the index in g->dims of the dim with
// role r, or -1. The loader sets them (a dim named like the role, or the model file's `roles:`);
// derived graphs (autodiff, graph_infer) keep them.
// The role's value (0 and *found false when the model has none).
int64_t graph_role_value(const stg_graph *g, stg_dim_role r, bool *found);
// The name of the role's dim in this model (for --set NAME=...), NULL when it has none.
const char *graph_role_name(const stg_graph *g, stg_dim_role r);
// Its index in g->dims, -1 when none.
int graph_role_index(const stg_graph *g, stg_dim_role r);
// The role's key in model files and messages: "batch", "ctx", "vocab".
const char *graph_role_key(stg_dim_role r);
// The role with that key, -1 when none.
int graph_role_parse(const char *key);
// "the model has no ctx dim: name one `ctx`, or declare it in the model file: roles: {ctx: DIM}" (errors).
const char *graph_role_missing(stg_dim_role r);
// Gives each role to the dim named like it (a graph built by hand, as the loader does by default).
void graph_roles_by_name(stg_graph *g);
const char *graph_option(const stg_graph *g, const char *name);

// Parameter count (elements of PARAM tensors).
int64_t graph_param_count(const stg_graph *g);

// ---- autodiff (graph/autodiff.c) ----
typedef struct stg_optim_config {
    double beta1, beta2, eps, weight_decay, max_norm;
    double lr, min_lr;              // the learning-rate schedule (lr_schedule op)
    int64_t warmup, cosine_steps;
    int lr_kind, wsd_shape;         // STG_LR_* (cosine, the default), STG_WSD_* (ops/base/oplist.h)
    double wsd_decay_frac;          // WSD: the share of cosine_steps spent in the final decay
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
    // Gradient accumulation: micro-batches per optimizer step (0 or 1: none). graph_autodiff sets
    // g->grad_accum, scales the loss gradient by 1 / grad_accum, makes each parameter's final
    // gradient accumulate (the op that writes it adds into it after the first micro-batch: its
    // stg_op.accum bit, or a copy op that does) and refuses in_backward (a gradient is dead as soon
    // as its update runs, so it cannot be summed over micro-batches).
    int grad_accum;
    // bf16 precision only: each parameter gradient that one product writes whole (the weight of a
    // linear or matmul, used once) is stored in bf16, the rounding autocast gives dW, and read so by
    // the norm and AdamW (2 bytes a parameter less for each); tied weights, embeddings, norm gains,
    // biases and the fused head's weight keep fp32 gradients. Refused with grad_accum > 1 (the sum
    // over micro-batches needs fp32).
    bool bf16_grads;
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
