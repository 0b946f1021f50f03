// The op registry: one entry per op kind (ops/base/oplist.h) with its arity, attributes, shape rule,
// gradient rule, FLOPs, what its backward reads, and whether it may run in place.
#ifndef STG_REGISTRY_H
#define STG_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/base/ir.h"
#include "ops/base/tensor.h"

typedef enum stg_attr_type { STG_ATTR_INT, STG_ATTR_I64, STG_ATTR_FLOAT, STG_ATTR_SHAPE } stg_attr_type;

// One attribute as written in a model file: `name=value`.
typedef struct stg_attr_def {
    const char *name;
    stg_attr_type type;
    size_t offset;      // offsetof within stg_attrs
    double def;         // default for INT and FLOAT
    int required;
} stg_attr_def;

#define STG_GRAD_SEED (-2) // dout value for the loss itself: d loss / d loss = 1

// How a gradient rule adds ops: graph_add_op's contract (graph/graph.h), given by autodiff. Adds an
// op with the given inputs, creates its outputs (named from name_hint), runs its shape rule and
// fills out_ids; returns the op id or -1.
typedef struct stg_grad_emit {
    int (*add_op)(stg_graph *g, stg_op_kind kind, const int *in, int n_in, const stg_attrs *a, stg_phase phase,
                  const char *name_hint, stg_loc loc, int *out_ids, stg_err *err);
} stg_grad_emit;

typedef struct stg_op_def {
    const char *name;
    int min_in, max_in;     // max_in -1: variadic
    int n_out;              // outputs written (the first is what a model file binds); -1: one per
                            // pair of inputs (ops_n_out)
    const stg_attr_def *attrs;
    int n_attrs;
    // Sets output shapes and dtypes; validates inputs. Output tensors exist with ndim 0.
    int (*infer)(stg_graph *g, int op, stg_err *err);
    // Emits the backward ops for forward op `op` given the gradients of its outputs (dout[i] is a
    // tensor id, -1 when that output has no gradient, STG_GRAD_SEED for the loss). For each input
    // with want[i] set it writes din[i], the gradient's tensor id; the rest stay -1.
    // NULL: not differentiable (backward and optimizer ops).
    int (*grad)(const stg_grad_emit *e, stg_graph *g, int op, const int *dout, const bool *want, int *din,
                stg_err *err);
    double (*flops)(const stg_graph *g, const stg_op *op);
    uint32_t saves_in;      // bit i: the gradient rule reads input i
    uint32_t saves_out;     // bit i: the gradient rule reads output i
    uint32_t no_grad_in;    // bit i: input i never gets a gradient (indices, targets)
    uint32_t no_decay_in;   // bit i: a parameter in input i is a norm gain or embedding
    uint32_t mutates_in;    // bit i: the op writes input i in place (optimizer)
    int inplace_in;         // output 0 may take input i's buffer if i dies here; -1 never
    int view;               // output 0 is a view of input 0 (same bytes)
    // > 0: the op may take one more input at this index, an addend of output 0's shape and dtype
    // that it adds to output 0 (graph_fold_add); 0: none.
    int addend_in;
    // Differentiable ops: a small model exercising the op, in model-file syntax (its `inputs:` and
    // `graph:` sections, the graph ending in a scalar `loss`). The sweep (tests/test_ops.c,
    // tests/test_gpu_sweep.c) loads it, differentiates it and checks the backward against finite
    // differences (fp64), fp32 against fp64, planned buffer sharing against separate buffers, and
    // CUDA against the CPU. Parameters use init=embedding (std 1); i32 inputs get values in [0, 5).
    const char *sample;
    // Bit k: the kind can add its output k into what the buffer holds instead of overwriting it
    // (gradient accumulation, stg_op.accum: cuBLASLt's beta = 1 for the products); every backend
    // implements it for these kinds. An op that has its addend input cannot (ops_can_accumulate).
    uint32_t accum_out;
    // Where the addend goes when the op has optional inputs before it (linear's bias); NULL:
    // addend_in. Read through ops_addend_at.
    int (*addend_at)(const stg_op *op);
    // Sets the attributes a model file's call implies from its input count (linear: a third input
    // is a bias); NULL: none. Called by the loader before the op is made.
    void (*from_call)(stg_attrs *a, int n_in);
    // Ops a model file writes (those with a gradient rule): their row of docs/MODEL_FORMAT.md's op
    // table, which tools/gen_optable.c writes from these (one line each, no '|'): what the op reads
    // and makes ("inputs → outputs"), and its attributes, every one of `attrs` named in backquotes
    // with its default or meaning (NULL when it has none).
    const char *doc;
    const char *doc_attrs;
    // The scheduler places the op just before the first op that reads one of its outputs (at the
    // end of the schedule when none does), not where it was made: an op whose output is large and
    // needed late (the fused head's late weight gradient) so that it is not held meanwhile.
    bool late;
    // The op makes a loss: its gradient rule takes STG_GRAD_SEED (the model's loss must be its output
    // itself; autodiff refuses a loss made by any other op, e.g. a sum of losses).
    bool loss;
} stg_op_def;

// Bit i of an input mask; inputs past 31 (of variadic ops: global_norm, allreduce) share bit 31.
static inline bool ops_bit(uint32_t mask, int i) { return i >= 0 && ((mask >> (i < 32 ? i : 31)) & 1u); }

// ---- what the families' rules share (ops/registry.c) -----------------------------------------

#define OPS_OP(g, id) (&(g)->ops[(id)])
#define OPS_IN(g, id, i) (&(g)->t[(g)->ops[(id)].in[(i)]])
#define OPS_OUT(g, id, o) (&(g)->t[(g)->ops[(id)].out[(o)]])
#define OPS_BIT(i) (1u << (i))
// An attribute row: ATTR(union member, field, type, default, required); ATTRS(array) for a row.
#define ATTR(T, field, type, def, req) {#field, type, offsetof(stg_attrs, T.field), def, req}
#define ATTRS(x) x, (int)(sizeof x / sizeof x[0])

void ops_set_shape(stg_tensor *t, int ndim, const int64_t *shape, stg_dtype dt);
void ops_copy_shape(stg_tensor *t, const stg_tensor *src, stg_dtype dt);
bool ops_is_float(stg_dtype d);
// "file:line:col: <op>: <fmt with a and b>" at op id's location; returns -1.
int ops_bad(stg_graph *g, int id, stg_err *err, const char *fmt, const char *a, const char *b);
const char *ops_sh(const stg_tensor *t, char *buf); // shape string, buf of 128
int ops_need_float(stg_graph *g, int id, int i, stg_err *err);
int ops_need_ndim(stg_graph *g, int id, int i, int lo, int hi, stg_err *err);
int ops_need_same(stg_graph *g, int id, int i, int j, stg_err *err);
void ops_rows_shape(const stg_tensor *x, int *nd, int64_t *s); // all dims but the last
stg_dtype ops_grad_dtype_for(const stg_graph *g, const stg_tensor *t);
// The optional addend input (stg_op_def.addend_in): of output 0's shape and dtype.
int ops_check_addend(stg_graph *g, int id, stg_err *err);
// Whether op id can add into its output k (its row's accum_out, and no addend input taken).
bool ops_can_accumulate(const stg_graph *g, int id, int k);
// The gradient of the step's loss with respect to the model's loss (what STG_GRAD_SEED stands
// for): 1, or 1 / g->grad_accum when the step sums that many micro-batches' gradients (their mean).
// A loss op's gradient rule scales its result by it.
double ops_loss_grad(const stg_graph *g);
// The input index at which op takes an addend (-1: its kind takes none); it has one when its
// n_in is that index + 1. ops_addend_of: the addend's input index, -1 when it has none.
int ops_addend_at(const stg_op *op);
int ops_addend_of(const stg_op *op);
// Shape rules several families use.
int ops_infer_same_as_in0(stg_graph *g, int id, stg_err *err);
int ops_infer_binary_same(stg_graph *g, int id, stg_err *err);
int ops_infer_ternary_same(stg_graph *g, int id, stg_err *err);
double ops_numel_in(const stg_graph *g, const stg_op *op, int i);
double ops_numel_out(const stg_graph *g, const stg_op *op, int o);
double ops_flops_elem1(const stg_graph *g, const stg_op *op);
double ops_flops_elem4(const stg_graph *g, const stg_op *op);
double ops_flops_elem8(const stg_graph *g, const stg_op *op);
double ops_flops_softmax(const stg_graph *g, const stg_op *op);
double ops_flops_zero(const stg_graph *g, const stg_op *op);
// Emits one backward op of kind k for forward op fwd through e (its outputs named from hint);
// returns the op id or -1. ops_emit1: the same, named "d.<tensor like>", returning output 0.
int ops_emit(const stg_grad_emit *e, stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a,
             const char *hint, int *outs, stg_err *err);
int ops_emit1(const stg_grad_emit *e, stg_graph *g, int fwd, stg_op_kind k, const int *in, int n, const stg_attrs *a,
              int like, stg_err *err);
const char *ops_dname(const stg_graph *g, int t, char *buf); // "d.<name of t>", buf of STG_NAME_MAX
void ops_name_out(stg_graph *g, int t, int like);             // names t "d.<name of like>"
stg_attrs ops_no_attrs(void);

// The lr_schedule op's learning rate for iteration t (0-based): the schedule its attributes name
// (ops/optim/schedule.h; STG_LR_COSINE is CS336's get_lr_cosine_schedule).
double ops_lr_at(const stg_lr_attrs *a, int64_t t);

// linear_cross_entropy's rows per chunk over `rows` rows and vocab V (ops/loss/rules.c): the
// attribute `chunk` when > 0, else the largest multiple of 64 rows whose logits hold at most
// OPS_LCE_CHUNK_ELEMS elements (at least 64); never more than rows. The planner's formula and
// every backend use this one function, so they agree on the chunk scratch.
#define OPS_LCE_CHUNK_ELEMS (INT64_C(1) << 25)
int64_t ops_lce_chunk(int64_t rows, int64_t V, int64_t chunk);
// Where the fused head's backward forms keep dW and the scratch: linear_cross_entropy_bwd (dx, dw,
// scratch), _dx (dx, scratch), _dw (dw, scratch); -1: none. The forward's scratch is output 2.
static inline int ops_lce_dw_out(stg_op_kind k) {
    return k == STG_OP_LINEAR_CROSS_ENTROPY_BWD ? 1 : k == STG_OP_LINEAR_CROSS_ENTROPY_DW ? 0 : -1;
}
static inline int ops_lce_scratch_out(stg_op_kind k) {
    return k == STG_OP_LINEAR_CROSS_ENTROPY_DX || k == STG_OP_LINEAR_CROSS_ENTROPY_DW ? 1 : 2;
}

// The elements of linear_cross_entropy_bwd's scratch (its last output, 1-D, of x's dtype): the
// chunk's C x V logits, and with dx_acc (a bf16 dx) an fp32 (rows, d) accumulator for dx after
// them, at element OPS_LCE_ACC_AT(C x V) (2 bf16 elements per fp32 value).
#define OPS_LCE_ACC_AT(cv) (((cv) + 127) / 128 * 128)
int64_t ops_lce_bwd_scratch(int64_t rows, int64_t d, int64_t V, int64_t chunk, bool dx_acc);

// The row of kind k (NULL for a value outside the op list).
const stg_op_def *ops_def(stg_op_kind k);
// The outputs an op of kind k with n_in inputs writes (its n_out, or n_in / 2 for pairwise ops).
int ops_n_out(const stg_op_def *d, int n_in);
const char *ops_name(stg_op_kind k);
// Returns the kind for a name, or -1.
int ops_lookup(const char *name);

#endif
