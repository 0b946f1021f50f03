// Softmax over the last dim and the causal mask applied before it.
#include <math.h>

#include "ops/softmax/kernels.h"
#include "ops/cpu/real.h"

// x (outer, Sq, Sk) -> y: y[i][j] = fill if j > i + (Sk - Sq), else x[i][j]. y may alias x.
void RFN(cpu_causal_mask)(const real *x, real *y, int64_t outer, int64_t Sq, int64_t Sk,
                          double fill) {
    CPU_PARALLEL_FOR(outer * Sq * Sk)
    for (int64_t r = 0; r < outer * Sq; r++) {
        int64_t i = r % Sq;
        int64_t last = i + (Sk - Sq); // last visible column
        const real *xr = x + r * Sk;
        real *yr = y + r * Sk;
        for (int64_t j = 0; j < Sk; j++) yr[j] = j > last ? (real)fill : xr[j];
    }
}

// x (rows, N) -> y (rows, N). The row max is subtracted; -inf entries give 0 (a row of only
// -inf gives zeros). y may alias x: every element is read before it is written.
void RFN(cpu_softmax_fwd)(const real *x, real *y, int64_t rows, int64_t N) {
    CPU_PARALLEL_FOR(rows * N)
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * N;
        real *yr = y + r * N;
        double mx = -INFINITY;
        for (int64_t j = 0; j < N; j++)
            if ((double)xr[j] > mx) mx = (double)xr[j];
        if (mx == -INFINITY) {
            for (int64_t j = 0; j < N; j++) yr[j] = 0;
            continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < N; j++) sum += exp((double)xr[j] - mx);
        double inv = 1.0 / sum;
        for (int64_t j = 0; j < N; j++) yr[j] = (real)(exp((double)xr[j] - mx) * inv);
    }
}

// y, dy (rows, N) -> dx (rows, N) = y (dy - sum(dy y)). dx may alias dy.
void RFN(cpu_softmax_bwd)(const real *y, const real *dy, real *dx, int64_t rows, int64_t N) {
    CPU_PARALLEL_FOR(rows * N)
    for (int64_t r = 0; r < rows; r++) {
        const real *yr = y + r * N, *dyr = dy + r * N;
        real *dxr = dx + r * N;
        double dot = 0.0;
        for (int64_t j = 0; j < N; j++) dot += (double)dyr[j] * (double)yr[j];
        for (int64_t j = 0; j < N; j++) dxr[j] = (real)((double)yr[j] * ((double)dyr[j] - dot));
    }
}
