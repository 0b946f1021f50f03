// RMSNorm and LayerNorm, forward and backward. Row statistics in double; the weight gradients
// are summed over rows per column (parallel over columns), so they are deterministic.
#include <math.h>

#include "ops/norm/kernels.h"
#include "ops/cpu/real.h"

// x (rows, D), w (D) -> y (rows, D), rstd (rows)
void RFN(cpu_rmsnorm_fwd)(const real *x, const real *w, real *y, real *rstd, int64_t rows,
                          int64_t D, double eps) {
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D;
        real *yr = y + r * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)xr[d] * (double)xr[d];
        double rs = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t d = 0; d < D; d++) yr[d] = (real)((double)xr[d] * rs * (double)w[d]);
        rstd[r] = (real)rs;
    }
}

// x (rows, D), w (D), rstd (rows), dy (rows, D) -> dx (rows, D), dw (D)
// xhat = x rstd; dw = sum_rows dy xhat; g = dy w; dx = rstd (g - xhat mean(g xhat))
// dx may alias dy (the registry lets it): dw is summed first, and each dx row is written only
// after its dy row has been read.
void RFN(cpu_rmsnorm_bwd)(const real *x, const real *w, const real *rstd, const real *dy,
                          real *dx, real *dw, int64_t rows, int64_t D) {
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t r = 0; r < rows; r++)
            acc += (double)dy[r * D + d] * (double)x[r * D + d] * (double)rstd[r];
        dw[d] = (real)acc;
    }
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D, *dyr = dy + r * D;
        real *dxr = dx + r * D;
        double rs = (double)rstd[r];
        double dot = 0.0; // sum g xhat
        for (int64_t d = 0; d < D; d++) dot += (double)dyr[d] * (double)w[d] * (double)xr[d] * rs;
        double mean_gx = dot / (double)D;
        for (int64_t d = 0; d < D; d++) {
            double g = (double)dyr[d] * (double)w[d];
            double xhat = (double)xr[d] * rs;
            dxr[d] = (real)(rs * (g - xhat * mean_gx));
        }
    }
}

// x (rows, D), w (D), b (D) -> y (rows, D), stats (rows, 2) = [mean, rstd] (biased variance)
void RFN(cpu_layernorm_fwd)(const real *x, const real *w, const real *b, real *y, real *stats,
                            int64_t rows, int64_t D, double eps) {
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D;
        real *yr = y + r * D;
        double sum = 0.0;
        for (int64_t d = 0; d < D; d++) sum += (double)xr[d];
        double mean = sum / (double)D;
        double var = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double c = (double)xr[d] - mean;
            var += c * c;
        }
        double rs = 1.0 / sqrt(var / (double)D + eps);
        for (int64_t d = 0; d < D; d++)
            yr[d] = (real)(((double)xr[d] - mean) * rs * (double)w[d] + (double)b[d]);
        stats[2 * r] = (real)mean;
        stats[2 * r + 1] = (real)rs;
    }
}

// x (rows, D), w (D), stats (rows, 2), dy (rows, D) -> dx (rows, D), dw (D), db (D)
// xhat = (x - mean) rstd; dw = sum dy xhat; db = sum dy; g = dy w;
// dx = rstd (g - mean(g) - xhat mean(g xhat)). dx may alias dy, as in rmsnorm_bwd.
void RFN(cpu_layernorm_bwd)(const real *x, const real *w, const real *stats, const real *dy,
                            real *dx, real *dw, real *db, int64_t rows, int64_t D) {
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t d = 0; d < D; d++) {
        double aw = 0.0, ab = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double g = (double)dy[r * D + d];
            double xhat = ((double)x[r * D + d] - (double)stats[2 * r]) * (double)stats[2 * r + 1];
            aw += g * xhat;
            ab += g;
        }
        dw[d] = (real)aw;
        db[d] = (real)ab;
    }
    CPU_PARALLEL_FOR(rows * D)
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D, *dyr = dy + r * D;
        real *dxr = dx + r * D;
        double mean = (double)stats[2 * r], rs = (double)stats[2 * r + 1];
        double sg = 0.0, sgx = 0.0;
        for (int64_t d = 0; d < D; d++) {
            double g = (double)dyr[d] * (double)w[d];
            sg += g;
            sgx += g * ((double)xr[d] - mean) * rs;
        }
        double mg = sg / (double)D, mgx = sgx / (double)D;
        for (int64_t d = 0; d < D; d++) {
            double g = (double)dyr[d] * (double)w[d];
            double xhat = ((double)xr[d] - mean) * rs;
            dxr[d] = (real)(rs * (g - mg - xhat * mgx));
        }
    }
}
