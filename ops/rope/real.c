// Rotary position embedding over adjacent pairs (x[2k], x[2k+1]), as in the CS336 handout.
#include <math.h>

#include "ops/rope/kernels.h"
#include "ops/cpu/real.h"

// x (outer, S, H, Dh) -> y (outer, S, H, Dh); y may alias x (each pair is read before written).
// Position p is the index along S; angle = p theta^(-2k/Dh), negated when inverse (the backward).
void RFN(cpu_rope)(const real *x, real *y, int64_t outer, int64_t S, int64_t H, int64_t Dh,
                   double theta, int inverse) {
    int64_t half = Dh / 2;
    double sign = inverse ? -1.0 : 1.0;
    CPU_PARALLEL_FOR(outer * S * H * Dh)
    for (int64_t p = 0; p < S; p++) {
        for (int64_t k = 0; k < half; k++) {
            double angle = sign * (double)p * pow(theta, -2.0 * (double)k / (double)Dh);
            double c = cos(angle), s = sin(angle);
            for (int64_t o = 0; o < outer; o++) {
                for (int64_t h = 0; h < H; h++) {
                    int64_t i = ((o * S + p) * H + h) * Dh + 2 * k;
                    double x0 = (double)x[i], x1 = (double)x[i + 1];
                    y[i] = (real)(x0 * c - x1 * s);
                    y[i + 1] = (real)(x0 * s + x1 * c);
                }
            }
        }
    }
}
