// The op registry: one entry per op kind (ops/base/oplist.h) with its arity, attributes, shape rule,
// gradient rule, FLOPs, what its backward reads, and whether it may run in place.
#ifndef STG_REGISTRY_H
#define STG_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

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
    int (*grad)(stg_graph *g, int op, const int *dout, const bool *want, int *din, stg_err *err);
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
} stg_op_def;

// Bit i of an input mask; inputs past 31 (of variadic ops: global_norm, allreduce) share bit 31.
static inline bool ops_bit(uint32_t mask, int i) { return i >= 0 && ((mask >> (i < 32 ? i : 31)) & 1u); }

// The lr_schedule op's learning rate for iteration t (0-based): CS336's get_lr_cosine_schedule.
double ops_lr_at(const stg_lr_attrs *a, int64_t t);

const stg_op_def *ops_def(stg_op_kind k);
// The outputs an op of kind k with n_in inputs writes (its n_out, or n_in / 2 for pairwise ops).
int ops_n_out(const stg_op_def *d, int n_in);
const char *ops_name(stg_op_kind k);
// Returns the kind for a name, or -1.
int ops_lookup(const char *name);

#endif
