// The CPU reference backend's kernels: plain C over float32 or float64 storage, float64
// accumulation in reductions. One entry point runs any op of a graph.
#ifndef STG_OPS_CPU_H
#define STG_OPS_CPU_H

#include "ops/base/ir.h"

#include <stddef.h>

// The scratch bytes op `op` of g needs (from its shapes; 0 for most ops). Per-thread parts count
// the OpenMP threads its kernel may use: omp_get_max_threads() now, 1 without OpenMP. A runtime
// allocates the max over a graph's ops once, before the first step (runtime/backend_cpu.c).
size_t cpu_op_scratch_bytes(const stg_graph *g, int op);

// Runs op `op` of graph g on host memory. data[t] points to tensor t's bytes for every tensor
// id t the op reads or writes (views point into their base). Float tensors must be F32 or F64
// (the CPU backend has no bf16). scratch (scratch_bytes long, aligned to 8 bytes or more; may be
// NULL when cpu_op_scratch_bytes is 0) is working memory the op may overwrite; nothing is
// allocated. Returns 0, or -1 with a message (e.g. a token id out of range, or scratch smaller
// than cpu_op_scratch_bytes, in which case no output is written).
int cpu_op_run(const stg_graph *g, int op, void *const *data, void *scratch, size_t scratch_bytes,
               stg_err *err);

// The same, in a micro-batch after the first of a step that accumulates gradients (accumulate 1):
// an op marked to accumulate (stg_op.accum) adds its result into those outputs instead of
// writing them. accumulate 0 is cpu_op_run.
int cpu_op_run_accum(const stg_graph *g, int op, void *const *data, void *scratch, size_t scratch_bytes,
                     int accumulate, stg_err *err);

// Whether the CPU backend implements kind k (every kind has a record: checked by tests/test_ops.c).
int cpu_op_supported(stg_op_kind k);

#endif
