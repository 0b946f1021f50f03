// The CPU reference backend's kernels: plain C over float32 or float64 storage, float64
// accumulation in reductions. One entry point runs any op of a graph.
#ifndef STG_OPS_CPU_H
#define STG_OPS_CPU_H

#include "graph/graph.h"

// Runs op `op` of graph g on host memory. data[t] points to tensor t's bytes for every tensor
// id t the op reads or writes (views point into their base). Float tensors must be F32 or F64
// (the CPU backend has no bf16). Returns 0, or -1 with a message (e.g. a token id out of range).
int cpu_op_run(const stg_graph *g, int op, void *const *data, stg_err *err);

// Whether the CPU backend implements kind k (every kind: checked by tests/test_registry.c).
int cpu_op_supported(stg_op_kind k);

#endif
