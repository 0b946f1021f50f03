// Hugging Face model directories from stg parameters and back (stg export --hf, stg import --hf).
//
// A model family is a table: one row per parameter, an stg name pattern ("blocks.{i}.wq", {i} the
// layer) beside the Hugging Face name ("model.layers.{i}.self_attn.q_proj.weight") and a transform;
// plus the family's config.json fields, computed from the model's dims on export and checked against
// them on import. The family of a model is the first table that names every one of its parameters,
// each row exactly once per layer, and whose structural checks pass (e.g. the CS336 LM: RMSNorm,
// RoPE, SwiGLU, no biases, untied head).
//
// The CS336 LM is exported as a LlamaForCausalLM. RoPE pairs differ: stg's rope op (as CS336)
// rotates adjacent pairs (x[2k], x[2k+1]) by angle pos * theta^(-2k/d); Hugging Face Llama rotates
// halves (x[k], x[k + d/2]) with the same frequencies. Attention scores are q . k per head, so
// permuting the rows of both projections the same way within each head changes nothing but the
// pairing: export writes row h d + j of q_proj (and k_proj) from stg's row h d + 2j for j < d/2 and
// h d + 2(j - d/2) + 1 for j >= d/2; import inverts it.
//
// Export writes DIR/config.json, DIR/model.safetensors (float32, Hugging Face names, metadata
// format=pt) and, given a tokenizer, DIR/tokenizer.json and DIR/tokenizer_config.json, into a
// temporary directory beside DIR renamed to DIR at the end: DIR appears whole or not at all. DIR
// must not exist, or be an empty directory. Import reads DIR/config.json (checked field by field
// against the model) and DIR/model.safetensors or the shards named by DIR/model.safetensors.index.json
// (F32, F64, BF16 or F16), and writes a float32 safetensors of stg names for --init (atomically).
// Every model parameter must be there with its shape, and every tensor there must be a parameter.
#ifndef STG_RUNTIME_HF_H
#define STG_RUNTIME_HF_H

#include "graph/graph.h"

struct rt_tok;

// Returned for bad input (a missing or mismatched tensor or field, an existing DIR): nothing was
// written. -1: a write failed (nothing left behind either).
#define RT_HF_BAD (-2)

typedef struct rt_hf_report {
    const char *family;       // the family table used ("cs336")
    const char *architecture; // its Hugging Face class ("LlamaForCausalLM")
    int tensors;              // tensors written
    int permuted;             // of which rows were permuted (q and k projections)
    double bytes;             // of model.safetensors (export) or the output (import)
    int shards;               // import: weight files read
} rt_hf_report;

// g: the model (a forward graph is enough); init: stg parameters by name (a checkpoint or an --init
// file; its checksums, when it has them, are verified); tok may be NULL.
int rt_hf_export(const stg_graph *g, const char *init, const struct rt_tok *tok, const char *dir, rt_hf_report *rep, stg_err *err);
// inputs (n) are refused as the output besides the files read from dir.
int rt_hf_import(const stg_graph *g, const char *dir, const char *out, const char *const *inputs, const char *const *input_what,
                 int n_inputs, rt_hf_report *rep, stg_err *err);

#endif
