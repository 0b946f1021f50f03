// Exact evaluation: the mean loss of a token model over every non-overlapping ctx-window of a token
// file (or of its first N tokens), deterministic, so two runs or two tools can compare on the same
// tokens. Window w holds tokens [w ctx, (w + 1) ctx) and predicts [w ctx + 1, (w + 1) ctx + 1): the
// windows share their boundary tokens, every target from position 1 to W ctx is scored once, and
// W = floor((N - 1) / ctx). The targets after the last whole window (fewer than ctx of them) are
// not scored; the result says how many.
//
// The windows run in file order, `batch` rows per forward run on an executor of a forward graph
// with inputs tokens and targets [batch, ctx]; a last short batch of r = W mod batch rows runs on a
// second executor of the same model with batch r (a second plan), so every batch is exact and no
// window is padded or repeated. The sum is kept in double: mean loss of each run x its targets.
#ifndef STG_RUNTIME_EVAL_H
#define STG_RUNTIME_EVAL_H

#include <stdint.h>

#include "runtime/data.h"
#include "runtime/exec.h"

typedef struct rt_eval_shape {
    int64_t tokens;     // tokens read: min(N, the file's)
    int64_t ctx, batch; // the model's
    int64_t windows;    // W
    int64_t targets;    // W x ctx
    int64_t dropped;    // targets after the last whole window: tokens - 1 - W ctx
    int64_t batches;    // full batches of `batch` windows
    int64_t rest;       // windows in the last short batch (0: none)
} rt_eval_shape;

// The windows of the first `limit` tokens of tk (limit <= 0: all of them). Fails when there is not
// one whole window (ctx + 1 tokens).
int rt_eval_shape_of(const rt_tokens *tk, int64_t limit, int64_t batch, int64_t ctx, rt_eval_shape *s, stg_err *err);

// The mean loss over the windows of s. main: an executor of a forward graph with tokens and
// targets [s->batch, s->ctx]; rest: one with [s->rest, s->ctx] (NULL exactly when s->rest is 0).
// Both must hold the parameters. *loss: nats per target.
int rt_eval_run(rt_exec *main, rt_exec *rest, const rt_tokens *tk, const rt_eval_shape *s, double *loss, stg_err *err);

// The bytes the targets of s stand for: the sum over target tokens (positions 1 .. W ctx of the file)
// of each token's bytes under tokenizer t (for bits per byte). Fails on an id outside t's vocabulary.
struct rt_tok;
int64_t rt_eval_target_bytes(const struct rt_tok *t, const rt_tokens *tk, const rt_eval_shape *s, stg_err *err);

// `stg train --val-full`: the executors and windows of an exact pass over the validation file, run
// by rt_train at each validation step after copying the training executor's parameters into them.
typedef struct rt_val_full {
    rt_exec *main, *rest; // forward executors of the model: batch rows and shape.rest rows (NULL when 0)
    const rt_tokens *tokens;
    rt_eval_shape shape;
} rt_val_full;
int rt_eval_full(const rt_val_full *v, rt_exec *train, double *loss, stg_err *err);

// Copies every parameter of src into the same-named parameter of dst (same dtype and shape: the
// same model in the same precision), e.g. from a training executor into a forward one.
int rt_eval_copy_params(rt_exec *dst, rt_exec *src, stg_err *err);

#endif
