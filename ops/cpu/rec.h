// The CPU backend's record of an op kind: each op family's ops/<family>/cpu.c defines
// `stg_cpu_<name>` for each of its kinds (ops/base/oplist.h), and ops/cpu/cpu.c dispatches through
// the table of them (a kind without a record does not link). Also the helpers the families'
// runners share.
#ifndef STG_OPS_CPU_REC_H
#define STG_OPS_CPU_REC_H

#include <stddef.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "ops/base/ir.h"
#include "ops/base/tensor.h"

// A runner gets the op's tensors (data), the float type (f64) and the caller's scratch, which
// holds at least the op's scratch bytes (checked by the kernels that use it).
typedef int (*cpu_run_fn)(const stg_graph *g, const stg_op *op, void *const *data, void *scratch,
                          size_t scratch_bytes, int f64, stg_err *err);

// The scratch bytes an op's kernel needs, from its shapes (0 when they are invalid: running the
// op then fails on them).
typedef size_t (*cpu_scratch_fn)(const stg_graph *g, const stg_op *op, int f64);

typedef struct stg_cpu_rec {
    cpu_run_fn run;         // never NULL
    cpu_scratch_fn scratch; // NULL: the kernel needs no scratch
    uint32_t skip_in;       // inputs (bits) whose float type is not checked against the rest:
                            // scalars read by their own dtype (adamw's norm and schedule state)
} stg_cpu_rec;
// Gradient accumulation: a runner of a kind whose row has accum_out adds its output k into what the
// buffer holds when bit k of op->accum is set. The dispatcher (cpu_op_run_accum) hands runners the
// op with those bits cleared in the first micro-batch, so they mean "add now".

// Calls the f64 or the f32 variant of kernel `name` with the same arguments (tensor pointers
// are void * and convert to either).
#define KCALL(f64, name, ...) ((f64) ? name##_f64(__VA_ARGS__) : name##_f32(__VA_ARGS__))

static inline const stg_tensor *IN(const stg_graph *g, const stg_op *op, int i) { return &g->t[op->in[i]]; }
static inline const stg_tensor *OUT(const stg_graph *g, const stg_op *op, int i) { return &g->t[op->out[i]]; }
static inline void *DIN(void *const *data, const stg_op *op, int i) { return data[op->in[i]]; }
static inline void *DOUT(void *const *data, const stg_op *op, int i) { return data[op->out[i]]; }

// Checks with a message naming the tensor: i32, n elements in every input and output (the
// elementwise ops), n elements, at least min_ndim dims.
int cpu_need_i32(const stg_tensor *t, stg_err *err);
int cpu_same_numel(const stg_graph *g, const stg_op *op, int64_t n, stg_err *err);
int cpu_need_numel(const stg_tensor *t, int64_t n, stg_err *err);
int cpu_need_ndim(const stg_tensor *t, int min_ndim, stg_err *err);
// Element i of a scalar-ish tensor of any dtype but bf16, as a double (NaN for bf16).
double cpu_read_scalar(const stg_tensor *t, const void *p, int64_t i);
// Output 0 += the op's addend input (its row's addend_in) when the op has one (matmul, linear and
// the norm backward fold a residual add that way).
void cpu_add_addend(const stg_graph *g, const stg_op *op, void *const *data, int f64);

#endif
