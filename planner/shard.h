// Per-device bytes of a step under data parallelism with ZeRO sharding, from a plan of one
// device's step (the CS336 memory questions: how much does each of N devices hold, and how many
// devices does a configuration need).
//
// ZeRO stage k over N devices shards, of the persistent state:
//   k >= 1: the optimizer state (AdamW moments; fp32 master weights in bf16 mode), as stg runs it:
//           each parameter's state on its owner rank (graph_dp_owners), the busiest rank counted
//   k >= 2: the gradients
//   k >= 3: the parameters (working weights)
// each to ceil(bytes / N) per device, and adds the transient buffers a device then needs:
//   k >= 2: two gradient buckets being reduce-scattered (bucket_bytes each)
//   k >= 3: two gathered parameters (the largest parameter, twice: one in use, one prefetched)
// Stage 1 is what stg runs; stages 2 and 3 are this accounting only (stg does not execute them).
// The estimate is the plan's peak minus what sharding removes plus the transient buffers: exact
// for what is persistent, an upper bound for the arena (sharding only shortens lifetimes).
#ifndef STG_SHARD_H
#define STG_SHARD_H

#include <stdint.h>
#include <stdio.h>

#include "ops/base/err.h"
#include "graph/graph.h"
#include "planner/plan.h"

typedef struct stg_shard_report {
    int world, zero;
    int64_t peak;             // the plan's peak (one device, no sharding)
    int64_t optimizer, grads, params; // persistent bytes of each class in the plan
    int64_t removed;          // bytes sharding takes off one device
    int64_t transient;        // buffers sharding adds
    int64_t per_device;       // peak - removed + transient
} stg_shard_report;

// `done`: the stage the plan's graph already runs (1: it is rank 0's ZeRO-1 step, its optimizer
// state already this rank's share; nothing is taken off it again). 0 for a one-device plan.
int plan_shard(const stg_graph *g, const stg_plan *p, int world, int zero, int done, int64_t bucket_bytes, stg_shard_report *r,
               stg_err *err);
// The fewest devices (1..max_world) whose per-device bytes fit `capacity`, 0 when none does.
int plan_shard_devices_needed(const stg_graph *g, const stg_plan *p, int zero, int64_t bucket_bytes, int64_t capacity, int max_world);
// A text (or Markdown) section: the classes, what is sharded, the per-device bytes, and for each
// stage the devices needed for `capacity` bytes (capacity 0: that line is left out).
int plan_shard_write(FILE *f, bool md, const stg_graph *g, const stg_plan *p, const stg_shard_report *r, int64_t bucket_bytes,
                     int64_t capacity, stg_err *err);

#endif
