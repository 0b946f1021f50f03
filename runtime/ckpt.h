// Checkpoints and parameter files (safetensors).
//
// A checkpoint holds every parameter under its model-file name (e.g. "blocks.3.wq") as float32
// (float64 for fp64 graphs) — the fp32 master weights in bf16 mode — plus "<name>.adam_m" and
// "<name>.adam_v", and metadata: format, model, precision, step, the data RNG state (hex), the
// resolved dims and options, and a CRC-32C of every tensor ("checksum": "crc32c", "crc32c:<name>":
// 8 hex digits) that every load verifies. Written atomically (temporary file, fsync, rename), and
// only when every value is finite.
//
// A checkpoint directory (rt_ckpt_save_dir) holds ckpt-<step>.safetensors, the newest `keep` of
// them; `latest`, a symlink to the newest; and ckpt.safetensors, a hard link to the newest (one
// file for tools). A checkpoint is pointed at only after it was read back and verified.
#ifndef STG_CKPT_H
#define STG_CKPT_H

#include <stddef.h>
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

// Writes dir/ckpt-<step>.safetensors (every rank calls it, as rt_ckpt_save_dist), reads it back and
// verifies its checksums, points `latest` and ckpt.safetensors at it, and removes this run's older
// checkpoints beyond the newest `keep` (0: keeps all). Fails, leaving the previous checkpoints and
// pointers as they were, when a value is not finite or a write fails; every rank gets the error.
// `written` (may be NULL) gets the path.
int rt_ckpt_save_dir(rt_exec *e, const char *dir, const rt_ckpt_state *st, int keep, struct rt_dist *d, char *written, size_t wn,
                     stg_err *err);
// Loads the newest checkpoint in dir that opens, verifies, holds only finite values and fits this
// model (falling back to older ones, then to a plain dir/ckpt.safetensors). `from` gets its path;
// `skipped` what was wrong with each newer one (empty when the newest loaded).
int rt_ckpt_resume(rt_exec *e, const char *dir, rt_ckpt_state *st, char *from, size_t nfrom, char *skipped, size_t nskipped,
                   stg_err *err);
// Opens path and checks every tensor against its stored CRC-32C (fails when it has none).
int rt_ckpt_verify(const char *path, stg_err *err);
// dir/ckpt-<step>.safetensors
void rt_ckpt_path(const char *dir, int64_t step, char *buf, size_t n);

// Sets parameters from any safetensors file with matching names and shapes (F32, F64 or BF16),
// e.g. exported from PyTorch. Tensors not named like a parameter are ignored; a parameter missing
// from the file, a failed checksum (when the file has them) or a NaN or infinity is an error.
int rt_params_load(rt_exec *e, const char *path, stg_err *err);

// The graph's dims and options as "name=value,..." (checkpoint metadata).
void rt_dims_string(const stg_graph *g, char *buf, size_t n);

#endif
