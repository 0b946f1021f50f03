// The memory plan of one training step: which region each tensor lives in, its byte offset there,
// and how many bytes the step needs. Reads the scheduled graph (graph/graph.h) and the op registry's
// view / in-place rules; knows nothing of devices.
//
// Regions: PERSISTENT holds the persistent classes (param, optimizer, input, workspace) back to back
// for the whole run; ARENA holds everything else, shared by liveness. A tensor's life is the
// schedule positions from its write to its last read (a tensor written but never read still takes
// its bytes at its producing step). Views alias their base; an op whose registry entry has
// `inplace_in = i` writes output 0 over input i's storage when that storage dies at the op.
// Offsets in the arena come from a best-fit, largest-first assignment (TFLite greedy-by-size, XLA
// decreasing-size best fit) tried over several orderings; the smallest arena wins.
#ifndef STG_PLAN_H
#define STG_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "graph/graph.h"

typedef enum stg_region { STG_REGION_NONE, STG_REGION_ARENA, STG_REGION_PERSISTENT } stg_region;

typedef struct stg_plan_opts {
    int64_t alignment; // bytes, default 256; every storage size is rounded up to it
} stg_plan_opts;

typedef struct stg_plan {
    int nt, nsched;
    int64_t alignment;
    uint8_t *region;   // per tensor id (stg_region)
    int64_t *offset;   // per tensor: byte offset in its region (views and in-place outputs: their storage's offset)
    int *first, *last; // per tensor: schedule positions of the write (first read if never written) and the
                       // last read (the write if never read); -1 when never used
    int *owner;        // per tensor: the tensor whose storage it occupies (itself, its view base, or the
                       // dying input it took over in place; chains resolve to the root storage)
    int *next_inplace; // per tensor: the tensor that took its storage over in place after it died, -1 if none
    int64_t *size;     // per tensor: its own bytes rounded up to the alignment
    int64_t persistent_bytes, arena_bytes;
    int64_t peak_bytes;        // persistent + arena: all bytes the step needs
    int64_t lower_bound_bytes; // persistent + max over steps of live arena bytes
    int peak_step;             // schedule position of the max live bytes (-1 for an empty schedule)
    int64_t by_class[STG_CLASS_COUNT]; // total bytes of each class (storage owners only, aligned)
    int64_t *live;             // [nsched][STG_CLASS_COUNT]: live bytes per step per class, persistent included;
                               // in-place storage counts as the class of the tensor occupying it at that step
    double fragmentation;      // arena-based: arena_bytes / (lower_bound_bytes - persistent_bytes) - 1
    char strategy[32];         // which ordering won
    int n_storages;            // storages placed in the arena (a group counts once)
    int n_inplace;             // outputs written over a dying input's storage
} stg_plan;

stg_plan_opts plan_defaults(void);

// Plans g (its schedule must be set). o may be NULL for the defaults.
int plan_build(const stg_graph *g, const stg_plan_opts *o, stg_plan **out, stg_err *err);

// Soundness, recomputed from the graph: returns -1 naming the two tensors if any two arena storages
// live at the same step overlap in bytes, if any tensor lies outside its region, if an in-place
// hand-over is not at an op allowed to write over its input, or if a group is not contiguous.
int plan_verify(const stg_graph *g, const stg_plan *p, stg_err *err);

void plan_free(stg_plan *p);

// Live bytes of class c at schedule position s (all classes when c < 0).
int64_t plan_live_at(const stg_plan *p, int s, int c);

#endif
