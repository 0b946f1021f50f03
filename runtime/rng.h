// A small deterministic random number generator: xoshiro256** (Blackman & Vigna) seeded through
// splitmix64. The same seed gives the same stream on every platform and compiler; the state can be
// saved to and restored from a fixed little-endian byte string (for checkpoints).
//
// Not for cryptography. Not thread-safe: give each thread or rank its own rt_rng
// (rt_rng_seed_stream derives independent-looking streams from one seed).
#ifndef STG_RUNTIME_RNG_H
#define STG_RUNTIME_RNG_H

#include <stdint.h>

#include "ops/base/err.h"

// Bytes of a saved state: "STGRNG1\0" tag, 4 x u64 state, u64 bits of the cached normal, u64 flag.
#define RT_RNG_STATE_BYTES 56

typedef struct rt_rng {
    uint64_t s[4];      // xoshiro256** state (never all zero)
    double spare;       // the second value of the last Box-Muller pair
    int has_spare;      // whether `spare` is still unused
} rt_rng;

// Seeds the generator: the four state words are four successive splitmix64 outputs of `seed`.
void rt_rng_seed(rt_rng *r, uint64_t seed);
// Seeds stream `stream` of `seed` (e.g. one stream per data-parallel rank or per purpose):
// the splitmix64 input is mixed from both, so streams of one seed do not overlap in practice.
void rt_rng_seed_stream(rt_rng *r, uint64_t seed, uint64_t stream);

// The next 64 random bits.
uint64_t rt_rng_u64(rt_rng *r);
// Uniform double in [0, 1) with 53 random bits.
double rt_rng_uniform(rt_rng *r);
// Standard normal N(0, 1) by the Box-Muller transform (pairs; the second value is cached).
double rt_rng_normal(rt_rng *r);
// Normal with mean 0 and standard deviation `std`, truncated to [lo, hi] by rejection (resample
// until inside). Requires lo <= hi. If 10000 draws in a row fall outside (an interval holding
// almost no mass), returns a uniform draw in [lo, hi] instead of looping forever. std <= 0 gives
// 0 clamped into [lo, hi].
double rt_rng_trunc_normal(rt_rng *r, double std, double lo, double hi);
// Uniform integer in [0, n), unbiased (rejection of the short top range). n == 0 returns 0.
uint64_t rt_rng_below(rt_rng *r, uint64_t n);

// Writes the full state (including the cached normal) as RT_RNG_STATE_BYTES bytes.
void rt_rng_save(const rt_rng *r, uint8_t out[RT_RNG_STATE_BYTES]);
// Restores a state written by rt_rng_save. Returns -1 with a message if the bytes are not a
// saved state (wrong tag, all-zero state, bad flag).
int rt_rng_load(rt_rng *r, const uint8_t in[RT_RNG_STATE_BYTES], stg_err *err);

#endif
