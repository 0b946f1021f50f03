// RoPE's (cos, sin) of position p, pair k of head dim Dh, on the device: the one definition of the
// rotation's bits, shared by the rope op's table (ops/rope/cuda.cu) and attention over the cache,
// which rotates the new key and the queries itself (ops/decode/cuda.cu). The angle p theta^(-2k/Dh)
// is formed and reduced modulo 2 pi in double, then sincosf (full-range fp32, ~1 ulp) of the reduced
// angle: the same accuracy as double sincos rounded to float, at a fraction of the cost.
#pragma once

#include <math.h>
#include <stdint.h>

__device__ __forceinline__ float2 rope_cos_sin(int64_t p, int k, int Dh, double log_theta) {
    double a = (double)p * exp(-2.0 * (double)k / (double)Dh * log_theta);
    const double two_pi = 6.283185307179586476925286766559;
    double n = rint(a * (1.0 / two_pi));
    float r = (float)fma(-n, two_pi, a);
    float sn, co;
    sincosf(r, &sn, &co);
    return make_float2(co, sn);
}
