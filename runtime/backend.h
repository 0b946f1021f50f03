// The backend interface: where the planned regions live and how one op runs there. The executor
// (runtime/exec.h) drives a backend through this table and nothing else.
#ifndef STG_BACKEND_H
#define STG_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

typedef struct rt_backend rt_backend;

typedef struct rt_backend_ops {
    const char *name;
    // Allocates n bytes of backend memory (aligned to at least 256). Only called before the
    // first step: the planned regions, or (test mode) one buffer per tensor.
    int (*alloc)(rt_backend *b, size_t n, void **out, stg_err *err);
    void (*release)(rt_backend *b, void *p);
    // Copies between host memory and backend memory.
    int (*upload)(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err);
    int (*download)(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err);
    // Sets n bytes of backend memory to the byte value v.
    int (*fill)(rt_backend *b, void *dst, int v, size_t n, stg_err *err);
    // Runs op `op` of g; ptr[t] is tensor t's address in backend memory.
    int (*run_op)(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err);
    // Waits for queued work (no-op on the CPU).
    int (*sync)(rt_backend *b, stg_err *err);
    void (*destroy)(rt_backend *b);
} rt_backend_ops;

struct rt_backend {
    const rt_backend_ops *ops;
    void *impl;
};

// The CPU reference backend (ops/cpu kernels, host memory). fp32 and fp64 graphs.
int rt_backend_cpu_new(rt_backend **out, stg_err *err);

#endif
