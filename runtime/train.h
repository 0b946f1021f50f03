// The training loop: batches from a data source, one step (forward, backward, clipping, AdamW)
// per iteration on an executor, validation, JSON-lines logs and atomic checkpoints. The learning
// rate schedule is part of the step graph (the lr_schedule op, set by stg_optim_config).
#ifndef STG_TRAIN_H
#define STG_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/exec.h"
#include "runtime/rng.h"

typedef struct rt_train_cfg {
    int64_t steps;            // total steps of the run (a resumed run continues up to this)
    uint64_t seed;            // parameters and data order
    const char *data, *val;   // token files (.bin / .npy); NULL data: the synthetic Markov source
    int64_t val_every;        // steps between validation losses (0: never)
    int64_t val_batches;      // batches per validation loss
    int markov_k;             // successors per symbol in the synthetic source
    const char *log_path;     // JSON lines, one per step (NULL: none)
    int log_mode;             // RT_LOG_*: what to do with an existing log
    const char *ckpt_dir;     // checkpoint directory (NULL: none; runtime/ckpt.h)
    int64_t ckpt_every;       // steps between checkpoints (0: only at the end)
    int keep;                 // checkpoints kept in ckpt_dir (newest first; 0: all)
    bool resume;              // continue from the newest checkpoint in ckpt_dir that verifies
    const char *init_path;    // start from these parameters (safetensors); not with resume
    int rank, world;          // data parallel: this process's share of every batch; only rank 0
                              // writes logs and checkpoints (world 0 or 1: one process)
    struct rt_dist *dist;     // data parallel: the group (checkpoints with ZeRO-1 gather over it)
    int64_t doc_sep;          // packed documents: this token ends a document (rt_feed_docs); -1: none
    bool doc_loss_mask;       // with doc_sep: targets that cross a boundary are ignored by the loss
} rt_train_cfg;

// An existing non-empty log: a fresh run refuses it (RT_LOG_NEW, the default: it would be lost),
// a resumed run appends to it; RT_LOG_OVERWRITE and RT_LOG_APPEND say what to do either way.
enum { RT_LOG_NEW = 0, RT_LOG_OVERWRITE, RT_LOG_APPEND };

rt_train_cfg rt_train_defaults(void);

typedef struct rt_train_progress {
    int64_t step, steps;      // step just completed (1-based)
    double loss, lr, grad_norm;
    double val_loss;          // NAN when not computed this step
    double tokens_per_s, elapsed_s;
    double floor;             // the data's entropy (nats/token) when known, else NAN
} rt_train_progress;

typedef void (*rt_progress_fn)(void *ctx, const rt_train_progress *p);

typedef struct rt_train_result {
    int64_t steps_done;       // the last step completed (the checkpoint's on a resumed run that had nothing to do)
    int64_t steps_run;        // steps this call ran
    double first_loss, last_loss, last_val_loss, floor;
    char resumed_from[4200];  // the checkpoint a resumed run loaded ("" otherwise)
    bool resumed_verified;    // it had checksums and they matched (an older stg's checkpoint has none)
    char resume_skipped[2048]; // why newer checkpoints were passed over ("" when none were)
    int stale_tmp_removed;    // temporary files of killed runs removed from ckpt_dir
    char last_ckpt[4200];     // the last checkpoint written and verified ("" when none)
} rt_train_result;


int rt_train(rt_exec *e, const rt_train_cfg *cfg, rt_progress_fn cb, void *ctx, rt_train_result *res, stg_err *err);

// One batch source for a graph: finds the inputs (tokens/targets or x/targets, and docs when the
// model has it: each position's document start, 0s unless rt_feed_docs), draws batches.
typedef struct rt_feed rt_feed;
int rt_feed_new(const stg_graph *g, const char *data_path, int markov_k, uint64_t data_seed, rt_feed **out, stg_err *err);
void rt_feed_free(rt_feed *f);
int rt_feed_next(rt_feed *f, rt_exec *e, rt_rng *rng, stg_err *err);
// Data parallel: every draw is a global batch of world x batch rows (the same on every rank) of
// which this rank feeds rows [rank * batch, (rank + 1) * batch): together the ranks see exactly
// the batch one process with world x batch rows would.
int rt_feed_shard(rt_feed *f, int rank, int world, stg_err *err);
double rt_feed_floor(const rt_feed *f); // entropy of the synthetic source, NAN otherwise
// Packed documents: every row (a window of the token stream, full, no padding) is cut into documents
// after each token `sep` (the separator ends its document), and the model's docs input gets each
// position's document start (a row starts a document: its first tokens may continue one that began
// before it). loss_mask: the target of a separator (the next document's first token) is -1, which
// cross_entropy ignores. Errors: the model has no docs input [batch, ctx, i32]; sep outside
// [0, vocab).
int rt_feed_docs(rt_feed *f, int64_t sep, bool loss_mask, stg_err *err);
int64_t rt_feed_tokens_per_batch(const rt_feed *f);

#endif
