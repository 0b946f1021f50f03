// Inference graphs derived from a training model's forward graph (docs/SAMPLE.md): the prefill (P
// prompt tokens per sequence: their K and V written to the cache, the next token drawn from the
// last position's logits) and the decode step (one token per sequence: the model's attention ops
// replaced by attention_cached, which appends K and V at the position held on the device and attends
// over the cache up to it). No model file is written twice: the caller loads the model at (batch B,
// ctx S) with S = P or 1 and fused attention, and this pass rewrites that forward graph.
//
// Both graphs hold the same persistent tensors under the same names, so two executors can share
// them (rt_exec_opts.share): the parameters (PARAM), the KV cache "kv.{i}.k" and "kv.{i}.v"
// (B, Hkv, C, Dh) (head-major) in the activation dtype, one pair per attention op in model order, and the
// sampler's state: "sample.token" (B, 1) i32 (the last token drawn; the decode step's input),
// "sample.pos" (1) i32 (tokens in the cache), "sample.ids" (B, C) i32 (each whole sequence so far).
// These are WORKSPACE tensors: persistent, zero when allocated. The prefill also has the INPUT
// "tokens" (B, P) i32. The graphs end with one sample op (the position advances by S).
#ifndef STG_GRAPH_INFER_H
#define STG_GRAPH_INFER_H

#include "graph/graph.h"

typedef enum { GRAPH_INFER_PREFILL, GRAPH_INFER_DECODE } graph_infer_kind;

typedef struct graph_infer_opts {
    graph_infer_kind kind;
    int64_t ctx;             // C: positions of the KV cache (prompt and generated tokens together)
    stg_sample_attrs sample; // the sampling rule (its advance is set here: S)
} graph_infer_opts;

// Tensor ids and sizes of a derived graph.
typedef struct graph_infer_info {
    int tokens;          // prefill: the INPUT (B, P); decode: -1
    int token, pos, ids; // the sampler's state (WORKSPACE)
    int logits;          // what the sample op reads
    int kv0;             // the first cache tensor: layer i's k is kv0 + 2 i, its v kv0 + 2 i + 1
    int n_layers;        // attention ops (cache pairs)
    int64_t batch, tokens_per_step, ctx, kv_heads, head_dim, vocab;
} graph_infer_info;

// Derives the graph o describes from fwd, a forward graph loaded at (batch B, ctx S) whose loss is
// cross_entropy(logits, targets) and whose attention (if any) is the fused attention op; fwd is not
// changed. Fails with a message naming what the model has that decoding cannot take (written-out
// attention, RoPE on something other than attention's q and k, a second input).
int graph_infer(const stg_graph *fwd, const graph_infer_opts *o, stg_graph **out, graph_infer_info *info, stg_err *err);

#endif
