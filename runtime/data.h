// Training data sources: token files (memory-mapped), a synthetic Markov-chain token source with a
// known entropy rate, byte-level tokenization of any file, and float features for the toy
// classifier. Every batch is drawn from an rt_rng, so a seed fixes the whole data stream.
//
// Batches are (batch, ctx) int32 row-major: row b, position t is at [b * ctx + t].
#ifndef STG_RUNTIME_DATA_H
#define STG_RUNTIME_DATA_H

#include <stdint.h>

#include "ops/base/err.h"
#include "runtime/rng.h"

// ---- token files ----------------------------------------------------------------------------
//
// Two layouts, as CS336 and nanoGPT keep them:
//   - any path not ending in ".npy": raw little-endian uint16 tokens, no header (a ".bin"), unless
//     it starts with the 16-byte header "STGTOKU4" + uint32 1 + uint32 0 and is 16 + 4k bytes long:
//     then little-endian uint32 tokens follow (what `stg tokenize` writes for vocabularies over
//     65536; docs/TOKENIZER.md);
//   - ".npy": a 1-D array of '<u2' (uint16) or '<i4' (int32).
// The file is memory-mapped, never copied.

typedef struct rt_tokens rt_tokens;

// Opens a token file and validates it: readable, a whole number of elements, not empty, and every
// token id in [0, vocab) (one linear scan; the message gives the index and the value of the first
// bad token). vocab must be in [1, INT32_MAX].
int rt_tokens_open(const char *path, int64_t vocab, rt_tokens **out, stg_err *err);
void rt_tokens_free(rt_tokens *t);
int64_t rt_tokens_count(const rt_tokens *t);
// Token i, or -1 when i is outside [0, count).
int64_t rt_tokens_at(const rt_tokens *t, int64_t i);

// One random batch: for each row an independent start s uniform in [0, n - ctx - 1],
// tokens = x[s .. s+ctx), targets = x[s+1 .. s+ctx+1) (the next token at every position).
// Fails with "data file X has N tokens; a batch row needs ctx+1 = M" when the file is too short.
int rt_tokens_batch(const rt_tokens *src, rt_rng *rng, int64_t batch, int64_t ctx,
                    int32_t *tokens /* (batch, ctx) */, int32_t *targets /* (batch, ctx) */, stg_err *err);

// ---- synthetic Markov-chain tokens ----------------------------------------------------------
//
// A seeded first-order Markov chain over `vocab` symbols in which every symbol has exactly k
// distinct possible successors. The chain is built so that it is irreducible and aperiodic: the
// symbols are put on one random cycle (each symbol's first successor is the next one on the cycle)
// and, when k >= 2, the first symbol of the cycle has itself as a successor; the other successors
// are drawn uniformly at random. Successor probabilities are either uniform (1/k each) or a fixed
// seeded distribution (weights 0.05 + Exp(1), normalized).
//
// Entropy rate (nats per token): H = sum_s pi(s) * H(P(.|s)), where pi is the stationary
// distribution. With uniform successors every H(P(.|s)) = ln k, so H = ln k exactly. Otherwise pi is
// computed by power iteration from the uniform distribution (pi <- pi P until the L1 change is below
// 1e-13 + 1e-15 * vocab, at most 20000 iterations; the chain being irreducible and aperiodic, this
// converges, in a few hundred iterations for vocab 50257, k 4).
//
// Why H is exactly the loss floor of a language model on these batches: each row's first state is
// drawn from pi, so every position of every row is distributed as pi (the chain is stationary),
// and targets[t] depends only on tokens[t] (first order). The best possible predictor of
// targets[t] is P(.|tokens[t]), whose expected cross-entropy is sum_s pi(s) H(P(.|s)) = H at every
// position -- the first position of a row included, since its predecessor is irrelevant.
// A model reaching mean loss H has learned the chain; nothing can do better in expectation.

typedef enum rt_markov_probs {
    RT_MARKOV_UNIFORM, // each successor 1/k: entropy rate ln k
    RT_MARKOV_SEEDED,  // a fixed random distribution per symbol
} rt_markov_probs;

typedef struct rt_markov rt_markov;

// vocab in [1, INT32_MAX], 1 <= k <= min(vocab, 256). k == 1 gives the deterministic cycle
// (entropy 0).
rt_markov *rt_markov_new(int64_t vocab, int k, uint64_t seed, rt_markov_probs probs, stg_err *err);
void rt_markov_free(rt_markov *m);
// The exact entropy rate in nats per token (see above).
double rt_markov_entropy(const rt_markov *m);
int64_t rt_markov_vocab(const rt_markov *m);
// The stationary distribution pi, (vocab) doubles.
const double *rt_markov_stationary(const rt_markov *m);
// One batch: each row starts from a state drawn from pi and runs ctx + 1 steps of the chain;
// tokens = states 0..ctx-1, targets = states 1..ctx.
int rt_markov_batch(const rt_markov *m, rt_rng *rng, int64_t batch, int64_t ctx,
                    int32_t *tokens /* (batch, ctx) */, int32_t *targets /* (batch, ctx) */, stg_err *err);

// ---- byte-level tokenization ----------------------------------------------------------------

// Writes every byte of in_path as one little-endian uint16 token (vocab 256) to out_path, a raw
// ".bin", atomically (temporary file, fsync, rename). Returns the number of tokens, or -1.
int64_t rt_tokens_from_text(const char *in_path, const char *out_path, stg_err *err);

// ---- toy classifier data --------------------------------------------------------------------
//
// Inputs x ~ N(0, 1) (batch, in) float32; target = argmax_c (W x)_c for a fixed seeded W
// (classes, in) with N(0, 1) entries (ties go to the lowest class). The classes are linearly
// separable, so the loss floor of a linear model is 0 (approached as the weights grow).

typedef struct rt_toy rt_toy;

rt_toy *rt_toy_new(int64_t in, int64_t classes, uint64_t seed, stg_err *err);
void rt_toy_free(rt_toy *toy);
int rt_toy_batch(const rt_toy *toy, rt_rng *rng, int64_t batch, float *x /* (batch, in) */,
                 int32_t *targets /* (batch) */, stg_err *err);

#endif
