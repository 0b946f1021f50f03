// The sample op's random numbers, shared by the CPU reference and the CUDA kernel (host and device):
// a counter-based uniform of (seed, position, sequence), so a draw depends on nothing but the token
// it decides (no state to carry between steps, the same value on every backend and in every run).
#ifndef STG_OPS_DECODE_UNIFORM_H
#define STG_OPS_DECODE_UNIFORM_H

#include <stdint.h>

#ifdef __CUDACC__
#define STG_HD __host__ __device__
#else
#define STG_HD
#endif

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit words that mixes well.
static inline STG_HD uint64_t stg_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A uniform in [0, 1) with 24 random bits (exact in float and double) for the token that will sit at
// `pos` in sequence b.
static inline STG_HD double stg_sample_uniform(uint64_t seed, int64_t pos, int64_t b) {
    uint64_t h = stg_mix64(stg_mix64(seed) ^ ((uint64_t)(uint32_t)pos << 32) ^ (uint64_t)(uint32_t)b);
    return (double)(h >> 40) * (1.0 / 16777216.0);
}

#endif
