// The analytical memory formula of the CS336 Transformer LM, in the CS336 memory-accounting style:
// closed forms from the dims alone (vocab, d_model, d_ff, n_layers, n_heads, batch, ctx), the
// `attention` option and the precision. Independent of the planner on purpose: it never reads the
// graph's tensors or ops, so the report can put an argument from first principles beside the plan.
//
// Notation: V vocab, D d_model, F d_ff, L layers, H heads, B batch, S ctx, N = B*S tokens,
// a = activation bytes (4 fp32, 2 bf16, 8 fp64), s = statistics bytes (4; 8 in fp64).
//   params P = 2*V*D + L*(4*D^2 + 3*D*F + 2*D) + D
// The model families (models/llama3, models/gpt2) change these terms:
//   Llama 3 (dim n_kv_heads: Hkv kv heads, Dkv = Hkv*D/H; option tie_embeddings=on: one V*D):
//     P = (1 or 2)*V*D + L*(2*D^2 + 2*D*Dkv + 3*D*F + 2*D) + D; saved per layer, flash:
//     (6ND + 2N*Dkv + 3NF)a + (2N + BHS)s (naive: unchanged: repeat_kv's copies are full width)
//   GPT-2 (dim n_positions, Pn rows of wpe; tied head; biases; GELU MLP; LayerNorm stats 2 a row):
//     P = V*D + Pn*D + L*(4*D^2 + 2*D*F + 9*D + F) + 2*D; saved per layer, flash
//     (8ND + 2NF)a + (4N + BHS)s, naive (8ND + 2NF)a + BHS^2 a + 4N s; final 2ND a + 2N s
// A model whose declared parameters are not P (another architecture) has no formula.
//   train, fp32: param 4P, grad 4P, optimizer 8P (AdamW m, v)
//   train, bf16: param 2P (bf16 working weights), grad 4P, optimizer 12P (fp32 master + m + v)
//   saved per layer, flash: (8ND + 3NF)a + (2N + BHS)s
//                    naive: (8ND + 3NF)a + BHS^2 a + 2N s
//   final: 2ND a + N s (x, rmsnorm_f out, rstd), logits NV a, cross-entropy lse N s; inputs 2N*4
//   with the option fused_head=on (linear_cross_entropy) no logits: the backward's scratch instead,
//   C V a (+ 4ND in bf16: an fp32 dx accumulator), C = ops_lce_chunk(N, V, 0) (the op's own
//   choice; a model file's chunk= attribute is not seen here). The plain head's logits gradient
//   takes the logits' bytes in place, so the saving is N V a less that scratch.
//   train total = param + grad + optimizer + L*layer + final + logits + lse + inputs: everything at once.
//   forward total = param + inputs + the largest per-layer working set + logits and lse, with the
//   working set the larger of
//     attention, flash: 5ND a + BHS s + N s   (x, q, k, v, attention out; lse; rmsnorm rstd)
//     attention, naive: 4ND a + 2BHS^2 a + N s (x, q^T, k^T, v^T; scores and probabilities; rstd)
//     MLP:              2ND a + 3NF a + N s    (x, rmsnorm out, w1 out, w3 out, swiglu out; rstd)
#ifndef STG_FORMULA_H
#define STG_FORMULA_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/base/err.h"
#include "graph/graph.h"

#define STG_FORMULA_MAX_TERMS 16

typedef struct stg_formula_term {
    char name[48];
    int64_t bytes;
    char how[224]; // the closed form with the numbers put in
} stg_formula_term;

typedef struct stg_formula {
    bool available;
    char reason[160]; // why not, when !available
    bool train;
    stg_precision precision;
    char attention[16];
    bool fused_head;  // the option fused_head=on: linear_cross_entropy, no logits kept
    int64_t lce_chunk; // its rows per chunk (0 without the fused head)
    int64_t vocab, d_model, d_ff, n_layers, n_heads, batch, ctx;
    bool gpt2, tied;                   // the GPT-2 form (n_positions); the head tied to the embedding
    int64_t n_kv_heads, n_positions;   // n_heads without grouped-query attention; 0 but for GPT-2
    int64_t params;
    int64_t param, grad, optimizer, activation, input, total; // bytes
    int64_t activation_per_layer; // train: saved per layer; forward: the largest per-layer working set
    int nterms;
    stg_formula_term terms[STG_FORMULA_MAX_TERMS];
} stg_formula;

// Fills f from g's dims, its `attention` (and `fused_head`, `tie_embeddings`) options and its
// precision. A graph without the CS336 dims (e.g. the toy model), or whose declared parameters (when
// it has any: the one look at its tensors) are not the closed form's, gives f->available = false
// and the reason; that is not an error. Returns -1 only for values the formula cannot take (a
// non-positive dim, an unknown attention option).
int formula_compute(const stg_graph *g, bool train, stg_formula *f, stg_err *err);

#endif
