// Sampling: the prefill and decode graphs of planner/infer.h on two executors that share one copy of
// the parameters, the KV cache and the sampler's state (rt_exec_opts.share), and the larger arena.
// The prefill runs the prompt and draws the first token; each decode step draws one more token per
// sequence, reading and advancing the position on the device, so a captured decode step is replayed
// unchanged for every position. Tokens never pass through the host unless asked for.
#ifndef STG_RUNTIME_SAMPLE_H
#define STG_RUNTIME_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "planner/infer.h"
#include "runtime/exec.h"

typedef struct rt_sampler rt_sampler;

typedef struct rt_sampler_opts {
    bool graph;              // capture the decode step once and replay it (backends with graphs)
    bool separate, poison;   // the executors' test modes (rt_exec_opts)
    const rt_exec *params;   // an executor (training) whose parameters the sampler reads by name, or NULL
} rt_sampler_opts;

// bp and bd: the backends of the prefill and the decode graph (two of one device: a CUDA context
// prepares one graph). The sampler keeps pointers to inf and the backends; the caller frees them
// after it.
int rt_sampler_new(const stg_infer *inf, rt_backend *bp, rt_backend *bd, const rt_sampler_opts *o, rt_sampler **out, stg_err *err);
void rt_sampler_free(rt_sampler *s);

// The parameters (when not another executor's): CS336's initialisation from seed, a constant fill
// (fast: benchmarks), or a safetensors file (rt_params_load).
int rt_sampler_init(rt_sampler *s, uint64_t seed, bool fast, stg_err *err);
int rt_sampler_load(rt_sampler *s, const char *path, stg_err *err);

// Starts every sequence from the same prompt of inf->prompt ids (each in [0, vocab)): the position
// is set to 0, the prefill runs and draws each sequence's first new token.
int rt_sampler_prefill(rt_sampler *s, const int32_t *prompt, stg_err *err);
// One decode step: the next token of every sequence. Fails when the context is full (the host
// keeps the count: a step needs room for the token it draws).
int rt_sampler_step(rt_sampler *s, stg_err *err);
// The same, pipelined: submit enqueues a step (at most two in flight), collect waits for the oldest.
int rt_sampler_submit(rt_sampler *s, stg_err *err);
int rt_sampler_collect(rt_sampler *s, stg_err *err);
// Steps the context still has room for.
int64_t rt_sampler_room(const rt_sampler *s);
// Tokens in each sequence so far (prompt and drawn): inf->prompt + 1 after the prefill.
int64_t rt_sampler_length(const rt_sampler *s);

// The token each sequence drew last (B of them), after everything submitted has finished.
int rt_sampler_last(rt_sampler *s, int32_t *tokens, stg_err *err);
// Every sequence so far: (B, C) ids, of which the first rt_sampler_length are set.
int rt_sampler_ids(rt_sampler *s, int32_t *ids, stg_err *err);

// The executors (STG_INFER_PREFILL, STG_INFER_DECODE), e.g. to read a tensor in a test.
rt_exec *rt_sampler_exec(rt_sampler *s, int which);
// Device bytes the two executors allocated and measured (-1 when the backend cannot measure).
int64_t rt_sampler_allocated(const rt_sampler *s);
int64_t rt_sampler_measured(const rt_sampler *s);

// ---- text ----------------------------------------------------------------------------------------

typedef struct rt_text {
    uint8_t *p;
    size_t n, cap;
} rt_text;

// Appends bytes (grown with realloc; -1 when out of memory).
int rt_text_add(rt_text *s, const void *p, size_t n);
// Appends token id's text: its bytes in tokenizer tok; without one, the byte `id` for a vocab of
// at most 256 (byte-level models), else " id".
struct rt_tok;
int rt_text_token(const struct rt_tok *tok, int64_t vocab, int32_t id, rt_text *s);
// Writes s[0..n) to f as a JSON string: ill-formed UTF-8 as U+FFFD, quotes, backslashes and control
// characters escaped. -1 when out of memory or the write fails.
int rt_json_string(FILE *f, const uint8_t *s, size_t n);

#endif
