// The optimizer side: squared norms for the global gradient norm, and AdamW with clipping.
#include <math.h>

#include "ops/optim/kernels.h"
#include "ops/cpu/real.h"

// x (n) -> sum of x^2, in double; in CPU_CHUNKS fixed chunks (the same bits for any thread count)
double RFN(cpu_sumsq)(const real *x, int64_t n) {
    double part[CPU_CHUNKS];
    CPU_PARALLEL_FOR(n)
    for (int c = 0; c < CPU_CHUNKS; c++) {
        int64_t lo = n * c / CPU_CHUNKS, hi = n * (c + 1) / CPU_CHUNKS;
        double acc = 0.0;
        for (int64_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
        part[c] = acc;
    }
    double total = 0.0;
    for (int c = 0; c < CPU_CHUNKS; c++) total += part[c];
    return total;
}

// param, grad, m, v (n), in place. c = (max_norm > 0 && norm > max_norm) ? max_norm/(norm+1e-6)
// : 1; g = c grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// a_t = lr sqrt(1-b2^t)/(1-b1^t); p -= a_t m/(sqrt(v)+eps); then p -= lr wd p.
void RFN(cpu_adamw)(real *param, const real *grad, real *m, real *v, int64_t n, double norm,
                    double step, double lr, const stg_adamw_attrs *a) {
    double c = (a->max_norm > 0 && norm > a->max_norm) ? a->max_norm / (norm + 1e-6) : 1.0;
    double b1 = a->beta1, b2 = a->beta2;
    double at = lr * sqrt(1.0 - pow(b2, step)) / (1.0 - pow(b1, step));
    double decay = lr * a->weight_decay;
    CPU_PARALLEL_FOR(n * 4)
    for (int64_t i = 0; i < n; i++) {
        double g = c * (double)grad[i];
        double mi = b1 * (double)m[i] + (1.0 - b1) * g;
        double vi = b2 * (double)v[i] + (1.0 - b2) * g * g;
        double p = (double)param[i];
        p -= at * mi / (sqrt(vi) + a->eps);
        p -= decay * p;
        m[i] = (real)mi;
        v[i] = (real)vi;
        param[i] = (real)p;
    }
}
