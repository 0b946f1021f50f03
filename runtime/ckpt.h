// Checkpoints and parameter files (safetensors).
//
// A checkpoint holds every parameter under its model-file name (e.g. "blocks.3.wq") as float32
// (float64 for fp64 graphs) — the fp32 master weights in bf16 mode — plus "<name>.adam_m" and
// "<name>.adam_v", and metadata: format, model, precision, step, the data RNG state (hex), the
// resolved dims and options. Written atomically (temporary file, fsync, rename).
#ifndef STG_CKPT_H
#define STG_CKPT_H

#include <stdint.h>

#include "runtime/exec.h"
#include "runtime/rng.h"

typedef struct rt_ckpt_state {
    int64_t step;   // steps completed
    rt_rng data_rng;
} rt_ckpt_state;

int rt_ckpt_save(rt_exec *e, const char *path, const rt_ckpt_state *st, stg_err *err);
// Data parallel, called by every rank at the same step: rank 0 writes the checkpoint. With ZeRO-1
// (the graph has broadcast ops) each parameter's owner sends rank 0 its fp32 value and AdamW
// moments, so the file is the same as one process's; each rank loads its own share of it with
// rt_ckpt_load. d NULL or a world of 1: rt_ckpt_save.
struct rt_dist;
int rt_ckpt_save_dist(rt_exec *e, const char *path, const rt_ckpt_state *st, struct rt_dist *d, stg_err *err);
// Restores parameters, AdamW state, step and RNG; fails (nothing changed in `e` on a mismatch
// found before loading) when the file is from a different model, dims or options.
int rt_ckpt_load(rt_exec *e, const char *path, rt_ckpt_state *st, stg_err *err);

// Sets parameters from any safetensors file with matching names and shapes (F32, F64 or BF16),
// e.g. exported from PyTorch. Tensors not named like a parameter are ignored; a parameter missing
// from the file is an error.
int rt_params_load(rt_exec *e, const char *path, stg_err *err);

// The graph's dims and options as "name=value,..." (checkpoint metadata).
void rt_dims_string(const stg_graph *g, char *buf, size_t n);

#endif
