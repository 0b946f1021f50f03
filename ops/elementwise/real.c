// Elementwise ops: activations and their gradients, mul, add, scale. Computed in double per
// element. Every output may alias an input: each element is read before it is written.
#include <math.h>

#include "ops/elementwise/kernels.h"
#include "ops/cpu/real.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// x (n) -> y (n) = x sigmoid(x)
void RFN(cpu_silu_fwd)(const real *x, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n * 8)
    for (int64_t i = 0; i < n; i++) {
        double xi = (double)x[i];
        y[i] = (real)(xi * sigmoid(xi));
    }
}

// x, dy (n) -> dx = dy s (1 + x (1 - s)), s = sigmoid(x)
void RFN(cpu_silu_bwd)(const real *x, const real *dy, real *dx, int64_t n) {
    CPU_PARALLEL_FOR(n * 8)
    for (int64_t i = 0; i < n; i++) {
        double xi = (double)x[i], s = sigmoid(xi);
        dx[i] = (real)((double)dy[i] * s * (1.0 + xi * (1.0 - s)));
    }
}

// x (n) -> y = max(x, 0)
void RFN(cpu_relu_fwd)(const real *x, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : (real)0;
}

// y (relu's output), dy (n) -> dx = dy [y > 0]
void RFN(cpu_relu_bwd)(const real *y, const real *dy, real *dx, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : (real)0;
}

// GELU, tanh approximation (GPT-2): y = x (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715 x^3).
// In double: tanh saturates to +-1 cleanly, so large |x| gives x or 0 exactly.
#define GELU_C 0.7978845608028654 // sqrt(2 / pi)
#define GELU_A 0.044715

void RFN(cpu_gelu_fwd)(const real *x, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) {
        double v = (double)x[i];
        y[i] = (real)(0.5 * v * (1.0 + tanh(GELU_C * (v + GELU_A * v * v * v))));
    }
}

// x, dy (n) -> dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)), t = tanh(u);
// dx may alias dy.
void RFN(cpu_gelu_bwd)(const real *x, const real *dy, real *dx, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) {
        double v = (double)x[i];
        double t = tanh(GELU_C * (v + GELU_A * v * v * v));
        double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * v * v);
        dx[i] = (real)((double)dy[i] * d);
    }
}

// a, b (n) -> y = silu(a) b
void RFN(cpu_swiglu_fwd)(const real *a, const real *b, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n * 8)
    for (int64_t i = 0; i < n; i++) {
        double ai = (double)a[i];
        y[i] = (real)(ai * sigmoid(ai) * (double)b[i]);
    }
}

// a, b, dy (n) -> da = dy b silu'(a), db = dy silu(a)
void RFN(cpu_swiglu_bwd)(const real *a, const real *b, const real *dy, real *da, real *db,
                         int64_t n) {
    CPU_PARALLEL_FOR(n * 8)
    for (int64_t i = 0; i < n; i++) {
        double ai = (double)a[i], bi = (double)b[i], g = (double)dy[i], s = sigmoid(ai);
        da[i] = (real)(g * bi * s * (1.0 + ai * (1.0 - s)));
        db[i] = (real)(g * ai * s);
    }
}

// a, b (n) -> y = a b
void RFN(cpu_mul)(const real *a, const real *b, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = (real)((double)a[i] * (double)b[i]);
}

// a, b (n) -> y = a + b
void RFN(cpu_add)(const real *a, const real *b, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = (real)((double)a[i] + (double)b[i]);
}

// x (n) -> y = factor x
void RFN(cpu_scale)(const real *x, real *y, int64_t n, double factor) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = (real)(factor * (double)x[i]);
}

// a, b (n) -> y += a + b
void RFN(cpu_add_acc)(const real *a, const real *b, real *y, int64_t n) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = (real)((double)y[i] + ((double)a[i] + (double)b[i]));
}

// x (n) -> y += factor x
void RFN(cpu_scale_acc)(const real *x, real *y, int64_t n, double factor) {
    CPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) y[i] = (real)((double)y[i] + factor * (double)x[i]);
}
