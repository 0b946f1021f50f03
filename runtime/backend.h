// The backend interface: where the planned regions live and how one op runs there. The executor
// (runtime/exec.h) drives a backend through this table and nothing else.
//
// Copies and ops are enqueued in order on the backend's one stream and may return before they are
// done (the CPU backend does everything at once); `sync` waits for all of it. Everything enqueued
// between capture_begin and capture_end is recorded instead of run, and replayed by graph_launch.
#ifndef STG_BACKEND_H
#define STG_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

typedef struct rt_backend rt_backend;

typedef struct rt_backend_ops {
    const char *name;
    // Backend memory (aligned to at least 256 bytes). Only called before the first step.
    int (*alloc)(rt_backend *b, size_t n, void **out, stg_err *err);
    void (*release)(rt_backend *b, void *p);
    // Host memory the backend copies from and to fastest (pinned on CUDA).
    int (*alloc_host)(rt_backend *b, size_t n, void **out, stg_err *err);
    void (*release_host)(rt_backend *b, void *p);
    // Enqueued copies between host and backend memory, and a byte fill of backend memory. From
    // alloc_host memory they do not block the host; from other host memory they may.
    int (*upload)(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err);
    int (*download)(rt_backend *b, void *dst, const void *src, size_t n, stg_err *err);
    int (*fill)(rt_backend *b, void *dst, int v, size_t n, stg_err *err);
    // Test mode (rt_exec_opts.poison): enqueues a fill of every multiprocessor's shared memory with
    // NaN bytes, so that a kernel reading shared memory it never wrote reads NaN. May be NULL.
    int (*poison_shared)(rt_backend *b, stg_err *err);
    // Once after allocation, before the first step and outside any capture (kernel tables,
    // library algorithm choices, workspaces). May be NULL.
    int (*prepare)(rt_backend *b, const stg_graph *g, void *const *ptr, stg_err *err);
    // Enqueues op `op` of g; ptr[t] is tensor t's address in backend memory.
    int (*run_op)(rt_backend *b, const stg_graph *g, int op, void *const *ptr, stg_err *err);
    // Gradient accumulation (stg_graph.grad_accum > 1): whether ops enqueued from now on that are
    // marked to accumulate (stg_op.accum) add into those outputs (on: micro-batches after the first)
    // or write them (off, the default). May be NULL: the backend cannot accumulate.
    void (*set_accumulate)(rt_backend *b, bool on);
    // Marks / waits for a point in the stream (slot 0 or 1), and waits for everything.
    int (*record)(rt_backend *b, int slot, stg_err *err);
    int (*wait)(rt_backend *b, int slot, stg_err *err);
    int (*sync)(rt_backend *b, stg_err *err);
    // Graph capture and replay; NULL when the backend has none (then the executor runs eagerly).
    int (*capture_begin)(rt_backend *b, stg_err *err);
    int (*capture_end)(rt_backend *b, void **graph, stg_err *err);
    int (*graph_launch)(rt_backend *b, void *graph, stg_err *err);
    void (*graph_destroy)(rt_backend *b, void *graph);
    // Timing marks in the stream: mark 0 then mark 1, then elapsed_ms waits for mark 1 and gives the
    // time between them as the device saw it.
    int (*timer_mark)(rt_backend *b, int which, stg_err *err);
    int (*elapsed_ms)(rt_backend *b, double *ms, stg_err *err);
    // Profiling: prof_begin makes n marks (before any run), prof_mark records mark i in the stream,
    // prof_elapsed waits and gives the device time from mark i to mark j. May be NULL.
    int (*prof_begin)(rt_backend *b, int n, stg_err *err);
    int (*prof_mark)(rt_backend *b, int i, stg_err *err);
    int (*prof_elapsed)(rt_backend *b, int i, int j, double *ms, stg_err *err);
    // Names the phase the following work belongs to (NVTX ranges on CUDA); NULL ends it. May be NULL.
    void (*annotate)(rt_backend *b, const char *phase);
    // Concurrency inside captured runs; all NULL for a backend with one stream. streams: how many
    // streams ops may be enqueued on (0 is the one everything above uses), not counting the
    // communication stream, whose index is streams(b) (it also takes the optimizer in backward's
    // updates, which a data-parallel run never has). op_lane: RT_LANE_*.
    // run_op_on: run_op on stream s. events makes events 0..n-1 (outside capture); event_record marks
    // the point reached in stream s, event_wait makes stream s wait for the last mark of event ev.
    int (*streams)(rt_backend *b);
    int (*op_lane)(rt_backend *b, const stg_graph *g, int op);
    int (*run_op_on)(rt_backend *b, int s, const stg_graph *g, int op, void *const *ptr, stg_err *err);
    int (*events)(rt_backend *b, int n, stg_err *err);
    int (*event_record)(rt_backend *b, int s, int ev, stg_err *err);
    int (*event_wait)(rt_backend *b, int s, int ev, stg_err *err);
    // Device bytes in use by this process (measured), and free; -1 when unknown.
    int64_t (*mem_used)(rt_backend *b);
    int64_t (*mem_free)(rt_backend *b);
    // Device memory the backend holds beyond the plan (library workspaces, kernel scratch), named:
    // up to max entries into names/bytes; returns how many. May be NULL (none).
    int (*workspaces)(rt_backend *b, const char **names, int64_t *bytes, int max);
    void (*destroy)(rt_backend *b);
} rt_backend_ops;

// Where an op may run (op_lane): on stream 0 only; on any stream; on stream 0 after everything
// enqueued before it (ops that touch tensors they do not name, like a multi-tensor optimizer).
// RT_LANE_COMM: communication between processes, on its own stream, index streams(b).
enum { RT_LANE_MAIN = 0, RT_LANE_ANY = 1, RT_LANE_BARRIER = 2, RT_LANE_COMM = 3 };

struct rt_backend {
    const rt_backend_ops *ops;
    void *impl;
};

// The CPU reference backend (ops/cpu kernels, host memory). fp32 and fp64 graphs.
int rt_backend_cpu_new(rt_backend **out, stg_err *err);
// Data parallelism on the CPU backend: allreduce ops average over the processes of d (a
// connected group the caller keeps), through rank 0 in rank order (runtime/dist.h).
struct rt_dist;
int rt_backend_cpu_join(rt_backend *b, struct rt_dist *d, stg_err *err);

#endif
