// Data movement: reshape (a view, or a copy when the runtime gave it its own buffer), the
// transpose of any two dims, and repeat_kv (each head repeated n times) with its backward.
#include <string.h>

#include "ops/layout/kernels.h"
#include "ops/cpu/real.h"

// x (n) -> y (n)
void RFN(cpu_copy)(const real *x, real *y, int64_t n) {
    if (x != y) memmove(y, x, (size_t)n * sizeof(real));
}

// x (shape) -> y with dims d0 and d1 swapped. Seen as x (A, N0, M, N1, C) with A the dims before
// d0, M those between, C those after d1: y (A, N1, M, N0, C), copied C elements at a time.
void RFN(cpu_transpose)(const real *x, real *y, int ndim, const int64_t *shape, int d0, int d1) {
    if (d0 > d1) {
        int t = d0;
        d0 = d1;
        d1 = t;
    }
    int64_t A = 1, M = 1, C = 1, N0 = shape[d0], N1 = shape[d1];
    for (int i = 0; i < d0; i++) A *= shape[i];
    for (int i = d0 + 1; i < d1; i++) M *= shape[i];
    for (int i = d1 + 1; i < ndim; i++) C *= shape[i];
    if (d0 == d1) {
        RFN(cpu_copy)(x, y, A * N0 * M * C);
        return;
    }
    CPU_PARALLEL_FOR(A * N0 * M * N1 * C)
    for (int64_t r = 0; r < A * N1; r++) {
        int64_t a = r / N1, i1 = r % N1;
        for (int64_t m = 0; m < M; m++)
            for (int64_t i0 = 0; i0 < N0; i0++) {
                const real *src = x + (((a * N0 + i0) * M + m) * N1 + i1) * C;
                real *dst = y + (((a * N1 + i1) * M + m) * N0 + i0) * C;
                memcpy(dst, src, (size_t)C * sizeof(real));
            }
    }
}

// x (rows, n m) -> ys[i] (rows, m)
void RFN(cpu_split)(const real *x, real *const *ys, int n, int64_t rows, int64_t m) {
    CPU_PARALLEL_FOR(rows * n * m)
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) memcpy(ys[i] + r * m, x + (r * n + i) * m, (size_t)m * sizeof(real));
}

// xs[i] (rows, m) -> y (rows, n m)
void RFN(cpu_concat)(const real *const *xs, real *y, int n, int64_t rows, int64_t m) {
    CPU_PARALLEL_FOR(rows * n * m)
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) memcpy(y + (r * n + i) * m, xs[i] + r * m, (size_t)m * sizeof(real));
}

// x (rows, H, Dh) -> y (rows, H n, Dh), y head h = x head h / n
void RFN(cpu_repeat_kv)(const real *x, real *y, int64_t rows, int64_t H, int64_t n, int64_t Dh) {
    CPU_PARALLEL_FOR(rows * H * n * Dh)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < H * n; h++)
            memcpy(y + (r * H * n + h) * Dh, x + (r * H + h / n) * Dh, (size_t)Dh * sizeof(real));
}

// dy (rows, H n, Dh) -> dx (rows, H, Dh), dx head h = sum_{c < n} dy head h n + c
void RFN(cpu_repeat_kv_bwd)(const real *dy, real *dx, int64_t rows, int64_t H, int64_t n, int64_t Dh) {
    CPU_PARALLEL_FOR(rows * H * n * Dh)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < Dh; d++) {
                double acc = 0.0;
                for (int64_t c = 0; c < n; c++) acc += (double)dy[(r * H * n + h * n + c) * Dh + d];
                dx[(r * H + h) * Dh + d] = (real)acc;
            }
}
