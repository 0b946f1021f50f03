// The executor: runs a scheduled graph in the plan's memory on a backend. One allocation for the
// persistent region and one for the arena, made by rt_exec_new; nothing is allocated by a step.
#ifndef STG_EXEC_H
#define STG_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/graph.h"
#include "planner/plan.h"
#include "runtime/backend.h"

typedef struct rt_exec_opts {
    bool separate; // test mode: every tensor in its own allocation (views still share their base)
    bool poison;   // test mode: fill all non-persistent memory, and the GPU's shared memory, with NaN bytes before every run
    bool graph;    // capture each kind of run once (per phase mask) and replay it (backends with graphs)
    int streams;   // graph mode: spread independent ops over at most this many streams (0: all the
                   // backend has; 1: one stream, the schedule's order)
    // Another executor whose memory this one uses (the inference graphs: runtime/sample.h): each
    // persistent tensor with the name, shape and dtype of one of its persistent tensors is that
    // tensor, and its arena is this one's when at least as large. Its backend may be another (same
    // device); the caller runs one executor at a time and frees `share` last.
    const struct rt_exec *share;
} rt_exec_opts;

// What a run leaves for the host: the loss (forward runs; the mean over the micro-batches under
// gradient accumulation), the global gradient norm and the learning rate it used (runs with the
// optimizer); NAN where the run did not make it.
typedef struct rt_exec_results {
    double loss, grad_norm, lr;
} rt_exec_results;

typedef struct rt_exec rt_exec;

#define RT_PHASE_FORWARD (1u << STG_PHASE_FORWARD)
#define RT_PHASE_BACKWARD (1u << STG_PHASE_BACKWARD)
#define RT_PHASE_OPTIMIZER (1u << STG_PHASE_OPTIMIZER)
#define RT_PHASE_ALL (RT_PHASE_FORWARD | RT_PHASE_BACKWARD | RT_PHASE_OPTIMIZER)

int rt_exec_new(const stg_graph *g, const stg_plan *p, rt_backend *b, const rt_exec_opts *o, rt_exec **out, stg_err *err);
void rt_exec_free(rt_exec *e);

const stg_graph *rt_exec_graph(const rt_exec *e);
// Backend bytes this executor allocated (regions or, in separate mode, all buffers).
int64_t rt_exec_allocated_bytes(const rt_exec *e);

// CS336 initialisation of every parameter from `seed` (truncated normals; ones; zeros), fp32
// master weights from the same values in bf16 mode, AdamW state zeroed.
int rt_exec_init_params(rt_exec *e, uint64_t seed, stg_err *err);

// For benchmarks of large models, where the host-side initialisation would take minutes: every
// parameter (and master weight) set to the byte pattern 0x3c (about 0.0115 in f32 and bf16), the
// AdamW moments to zero, with device-side fills. The timing of dense kernels does not depend on
// the values.
int rt_exec_init_params_fast(rt_exec *e, stg_err *err);

// Raw copies of a whole tensor in its own dtype. Writes to INPUT tensors go to a host staging
// buffer that the next run uploads at its start (inside the captured graph in graph mode); with
// gradient accumulation the value goes to every micro-batch (rt_exec_write_micro writes one).
int rt_exec_write(rt_exec *e, int t, const void *host, size_t bytes, stg_err *err);
// Gradient accumulation (the graph's grad_accum > 1): every run that has a forward or backward
// phase makes rt_exec_micro(e) passes, one per micro-batch of the staged inputs (micro-batch k
// uploaded before pass k, inside the captured graph): the first pass writes the parameter
// gradients, the later ones add into them, the ops that read gradients (the data-parallel
// all-reduce, clipping, AdamW) run in the last pass only, and the results' loss is the mean of the
// passes' losses. rt_exec_micro is 1 for a graph without accumulation.
int rt_exec_micro(const rt_exec *e);
int rt_exec_write_micro(rt_exec *e, int t, int micro, const void *host, size_t bytes, stg_err *err);
int rt_exec_read(rt_exec *e, int t, void *host, size_t bytes, stg_err *err);
// Copies with conversion from/to double for float tensors (f32, bf16, f64) and i32.
int rt_exec_read_f64(rt_exec *e, int t, double *host, stg_err *err);
int rt_exec_write_f64(rt_exec *e, int t, const double *host, stg_err *err);

// Sets the optimizer's count of steps done (0 for a fresh run, the checkpoint's on resume); the
// lr_schedule op advances it and computes the learning rate inside every step.
int rt_exec_set_steps_done(rt_exec *e, int64_t done, stg_err *err);

// Enqueues a run of the scheduled ops whose phase is in phase_mask (RT_PHASE_*), in schedule
// order, preceded by the upload of the staged inputs and followed by the download of its results
// to host memory. Does not wait: at most two runs may be in flight; rt_exec_collect waits for the
// oldest and returns its results. The inputs for the next run may be written as soon as the run
// before the previous one has been collected (double-buffered staging).
int rt_exec_submit(rt_exec *e, unsigned phase_mask, stg_err *err);
int rt_exec_collect(rt_exec *e, rt_exec_results *r, stg_err *err);
// Submit and collect: a run that has finished when it returns (results may be NULL).
int rt_exec_run(rt_exec *e, unsigned phase_mask, stg_err *err);
int rt_exec_run_results(rt_exec *e, unsigned phase_mask, rt_exec_results *r, stg_err *err);

// One eager run with a timing mark around every op: ms[s] is the device time of schedule position
// s (0 for ops not in phase_mask). Needs a backend with profiling marks (CUDA).
int rt_exec_profile(rt_exec *e, unsigned phase_mask, double *ms, stg_err *err);

// The longest chain of ops in a run of phase_mask with the streams and waits a captured run uses,
// each op taking ms[s] (schedule position s, as from rt_exec_profile) and starting when its stream's
// previous op and every op it waits on have finished; sharing the device is not modeled. *length:
// when the last op finishes; on_path[s]: op s is on the longest chain (one chain where several tie);
// slack[s]: how much longer op s could take without lengthening the run (-1 for ops not in
// phase_mask). With one stream the length is the sum and every op is on the chain.
int rt_exec_critical_path(rt_exec *e, unsigned phase_mask, const double *ms, double *length, bool *on_path, double *slack,
                          stg_err *err);
// The ordering behind rt_exec_critical_path, kept to be evaluated for many sets of op times (what-if
// timings): each op of a run of phase_mask after its stream's previous op and the ops it waits on.
// rt_dag_length gives the length for op times ms (by schedule position) and fills on_path and slack
// as above (either may be NULL); -1 when out of memory.
typedef struct rt_dag rt_dag;
int rt_exec_dag(rt_exec *e, unsigned phase_mask, rt_dag **out, stg_err *err);
// The same order for another number of compute streams (what-if: how the lanes would be planned with
// nstreams; 0: the streams a run uses). More than one needs a backend with streams.
int rt_exec_dag_streams(rt_exec *e, unsigned phase_mask, int nstreams, rt_dag **out, stg_err *err);
double rt_dag_length(const rt_dag *d, const double *ms, bool *on_path, double *slack);
void rt_dag_free(rt_dag *d);

// The compute streams a run uses (1 unless graph mode on a backend with streams).
int rt_exec_streams(const rt_exec *e);

// Device bytes measured by the backend: in use after allocation and preparation minus in use
// before (-1 when the backend cannot measure).
int64_t rt_exec_measured_bytes(const rt_exec *e);

// The parameter a tensor name refers to in a checkpoint: the fp32 truth of parameter p (the
// master weights in bf16 mode, the parameter itself otherwise).
int rt_exec_param_truth(const rt_exec *e, int p);

#endif
