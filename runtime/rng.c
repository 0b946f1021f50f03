#include "runtime/rng.h"

#include <math.h>
#include <string.h>

static const char rng_tag[8] = {'S', 'T', 'G', 'R', 'N', 'G', '1', '\0'};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rt_rng_seed(rt_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    // splitmix64 is a bijection of its counter, so four successive outputs cannot all be zero;
    // keep the guard anyway since an all-zero state would stay zero forever.
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
    r->spare = 0.0;
    r->has_spare = 0;
}

void rt_rng_seed_stream(rt_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = stream ^ 0x2545f4914f6cdd1dull;
    uint64_t h = splitmix64(&x);
    rt_rng_seed(r, seed ^ h);
}

uint64_t rt_rng_u64(rt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rt_rng_uniform(rt_rng *r) { return (double)(rt_rng_u64(r) >> 11) * 0x1.0p-53; }

double rt_rng_normal(rt_rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = 1.0 - rt_rng_uniform(r); // (0, 1]: log is finite
    double u2 = rt_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586476925 * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return rad * cos(th);
}

double rt_rng_trunc_normal(rt_rng *r, double std, double lo, double hi) {
    if (!(lo <= hi)) return lo; // documented precondition; do not loop on NaN or lo > hi
    if (!(std > 0.0)) return 0.0 < lo ? lo : (0.0 > hi ? hi : 0.0);
    for (int i = 0; i < 10000; i++) {
        double x = std * rt_rng_normal(r);
        if (x >= lo && x <= hi) return x;
    }
    return lo + (hi - lo) * rt_rng_uniform(r);
}

uint64_t rt_rng_below(rt_rng *r, uint64_t n) {
    if (n == 0) return 0;
    // 2^64 mod n: values below it would make the low residues more likely; reject them.
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = rt_rng_u64(r);
        if (x >= threshold) return x % n;
    }
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void rt_rng_save(const rt_rng *r, uint8_t out[RT_RNG_STATE_BYTES]) {
    memcpy(out, rng_tag, 8);
    for (int i = 0; i < 4; i++) put_u64(out + 8 + 8 * i, r->s[i]);
    uint64_t bits;
    memcpy(&bits, &r->spare, sizeof bits);
    put_u64(out + 40, bits);
    put_u64(out + 48, r->has_spare ? 1 : 0);
}

int rt_rng_load(rt_rng *r, const uint8_t in[RT_RNG_STATE_BYTES], stg_err *err) {
    if (memcmp(in, rng_tag, 8) != 0) return stg_errf(err, "RNG state: bad tag (not a saved stg RNG state)");
    uint64_t s[4];
    for (int i = 0; i < 4; i++) s[i] = get_u64(in + 8 + 8 * i);
    if (!(s[0] | s[1] | s[2] | s[3])) return stg_errf(err, "RNG state: all-zero xoshiro state is invalid");
    uint64_t flag = get_u64(in + 48);
    if (flag > 1) return stg_errf(err, "RNG state: bad cached-normal flag %llu (expected 0 or 1)",
                                  (unsigned long long)flag);
    uint64_t bits = get_u64(in + 40);
    double spare;
    memcpy(&spare, &bits, sizeof spare);
    if (flag && !isfinite(spare)) return stg_errf(err, "RNG state: cached normal is not finite");
    memcpy(r->s, s, sizeof s);
    r->spare = spare;
    r->has_spare = (int)flag;
    return 0;
}
